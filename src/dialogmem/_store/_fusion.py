"""Convex fusion of a view's dense and BM25 result lists (``hybrid_search(..., dense_weight=w)``).

Each list's scores are min-max normalised over that list, then ``w · dense + (1 − w) · bm25``; a
memory missing from one list takes 0 for that side. Without a weight, ``hybrid_search`` fuses by
reciprocal rank inside the index (one prefetch query; ranks only, the score margins are lost).
Bruch et al. ("An Analysis of Fusion Functions for Hybrid Retrieval", 2023) found a tuned convex
combination ahead of RRF on every collection they tried. Measured here on the LoCoMo dev set
(LLM-free, 1,033 questions, the same stores), w = 0.4 against RRF: evidence recall @5/@10
.748/.818 → .756/.822, at 256/512/1,024 context tokens .629/.752/.819 → .649/.770/.829, ahead at
512 on each of the 7 conversations; w = 0.3 to 0.5 all gain, 0.6 does not.

The two lists are fetched as ids and scores only (one batch request); the payloads of the fused
top ``limit`` follow in one read, so the fusion costs about what an RRF query does. Pure here.
"""

from __future__ import annotations

from collections.abc import Sequence

IdScore = tuple[str, float]


def min_max(hits: Sequence[IdScore]) -> dict[str, float]:
    """Each id's score scaled to [0, 1] over the list (all 1.0 when the scores are equal)."""
    if not hits:
        return {}
    scores = [s for _, s in hits]
    lo, hi = min(scores), max(scores)
    if hi <= lo:
        return {i: 1.0 for i, _ in hits}
    return {i: (s - lo) / (hi - lo) for i, s in hits}


def convex_fusion(dense: Sequence[IdScore], lexical: Sequence[IdScore], *, dense_weight: float,
                  limit: int) -> list[IdScore]:
    """The union of both lists by fused score, best first (ties by id), at most ``limit``."""
    d, lx = min_max(dense), min_max(lexical)
    fused = {i: dense_weight * d.get(i, 0.0) + (1.0 - dense_weight) * lx.get(i, 0.0) for i in (*lx, *d)}
    order = sorted(fused, key=lambda i: (-fused[i], i))[:max(0, limit)]
    return [(i, fused[i]) for i in order]


def rrf_fusion(*rankings: Sequence[str], k: int, limit: int) -> list[IdScore]:
    """Reciprocal rank fusion as Qdrant computes it: each list adds ``1 / (k + position)`` (from 0)
    to an id's score; best first (ties by id), at most ``limit``."""
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, i in enumerate(ranking):
            fused[i] = fused.get(i, 0.0) + 1.0 / (k + rank)
    order = sorted(fused, key=lambda i: (-fused[i], i))[:max(0, limit)]
    return [(i, fused[i]) for i in order]
