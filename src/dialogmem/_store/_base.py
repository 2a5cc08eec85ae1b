"""The vector index protocol every adapter implements.

Scope is not optional: every read, write and delete takes ``user_id`` and the adapter applies it
inside the call (a payload filter; a read by id checks each point's ``user_id``), so a caller cannot
forget it. An id that exists under another
user behaves exactly like an id that does not exist.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel

from .._types import MemoryRecord, ScoredRecord
from ..types import IndexFilter

#: the scope the shared LTM graph's nodes are indexed under: a ``user_id`` no caller can give
#: (``check_id`` refuses control characters), so no user's read or write ever reaches it
LTM_SCOPE = "\x1fltm"

#: where an index reads the records its points do not copy: (user_id, ids) -> the records of those ids
#: that the user holds (active), keyed by id; ids it does not hold are left out. The store passes its
#: journal's memory rows (one batched read), so an Edge point need not carry a second copy of its record.
RecordSource = Callable[[str, Sequence[str]], Mapping[str, MemoryRecord]]

#: payload fields with an index in every adapter
INDEXED_FIELDS = ("user_id", "float_time_stamp", "speaker_name", "tier", "entities")


class IndexPoint(BaseModel):
    """A record with its dense vector; the adapter derives the BM25 sparse vector from
    ``record.memory`` (plus keywords) itself."""

    model_config = {"arbitrary_types_allowed": True}

    record: MemoryRecord
    vector: np.ndarray


@runtime_checkable
class VectorIndex(Protocol):
    """Dense + BM25 index with payload, scoped per user."""

    dim: int

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        """Insert or replace points (each carries its own ``user_id``)."""

    def retrieve(self, ids: Sequence[str], user_id: str, *, with_vectors: bool = False
                 ) -> list[tuple[MemoryRecord, np.ndarray | None]]:
        """Records with these ids in this user's scope; missing/foreign ids are left out."""

    def set_payload(self, id: str, user_id: str, fields: dict) -> bool:
        """Merge ``fields`` into one record's payload; False if not in scope."""

    def delete(self, ids: Sequence[str], user_id: str) -> int:
        """Delete these ids in scope; returns how many existed."""

    def delete_user(self, user_id: str) -> int:
        """Delete every point of this user; returns how many."""

    def count(self, user_id: str, flt: IndexFilter | None = None) -> int:
        """Exact count in scope."""

    def scroll(self, user_id: str, flt: IndexFilter | None = None, *, limit: int = 100,
               offset: str | None = None) -> tuple[list[MemoryRecord], str | None]:
        """Page through records in scope ordered by id; returns (records, next_offset)."""

    def hybrid_search(self, user_id: str, vector: np.ndarray, text: str, *, limit: int,
                      flt: IndexFilter | None = None, prefetch_limit: int | None = None,
                      dense_weight: float | None = None) -> list[ScoredRecord]:
        """Dense + BM25 in scope + flt, ``prefetch_limit`` candidates from each side: fused with RRF
        in one query, or with ``dense_weight`` by a convex combination of the min-max normalised
        scores (``_fusion``; one batch request of ids and scores, then the top ``limit`` payloads)."""

    def hybrid_search_batch(self, user_id: str, vectors: np.ndarray, texts: Sequence[str], *, limit: int,
                            flts: Sequence[IndexFilter | None] | None = None,
                            prefetch_limit: int | None = None, dense_weight: float | None = None
                            ) -> list[list[ScoredRecord]]:
        """``hybrid_search`` for many (vector, text, filter) views at once: one list per view, each
        what ``hybrid_search`` of that view returns, in one request (and one payload read)."""

    def dense_search(self, user_id: str, vector: np.ndarray, *, limit: int,
                     flt: IndexFilter | None = None) -> list[ScoredRecord]:
        """Dense-only search (cosine score) in scope."""

    def lexical_search(self, user_id: str, text: str, *, limit: int,
                       flt: IndexFilter | None = None) -> list[ScoredRecord]:
        """BM25-only search in scope."""

    def dense_search_batch(self, user_id: str, vectors: np.ndarray, *, limit: int,
                           flts: Sequence[IndexFilter | None] | None = None
                           ) -> list[list[ScoredRecord]]:
        """Many dense queries in one batch request (used to build sleep-time update queues)."""

    def count_all(self) -> int:
        """Points of every user (maintenance only)."""

    def scroll_all(self, *, limit: int = 500, offset: str | None = None, with_vectors: bool = True
                   ) -> tuple[list[tuple[MemoryRecord, np.ndarray | None]], str | None]:
        """One page of every user's points ordered by id (maintenance only)."""

    def check_room(self, points: int = 0) -> None:
        """Raise ``DiskFullError`` when the index cannot take ``points`` more points (0: a delete),
        so a change is refused before it is journaled."""

    def build_index(self, min_points: int) -> int:
        """Put the points a search still reads by exact scan into the search graph when at least
        ``min_points`` (> 0) wait; how many waited (0: nothing built, or the backend builds its own)."""

    def flush(self) -> None:
        """Make everything written so far durable."""

    def close(self) -> None:
        """Flush and release resources. Idempotent."""


@runtime_checkable
class JournalBoundIndex(Protocol):
    """An index that lives in the journal's database (``PgIndex``): the change writer applies a change
    to it inside the journal's commit, on the journal's connection, so both commit as one."""

    joins_journal: bool

    def bound(self, conn: Any) -> AbstractContextManager[None]:
        """Run this thread's index calls on ``conn`` (a connection inside an open transaction)."""
        ...
