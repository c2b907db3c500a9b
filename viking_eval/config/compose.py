"""Composing the project's config as ``python -m viking_eval`` does, and Hydra's errors as one line.

- :func:`register_schema` stores the root schema (:class:`~viking_eval.config.settings.ConfigFile`,
  derived by :mod:`~viking_eval.config.schema`) in Hydra's ConfigStore as ``viking_eval_schema``;
  conf/config.yaml names it first in its defaults, so every composition type-checks the
  harness's settings (``dataset.strict=maybe``, ``run.top_k=abc`` fail while composing).
- :func:`compose_config` composes for a list of overrides (Hydra's compose API).
- :func:`job_overrides` expands a multirun's sweep overrides into the overrides of each job, as
  Hydra's basic sweeper does; :func:`job_configs` (:class:`JobComposer`, which the Optuna sweeper
  also uses for its trials) composes each job's config, once per distinct set of config-group
  choices (a grid of parameter values is composed once and each job's values set on a copy, as
  Hydra applies them: ``tests/test_compose_jobs.py`` checks it equals composing every job).
- :func:`explain` turns whatever composing raised (a missing config group option, an override of
  a key that does not exist, a value of the wrong type, an override that does not parse) into a
  :class:`~viking_eval.config.errors.ConfigError` naming the key and what is allowed.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import MissingConfigException, OverrideParseException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from viking_eval.config.errors import ConfigError, did_you_mean, field_path, from_validation_error
from viking_eval.config.schema import is_params_class, schema_of

__all__ = [
    "CONFIG_DIR",
    "SCHEMA_NAME",
    "JobComposer",
    "compose_config",
    "explain",
    "hydra_session",
    "job_configs",
    "job_overrides",
    "register_schema",
]

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = PROJECT_ROOT / "conf"
#: the root schema's name in Hydra's ConfigStore: the first entry of conf/config.yaml's defaults
SCHEMA_NAME = "viking_eval_schema"
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def register_schema() -> None:
    """Store the schema of :class:`~viking_eval.config.settings.ConfigFile` as ``viking_eval_schema``."""
    from viking_eval.config.settings import ConfigFile

    ConfigStore.instance().store(name=SCHEMA_NAME, node=schema_of(ConfigFile), provider="viking_eval")


@contextmanager
def hydra_session(config_dir: Path = CONFIG_DIR, extra_dir: Path | None = None) -> Iterator[None]:
    """Hydra's compose API over ``config_dir`` (the running app's own when there is one);
    ``extra_dir`` is searched first, as Hydra searches a command line's ``--config-dir``."""
    if GlobalHydra.instance().is_initialized():
        yield
        return
    if extra_dir is None:
        with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
            yield
        return
    from hydra import version
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.config_search_path import SearchPathQuery

    version.setbase("1.3")
    search_path = create_config_search_path(search_path_dir=str(config_dir))
    search_path.prepend(
        provider="command-line", path=f"file://{extra_dir}", anchor=SearchPathQuery(provider="schema")
    )
    Hydra.create_main_hydra2(task_name="app", config_search_path=search_path)
    try:
        yield
    finally:
        GlobalHydra.instance().clear()


def compose_config(
    overrides: Sequence[str],
    *,
    run_mode: RunMode = RunMode.RUN,
    config_name: str = "config",
    with_hydra: bool = False,
) -> DictConfig:
    """The config for ``overrides`` (inside :func:`hydra_session`); the ``hydra`` node only with
    ``with_hydra``. In MULTIRUN mode sweep overrides are allowed and left out of the result."""
    hydra = GlobalHydra.instance().hydra
    if hydra is None:
        raise RuntimeError("compose_config needs hydra_session()")
    cfg = hydra.compose_config(
        config_name=config_name, overrides=list(overrides), run_mode=run_mode, with_log_configuration=False
    )
    return cfg if with_hydra else _without_hydra(cfg)


def _without_hydra(cfg: DictConfig) -> DictConfig:
    return OmegaConf.masked_copy(cfg, [str(key) for key in cfg if key != "hydra"])


