"""Export a tuned retriever for production: ``python -m viking_eval.sweep.export <run or sweep folder> --name <name>``.

Writes ``experiments/tuned/<name>.yaml``: retriever class and parameters, embedder class,
parameters and name (model id + weights fingerprint), store settings, the dataset and split it
was tuned on with its metrics, the held-out evaluation when the sweep made one (``best.yaml``),
git sha and date. ``retrievers.load_tuned`` reads it without hydra or viking_eval.

From a run folder the retriever is ``--retriever`` or the best one by ``--metric``; from a sweep
folder it is the job chosen in ``best.yaml`` or, without one, the best job by ``--metric``.

An existing file is never replaced unless ``--force`` is given: without it the export stops with
one line naming the file and what it holds (its retriever, dataset, split, export date and source
folder), exit 2, the file untouched. The file is written whole under a temporary name and then
put in place (linked, so that a file another process put there meanwhile is not replaced either;
with ``--force``, renamed over the old one), so a partial file never sits under the final name.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import yaml

import retrievers
from retrievers.ranking import pair_key
from retrievers.tuned import TUNED_FORMAT
from viking_eval import files
from viking_eval.config.load import BACKEND_KEYS, without_encode_keys
from viking_eval.results import run_folder, sweep_folder

REPO_ROOT = Path(__file__).resolve().parents[2]


class ExportError(ValueError):
    """A folder that cannot be exported; the message says what is missing."""


def _short_class(target: str, what: str) -> str:
    short = target.rsplit(".", 1)[-1]
    if not target.startswith("retrievers.") or short not in retrievers.__all__:
        raise ExportError(
            f"{what} {target!r} is not a class of the retrievers public API; it cannot be exported"
        )
    return short


def _best(candidates: list[tuple[str, float]], metric: str, where: Path) -> str:
    if not candidates:
        raise ExportError(f"{where}: no result holds metric {metric!r}")
    return sorted(candidates, key=pair_key)[0][0]


def _is_run(folder: Path) -> bool:
    return run_folder.is_finished_run(folder)


def choose(folder: Path, retriever: str | None, metric: str) -> tuple[Path, str, dict[str, Any] | None]:
    """(run folder, retriever name, best.yaml content or None) for a run or sweep folder."""
    if _is_run(folder):
        document = run_folder.read_metrics(folder)
        names = list(document["retrievers"])
        if retriever is not None:
            if retriever not in names:
                raise ExportError(f"{folder}: no retriever {retriever!r}; the run has {names}")
            return folder, retriever, None
        scored = [
            (name, entry["metrics"][metric])
            for name, entry in document["retrievers"].items()
            if metric in entry["metrics"]
        ]
        return folder, _best(scored, metric, folder), None
    best = sweep_folder.read_best(folder)
    if best is not None:
        return folder / str(best["job"]), retriever or str(best["retriever"]), best
    jobs = sorted(path for path in folder.iterdir() if path.is_dir() and _is_run(path))
    if not jobs:
        raise ExportError(
            f"{folder} is neither a run folder (metrics.json + config.yaml) nor a sweep with finished jobs"
        )
    scored = []
    for job in jobs:
        for name, entry in run_folder.read_metrics(job)["retrievers"].items():
            if (retriever is None or name == retriever) and metric in entry["metrics"]:
                scored.append((f"{job.name}/{name}", entry["metrics"][metric]))
    job_name, name = _best(scored, metric, folder).split("/", 1)
    return folder / job_name, name, None


def tuned_document(run_dir: Path, retriever: str, name: str, best: dict[str, Any] | None) -> dict[str, Any]:
    config = run_folder.read_config(run_dir)
    metrics = run_folder.read_metrics(run_dir)
    environment = run_folder.read_environment(run_dir)
    retriever_cfg = dict(config["retrievers"][retriever])
    # embedder.backend / actors (where the harness encoded the corpus) are not the embedder's
    embedder_cfg = without_encode_keys(config["embedder"])
    # where the model runs is the caller's choice (load_tuned refuses a device from a file; the
    # vectors do not depend on it): conf/embedder/minilm.yaml's device is not exported
    embedder_cfg.pop("device", None)
    provenance: dict[str, Any] = {
        "source": str(run_dir),
        "dataset": metrics["dataset"],
        "tuned_on": {"split": metrics["split"], "metrics": metrics["retrievers"][retriever]["metrics"]},
        "git": environment.get("git"),
        "exported": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if best is not None:
        provenance["tuned_on"] = best.get("tuned_on", provenance["tuned_on"])
        if "evaluated_on" in best:
            provenance["evaluated_on"] = best["evaluated_on"]
        if "default_evaluated_on" in best:
            provenance["default_evaluated_on"] = best["default_evaluated_on"]
    return {
        "format": TUNED_FORMAT,
        "name": name,
        "retriever": {
            "class": _short_class(retriever_cfg.pop("_target_"), f"retrievers.{retriever}"),
            "params": retriever_cfg,
        },
        "embedder": {
            "class": _short_class(embedder_cfg.pop("_target_"), "embedder"),
            "params": embedder_cfg,
            "name": environment.get("embedder"),
        },
        # what the store holds; where its searches ran (store.backend*) is the service's choice,
        # never a tuned file's (load_tuned(..., backend=) names it)
        "store": {
            key: value for key, value in (config.get("store") or {}).items() if key not in BACKEND_KEYS
        },
        "provenance": provenance,
    }


def tuned_path(name: str, out_dir: Path | None = None) -> Path:
    """``<out_dir>/<name>.yaml`` (default out_dir: experiments/tuned); ``name`` is a plain file name."""
    if not name or name.startswith(".") or "/" in name or "\\" in name or name.endswith((".yaml", ".yml")):
        raise ExportError(
            f"--name {name!r}: give a plain file name without folder or suffix (e.g. hybrid-mydata); "
            "--out-dir chooses the folder"
        )
    return (out_dir or REPO_ROOT / "experiments" / "tuned") / f"{name}.yaml"


def describe_tuned(path: Path) -> str:
    """What an existing tuned file holds, in a few words, from its own fields: retriever class,
    dataset, tuning split, export date and source folder (those it records)."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        return f"a file that is not a readable tuned file ({type(error).__name__})"
    if not isinstance(document, dict) or document.get("format") != TUNED_FORMAT:
        return "a file that is not a tuned file of this format"
    retriever = document.get("retriever")
    retriever_class = retriever.get("class") if isinstance(retriever, dict) else None
    provenance = document.get("provenance")
    provenance = provenance if isinstance(provenance, dict) else {}
    tuned_on = provenance.get("tuned_on")
    split = tuned_on.get("split") if isinstance(tuned_on, dict) else None
    parts = [f"a tuned {retriever_class or 'retriever'}"]
    if provenance.get("dataset"):
        parts.append(f"tuned on {provenance['dataset']}" + (f" ({split} split)" if split else ""))
    if provenance.get("exported"):
        parts.append(f"exported {provenance['exported']}")
    if provenance.get("source"):
        parts.append(f"from {provenance['source']}")
    return ", ".join(parts)


