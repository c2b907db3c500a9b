"""Document times: :class:`TimestampConfig` (``store.timestamps``: which metadata fields, which zone,
which epoch unit) and :class:`DocumentTimes`, the epoch seconds of every store row parsed once at
build with the counts of what parsed, saved as ``.npy`` + JSON (see :mod:`retrievers.timeparse`)."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import tzinfo
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from retrievers.params import Params, param
from retrievers.timeparse.stamps import parse_timestamp, parse_timezone
from retrievers.types import Document

__all__ = ["DocumentTimes", "TimestampConfig"]

log = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float64]

_MAX_EXAMPLES = 5


@dataclass(frozen=True)
class TimestampConfig(Params):
    """Which metadata fields hold a document's time (first present field wins; an unparseable
    value is counted and the next field is tried), the zone of naive values, the epoch unit."""

    SECTION = "store.timestamps"

    fields: tuple[str, ...] = param(("timestamp", "session_date_time"), non_empty=True, unique=True)
    default_timezone: str = param("UTC", doc="UTC, an offset such as +02:00, or an IANA name")
    epoch_unit: Literal["s", "ms"] = param("s")

    def check(self) -> None:
        if any(not name for name in self.fields):
            raise self.fail("fields", f"must be a non-empty list of metadata keys, got {list(self.fields)}")
        try:
            parse_timezone(self.default_timezone)
        except ValueError as error:
            raise self.fail("default_timezone", f"is not a time zone: {error}") from None

    @property
    def tz(self) -> tzinfo:
        return parse_timezone(self.default_timezone)


def _is_missing(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


class DocumentTimes:
    """Epoch seconds (float64, NaN = no time) per store row, and the parse report."""

    ARRAY_FILE = "epoch_seconds.npy"
    REPORT_FILE = "report.json"

    def __init__(self, epoch_seconds: npt.ArrayLike, report: Mapping[str, Any]) -> None:
        array = np.asarray(epoch_seconds, dtype=np.float64)
        if array.ndim != 1:
            raise ValueError(f"epoch_seconds must be 1-D, got shape {array.shape}")
        if np.isinf(array).any():
            raise ValueError("epoch_seconds must be finite or NaN (missing), never infinite")
        self.epoch_seconds: FloatArray = array
        self.report: dict[str, Any] = dict(report)

    def __len__(self) -> int:
        return int(self.epoch_seconds.shape[0])

    @classmethod
    def build(cls, documents: Sequence[Document], config: TimestampConfig) -> DocumentTimes:
        """Parse every document's time; counts go to :attr:`report` and a warning is logged when
        values did not parse."""
        tz = config.tz
        times = np.full(len(documents), np.nan, dtype=np.float64)
        by_field = {name: {"parsed": 0, "unparseable": 0} for name in config.fields}
        examples: list[dict[str, str]] = []
        n_unparseable_docs = 0
        for row, doc in enumerate(documents):
            had_bad_value = False
            for name in config.fields:
                value = doc.metadata.get(name)
                if _is_missing(value):
                    continue
                parsed = parse_timestamp(value, tz=tz, epoch_unit=config.epoch_unit)
                if parsed is None:
                    by_field[name]["unparseable"] += 1
                    had_bad_value = True
                    if len(examples) < _MAX_EXAMPLES:
                        examples.append({"doc_id": doc.id, "field": name, "value": str(value)[:80]})
                    continue
                by_field[name]["parsed"] += 1
                times[row] = parsed.timestamp()
                break
            if had_bad_value and math.isnan(times[row]):
                n_unparseable_docs += 1
        n_parsed = int(np.count_nonzero(~np.isnan(times)))
        report: dict[str, Any] = {
            "fields": list(config.fields),
            "default_timezone": config.default_timezone,
            "epoch_unit": config.epoch_unit,
            "n_documents": len(documents),
            "parsed": n_parsed,
            "unparseable": n_unparseable_docs,
            "missing": len(documents) - n_parsed - n_unparseable_docs,
            "by_field": by_field,
            "examples": examples,
        }
        bad_values = sum(counts["unparseable"] for counts in by_field.values())
        if bad_values:
            log.warning(
                "timestamps: %d value(s) did not parse (%d documents left without a time); "
                "examples: %s. Accepted: epoch %s, ISO 8601, '1:56 pm on 8 May, 2023'",
                bad_values,
                n_unparseable_docs,
                examples,
                config.epoch_unit,
            )
        return cls(times, report)

    def save(self, folder: Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / self.ARRAY_FILE, self.epoch_seconds, allow_pickle=False)
        (folder / self.REPORT_FILE).write_text(json.dumps(self.report, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, folder: Path, n_documents: int, *, mmap: bool = True) -> DocumentTimes:
        folder = Path(folder)
        array_path = folder / cls.ARRAY_FILE
        if not array_path.is_file():
            raise ValueError(
                f"{folder}: missing {cls.ARRAY_FILE}; the store was built without timestamps, rebuild it"
            )
        times = np.load(array_path, mmap_mode="r" if mmap else None, allow_pickle=False)
        if times.dtype != np.float64 or times.shape != (n_documents,):
            raise ValueError(
                f"{array_path}: expected float64 of shape ({n_documents},), got {times.dtype} {times.shape}"
            )
        report = json.loads((folder / cls.REPORT_FILE).read_text(encoding="utf-8"))
        return cls(times, report)

    def has_time(self, mask: npt.NDArray[np.bool_] | None = None) -> npt.NDArray[np.bool_]:
        """Rows with a time (and allowed by ``mask``)."""
        known = ~np.isnan(self.epoch_seconds)
        return known if mask is None else known & mask

    def span(self, mask: npt.NDArray[np.bool_] | None = None) -> tuple[float, float] | None:
        """(earliest, latest) epoch seconds over the rows allowed by ``mask``; None if none has a time."""
        rows = self.has_time(mask)
        if not rows.any():
            return None
        values = self.epoch_seconds[rows]
        return float(values.min()), float(values.max())
