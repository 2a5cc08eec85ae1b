"""Online synthesis as changes to the store: a batch's new memories decided against the memories of
their session (``_synthesize.plan_batch``) and turned into ``MemoryWrite`` / ``MemoryRemoval`` items
for one ``ChangeSet`` (pure: the caller finds the candidates and commits the changes).

What the store sees for a merge of group ``G`` into survivor ``S`` (the oldest member):

- ``S`` is written with the merged text, sources, entities and keywords unioned; a stored ``S`` is
  an ``update`` whose history row keeps the version before (``old``), a new ``S`` an ``add``;
- every absorbed memory gets a ``delete`` history row with its full record, actor
  ``write:synthesis:into:<S>``; a new fragment absorbed in the same batch is first written (``add``)
  and then removed in the same transaction, so every extracted fact keeps its own history rows.
  Restoring those records undoes the merge (``_synthesize.undo_synthesis``).

The rule merge text keeps every content word of its members (``merge_text``), so nothing is lost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .._changes import MemoryRemoval, MemoryWrite
from .._text._words import memory_keywords
from .._types import Event, MemoryRecord
from ._synthesize import Decide, Fragment, apply_synthesis, plan_batch

ACTOR = "write:synthesis"
EmbedFn = Callable[[list[str]], np.ndarray]


@dataclass
class OnlineChanges:
    writes: list[MemoryWrite] = field(default_factory=list)
    removals: list[MemoryRemoval] = field(default_factory=list)
    merges: int = 0


class CachedEmbed:
    """``embed`` that remembers the vectors of merged texts (the survivor is written with one)."""

    def __init__(self, embed: EmbedFn) -> None:
        self._embed = embed
        self.vectors: dict[str, np.ndarray] = {}

    def __call__(self, texts: list[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if todo:
            for text, vector in zip(todo, self._embed(todo), strict=True):
                self.vectors[text] = vector
        return np.stack([self.vectors[t] for t in texts])


def synthesis_changes(new: Sequence[tuple[MemoryRecord, np.ndarray]],
                      existing: Sequence[tuple[MemoryRecord, np.ndarray]], decide: Decide,
                      embed: EmbedFn, *, now: float) -> OnlineChanges:
    """The writes and removals that store ``new`` with synthesis against ``existing`` (same user)."""
    cached = CachedEmbed(embed)
    plan = plan_batch([Fragment.of(r, v) for r, v in new], [Fragment.of(r, v) for r, v in existing],
                      decide, cached)
    before = {r.id: r for r, _ in existing}
    vectors = {r.id: v for r, v in [*existing, *new]}
    current = {**before, **{r.id: r for r, _ in new}}
    merged_into: dict[str, str] = {}
    for decision in plan.merges:
        survivor = apply_synthesis(decision, current, now=now)
        current[survivor.id] = survivor.model_copy(update={"keywords": _keywords(survivor)})
        vectors[survivor.id] = cached([decision.text])[0]
        for i in decision.absorbed_ids:
            merged_into[i] = decision.survivor_id
    out = OnlineChanges(merges=len(plan.merges))
    for record, vector in new:  # every new fact is written once (absorbed ones removed below)
        final = current[record.id] if record.id not in merged_into else record
        out.writes.append(MemoryWrite(record=final, event=Event.ADD, actor="write" if final is record else ACTOR,
                                      vector=vectors[record.id] if final is not record else vector))
    for mid, record in before.items():
        if current[mid] is not record and mid not in merged_into:
            out.writes.append(MemoryWrite(record=current[mid], event=Event.UPDATE, actor=ACTOR, old=record,
                                          vector=vectors[mid]))
    for mid, into in merged_into.items():
        into = _final(into, merged_into)
        removed = before.get(mid) or next(r for r, _ in new if r.id == mid)
        out.removals.append(MemoryRemoval(record=removed, actor=f"{ACTOR}:into:{into}"))
    return out


def _final(mid: str, merged_into: dict[str, str]) -> str:
    seen = set()
    while mid in merged_into and mid not in seen:
        seen.add(mid)
        mid = merged_into[mid]
    return mid


def _keywords(record: MemoryRecord) -> list[str]:
    return list(dict.fromkeys([*record.keywords, *memory_keywords(record.memory)]))