def _exists_error(target: Path) -> ExportError:
    return ExportError(
        f"{target} exists and holds {describe_tuned(target)}; --force replaces it (or give another --name)"
    )


def _write_new(target: Path, text: str) -> None:
    """Write ``text`` to ``target`` when no file is there: the whole text goes to a temporary file
    beside it, which is then hard-linked under the final name (a link never replaces a file, so
    one created meanwhile is refused, not overwritten)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
    try:
        with open(temp, "x", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temp, target)
        except FileExistsError:
            raise _exists_error(target) from None
    finally:
        temp.unlink(missing_ok=True)


def export(
    folder: Path,
    name: str,
    *,
    retriever: str | None = None,
    metric: str = "nDCG@10",
    out_dir: Path | None = None,
    force: bool = False,
) -> Path:
    """Write the tuned file ``<out_dir>/<name>.yaml`` and return its path; an existing file is an
    ExportError (naming what it holds) unless ``force``, which replaces it atomically."""
    target = tuned_path(name, out_dir)
    if not force and (target.exists() or target.is_symlink()):
        raise _exists_error(target)  # before any work: nothing to redo once another name is given
    run_dir, chosen, best = choose(folder, retriever, metric)
    document = tuned_document(run_dir, chosen, name, best)
    text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
    if force:
        files.write_text(target, text)
    else:
        _write_new(target, text)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m viking_eval.sweep.export", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("folder", type=Path, help="a run folder or a multirun (sweep) folder")
    parser.add_argument("--name", required=True, help="file name under experiments/tuned/")
    parser.add_argument("--retriever", help="retriever name in the run (default: best by --metric)")
    parser.add_argument("--metric", default="nDCG@10", help="metric that picks the best (default nDCG@10)")
    parser.add_argument("--out-dir", type=Path, help="default: experiments/tuned in the repository")
    parser.add_argument(
        "--force", action="store_true", help="replace an existing file of that name (refused without it)"
    )
    args = parser.parse_args(argv)
    try:
        target = tuned_path(args.name, args.out_dir)
        replaced = describe_tuned(target) if args.force and target.exists() else None
        path = export(
            args.folder,
            args.name,
            retriever=args.retriever,
            metric=args.metric,
            out_dir=args.out_dir,
            force=args.force,
        )
    except (ExportError, run_folder.RunFolderError, OSError, KeyError, yaml.YAMLError) as error:
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    print(f"tuned retriever written to {path}" + (f" (replaced {replaced})" if replaced else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