def job_overrides(base: DictConfig, task_overrides: Sequence[str]) -> list[list[str]]:
    """The overrides of every job of a basic-sweeper multirun: ``hydra.sweeper.params`` of the
    config, then the command line's task overrides, sweeps expanded (cartesian product, in
    Hydra's order; basic_sweeper.BasicSweeper.split_arguments)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    params = base.hydra.sweeper.get("params")
    plain = OmegaConf.to_container(params, resolve=False) if isinstance(params, DictConfig) else None
    given = plain if isinstance(plain, dict) else {}  # a DictConfig's container is a dict
    lines = [f"{key!s}={value}" for key, value in given.items()] + list(task_overrides)
    parser = OverridesParser.create()
    parsed = parser.parse_overrides(lines)
    return BasicSweeper.split_arguments(parsed, None)[0]


class _Groups:
    """Whether a key names a config group (``embedder``, ``hydra/launcher``), asking Hydra's
    config loader for the groups under the key's parent, once per parent."""

    def __init__(self) -> None:
        self._loader = GlobalHydra.instance().config_loader()
        self._under: dict[str, frozenset[str]] = {}

    def __contains__(self, path: object) -> bool:
        parent, _, name = str(path).rpartition("/")
        if parent not in self._under:
            self._under[parent] = frozenset(self._loader.list_groups(parent))
        return name in self._under[parent]


def _leaf_value(override: Override, groups: _Groups) -> bool:
    """Whether Hydra applies ``override`` as a value set on the composed config (``key=value`` of a
    plain value, the key no config group): such overrides never change the defaults list."""
    key = override.key_or_group
    return (
        override.is_sweep_override() is False
        and override.package is None
        and not (override.is_add() or override.is_force_add() or override.is_delete())
        and "/" not in key
        and key.replace(".", "/") not in groups
        and not key.startswith("hydra.")
        and isinstance(override.value(), str | int | float | bool | type(None))
    )


class JobComposer:
    """Composes jobs' configs (:meth:`config`), each as Hydra would, but once per shape: jobs that
    share their config-group choices and the keys they set to plain values are composed once, and
    the others copy that config and set their values as Hydra does (``OmegaConf.update(...,
    merge=True)``, typed by the schema); a job whose values cannot be set that way is composed in
    full, so its error is Hydra's own. ``compose`` composes a job in full, ``hydra`` node included
    (default: :func:`compose_config` in the current Hydra session; a sweeper passes its config
    loader's ``load_sweep_config``). One composer remembers every shape it composed."""

    def __init__(
        self, *, config_name: str = "config", compose: Callable[[list[str]], DictConfig] | None = None
    ) -> None:
        self._parser = OverridesParser.create()
        self._groups = _Groups()
        self._compose = compose or (
            lambda overrides: compose_config(overrides, config_name=config_name, with_hydra=True)
        )
        # each shape's config, ``hydra`` node left out, struct as Hydra leaves it (a key it lacks
        # raises when a job sets it)
        self._composed: dict[tuple[object, ...], DictConfig] = {}

    def config(self, overrides: Sequence[str]) -> DictConfig:
        """The config of a job with ``overrides`` (``hydra`` node left out); raises what
        composing it raises."""
        overrides = list(overrides)
        parsed = self._parser.parse_overrides(overrides)
        values = [override for override in parsed if _leaf_value(override, self._groups)]
        others = [override for override in parsed if not _leaf_value(override, self._groups)]
        shape = (tuple(o.input_line for o in others), tuple(o.key_or_group for o in values))
        # a key also set another way (``++key=...`` after ``key=...``) keeps Hydra's order: in full
        alone = {o.key_or_group for o in values} & {o.key_or_group for o in others}
        template = None if alone else self._composed.get(shape)
        if template is not None:
            cfg = copy.deepcopy(template)
            try:
                for override in values:
                    OmegaConf.update(cfg, override.key_or_group, override.value(), merge=True)
            except OmegaConfBaseException:
                pass  # composed in full below: Hydra words the error
            else:
                OmegaConf.set_struct(cfg, None)  # as a config composed in full is returned
                return cfg
        cfg = self._compose(overrides)
        if shape not in self._composed:
            template = _without_hydra(cfg)
            OmegaConf.set_struct(template, True)
            self._composed[shape] = template
        return _without_hydra(cfg)


def job_configs(
    jobs: Iterable[Sequence[str]], common: Sequence[str], *, config_name: str = "config"
) -> Iterator[tuple[list[str], DictConfig | Exception]]:
    """Each job's overrides (``common`` then the job's) and its config, or what composing it
    raised (:class:`JobComposer`: composed once per shape)."""
    composer = JobComposer(config_name=config_name)
    for job in jobs:
        overrides = [*common, *job]
        try:
            yield overrides, composer.config(overrides)
        except Exception as error:
            yield overrides, error


# --------------------------------------------------------------------------- Hydra's errors


def _one_line(text: object) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return "; ".join(lines) if lines else str(text)


def _omegaconf_cause(error: BaseException) -> OmegaConfBaseException | None:
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OmegaConfBaseException):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _override_key(line: str) -> str:
    key = line.split("=", 1)[0].lstrip("+~")
    return key.split("@", 1)[0]


