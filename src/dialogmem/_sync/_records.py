"""The journal as the vector index's record source: an Edge point carries only the fields its filters
read, and a search reads its hits' records from the journal's memory rows (the canonical copy)."""

from __future__ import annotations

from collections.abc import Sequence

from .._journal import MemoryRows
from .._store._base import RecordSource
from .._types import MemoryRecord


def journal_records(journal: MemoryRows) -> RecordSource:
    """Reads a user's active memories by id in one statement (a part of ``ID_PART`` ids each); an id
    the user does not hold, or no longer holds active, is left out."""
    def records(user_id: str, ids: Sequence[str]) -> dict[str, MemoryRecord]:
        if not ids:
            return {}
        return {r.id: r for r in journal.memories(user_id, ids=ids, limit=len(ids))}
    return records
