"""Peak memory of a block of code, for the scale benchmarks (Linux ``/proc``).

:class:`PeakMemory` samples ``/proc/self/status`` every 10 ms in a thread and reports the peak
resident set (``VmRSS``) and its anonymous part (``RssAnon``: heap and anonymous maps, what
the process itself holds; the rest of RSS is file pages, such as a memory-mapped store's, that
the kernel can drop at will) above what they were when the block started.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

__all__ = ["PeakMemory", "rss_mb"]

_STATUS = Path("/proc/self/status")


def rss_mb() -> dict[str, float]:
    """``VmRSS``, ``RssAnon`` and ``RssFile`` of this process now, in MB."""
    values = {}
    for line in _STATUS.read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            values[key] = int(rest.split()[0]) / 1024
    return values


class PeakMemory:
    """``with PeakMemory() as peak: ...``; then ``peak.rss`` / ``peak.anon``: the peak above the
    start (MB), sampled every ``interval`` seconds; ``peak.end_rss`` / ``end_anon``: at the end."""

    def __init__(self, interval: float = 0.01) -> None:
        self.interval = interval
        self.rss = self.anon = self.end_rss = self.end_anon = 0.0
        self._stop = threading.Event()

    def __enter__(self) -> PeakMemory:
        start = rss_mb()
        self._base_rss, self._base_anon = start["VmRSS"], start["RssAnon"]
        self._peak_rss, self._peak_anon = self._base_rss, self._base_anon
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            now = rss_mb()
            self._peak_rss = max(self._peak_rss, now["VmRSS"])
            self._peak_anon = max(self._peak_anon, now["RssAnon"])
            time.sleep(self.interval)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        now = rss_mb()
        self._peak_rss = max(self._peak_rss, now["VmRSS"])
        self._peak_anon = max(self._peak_anon, now["RssAnon"])
        self.rss = self._peak_rss - self._base_rss
        self.anon = self._peak_anon - self._base_anon
        self.end_rss = now["VmRSS"] - self._base_rss
        self.end_anon = now["RssAnon"] - self._base_anon
