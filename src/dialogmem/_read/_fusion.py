"""How one view's dense and BM25 result lists become one ranking (stage 1 of the read path).

``convex`` (the default) is a convex combination of the two scores, each min-max normalised over
the list it came from: ``w · dense + (1 − w) · bm25``, a memory missing from one list taking 0 for
that side. ``rrf`` is reciprocal rank fusion inside the index (one prefetch query; ranks only, the
score margins are lost). Bruch et al. ("An Analysis of Fusion Functions for Hybrid Retrieval",
2023) found a tuned convex combination ahead of RRF on every collection they tried; measured here
on the LoCoMo dev set (LLM-free, 1,033 questions, same stores), convex with w = 0.4 against RRF:
evidence recall @5/@10 .748/.818 → .756/.822, at 256/512/1,024 context tokens .629/.752/.819 →
.649/.770/.829, ahead on each of the 7 conversations at 512; w = 0.3 to 0.5 all gain, 0.6 does not.

Pure functions: the index calls are the caller's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .._types import ScoredRecord

FusionKind = Literal["convex", "rrf"]
DENSE_WEIGHT = 0.4


class Fusion(BaseModel):
    """Which fusion a view's query uses, and the dense side's weight for ``convex``."""

    model_config = ConfigDict(frozen=True)

    kind: FusionKind = "convex"
    dense_weight: float = Field(DENSE_WEIGHT, ge=0.0, le=1.0)


def min_max(hits: Sequence[ScoredRecord]) -> dict[str, float]:
    """Each hit's score scaled to [0, 1] over the list (all 1.0 when the scores are equal)."""
    if not hits:
        return {}
    scores = [h.score for h in hits]
    lo, hi = min(scores), max(scores)
    if hi <= lo:
        return {h.record.id: 1.0 for h in hits}
    return {h.record.id: (h.score - lo) / (hi - lo) for h in hits}


def convex_fusion(dense: Sequence[ScoredRecord], lexical: Sequence[ScoredRecord], *, dense_weight: float,
                  limit: int) -> list[ScoredRecord]:
    """The union of both lists by fused score, best first (ties by id), at most ``limit``."""
    records = {h.record.id: h.record for h in (*lexical, *dense)}
    d, lx = min_max(dense), min_max(lexical)
    fused = {i: dense_weight * d.get(i, 0.0) + (1.0 - dense_weight) * lx.get(i, 0.0) for i in records}
    order = sorted(fused, key=lambda i: (-fused[i], i))[:max(0, limit)]
    return [ScoredRecord(record=records[i], score=fused[i]) for i in order]
