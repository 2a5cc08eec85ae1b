"""Redundancy and conflict handling for a new MTM item (seed 000 §3.5, Algorithm 2 lines 8-10),
decided without I/O against the caller's nearest existing items.

``reconcile(new, similar, now=...)`` looks at the candidates (``ScoredRecord``: record + cosine) from
the most similar down and decides on the first that qualifies:

- ``merge``: a near-duplicate (cosine ``>= duplicate_cosine``, same negations) whose content words
  and numbers contain all of the new item's: the new item is not stored (nothing of it is lost); the
  existing one keeps its text and takes the new item's source turns.
- ``rewrite``: the same, but the new item's words and numbers contain the existing one's (it says
  more): the existing item takes the new text (same id, old text in history) and the union of sources.
- ``supersede``: a conflict — cosine ``>= conflict_cosine`` and the content words other than numbers
  overlap (Jaccard ``>= conflict_overlap``), but the negations differ or both give numbers and
  neither set contains the other ("Sam has 2 dogs" / "Sam has 3 dogs", "likes tea" / "does not like
  tea"). Time settles it: the later
  ``float_time_stamp`` wins and the other is retired (deleted from the index, kept in history) —
  unless the older one has ``evidence_margin`` times the evidence of the newer (evidence = distinct
  source turns + access count), in which case the decision is ``keep_both`` and the new item is
  stored with its confidence scaled by the evidence ratio.
- ``add``: none of the above; the new item is stored as it is.

Two items that are merely related (different words, or neither contained in the other) are both
kept: without a model, "rewriting" them into one would lose words.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .._text._measures import jaccard, ordered_union
from .._text._words import content_tokens
from .._types import Event, HistoryEntry, MemoryRecord, ScoredRecord

Action = Literal["add", "merge", "rewrite", "supersede", "keep_both"]
_NEGATION = re.compile(r"\b(?:not|no|never|none|nobody|nothing|neither|nor|without|\w{1,12}n[’']t)\b",
                       re.IGNORECASE)
_NUMBER = re.compile(r"\d{1,12}(?:[.,]\d{1,6})?")


class ReconcileThresholds(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    duplicate_cosine: float = Field(0.92, ge=-1, le=1)
    conflict_cosine: float = Field(0.8, ge=-1, le=1)
    conflict_overlap: float = Field(0.6, ge=0, le=1)
    evidence_margin: float = Field(3.0, ge=1)


class ReconcileDecision(BaseModel):
    """What to do with ``new_id``; ``target_id``: the existing item concerned (``None`` for add);
    ``retired_id``: the item that loses a conflict; ``history``: the rows the decision implies."""

    action: Action
    new_id: str
    target_id: str | None = None
    retired_id: str | None = None
    text: str | None = None  # the target's text after merge / rewrite
    source_turn_ids: list[str] = Field(default_factory=list)  # the target's after merge / rewrite
    new_confidence: float | None = None  # keep_both: the new item's confidence
    history: list[HistoryEntry] = Field(default_factory=list)


class _Facts:
    """The lexical signature of a text: content words without numbers, numbers, negations."""

    def __init__(self, text: str) -> None:
        tokens = content_tokens(text)
        self.words = frozenset(t for t in tokens if not t.isdigit())
        self.numbers = frozenset(_NUMBER.findall(text))
        self.negations = frozenset(m.lower().replace("’", "'") for m in _NEGATION.findall(text))


def _numbers_clash(a: frozenset[str], b: frozenset[str]) -> bool:
    """Both state numbers and neither set contains the other ("2 dogs" / "3 dogs"); a number
    only one of them gives is a detail, not a clash."""
    return bool(a) and bool(b) and not (a <= b or b <= a)


def evidence(record: MemoryRecord) -> int:
    return len(set(record.source_turn_ids)) + record.access_count


def reconcile(new_item: MemoryRecord, similar_items: Sequence[ScoredRecord], *, now: float,
              thresholds: ReconcileThresholds | None = None) -> ReconcileDecision:
    """The decision for ``new_item`` given its nearest existing items (see the module docstring)."""
    th = thresholds or ReconcileThresholds()
    new = _Facts(new_item.memory)
    for cand in sorted(similar_items, key=lambda s: (-s.score, s.record.id)):
        old_rec = cand.record
        if old_rec.id == new_item.id or cand.score < th.conflict_cosine:
            continue
        old = _Facts(old_rec.memory)
        if old.negations != new.negations or _numbers_clash(old.numbers, new.numbers):
            if jaccard(old.words, new.words) >= th.conflict_overlap:
                return _settle(new_item, old_rec, now, th)
        elif cand.score >= th.duplicate_cosine:
            if new.words <= old.words and new.numbers <= old.numbers:
                return _merge(new_item, old_rec, now)
            if old.words <= new.words and old.numbers <= new.numbers:
                return _rewrite(new_item, old_rec, now)
    return ReconcileDecision(action="add", new_id=new_item.id, history=[_add(new_item, now, "write")])


def _merge(new: MemoryRecord, old: MemoryRecord, now: float) -> ReconcileDecision:
    sources = ordered_union([old.source_turn_ids, new.source_turn_ids])
    return ReconcileDecision(action="merge", new_id=new.id, target_id=old.id, text=old.memory,
                             source_turn_ids=sources,
                             history=[_row(old, Event.UPDATE, old.memory, now, f"write:merge:absorbed:{new.id}")])


def _rewrite(new: MemoryRecord, old: MemoryRecord, now: float) -> ReconcileDecision:
    sources = ordered_union([old.source_turn_ids, new.source_turn_ids])
    return ReconcileDecision(action="rewrite", new_id=new.id, target_id=old.id, text=new.memory,
                             source_turn_ids=sources,
                             history=[_row(old, Event.UPDATE, new.memory, now, f"write:rewrite:from:{new.id}")])


def _settle(new: MemoryRecord, old: MemoryRecord, now: float, th: ReconcileThresholds) -> ReconcileDecision:
    newer, older = (new, old) if new.float_time_stamp >= old.float_time_stamp else (old, new)
    if evidence(older) >= th.evidence_margin * evidence(newer):
        conf = round(new.confidence * min(1.0, evidence(new) / evidence(old)), 6)
        return ReconcileDecision(action="keep_both", new_id=new.id, target_id=old.id, new_confidence=conf,
                                 history=[_add(new, now, f"write:conflicts-with:{old.id}")])
    return ReconcileDecision(
        action="supersede", new_id=new.id, target_id=old.id, retired_id=older.id,
        history=[_add(new, now, "write"),
                 _row(older, Event.DELETE, None, now, f"write:superseded-by:{newer.id}")])


def _add(record: MemoryRecord, now: float, actor: str) -> HistoryEntry:
    return HistoryEntry(memory_id=record.id, event=Event.ADD, old_memory=None, new_memory=record.memory,
                        timestamp=now, actor=actor)


def _row(record: MemoryRecord, event: Event, new_text: str | None, now: float, actor: str) -> HistoryEntry:
    return HistoryEntry(memory_id=record.id, event=event, old_memory=record.memory, new_memory=new_text,
                        timestamp=now, actor=actor)


def apply_reconcile(new_item: MemoryRecord, decision: ReconcileDecision, target: MemoryRecord | None, *,
                    now: float) -> tuple[list[MemoryRecord], list[str]]:
    """(records to upsert, ids to delete from the index) that carry out ``decision``."""
    if decision.action == "add":
        return [new_item], []
    if target is None or target.id != decision.target_id:
        raise ValueError(f"decision about {decision.target_id} applied with target {target and target.id}")
    if decision.action in ("merge", "rewrite"):
        updated = target.model_copy(update={
            "memory": decision.text, "source_turn_ids": decision.source_turn_ids,
            "entities": ordered_union([target.entities, new_item.entities]),
            "keywords": ordered_union([target.keywords, new_item.keywords]),
            "salience": max(target.salience, new_item.salience), "updated_at": now,
            "version": target.version + 1})
        return [updated], []
    if decision.action == "keep_both":
        return [new_item.model_copy(update={"confidence": decision.new_confidence})], []
    return [new_item], [decision.retired_id] if decision.retired_id else []
