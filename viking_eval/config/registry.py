"""The classes a config may name with ``_target_``, checked before anything is imported or called.

A config, an experiment file, a baseline file's command or a run folder's ``config.yaml`` is data:
it may choose among the classes below, never make the harness import a module or call a callable
of its choosing (``{_target_: logging.FileHandler, filename: F, mode: w}`` would truncate ``F`` the
moment it is built; importing a module runs its code). So every ``_target_`` anywhere in a config
is looked up here first, and only a name found here is imported or built:

- **The project's classes** (:func:`project_classes`): the retrievers, embedders, rerankers and
  intent analysers of the ``retrievers`` library, by any name the library exports them under
  (``retrievers.BM25Retriever``, ``retrievers.baselines.BM25Retriever``). Looking them up imports
  nothing: they are the library's own, already imported.
- **Your own classes**, allowed explicitly by whoever runs the harness, never by a config:
  the environment variable ``VIKING_EVAL_ALLOW_TARGETS`` (comma-separated module prefixes or
  dotted class names: ``my_pkg`` allows ``my_pkg.overlap.WordOverlap``) or, from Python,
  :func:`allow_targets`. Only names under an allowed prefix are imported.

Each place a config builds an object expects one kind (:data:`SLOT_KINDS`): ``retrievers.<name>``
a retriever, ``embedder`` an embedder, a ``reranker`` key a reranker, ``analyzer`` an intent
analyser, a hybrid's ``vector_leg``/``keyword_leg`` a retriever. A project class of another kind
is refused by the registry; an own class must have the kind's method (``retrieve_batch``,
``encode``, ``rerank``, ``analyze``) before it is called. :func:`check_targets` walks a whole
config (every nested mapping and list) and raises one :class:`ConfigError` naming the key
(``retrievers.dense.reranker._target_``), the refused value and what is allowed.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from viking_eval.config.errors import ConfigError

__all__ = [
    "ALLOW_ENV",
    "HYDRA_TARGETS",
    "KINDS",
    "SLOT_KINDS",
    "Registered",
    "allow_targets",
    "allowed_names",
    "allowed_prefixes",
    "check_hydra_targets",
    "check_targets",
    "is_allowed",
    "kind_of_slot",
    "lookup",
    "project_classes",
    "resolve",
]

#: the environment variable listing the module prefixes / classes of your own a config may name
ALLOW_ENV = "VIKING_EVAL_ALLOW_TARGETS"
#: the kinds of object a config builds, and the method an own class of that kind must have
KINDS: dict[str, str] = {
    "retriever": "retrieve_batch",
    "embedder": "encode",
    "reranker": "rerank",
    "analyzer": "analyze",
}
#: the kind a ``_target_`` must be, by the key that holds the mapping (other keys: any kind)
SLOT_KINDS: dict[str, str] = {
    "embedder": "embedder",
    "reranker": "reranker",
    "analyzer": "analyzer",
    "vector_leg": "retriever",
    "keyword_leg": "retriever",
}
#: ``_target_`` names Hydra's own node may hold (sweepers, launchers, callbacks): Hydra's core
#: plugins, installed ``hydra_plugins`` (Hydra imports those itself to discover them), Hydra's
#: experimental callbacks and the project's sweep summary
HYDRA_TARGETS: tuple[str, ...] = (
    "hydra._internal.core_plugins.",
    "hydra_plugins.",
    "hydra.experimental.callbacks.",
    "viking_eval.sweep.summary.SweepSummary",
)
#: extra prefixes allowed from Python (allow_targets)
_ALLOWED: list[str] = []


@cache
def project_classes() -> dict[str, tuple[type, ...]]:
    """The project's classes a config may name, by kind (built on first use)."""
    from retrievers.baselines import BM25Retriever, DenseRetriever
    from retrievers.embedders import (
        OpenAIEmbedder,
        SentenceTransformerEmbedder,
        StaticEmbedder,
        TfidfEmbedder,
    )
    from retrievers.graph import GraphRetriever
    from retrievers.hierarchical import HierarchicalRetriever, HierarchicalSearchRetriever
    from retrievers.hierarchical.intent import LLMIntentAnalyzer, PassthroughAnalyzer, RuleBasedAnalyzer
    from retrievers.hybrid import HybridRetriever
    from retrievers.multi_strategy import MultiStrategyRetriever
    from retrievers.rerank import CrossEncoderReranker, EmbeddingReranker, HTTPReranker, LLMReranker
    from retrievers.run_file import RunFileRetriever

    return {
        "retriever": (
            BM25Retriever,
            DenseRetriever,
            HybridRetriever,
            GraphRetriever,
            HierarchicalRetriever,
            HierarchicalSearchRetriever,
            MultiStrategyRetriever,
            RunFileRetriever,
        ),
        "embedder": (SentenceTransformerEmbedder, StaticEmbedder, TfidfEmbedder, OpenAIEmbedder),
        "reranker": (CrossEncoderReranker, EmbeddingReranker, HTTPReranker, LLMReranker),
        "analyzer": (LLMIntentAnalyzer, RuleBasedAnalyzer, PassthroughAnalyzer),
    }


