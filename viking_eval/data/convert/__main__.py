"""Command line: ``python -m viking_eval.data.convert NAME RAW... [--dest DIR] [--force] [--no-verify]``.

Bad input is reported as one ``error: <file>:<line>: <what is wrong>`` line on stderr with exit
status 2 (no traceback); a finished conversion prints one status line per checked file.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from viking_eval.data.convert import CONVERTERS, convert
from viking_eval.data.errors import DataError
from viking_eval.data.locations import DATA_ENV, data_home


def _epilog() -> str:
    lines = ["datasets, the raw file(s) each expects and where to get them:"]
    for spec in CONVERTERS.values():
        names = " ".join(raw.name for raw in spec.raw)
        lines.append(f"  {spec.name}: {spec.summary}")
        lines.append(f"    python -m viking_eval.data.convert {spec.name} {names}")
        for raw in spec.raw:
            lines.append(f"    {raw.name}: {raw.source}")
            lines.append(f"      {raw.url}")
            lines.append(f"      sha256 {raw.sha256}")
    lines.append("")
    lines.append(
        f"Raw files are checked against these checksums, converted files against datasets/registry.yaml "
        f"(local_datasets.converters). To load a converted dataset by name, put DEST on {DATA_ENV}."
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry; returns the exit status (0 ok, 2 bad input or refused)."""
    parser = argparse.ArgumentParser(
        prog="python -m viking_eval.data.convert",
        description=(
            "Rebuild a shared dataset (BEIR layout: corpus.jsonl, queries.jsonl, qrels/<split>.tsv) "
            "byte for byte from its raw public release."
        ),
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("name", choices=sorted(CONVERTERS), help="dataset to build")
    parser.add_argument(
        "raw", nargs="+", type=Path, help="the raw file(s) of the release (or a folder holding them)"
    )
    parser.add_argument(
        "--dest",
        type=Path,
        default=None,
        help=f"parent folder; the dataset goes to DEST/NAME (default: {data_home()})",
    )
    parser.add_argument("--force", action="store_true", help="replace an existing non-empty DEST/NAME")
    parser.add_argument(
        "--no-verify",
        dest="verify",
        action="store_false",
        help="convert raw files whose sha256 differs from the published release (outputs are still "
        "compared with the registry, but a mismatch is only reported)",
    )
    parser.add_argument(
        "--registry", type=Path, default=None, help="registry YAML with the expected output checksums"
    )
    args = parser.parse_args(argv)
    try:
        folder = convert(
            args.name,
            args.raw,
            args.dest,
            force=args.force,
            verify=args.verify,
            registry=args.registry,
            log=print,
        )
    except (DataError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{args.name} is in {folder.resolve()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
