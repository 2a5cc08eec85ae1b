"""Runs the write path for the facade: journal, due batches, extraction, the change writer.

Per user, one lock serialises that user's writes (so a retried message is recognised, and a batch
is extracted once); nothing here takes a store-wide lock, so a slow model call for one user holds
up neither other users' writes nor anyone's searches.

Two ways through, chosen by the stages:

* immediate (LLM-free defaults): a turn's memories are computed first and committed together with
  the turn itself — one journal transaction per ``add``;
* batched (an LLM extracts, or the buffers have sizes): the turns are journaled first (the caller's
  acknowledgement), and when a batch is due its extraction runs outside any lock, then commits.

A batch whose processing raises is quarantined (its turns stay journaled, with the error) instead
of failing the call or, at the next open, the store.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from .._changes import ChangeSet, MemoryWrite
from .._journal import TurnStatus, UserRows
from .._store import IndexFilter, VectorIndex
from .._sync._writer import ChangeWriter
from .._types import Event, MemoryRecord, Turn
from . import Batch, BufferedTurn, WriteStages
from ._events import EVENT_CLASS
from ._extract import ExtractedFact, fact_from_turns
from ._interactions import TurnChanges
from ._online import synthesis_changes
from ._records import records_from_facts

log = logging.getLogger(__name__)

NEIGHBOURS = 6  # stored memories looked at per new memory by online synthesis


@dataclass
class IngestResult:
    stored: list[MemoryRecord] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)


class Ingest:
    def __init__(self, journal: UserRows, writer: ChangeWriter, index: VectorIndex, stages: WriteStages) -> None:
        self.journal = journal
        self.writer = writer
        self.index = index  # the nearest stored items (synthesis, the per-turn writer's reconciliation)
        self.stages = stages
        # a user's lock lives while a caller holds or waits on it: the map does not keep an entry for
        # every user id ever seen (a forgotten one included)
        self._locks: weakref.WeakValueDictionary[str, threading.Lock] = weakref.WeakValueDictionary()
        self._locks_guard = threading.Lock()

    @contextmanager
    def user_lock(self, user_id: str) -> Iterator[None]:
        """Serialises one user's writes (add, flush, update, delete, sleep): in this process, and
        with a shared journal (PostgreSQL) across processes too, so a batch is extracted once."""
        with self._thread_lock(user_id), self.journal.user_lock(user_id):
            yield

    def _thread_lock(self, user_id: str) -> threading.Lock:
        with self._locks_guard:
            lock = self._locks.get(user_id)
            if lock is None:
                lock = self._locks[user_id] = threading.Lock()
            return lock

    def add(self, user_id: str, turns: list[Turn], *, flush: bool) -> IngestResult:
        """Journal the turns that are new (a retried id is a no-op), then write what is due. A retry
        (turns journaled already) answers as the first try did: the live memories citing its turns
        come back with the new ones, so a client that lost the first answer reads the same result."""
        with self.user_lock(user_id):
            fresh = self.journal.fresh_turns(turns)
            result = self._run(user_id, fresh, force=flush)
            seen = {t.id for t in fresh}
            repeated = {t.id for t in turns if t.id not in seen}
            if repeated:
                made = {r.id for r in result.stored}
                earlier = [r for r in self._citing(user_id, repeated) if r.id not in made]
                result.stored = [*earlier, *result.stored]
            return result

    def _citing(self, user_id: str, turn_ids: set[str]) -> list[MemoryRecord]:
        """This user's active memories that cite any of ``turn_ids`` (a retried add's; a page at a
        time through the user's memories, which only a retry pays for)."""
        out: list[MemoryRecord] = []
        after: str | None = None
        while True:
            page = self.journal.memories(user_id, after_id=after, limit=1000)
            out.extend(r for r in page if turn_ids.intersection(r.source_turn_ids))
            if len(page) < 1000:
                return out
            after = page[-1].id

    def process(self, user_id: str, *, force: bool) -> IngestResult:
        """Write this user's due batch (all pending turns with ``force``): flush, and after a restart."""
        with self.user_lock(user_id):
            return self._run(user_id, [], force=force)

    def _run(self, user_id: str, fresh: list[Turn], *, force: bool) -> IngestResult:
        pending = _buffered([*self.journal.pending_turns(user_id), *fresh])
        batch = self.stages.due(user_id, pending, force=force) if pending else []
        if fresh and not (batch and self.stages.immediate):
            self.writer.apply(ChangeSet(user_id, turns=fresh))  # journaled: the caller's turn is safe
            fresh = []
        if not batch:
            return IngestResult()
        changes = self._batch_changes(user_id, batch)
        changes.turns = fresh + changes.turns  # immediate: the turns commit with their memories
        removed = {r.record.id for r in changes.removals}  # a fragment merged away by synthesis
        stored = [r for r in self.writer.apply(changes) if r.id not in removed]
        return IngestResult(stored=stored, quarantined=list(changes.quarantined))

    def _batch_changes(self, user_id: str, batch: Batch, previous: list[BufferedTurn] | None = None) -> ChangeSet:
        """One pipeline for both write modes: facts (extracted from the batch, or one per interaction
        with ``write.mode = "turn"``), records, their vectors (one embedding call), then the changes
        (reconciled with the user's nearest items, merged by online synthesis, or written as they are).
        ``previous``: the turns before the batch (default: read from the journal)."""
        turn_ids = [t.turn_id for segment in batch for t in segment]
        now = time.time()
        try:
            if previous is None:
                previous = self._context(user_id, batch[0][0], set(turn_ids))
            facts = self._facts(batch, previous)
            records = records_from_facts(user_id, facts, now=now)
            vectors = self.stages.memory_vectors(user_id, facts)
            if self.stages.turn_writer is not None:  # its reads of the nearest items are part of the unit
                return self._reconciled(user_id, records, vectors, turn_ids, now=now)
        except Exception as exc:  # a poison turn must never block the store: it waits in quarantine
            if len(turn_ids) > 1:  # find the turns that fail on their own; the others go through
                log.warning("processing %d turns of user %s failed (%s: %s); retrying them one by one",
                            len(turn_ids), user_id, type(exc).__name__, exc)
                changes = ChangeSet(user_id)
                # each turn's context is the turns before it in the batch, as in the batch (the batch's
                # turns may not be journaled yet, so the journal cannot say what came before them)
                history = list(previous or [])  # None: the journal's read failed, and would again
                for segment in batch:
                    for turn in segment:
                        changes.merge(self._batch_changes(user_id, [[turn]], history[-self.stages.context_turns:]
                                                          if self.stages.context_turns else []))
                        history.append(turn)
                return changes
            log.error("could not process turn %s of user %s (%s: %s); it is quarantined",
                      turn_ids[0], user_id, type(exc).__name__, exc, exc_info=True)
            return ChangeSet(user_id, quarantined=dict.fromkeys(turn_ids, f"{type(exc).__name__}: {exc}"))
        writes = [MemoryWrite(record=r, event=Event.ADD, actor="write", vector=v)
                  for r, v in zip(records, vectors, strict=True)]
        if self.stages.synthesis is not None:  # event units stay as written: synthesis merges facts
            facts_at = [i for i, r in enumerate(records) if r.memory_class != EVENT_CLASS]
            if facts_at:
                changes = self._synthesized(user_id, [records[i] for i in facts_at], vectors[facts_at], turn_ids)
                changes.writes += [w for w in writes if w.record.memory_class == EVENT_CLASS]
                return changes
        return ChangeSet(user_id, writes=writes, processed=turn_ids)

    def _facts(self, batch: Batch, previous: list[BufferedTurn]) -> list[ExtractedFact]:
        """What the batch says: the extractor's facts (and HyMem's event units beside them), or with
        ``write.mode = "turn"`` one item per interaction (seed 000 Algorithm 2; the model call, if
        any, runs under the user's lock only)."""
        writer = self.stages.turn_writer
        if writer is None:
            facts = self.stages.extractor.extract(batch, previous=previous)
            if self.stages.events is not None:
                facts += self.stages.events.summarize(batch, previous)
            return facts
        history, facts = list(previous), []
        for group in batch:
            written = writer.write(group, history)
            history += group
            if written.text:
                cited = [t for t in history if t.turn_id in set(written.source_turn_ids)] or list(group)
                fact = fact_from_turns(written.text, cited, method=written.method)
                facts.append(fact.model_copy(update={"speaker_name": group[0].speaker,
                                                     "topic_id": group[-1].topic_id}))
        return facts

    def _synthesized(self, user_id: str, records: list[MemoryRecord], vectors: np.ndarray,
                     turn_ids: list[str]) -> ChangeSet:
        """The batch's memories merged with related memories of their session (write.synthesis)."""
        synthesis = self.stages.synthesis
        assert synthesis is not None
        new = list(zip(records, vectors, strict=True))
        existing = self._session_neighbours(user_id, new, cross_session=synthesis.config.cross_session)
        decide = synthesis.decider([*self.journal.speakers(user_id), *(r.speaker_name for r in records)])
        online = synthesis_changes(new, existing, decide, self.stages.embedder.embed, now=time.time())
        return ChangeSet(user_id, writes=online.writes, removals=online.removals, processed=turn_ids)

    def _reconciled(self, user_id: str, records: list[MemoryRecord], vectors: np.ndarray, turn_ids: list[str],
                    *, now: float) -> ChangeSet:
        """write.mode = "turn": each item reconciled with the user's nearest stored items (merged,
        rewritten, or settled by time and evidence)."""
        changes = TurnChanges()
        for record, vector in zip(records, vectors, strict=True):
            hits = self.index.dense_search(user_id, vector, limit=NEIGHBOURS, flt=IndexFilter(tier="mtm"))
            stored = self.journal.vectors(user_id, [h.record.id for h in hits])
            changes.add(record, vector, hits, stored, now=now)
        return ChangeSet(user_id, writes=list(changes.writes.values()), removals=changes.removals,
                         processed=turn_ids)

    def _session_neighbours(self, user_id: str, new: list[tuple[MemoryRecord, np.ndarray]], *,
                            cross_session: bool) -> list[tuple[MemoryRecord, np.ndarray]]:
        """This user's stored MTM memories nearest to the new ones, in their session (unless
        ``cross_session``): the candidates of synthesis, with their vectors."""
        todo = [(r, v) for r, v in new if cross_session or r.session_id is not None]
        if not todo:
            return []
        flts = [IndexFilter(tier="mtm", session_id=None if cross_session else r.session_id) for r, _ in todo]
        hits = self.index.dense_search_batch(user_id, np.stack([v for _, v in todo]),
                                                     limit=NEIGHBOURS, flts=flts)
        found = {h.record.id: h.record for hs in hits for h in hs if h.record.user_id == user_id}
        stored = self.journal.vectors(user_id, list(found))
        return [(found[i], stored[i]) for i in found if i in stored]

    def _context(self, user_id: str, first: BufferedTurn, batch_ids: set[str]) -> list[BufferedTurn]:
        """The turns said just before the batch (its extractor's read-only context), oldest first."""
        n = self.stages.context_turns
        earlier = self.journal.turns_before(user_id, first.seq or None, n + len(batch_ids))
        return _buffered([t for t in earlier if t.id not in batch_ids][-n:])

    def pending_count(self, user_id: str | None = None) -> int:
        return self.journal.count_turns(user_id, TurnStatus.PENDING)


def _buffered(turns: list[Turn]) -> list[BufferedTurn]:
    """Journal turns as the write stages read them."""
    return [BufferedTurn.from_turn(t) for t in turns]
