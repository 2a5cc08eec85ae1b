"""Carries out the MTM capacity bound for one user (seed 000 eq. 6): the plan comes from
``_sleep._mtm.plan_eviction`` (utility: recency, access count, last access, salience, redundancy),
the outcome is one ``ChangeSet`` for the change writer.

Evicted items and items compressed into a near-duplicate become ``MemoryRemoval(status="evicted")``:
they leave the vector index, keep their journal row (``get`` and ``get_all(include_evicted=True)``
read them, ``history`` shows why they left), and the next LTM consolidation cycle takes them in.
The keeper of a compressed group is rewritten with the union of its group's sources, entities and
keywords (its text does not change, so its stored vector is reused).
"""

from __future__ import annotations

import logging
import time

import numpy as np
from pydantic import BaseModel

from .._changes import ChangeSet, MemoryRemoval, MemoryWrite
from .._journal import Journal
from .._sync._writer import ChangeWriter
from .._types import Event, MemoryRecord
from ._mtm import EvictionPlan, compressed_record, plan_eviction

log = logging.getLogger(__name__)

_PAGE = 5000


class EvictionReport(BaseModel):
    users: int = 0
    evicted: int = 0
    compressed: int = 0  # items absorbed into a near-duplicate


def eviction_changes(user_id: str, records: list[MemoryRecord], plan: EvictionPlan, vectors: dict[str, np.ndarray],
                     *, now: float) -> ChangeSet:
    """The change set of ``plan`` (pure): removals with the plan's reasons, rewritten keepers."""
    by_id = {r.id: r for r in records}
    actors = {h.memory_id: h.actor for h in plan.history(by_id, now=now)}
    cs = ChangeSet(user_id)
    for group in plan.compress:
        keep = by_id[group.keep_id]
        new = compressed_record(keep, [by_id[a] for a in group.absorbed_ids], now=now)
        cs.writes.append(MemoryWrite(record=new, event=Event.UPDATE, actor=actors[keep.id], old=keep,
                                     sleep_pending=False, vector=vectors.get(keep.id)))
    for mid in plan.removed_ids():
        cs.removals.append(MemoryRemoval(record=by_id[mid], actor=actors[mid], status="evicted"))
    return cs


class Evictor:
    def __init__(self, journal: Journal, writer: ChangeWriter) -> None:
        self.journal = journal
        self.writer = writer

    def run_user(self, user_id: str, capacity: int) -> EvictionReport:
        """Bound this user's active MTM to ``capacity`` items (the caller holds the user's lock)."""
        records = self._active(user_id)
        if len(records) <= capacity:
            return EvictionReport()
        vectors = self.journal.vectors(user_id, [r.id for r in records])
        records = [r for r in records if r.id in vectors]  # a row without a vector is not searchable anyway
        now = time.time()
        matrix = np.stack([vectors[r.id] for r in records]) if records else np.zeros((0, 1), np.float32)
        plan = plan_eviction(records, matrix, capacity=capacity, now=now)
        self.writer.apply(eviction_changes(user_id, records, plan, vectors, now=now))
        absorbed = sum(len(g.absorbed_ids) for g in plan.compress)
        log.info("mtm %s: %d items, capacity %d: %d compressed, %d evicted", user_id, plan.before, capacity,
                 absorbed, len(plan.evict))
        return EvictionReport(users=1, evicted=len(plan.evict), compressed=absorbed)

    def _active(self, user_id: str) -> list[MemoryRecord]:
        out: list[MemoryRecord] = []
        after: str | None = None
        while True:
            page = self.journal.memories(user_id, after_id=after, limit=_PAGE, tier="mtm")
            out += page
            if len(page) < _PAGE:
                return out
            after = page[-1].id
