"""A bounded, thread-safe LRU of query vectors, keyed by the exact text.

It lives on one embedder instance (no module-level state). Searches repeat queries more than one
would think: a chat turn is searched again when the assistant retries, a dashboard polls the same
question, and the bench searches each question once per k. A hit skips the encoder entirely.
Stored vectors are read-only copies; callers get fresh copies, so nobody can change a cached row.
The write path's turn-line vectors (``write.vectors = "turns"``) are kept in one too, keyed by user
and text, so ``drop`` forgets a user's by key prefix.

``clear`` and ``drop`` start a new generation: a caller that read ``generation`` before it embedded
passes it to ``store``, which then stores nothing if a ``clear`` or any ``drop`` came in between. An
embedding begun before a clear is not cached after it; one begun later is cached like any later query.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np


class QueryCache:
    """``size`` vectors at most; ``size=0`` caches nothing."""

    def __init__(self, size: int) -> None:
        if size < 0:
            raise ValueError("cache size must be >= 0")
        self.size = int(size)
        self._rows: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self._generation = 0

    @property
    def generation(self) -> int:
        """Changes at every ``clear`` and ``drop``."""
        return self._generation

    def __len__(self) -> int:
        return len(self._rows)

    def lookup(self, texts: Sequence[str]) -> list[np.ndarray | None]:
        """The cached vector (a copy) of each text, or None; found rows become most recent."""
        out: list[np.ndarray | None] = []
        with self._lock:
            for text in texts:
                row = self._rows.get(text)
                if row is not None:
                    self._rows.move_to_end(text)
                    self.hits += 1
                    out.append(row.copy())
                else:
                    self.misses += 1
                    out.append(None)
        return out

    def store(self, texts: Sequence[str], vectors: np.ndarray, *, generation: int | None = None) -> None:
        """Remember the rows; none when ``generation`` is given and a ``clear`` or ``drop`` came since."""
        if self.size == 0:
            return
        with self._lock:
            if generation is not None and generation != self._generation:
                return
            for text, vector in zip(texts, vectors, strict=True):
                row = np.array(vector, dtype=np.float32, copy=True)
                row.setflags(write=False)
                self._rows[text] = row
                self._rows.move_to_end(text)
            while len(self._rows) > self.size:
                self._rows.popitem(last=False)

    def clear(self) -> None:
        """Forget every row."""
        with self._lock:
            self._rows.clear()
            self._generation += 1

    def drop(self, prefix: str) -> int:
        """Forget every row whose key starts with ``prefix``; how many were dropped."""
        with self._lock:
            gone = [key for key in self._rows if key.startswith(prefix)]
            for key in gone:
                del self._rows[key]
            self._generation += 1
        return len(gone)
