"""The per-turn writer's units and changes (seed 000 Algorithm 2), decided without I/O.

``due_interactions`` cuts the pending turns of a user into *interactions*: a run of turns by one
speaker (the opener: a user's message) and the run of turns by the others that replies to it (the
assistant's answer), never across sessions. An interaction is due once its reply has arrived (or
its session has moved on, or it has grown to ``MAX_OPENER`` turns with no reply); the last one,
still waiting for its reply, stays pending unless the caller flushes.

``TurnChanges`` turns the item written for each interaction into store changes, reconciled by
``_reconcile.reconcile`` against the user's nearest stored items (found by the caller) and the
items of the same batch: ``add``, ``merge`` (the item adds nothing: the existing one takes its
sources), ``rewrite`` (the item says more: the existing one takes its text, the old text stays in
history), ``supersede`` (a conflict settled by time: the older item is removed, with history) and
``keep_both`` (the older one has far more evidence: the new one is stored with lower confidence).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .._changes import MemoryRemoval, MemoryWrite
from .._text._measures import cosine
from .._types import Event, MemoryRecord, ScoredRecord
from ._extract import BufferedTurn
from ._reconcile import ReconcileThresholds, apply_reconcile, reconcile

MAX_OPENER = 8  # turns of one speaker with no reply that form an interaction anyway
ACTOR = "write:turn"


def due_interactions(pending: Sequence[BufferedTurn], *, force: bool) -> list[list[BufferedTurn]]:
    """The interactions of ``pending`` (oldest first) that are complete, or all of them with ``force``."""
    groups: list[list[BufferedTurn]] = []
    complete: list[bool] = []
    for turn in pending:
        group = groups[-1] if groups else None
        if group is not None and turn.session_id == group[0].session_id and _joins(group, turn):
            group.append(turn)
            complete[-1] = _has_reply(group) or len(group) >= MAX_OPENER
            continue
        if groups:
            complete[-1] = True  # the next interaction began: this one is over
        groups.append([turn])
        complete.append(False)
    if force:
        return groups
    return [g for g, done in zip(groups, complete, strict=True) if done]


def _has_reply(group: Sequence[BufferedTurn]) -> bool:
    return any(t.speaker != group[0].speaker for t in group)


def _joins(group: Sequence[BufferedTurn], turn: BufferedTurn) -> bool:
    """The opener goes on, or the reply begins or goes on; the opener speaking again after a reply
    (or a third speaker after it) begins the next interaction."""
    if len(group) >= MAX_OPENER and not _has_reply(group):
        return False
    if not _has_reply(group):
        return True
    return turn.speaker == group[-1].speaker and turn.speaker != group[0].speaker


@dataclass
class TurnChanges:
    """The writes and removals of one batch of interaction items, reconciled one by one."""

    thresholds: ReconcileThresholds = field(default_factory=ReconcileThresholds)
    writes: dict[str, MemoryWrite] = field(default_factory=dict)  # by memory id, in order
    removals: list[MemoryRemoval] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)

    def add(self, item: MemoryRecord, vector: np.ndarray, stored: Sequence[ScoredRecord],
            stored_vectors: dict[str, np.ndarray], *, now: float) -> None:
        """Reconcile ``item`` with ``stored`` (the user's nearest items, with their vectors) and the
        items of this batch; record what it changes."""
        vectors = dict(stored_vectors)
        similar: dict[str, ScoredRecord] = {s.record.id: s for s in stored if s.record.user_id == item.user_id}
        for mid, w in self.writes.items():  # this batch's items, as they are now
            if w.record.user_id == item.user_id and w.vector is not None:
                similar[mid] = ScoredRecord(record=w.record, score=cosine(vector, w.vector))
                vectors[mid] = w.vector
        removed = {r.record.id for r in self.removals}
        decision = reconcile(item, [s for i, s in similar.items() if i not in removed], now=now,
                             thresholds=self.thresholds)
        self.actions.append(decision.action)
        target = similar[decision.target_id].record if decision.target_id in similar else None
        upserts, retired = apply_reconcile(item, decision, target, now=now)
        actor = decision.history[0].actor.replace("write", ACTOR, 1) if decision.history else ACTOR
        for record in upserts:
            same = record.id == item.id
            self._put(record, vector if same or decision.action == "rewrite" else vectors.get(record.id),
                      actor, old=None if same else target)
        for rid in retired:
            gone = item if rid == item.id else similar[rid].record
            if rid == item.id and rid not in self.writes:
                self._put(item, vector, ACTOR, old=None)  # written, then retired: history keeps it
            self.removals.append(MemoryRemoval(record=gone, actor=f"{ACTOR}:superseded-by:{decision.new_id}"))

    def _put(self, record: MemoryRecord, vector: np.ndarray | None, actor: str, *,
             old: MemoryRecord | None) -> None:
        """One write per memory id (``vector=None``: the change writer embeds the text)."""
        earlier = self.writes.get(record.id)
        if earlier is not None:  # written earlier in this batch: one write, its first event and old
            self.writes[record.id] = MemoryWrite(record=record, event=earlier.event, actor=actor, old=earlier.old,
                                                 vector=vector)
        else:
            event = Event.ADD if old is None else Event.UPDATE
            self.writes[record.id] = MemoryWrite(record=record, event=event, actor=actor, old=old, vector=vector)
