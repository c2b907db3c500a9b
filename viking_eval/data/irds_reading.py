"""Reading an ir_datasets collection with its logs held back, and the one-line error when
ir_datasets cannot get a file it needs (for :func:`viking_eval.data.irds.load_irds`).

**Offline.** When ir_datasets cannot get a file (no network, a host down, a file it cannot
download itself), the error is one line naming each file it wanted (URL, md5), where to put it
(ir_datasets then uses it as is), and ``IR_DATASETS_HOME``. ir_datasets' own log lines about the
failed attempts are held back while loading: replayed if the load succeeds, dropped with the error.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from viking_eval.data.errors import DataError

__all__ = ["Reading", "irds_home", "offline_error"]

_LOGGER = "ir_datasets"  # every ir_datasets module logs through this one logger (ir_datasets.log.easy)


def irds_home() -> Path:
    """ir_datasets' data folder (``ir_datasets.util.home_path()``, without creating it)."""
    return Path(os.environ.get("IR_DATASETS_HOME") or Path.home() / ".ir_datasets").expanduser()


class _HeldLogs(logging.Filter):
    """Holds ir_datasets' log records while a dataset is read (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False


class Reading:
    """One load: ir_datasets' logs held back, and each ``Download`` that failed recorded (the
    ``path``/``stream`` methods of ``ir_datasets.util.Download`` are wrapped for the duration, so
    an offline error can say which file ir_datasets wanted and where it would look for it)."""

    def __init__(self, ir_datasets: Any) -> None:
        self.ir_datasets = ir_datasets
        self.failed: list[tuple[Any, BaseException]] = []
        self.held = _HeldLogs()
        self._restore: list[Callable[[], None]] = []

    def __enter__(self) -> Reading:
        logger = logging.getLogger(_LOGGER)
        logger.addFilter(self.held)
        self._restore.append(lambda: logger.removeFilter(self.held))
        download_cls = self.ir_datasets.util.Download
        original_path, original_stream = download_cls.path, download_cls.stream
        failed = self.failed

        def path(download: Any, force: bool = True) -> Any:
            try:
                return original_path(download, force)
            except Exception as exc:
                failed.append((download, exc))
                raise

        @contextlib.contextmanager
        def stream(download: Any) -> Iterator[Any]:
            try:
                with original_stream(download) as handle:
                    yield handle
            except Exception as exc:
                failed.append((download, exc))
                raise

        download_cls.path, download_cls.stream = path, stream

        def restore() -> None:
            download_cls.path, download_cls.stream = original_path, original_stream

        self._restore.append(restore)
        return self

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        for undo in reversed(self._restore):
            undo()
        if error is None or not isinstance(error, DataError):
            logger = logging.getLogger(_LOGGER)
            for record in self.held.records:  # the load worked: say what ir_datasets said
                logger.handle(record)

    def download_failures(self) -> list[tuple[Any, BaseException]]:
        """Failed downloads (network, checksum, a file ir_datasets cannot fetch), each once."""
        seen: set[int] = set()
        out = []
        for download, exc in self.failed:
            if id(download) in seen or not _is_download_error(exc):
                continue
            seen.add(id(download))
            out.append((download, exc))
        return out


def _is_download_error(exc: BaseException) -> bool:
    if isinstance(exc, OSError):  # FileNotFoundError, HashVerificationError (an IOError), disk full
        return True
    if isinstance(exc, RuntimeError) and exc.args and exc.args[0] == "All download sources failed":
        return True
    try:
        import requests
    except ImportError:  # pragma: no cover - a dependency of ir_datasets
        return False
    return isinstance(exc, requests.RequestException)


def _reason(exc: BaseException) -> str:
    """A few words on why a download failed."""
    if isinstance(exc, RuntimeError) and len(exc.args) > 1 and isinstance(exc.args[1], list):
        reasons = [_reason(inner) for _, inner in exc.args[1] if isinstance(inner, BaseException)]
        return "; ".join(dict.fromkeys(reasons)) or "every source failed"
    try:
        import requests
    except ImportError:  # pragma: no cover
        requests = None  # type: ignore[assignment]
    if requests is not None:
        if isinstance(exc, requests.ConnectionError) and not isinstance(exc, requests.Timeout):
            return "cannot connect (no network, or the host is down)"
        if isinstance(exc, requests.Timeout):
            return "timed out"
        if isinstance(exc, requests.HTTPError):
            status = getattr(getattr(exc, "response", None), "status_code", None)
            return f"HTTP {status}" if status else "HTTP error"
    if isinstance(exc, FileNotFoundError):
        return "not there"
    if type(exc).__name__ == "HashVerificationError":
        return f"checksum mismatch ({' '.join(str(exc).split())[:160]})"
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"


def _wanted(download: Any) -> str:
    """What ir_datasets wanted for one failed download (URL and md5, or its own instructions for
    a file it cannot fetch), and where a copy would be picked up as it is."""
    mirrors = list(getattr(download, "mirrors", []) or [])
    urls = [str(m.url) for m in mirrors if getattr(m, "url", None)]
    uris = [str(m.uri) for m in mirrors if getattr(m, "uri", None)]
    locals_ = [m for m in mirrors if type(m).__name__ == "LocalDownload"]
    cache_path = getattr(download, "_cache_path", None)
    md5 = getattr(download, "expected_md5", None)
    target = cache_path if cache_path and cache_path != os.devnull else None
    if target is None and locals_:
        target = str(locals_[0]._path)
    source = (urls or uris)[0] if urls or uris else None
    if source:
        what = source + (f" (md5 {md5})" if md5 else "")
    else:  # a file ir_datasets cannot download: it says how to get it
        message = " ".join(str(getattr(locals_[0], "_message", "") or "").split()) if locals_ else ""
        first = re.split(r"(?<=[.!?])\s", message, maxsplit=1)[0] if message else ""
        what = "a file ir_datasets cannot download itself" + (f" ({first[:200]})" if first else "")
    return what + (f" -> put it at {target}" if target else "")


def offline_error(where: str, failures: list[tuple[Any, BaseException]]) -> DataError:
    reasons: dict[str, list[str]] = {}  # one entry per file, however many parts of the dataset want it
    for download, exc in failures:
        reasons.setdefault(_wanted(download), [])
        for reason in _reason(exc).split("; "):
            if reason not in reasons[_wanted(download)]:
                reasons[_wanted(download)].append(reason)
    wanted = "; ".join(f"{file} [{'; '.join(why)}]" for file, why in reasons.items())
    count = f"{len(reasons)} files" if len(reasons) > 1 else "a file"
    return DataError(
        f"{where}: ir_datasets could not get {count} it needs: {wanted}. Fetch each where there is a "
        f"network and put it there (check its md5: ir_datasets uses a file found there as it is), or "
        f"set IR_DATASETS_HOME (now {irds_home()}) to a folder where ir_datasets already holds this "
        "collection",
        path=Path(where),
    )
