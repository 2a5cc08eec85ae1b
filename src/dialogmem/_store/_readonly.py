"""The indexes a read-only store searches; every write to them raises ``StoreError``.

An Edge shard can be open in one process only, so a second process that wants to read — a CLI
search beside a running server, a backup — cannot use it. ``SnapshotIndex`` reads the journal instead
(SQLite lets readers in beside a writer) and, on a user's first search, copies that user's active
memories with their stored vectors into a temporary in-process shard: a snapshot as of that search.

A server index (PostgreSQL, a Qdrant server) is shared by design: ``LiveIndex`` reads it as it is,
so a read-only process sees every write the writers commit, without copying anything.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

import numpy as np

from .._errors import StoreError
from .._types import MemoryRecord, ScoredRecord
from ._base import IndexFilter, VectorIndex
from ._edge import EdgeIndex

Fill = Callable[[VectorIndex, str], int]


class _ReadOnly:
    """The reads of ``VectorIndex``, each on the index ``_source`` gives for its scope; writes refused."""

    def _source(self, user_id: str) -> VectorIndex:
        raise NotImplementedError

    @staticmethod
    def _refuse(*_: object, **__: object) -> NoReturn:
        raise StoreError("this store is open read-only")

    upsert = set_payload = delete = delete_user = check_room = _refuse

    def retrieve(self, ids: Sequence[str], user_id: str, *, with_vectors: bool = False
                 ) -> list[tuple[MemoryRecord, np.ndarray | None]]:
        return self._source(user_id).retrieve(ids, user_id, with_vectors=with_vectors)

    def count(self, user_id: str, flt: IndexFilter | None = None) -> int:
        return self._source(user_id).count(user_id, flt)

    def scroll(self, user_id: str, flt: IndexFilter | None = None, *, limit: int = 100,
               offset: str | None = None) -> tuple[list[MemoryRecord], str | None]:
        return self._source(user_id).scroll(user_id, flt, limit=limit, offset=offset)

    def hybrid_search(self, user_id: str, vector: np.ndarray, text: str, *, limit: int,
                      flt: IndexFilter | None = None, prefetch_limit: int | None = None,
                      dense_weight: float | None = None) -> list[ScoredRecord]:
        return self._source(user_id).hybrid_search(user_id, vector, text, limit=limit, flt=flt,
                                                   prefetch_limit=prefetch_limit, dense_weight=dense_weight)

    def hybrid_search_batch(self, user_id: str, vectors: np.ndarray, texts: Sequence[str], *, limit: int,
                            flts: Sequence[IndexFilter | None] | None = None,
                            prefetch_limit: int | None = None, dense_weight: float | None = None
                            ) -> list[list[ScoredRecord]]:
        return self._source(user_id).hybrid_search_batch(user_id, vectors, texts, limit=limit, flts=flts,
                                                         prefetch_limit=prefetch_limit, dense_weight=dense_weight)

    def dense_search(self, user_id: str, vector: np.ndarray, *, limit: int,
                     flt: IndexFilter | None = None) -> list[ScoredRecord]:
        return self._source(user_id).dense_search(user_id, vector, limit=limit, flt=flt)

    def lexical_search(self, user_id: str, text: str, *, limit: int,
                       flt: IndexFilter | None = None) -> list[ScoredRecord]:
        return self._source(user_id).lexical_search(user_id, text, limit=limit, flt=flt)

    def dense_search_batch(self, user_id: str, vectors: np.ndarray, *, limit: int,
                           flts: Sequence[IndexFilter | None] | None = None) -> list[list[ScoredRecord]]:
        return self._source(user_id).dense_search_batch(user_id, vectors, limit=limit, flts=flts)

    def build_index(self, min_points: int) -> int:
        """A read-only store builds nothing."""
        return 0

    def flush(self) -> None:
        """Nothing to persist: nothing is written."""


class LiveIndex(_ReadOnly):
    """``VectorIndex`` reads of a shared server index, as its writers leave it; every write raises."""

    def __init__(self, index: VectorIndex) -> None:
        self.dim = index.dim
        self._index = index

    def _source(self, user_id: str) -> VectorIndex:
        return self._index

    def count_all(self) -> int:
        return self._index.count_all()

    def scroll_all(self, *, limit: int = 500, offset: str | None = None, with_vectors: bool = True
                   ) -> tuple[list[tuple[MemoryRecord, np.ndarray | None]], str | None]:
        return self._index.scroll_all(limit=limit, offset=offset, with_vectors=with_vectors)

    def close(self) -> None:
        self._index.close()


class SnapshotIndex(_ReadOnly):
    """``VectorIndex`` reads over per-user snapshots of the journal; every write raises ``StoreError``."""

    def __init__(self, dim: int, fill: Fill) -> None:
        self.dim = dim
        self._fill = fill
        self._dir = tempfile.TemporaryDirectory(prefix="dialogmem-readonly-")
        self._shards: dict[str, EdgeIndex] = {}
        self._lock = threading.Lock()

    def _source(self, user_id: str) -> EdgeIndex:
        with self._lock:
            shard = self._shards.get(user_id)
            if shard is None:
                shard = EdgeIndex(Path(self._dir.name) / str(len(self._shards)), dim=self.dim)
                self._fill(shard, user_id)
                self._shards[user_id] = shard
            return shard

    def count_all(self) -> int:
        with self._lock:
            return sum(s.count_all() for s in self._shards.values())

    def scroll_all(self, *, limit: int = 500, offset: str | None = None, with_vectors: bool = True
                   ) -> tuple[list[tuple[MemoryRecord, np.ndarray | None]], str | None]:
        raise StoreError("a read-only store has no index of its own to scroll")

    def close(self) -> None:
        with self._lock:
            for shard in self._shards.values():
                shard.close()
            self._shards.clear()
        self._dir.cleanup()

