"""Carries out the MTM capacity bound for one user (seed 000 eq. 6): the plan comes from
``_sleep._mtm.plan_eviction`` (utility: recency, access count, last access, salience, redundancy),
the outcome goes to the change writer as one ``ChangeSet`` per part of ``_PAGE`` removals.

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
from .._journal import MemoryRows
from .._sync._writer import ChangeWriter
from .._types import Event, MemoryRecord
from ._mtm import EvictionItem, EvictionPlan, compressed_record, plan_eviction

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
    def __init__(self, journal: MemoryRows, writer: ChangeWriter) -> None:
        self.journal = journal
        self.writer = writer

    def run_user(self, user_id: str, capacity: int) -> EvictionReport:
        """Bound this user's active MTM to ``capacity`` items (the caller holds the user's lock).

        Memory stays near one float32 matrix of the user's vectors: the plan reads slim items
        (``EvictionItem``), and is applied in parts of ``_PAGE`` removals, each part's records read
        again and written as one change set. A crash between parts leaves a smaller MTM that the
        next sleep bounds again; a compress group is never split."""
        count = self.journal.count_memories(user_id, tier="mtm")
        if count <= capacity:
            return EvictionReport()
        items, matrix = self._active(user_id, count)
        now = time.time()
        plan = plan_eviction(items, matrix, capacity=capacity, now=now)
        row = {item.id: i for i, item in enumerate(items)} if plan.compress else {}
        del items
        for part in plan.parts(_PAGE):
            ids = [*(g.keep_id for g in part.compress), *part.removed_ids()]
            records = self.journal.memories(user_id, ids=ids, limit=len(ids))
            vectors = {g.keep_id: matrix[row[g.keep_id]] for g in part.compress}
            self.writer.apply(eviction_changes(user_id, records, part, vectors, now=now))
        absorbed = sum(len(g.absorbed_ids) for g in plan.compress)
        log.info("mtm %s: %d items, capacity %d: %d compressed, %d evicted", user_id, plan.before, capacity,
                 absorbed, len(plan.evict))
        return EvictionReport(users=1, evicted=len(plan.evict), compressed=absorbed)

    def _active(self, user_id: str, count: int) -> tuple[list[EvictionItem], np.ndarray]:
        """The user's active MTM items that have a vector (a row without one is not searchable
        anyway), and their vectors as one matrix (``count`` rows expected), read a page at a time."""
        items: list[EvictionItem] = []
        matrix: np.ndarray | None = None
        after: str | None = None
        while True:
            page = self.journal.memories(user_id, after_id=after, limit=_PAGE, tier="mtm")
            vectors = self.journal.vectors(user_id, [r.id for r in page])
            for r in page:
                v = vectors.get(r.id)
                if v is None:
                    continue
                if matrix is None or len(items) == len(matrix):  # the count, or grown if more came
                    grown = np.empty((max(count, 2 * len(items), 1), len(v)), dtype=np.float32)
                    if matrix is not None:
                        grown[:len(items)] = matrix
                    matrix = grown
                matrix[len(items)] = v
                items.append(EvictionItem.of(r))
            if len(page) < _PAGE:
                break
            after = page[-1].id
        return items, (matrix[:len(items)] if matrix is not None else np.zeros((0, 1), np.float32))
