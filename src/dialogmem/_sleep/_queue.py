"""Update queues for sleep time (seed 001 §3.3, seed 002's queue construction).

An entry may only be updated by entries that are at least as new: for every entry added since the
last sleep (a *source*), one batched dense query finds its most similar older-or-equal neighbours
(*targets*); the source joins each target's queue when the cosine reaches ``threshold``. Each queue
keeps its ``keep_top_n`` best candidates. New entries are targets of newer new entries in the same
way, since they are in the index already (soft-inserted at write time).

Equal timestamps are common (several facts from one turn), so "newer" is a strict total order on
``(float_time_stamp, created_at, id)``: of two entries, exactly one may update the other, and two
decisions can never try to rewrite each other.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from .._store._base import IndexFilter, VectorIndex
from .._types import MemoryRecord, ScoredRecord


def age_key(record: MemoryRecord) -> tuple[float, float, str]:
    """Total order of entries by age; a larger key is newer."""
    return (record.float_time_stamp, record.created_at, record.id)


@dataclass
class UpdateQueues:
    """``queues[target_id]``: candidate sources, best score first; ``targets[target_id]``: the target."""

    queues: dict[str, list[ScoredRecord]] = field(default_factory=dict)
    targets: dict[str, MemoryRecord] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.queues)

    def items(self) -> Iterator[tuple[MemoryRecord, list[ScoredRecord]]]:
        """``(target, sources)`` pairs, oldest target first."""
        for tid in sorted(self.queues, key=lambda t: age_key(self.targets[t])):
            yield self.targets[tid], self.queues[tid]

    def records(self) -> dict[str, MemoryRecord]:
        """Every record that appears as a target or a source, by id."""
        out = dict(self.targets)
        for sources in self.queues.values():
            for s in sources:
                out.setdefault(s.record.id, s.record)
        return out

    def payloads(self) -> dict[str, list[dict[str, float | str]]]:
        """Seed 002's ``update_queue`` payload field for each target."""
        return {tid: [{"id": s.record.id, "score": round(s.score, 6)} for s in sources]
                for tid, sources in self.queues.items()}


def build_update_queues(index: VectorIndex, user_id: str,
                        new_entries: Sequence[tuple[MemoryRecord, np.ndarray]], *,
                        top_k: int = 20, keep_top_n: int = 10, threshold: float = 0.8) -> UpdateQueues:
    """Queues of the targets that the ``new_entries`` (records with their vectors) may update.

    One ``dense_search_batch`` request covers all new entries; the rest is bookkeeping over its
    ``len(new_entries) * top_k`` hits.
    """
    unique: dict[str, tuple[MemoryRecord, np.ndarray]] = {}
    for record, vector in new_entries:
        unique.setdefault(record.id, (record, vector))
    result = UpdateQueues()
    if not unique:
        return result
    sources = [r for r, _ in unique.values()]
    vectors = np.stack([np.asarray(v, dtype=np.float32).reshape(-1) for _, v in unique.values()])
    flts = [IndexFilter(time_to=r.float_time_stamp, exclude_ids=[r.id]) for r in sources]
    hits_per_source = index.dense_search_batch(user_id, vectors, limit=top_k, flts=flts)
    for source, hits in zip(sources, hits_per_source, strict=True):
        newer = age_key(source)
        for hit in hits:
            target = hit.record
            if hit.score < threshold or age_key(target) >= newer:
                continue
            result.targets.setdefault(target.id, target)
            # model_construct: both parts were validated already, and this runs len(hits) times.
            candidate = ScoredRecord.model_construct(record=source, score=hit.score)
            result.queues.setdefault(target.id, []).append(candidate)
    for queue in result.queues.values():
        queue.sort(key=lambda s: (-s.score, s.record.id))
        del queue[keep_top_n:]
    return result
