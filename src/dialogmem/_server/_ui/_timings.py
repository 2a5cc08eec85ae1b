"""Server-side latency of the inspector's pages and of the searches run from it, kept in a
bounded window per name, and their percentiles (what the stats page charts)."""

from __future__ import annotations

import threading
from collections import deque

#: samples kept per name: the latest ones
WINDOW = 2000


def percentile(sorted_values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by linear interpolation between the closest ranks."""
    if not sorted_values:
        raise ValueError("no values")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


class Timings:
    """Thread-safe windows of milliseconds by name ("page memories", "search.retrieve", ...)."""

    def __init__(self, window: int = WINDOW) -> None:
        self._window = window
        self._lock = threading.Lock()
        self._samples: dict[str, deque[float]] = {}

    def add(self, name: str, ms: float) -> None:
        with self._lock:
            self._samples.setdefault(name, deque(maxlen=self._window)).append(ms)

    def summary(self) -> list[tuple[str, int, float, float, float]]:
        """(name, samples, p50, p95, p99) for every name, sorted by name."""
        with self._lock:
            copies = {name: sorted(values) for name, values in self._samples.items()}
        return [(name, len(v), percentile(v, 50), percentile(v, 95), percentile(v, 99))
                for name, v in sorted(copies.items()) if v]
