"""Access statistics of search hits, counted in memory and written in batches.

A search only counts its hits here (no I/O, nothing on the search's own clock); the counts ride
along with the next journal commit, or are written once ``threshold`` hits have piled up, and at
close. Increments are added in SQL (``access_count = access_count + n``), so concurrent searches
never lose one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable


class AccessLog:
    """Pending (count, last access) per (user, memory id)."""

    def __init__(self, threshold: int = 512) -> None:
        self.threshold = threshold
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], list[float]] = {}

    def record(self, user_id: str, ids: Iterable[str], now: float) -> bool:
        """Count one access of each id; True when enough are pending to be written now."""
        with self._lock:
            for memory_id in ids:
                entry = self._pending.setdefault((user_id, memory_id), [0, now])
                entry[0] += 1
                entry[1] = max(entry[1], now)
            return len(self._pending) >= self.threshold

    def drain(self) -> list[tuple[str, str, int, float]]:
        """Take every pending count: (user, memory id, count, last access)."""
        with self._lock:
            pending, self._pending = self._pending, {}
        return [(user, mid, int(n), last) for (user, mid), (n, last) in pending.items()]

    def restore(self, drained: Iterable[tuple[str, str, int, float]]) -> None:
        """Put back counts taken by :meth:`drain` whose write failed, so none is lost."""
        with self._lock:
            for user, mid, n, last in drained:
                entry = self._pending.setdefault((user, mid), [0, last])
                entry[0] += n
                entry[1] = max(entry[1], last)

    def pending(self, user_id: str, memory_id: str) -> tuple[int, float] | None:
        with self._lock:
            entry = self._pending.get((user_id, memory_id))
        return (int(entry[0]), entry[1]) if entry is not None else None

    def forget(self, user_id: str) -> None:
        with self._lock:
            self._pending = {k: v for k, v in self._pending.items() if k[0] != user_id}