@dataclass(frozen=True)
class Registered:
    """A project class and its kind."""

    cls: type
    kind: str


@cache
def _project_names() -> dict[str, Registered]:
    """Every dotted name a project class is exported under: each package on the way to its module
    that holds it under its own name (``retrievers.rerank.EmbeddingReranker`` and
    ``retrievers.EmbeddingReranker`` for ``retrievers.rerank.embedding.EmbeddingReranker``)."""
    names: dict[str, Registered] = {}
    for kind, classes in project_classes().items():
        for cls in classes:
            parts = cls.__module__.split(".")
            for end in range(1, len(parts) + 1):
                module = sys.modules.get(".".join(parts[:end]))
                if module is not None and getattr(module, cls.__name__, None) is cls:
                    names[f"{module.__name__}.{cls.__name__}"] = Registered(cls, kind)
    return names


def _shown(cls: type) -> str:
    """The name a message shows for a project class: ``retrievers.<package>.<Class>`` as in conf/."""
    names = sorted((name for name, item in _project_names().items() if item.cls is cls), key=len)
    three = [name for name in names if name.count(".") == 2]
    return (three or names)[0]


def allowed_names(kind: str | None = None) -> list[str]:
    """The project classes of ``kind`` (any kind: None), as conf/ names them."""
    kinds = [kind] if kind is not None else list(KINDS)
    return [_shown(cls) for name in kinds for cls in project_classes()[name]]


def allow_targets(*names: str) -> None:
    """Allow ``_target_`` names under these module prefixes (``my_pkg``) or these dotted classes
    (``my_pkg.overlap.WordOverlap``) for the rest of the process: the Python form of
    ``VIKING_EVAL_ALLOW_TARGETS``. Only the program calls this, never a config."""
    for name in names:
        if not isinstance(name, str) or not _is_dotted(name):
            raise ValueError(f"allow_targets: {name!r} is not a module or dotted class name (e.g. 'my_pkg')")
        if name not in _ALLOWED:
            _ALLOWED.append(name)


def allowed_prefixes() -> list[str]:
    """The prefixes allowed now: ``VIKING_EVAL_ALLOW_TARGETS``'s, then :func:`allow_targets`'s."""
    raw = os.environ.get(ALLOW_ENV, "")
    from_env = [part.strip() for part in raw.replace(";", ",").split(",") if part.strip()]
    return [*from_env, *(name for name in _ALLOWED if name not in from_env)]


def _is_dotted(name: str) -> bool:
    return bool(name) and all(part.isidentifier() for part in name.split("."))


def _covering(target: str, prefixes: Iterable[str]) -> str | None:
    for prefix in prefixes:
        if target == prefix or target.startswith(f"{prefix}."):
            return prefix
    return None


def _hint() -> str:
    return f"own classes: add their module to {ALLOW_ENV} (docs/configs.md)"


def _refused(key: str, target: Any, kind: str | None, reason: str = "") -> ConfigError:
    article = "an" if kind and kind[0] in "aeiou" else "a"
    what = f"{article} {kind} class of the registry" if kind else "a class of the registry"
    names = allowed_names(kind)
    shown = ", ".join(names) if len(names) <= 8 else ", ".join(names[:8]) + ", ..."
    detail = f"{target!r} is not {what}{reason}; allowed: {shown}; {_hint()}"
    return ConfigError(key.rsplit("._target_", 1)[0] or key, f"_target_ {detail}", key=key, detail=detail)


def lookup(target: str) -> Registered | None:
    """The project class named ``target`` (nothing is imported), or None."""
    return _project_names().get(target)


def is_allowed(target: object) -> bool:
    """Whether ``target`` names a project class or lies under an allowed prefix (no import)."""
    if not isinstance(target, str) or not _is_dotted(target):
        return False
    return lookup(target) is not None or _covering(target, allowed_prefixes()) is not None


def _import_own(target: str, prefix: str, key: str) -> Any:
    """The object ``target`` (allowed by ``prefix``) names: its longest prefix that is a module,
    imported (which imports that module's parent packages, as any import does), then attributes."""
    parts = target.split(".")
    for end in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:end])
        try:
            found: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name is not None and (
                module_name == error.name or module_name.startswith(f"{error.name}.")
            ):
                continue  # this prefix is no module: try a shorter one (a class inside a class)
            raise _import_error(key, target, error) from None
        except Exception as error:  # the user's module raised while importing
            raise _import_error(key, target, error) from None
        for attribute in parts[end:]:
            found = getattr(found, attribute, None)
            if found is None:
                detail = f"{target!r}: module {module_name!r} has no {'.'.join(parts[end:])!r}"
                raise ConfigError(key.rsplit("._target_", 1)[0], f"_target_ {detail}", key=key, detail=detail)
        return found
    detail = f"{target!r} cannot be imported: no module {parts[0]!r} (allowed by {prefix!r} in {ALLOW_ENV})"
    raise ConfigError(key.rsplit("._target_", 1)[0], f"_target_ {detail}", key=key, detail=detail)