def _node_keys(node_path: str, overrides: Sequence[str], dropped: str) -> tuple[list[str], type | None]:
    """The keys a config node may hold, from the config composed without the override that
    failed: a class's fields when the node names a ``_target_`` or is a typed harness section,
    else the keys it has."""
    from viking_eval.config.settings import ConfigFile

    holder, _ = field_path(ConfigFile, f"{node_path}.x") if node_path else (ConfigFile, "x")
    if holder is not None:
        return [field.name for field in dataclasses.fields(schema_of(holder))], holder
    try:
        with hydra_session():
            cfg = compose_config([line for line in overrides if _override_key(line) != dropped])
        node = OmegaConf.select(cfg, node_path)
    except Exception:
        return [], None
    if not isinstance(node, DictConfig):
        return [], None
    target = node.get("_target_")
    if isinstance(target, str):
        from viking_eval.config.registry import is_allowed, resolve

        params: Any = None
        with suppress(Exception):  # not in the registry, or an import error: the node's own keys are listed
            params = (
                getattr(resolve(target, f"{node_path}._target_"), "Params", None)
                if is_allowed(target)
                else None
            )
        if is_params_class(params):
            return [field.name for field in dataclasses.fields(schema_of(params))], params
    return [str(key) for key in node], None


def _missing_key(key: str, overrides: Sequence[str]) -> ConfigError:
    """An override of ``key``, which the composed config does not have (Hydra: "Could not override")."""
    from viking_eval.config.load import bm25_key_error
    from viking_eval.config.validate import BM25_STORE_KEYS

    parent, _, name = key.rpartition(".")
    keys, holder = _node_keys(parent, overrides, key)
    where = parent or "the top level"
    if name in keys and holder is not None and not is_harness(holder):
        detail = f"is not set by the config: add it with +{key}=<value>"
    elif re.fullmatch(r"retrievers\.[^.]+", parent) and name in BM25_STORE_KEYS:
        return bm25_key_error(parent, name)
    elif keys:
        hint = "" if holder is not None else f" (a new key needs +: +{key}=<value>)"
        detail = f"no such key{did_you_mean(name, keys)}{hint}; {where} has: {', '.join(keys)}"
    else:
        detail = f"no such key in the config (a new key needs +: +{key}=<value>)"
    return ConfigError(parent or "config", f"{name}: {detail}", key=key, detail=detail)


def is_harness(cls: type) -> bool:
    """Whether ``cls`` is one of the harness's settings classes (typed at composition)."""
    return (
        cls.__module__ == "viking_eval.config.settings"
        or cls.__module__ == "viking_eval.measures.significance"
    )


def explain(error: BaseException, overrides: Sequence[str] = ()) -> ConfigError:
    """``error``, raised while composing for ``overrides``, as one ConfigError line."""
    from viking_eval.config.settings import ConfigFile

    if isinstance(error, ConfigError):
        return error
    if isinstance(error, MissingConfigException):
        missing = error.missing_cfg_file or ""
        group, _, option = missing.rpartition("/")
        if group and error.options is not None:
            options = ", ".join(sorted(error.options))
            suggestion = did_you_mean(option, error.options)
            detail = f"no option {option!r}{suggestion}; the options are: {options} (conf/{group}/)"
            return ConfigError(group, detail, key=group, detail=detail)
        return ConfigError("config", _one_line(error).split("; Config search path", 1)[0])
    if isinstance(error, OverrideParseException):
        detail = f"cannot parse {error.override!r}: {_one_line(error.message)}"
        return ConfigError("command line", detail)
    cause = _omegaconf_cause(error)
    message = _one_line(error)
    if isinstance(cause, ConfigAttributeError | ConfigKeyError) and message.startswith("Could not override"):
        return _missing_key(str(cause.full_key), overrides)
    if cause is not None and cause.full_key:
        found = from_validation_error("", cause, ConfigFile)
        if isinstance(error, Exception) and "does not support deletion" in str(cause.msg or ""):
            detail = "cannot be deleted (~): it is a setting every run has; give it a value instead"
            return ConfigError(found.key, detail, key=found.key, detail=detail)
        return ConfigError(found.key, found.detail, key=found.key, detail=found.detail)
    quoted = re.search(r"'([^']+)'", message)
    if message.startswith("Could not append to config") and quoted:
        key = quoted.group(1)
        detail = f"is already in the config: write {key}=<value> without the +"
        return ConfigError(key, detail, key=key, detail=detail)
    if message.startswith(("Could not delete", "Could not override")) and quoted:
        key = quoted.group(1)
        detail = message.split(". ", 1)[1] if ". " in message else message
        return ConfigError(key, detail, key=key, detail=detail)
    return ConfigError("config", message)
