"""Rebuilding the vector index from the journal, and the other repairs ``dialogmem repair`` runs."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from .._changes import ChangeSet, MemoryWrite
from .._config import Config
from .._errors import StoreError
from .._journal import IndexState, MemoryRows, SQLiteJournal
from .._store import LTM_SCOPE, EdgeIndex, VectorIndex
from .._types import Event
from ..types import RepairReport
from ._maintenance import IndexMarker, StorePaths

log = logging.getLogger(__name__)


def import_from_index(journal: MemoryRows, index: VectorIndex) -> int:
    """Copy every point of ``index`` into the journal's memory rows (a store written before the
    journal held memories, or ``repair --from-index``). Existing rows are left as they are."""
    n = 0
    offset: str | None = None
    while True:
        page, offset = index.scroll_all(limit=500, offset=offset, with_vectors=True)
        by_user: dict[str, list[MemoryWrite]] = {}
        for record, vector in page:
            if record.user_id == LTM_SCOPE or journal.memory_owner(record.id) is not None:
                continue
            by_user.setdefault(record.user_id, []).append(
                MemoryWrite(record=record, event=Event.ADD, actor="import", sleep_pending=False, vector=vector))
        for user_id, writes in by_user.items():
            journal.commit(ChangeSet(user_id, writes=writes), {w.record.id: w.vector for w in writes
                                                               if w.vector is not None})
            n += len(writes)
        if offset is None:
            break
    log.info("copied %d memories from the vector index into the journal", n)
    return n


def recover_journal(config: Config, data_dir: Path) -> RepairReport:
    """``repair --from-index``: a new journal whose memory rows come from the surviving index."""
    if config.journal.url is not None:
        raise StoreError("--from-index rebuilds a missing SQLite journal file; this store's journal is PostgreSQL")
    paths = StorePaths(data_dir)
    if paths.journal.exists():
        raise StoreError(f"{paths.journal} exists: --from-index only rebuilds a missing journal")
    if not paths.index_has_data():
        raise StoreError(f"there is no index at {paths.index} to recover memories from")
    started = time.perf_counter()
    index = EdgeIndex(paths.index, dim=config.embedder.dim, min_free_mb=config.store.min_free_mb)
    try:
        if _lean_points(index):
            raise StoreError(f"the index at {paths.index} keeps no copies of the memories (store.index_records "
                             "was off when they were written; the journal was their only copy): --from-index "
                             "cannot recover them. Restore the journal from a backup or an export")
        journal = SQLiteJournal(paths.journal)
        try:
            journal.set_meta("import_index", None)
            recovered = import_from_index(journal, index)
            journal.mark_index([r.id for r, _, _ in journal.index_rows(states=None)], IndexState.SYNCED)
            paths.write_marker(IndexMarker(store_id=journal.meta("store_id") or "",
                                           generation=int(journal.meta("index_generation") or 1)))
        finally:
            journal.close()
    finally:
        index.close()
    return RepairReport(memories_recovered=recovered, seconds=round(time.perf_counter() - started, 3))


def _lean_points(index: EdgeIndex) -> int:
    """How many of the index's memory points hold no copy of their record (read before anything is
    written, so a refusal leaves no journal behind)."""
    return index.points_without_records()

