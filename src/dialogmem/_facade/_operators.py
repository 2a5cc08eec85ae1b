"""The verbs of operators and migrations: quarantined turns, bulk import, index rebuild and repair.

A mixin of ``Memory``: it relies on the facade's ``_parts``, ``_call()`` and ``_writable()``.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from .._changes import ChangeSet, MemoryWrite
from .._config import Config
from .._errors import InputError, first_problem
from .._journal import TurnStatus
from .._store._payload import point_id
from .._sync._ltmindex import indexed_memories
from .._sync._maintenance import StorePaths
from .._sync._repair import recover_journal
from .._types import AddResult, Event, MemoryRecord, QuarantinedTurn, SearchHit
from ..types import RepairReport
from ._host import FacadeHost
from ._input import check_id, check_record, check_text
from ._lifecycle import StoreLock
from ._open import Parts, rebuild_index

log = logging.getLogger(__name__)


class Operations(FacadeHost):
    """Quarantine, bulk import, index rebuild: the operators' verbs of ``Memory``."""

    def import_records(self, records: Iterable[MemoryRecord | dict[str, Any]], *,
                       vectors: np.ndarray | None = None) -> int:
        """Store ready-made memory records (a migration, a benchmark's precomputed data) through the
        change writer; ``vectors`` (one row per record) skip the embedding. Returns how many."""
        with self._call():
            self._writable()
            items = [_importable(r, self.config.write.max_metadata_bytes) for r in records]
            if vectors is not None and len(vectors) != len(items):
                raise InputError(f"{len(items)} records but {len(vectors)} vectors")
            by_user: dict[str, ChangeSet] = {}
            for i, r in enumerate(items):
                owner = self._parts.journal.memory_owner(r.id)
                if owner is not None and owner != r.user_id:
                    raise InputError(f"memory id {r.id} already belongs to another user")
                vector = None if vectors is None else np.asarray(vectors[i], dtype=np.float32)
                by_user.setdefault(r.user_id, ChangeSet(r.user_id)).writes.append(
                    MemoryWrite(record=r, event=Event.ADD, actor="import", vector=vector))
            for changes in by_user.values():
                self._parts.writer.apply(changes)
            return len(items)

    def derived_id(self, user_id: str, name: str) -> str:
        """A memory id for ``name`` in ``user_id``'s space (for ``import_records``: a LangGraph item's
        id is its namespace and key). The same store, user and name always give the same id; another
        user's name gives another id, and nobody without the store's secret (the journal's
        ``store_id``, never served) can compute one, so no user can occupy or probe the id that a
        name of another user will get."""
        with self._call():
            check_id("user_id", user_id)
            check_text("name", name)
            secret = (self._parts.journal.meta("store_id") or "").encode()
            message = b"derived-id\x00" + user_id.encode() + b"\x00" + name.encode()
            digest = hmac.new(secret, message, hashlib.sha256).digest()
            return str(uuid.UUID(bytes=digest[:16], version=5))

    def quarantined(self, user_id: str | None = None) -> list[QuarantinedTurn]:
        """Accepted turns whose processing failed (of one user, or all), with the reason."""
        with self._call():
            return [q for _, q in self._parts.journal.quarantined(check_id("user_id", user_id) if user_id else None)]

    def retry_quarantined(self, user_id: str, turn_ids: Sequence[str] | None = None) -> AddResult:
        """Put quarantined turns (all of this user's, or these) back in the write path and flush them."""
        with self._call():
            self._writable()
            check_id("user_id", user_id)
            ids = list(turn_ids) if turn_ids is not None else [
                q.turn.id for _, q in self._parts.journal.quarantined(user_id)]
            moved = self._parts.journal.set_turn_status(user_id, ids, TurnStatus.PENDING,
                                                        only_from=TurnStatus.QUARANTINED)
            outcome = self._parts.ingest.process(user_id, force=True)
            log.info("retried %d quarantined turns of %s", moved, user_id)
            return AddResult(turn_ids=ids, memories=[SearchHit.from_record(r, 1.0) for r in outcome.stored],
                             quarantined=outcome.quarantined)

    def drop_quarantined(self, user_id: str, turn_ids: Sequence[str]) -> int:
        """Give up on quarantined turns: they stay journaled (raw text kept), marked dropped."""
        with self._call():
            self._writable()
            check_id("user_id", user_id)
            return self._parts.journal.set_turn_status(user_id, list(turn_ids), TurnStatus.DROPPED,
                                                       only_from=TurnStatus.QUARANTINED)

    def rebuild_index(self) -> RepairReport:
        """Build the vector index again from the journal (the old Edge directory is moved aside)."""
        with self._call():
            self._writable()
            return rebuild_index(self._parts)



def _importable(item: MemoryRecord | dict[str, Any], max_metadata_bytes: int) -> MemoryRecord:
    """A record that the journal and the index will both take, or ``InputError`` saying why not."""
    if isinstance(item, MemoryRecord):  # validated again: a copy made with model_copy(update=) never was
        item = item.model_dump()
    if not isinstance(item, dict):
        raise InputError(f"a record must be a MemoryRecord or a dict, got {type(item).__name__}")
    now = time.time()
    try:
        record = MemoryRecord.model_validate({"created_at": now, "updated_at": now, **item})
    except ValidationError as exc:
        where, what = first_problem(exc)
        raise InputError(f"not a memory record: {where}: {what}") from exc
    if point_id(record.id) is None:
        raise InputError(f"memory id {record.id!r} must be a UUID string")
    return check_record(record, max_metadata_bytes)


def prepare_repair(config: Config, *, from_index: bool) -> RepairReport:
    """The part of ``Memory.repair`` before the store is opened: with ``from_index``, rebuild a missing
    journal's memory rows from the surviving index; otherwise move an Edge index aside (never
    deleted), so that opening builds it again from the journal."""
    data_dir = Path(config.data_dir).expanduser()
    report = recover_journal(config, data_dir) if from_index else RepairReport()
    if not from_index and config.store.backend == "edge":
        lock = StoreLock(data_dir / ".lock")
        try:
            moved = StorePaths(data_dir).move_index_aside("repaired")
        finally:
            lock.release()
        report.index_moved_to = str(moved) if moved is not None else None
    return report


def finish_repair(parts: Parts, config: Config, report: RepairReport) -> RepairReport:
    """The part of ``Memory.repair`` on the opened store: a server index is rebuilt in place."""
    if config.store.backend != "edge":
        rebuild_index(parts)
    report.memories_indexed = indexed_memories(parts.index)
    return report