def _import_error(key: str, target: str, error: BaseException) -> ConfigError:
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    detail = f"{target!r} cannot be imported: {type(error).__name__}: {first}"
    return ConfigError(key.rsplit("._target_", 1)[0], f"_target_ {detail}", key=key, detail=detail)


def resolve(target: object, key: str, kind: str | None = None) -> type:
    """The class ``target`` names, for the ``_target_`` at ``key``, refused (ConfigError, nothing
    imported) unless it is a project class of ``kind`` (any kind: None) or lies under an allowed
    prefix; an own class must be a class with ``kind``'s method."""
    if not isinstance(target, str) or not target:
        raise _refused(key, target, kind, " (a dotted class name)")
    registered = lookup(target)
    if registered is not None:
        if kind is not None and registered.kind != kind:
            raise _refused(key, target, kind, f" (it is a {registered.kind})")
        return registered.cls
    prefix = _covering(target, allowed_prefixes()) if _is_dotted(target) else None
    if prefix is None:
        raise _refused(key, target, kind)
    found = _import_own(target, prefix, key)
    if not isinstance(found, type):
        raise _refused(key, target, kind, f" (it is a {type(found).__name__}, not a class)")
    # a retriever class gets the whole contract checked, with its own message (settings.check_retriever)
    if kind not in (None, "retriever") and not callable(getattr(found, KINDS[kind], None)):
        article = "an" if kind[0] in "aeiou" else "a"
        detail = f"{target!r} is not {article} {kind}: it has no {KINDS[kind]}() method (retrievers/types.py)"
        raise ConfigError(key.rsplit("._target_", 1)[0], f"_target_ {detail}", key=key, detail=detail)
    return found


def kind_of_slot(path: tuple[str, ...]) -> str | None:
    """The kind the mapping at ``path`` must build: ``embedder`` at the top, ``retrievers.<name>``,
    or by its own key (:data:`SLOT_KINDS`)."""
    if path == ("embedder",):
        return "embedder"
    if len(path) == 2 and path[0] == "retrievers":
        return "retriever"
    return SLOT_KINDS.get(path[-1]) if path else None


def check_targets(config: Mapping[str, Any], root: tuple[str, ...] = ()) -> None:
    """Refuse (ConfigError) the first ``_target_`` anywhere in ``config`` (plain data; Hydra's node
    left out) that is not a project class of its slot's kind or an allowed own class. Outer
    mappings are checked before the mappings inside them, in the config's order."""
    _walk(config, root)


def _walk(value: Any, path: tuple[str, ...]) -> None:
    if isinstance(value, Mapping):
        if "_target_" in value:
            target = value["_target_"]
            key = ".".join((*path, "_target_"))
            if target is not None:  # `_target_: null` is "no object" (conf/reranker/none.yaml)
                resolve(target, key, kind_of_slot(path) if path else None)
        for name, item in value.items():
            if name != "_target_":
                _walk(item, (*path, str(name)))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _walk(item, (*path, str(index)))


def check_hydra_targets(hydra_node: Mapping[str, Any]) -> None:
    """Refuse a ``_target_`` in Hydra's own node (``hydra.callbacks``, ``hydra.sweeper``,
    ``hydra.launcher``: Hydra builds them before the run starts) outside :data:`HYDRA_TARGETS`."""

    def walk(value: Any, path: tuple[str, ...]) -> None:
        if isinstance(value, Mapping):
            target = value.get("_target_")
            if target is not None and not _hydra_allowed(target):
                key = ".".join((*path, "_target_"))
                detail = (
                    f"{target!r} is not a Hydra plugin or callback this project allows; allowed: "
                    f"{', '.join(prefix + ('*' if prefix.endswith('.') else '') for prefix in HYDRA_TARGETS)}"
                )
                raise ConfigError(".".join(path), f"_target_ {detail}", key=key, detail=detail)
            for name, item in value.items():
                if name != "_target_":
                    walk(item, (*path, str(name)))
        elif isinstance(value, list | tuple):
            for index, item in enumerate(value):
                walk(item, (*path, str(index)))

    walk(hydra_node, ("hydra",))


def _hydra_allowed(target: object) -> bool:
    if not isinstance(target, str) or not _is_dotted(target):
        return False
    return any(
        target.startswith(prefix) if prefix.endswith(".") else target == prefix for prefix in HYDRA_TARGETS
    )
