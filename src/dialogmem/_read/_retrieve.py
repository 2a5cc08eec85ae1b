"""Stage 1: metadata-constrained, multi-view coarse retrieval (seed 000 §3.4, seed 003 §2.3).

Every hypothetical query (HQ) is one view and runs as one hybrid query on the index: dense and
BM25, fused (``_store/_fusion``: a convex combination of the normalised scores by default, or RRF inside
the index), filtered by scope + time window + speaker + tier. Seed 000's double
budget: with ``n`` HQs and a final budget ``K`` each view asks for ``ceil(2K / n)`` and the
union, de-duplicated by id, is cut to ``2K`` candidates.

A filter that matches nothing is dropped rather than returning nothing: first the tier (a tier
may simply be empty — LTM is built only at sleep time), then the speakers, then the time window.
What was dropped is returned beside the candidates (the plan itself is never changed), so the
caller can tell.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import ConfigDict

from .._models._embed_base import Embedder
from .._settings import DENSE_WEIGHT
from .._store._base import IndexFilter, VectorIndex
from .._types import ScoredRecord
from ._plan import QueryPlan

#: order in which empty-result filters are relaxed
_RELAX_ORDER = ("tier", "speakers", "time")


class Candidate(ScoredRecord):
    """A stage-1 candidate: best fused score over the views, and how many views returned it.

    ``rank`` is its best rank in any view (0 = top); ``vector`` is filled only when asked for;
    ``affinity``, for a present- or past-state question only, is how close its vector is to the asked
    attribute's prototypes (``_attributes``), read from its own turn when ``line_affinity``; ``topicality``,
    for the asked person's own statements, is that turn's cosine to the question (``_choose``).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    views: int = 1
    rank: int = 0
    vector: Any = None  # np.ndarray | None; Any keeps pydantic from copying the array
    affinity: float | None = None
    line_affinity: bool = False  # the affinity is its own turn's vector's, not its window's
    topicality: float | None = None  # its own turn's cosine to the question (state questions, ``_state``)


def per_view_budget(k: int, n_views: int) -> int:
    """Seed 000 eq. 3: the 2K candidate budget split evenly over the views (rounded up)."""
    return math.ceil(2 * k / max(1, n_views))


def lexical_text(hq_text: str, plan: QueryPlan) -> str:
    """The HQ text plus plan keywords (and a state question's change words) not already in it (BM25
    side of the hybrid query)."""
    low = hq_text.lower()
    extra = [kw for kw in dict.fromkeys([*plan.keywords, *plan.expansions]) if kw.lower() not in low]
    return " ".join([hq_text, *extra]).strip()


def _merge_filter(base: IndexFilter | None, **kw: Any) -> IndexFilter:
    data = base.model_dump() if base is not None else {}
    for key, value in kw.items():
        if value is None:
            continue
        if key == "time_from" and data.get("time_from") is not None:
            value = max(value, data["time_from"])  # the caller's own window still holds
        elif key == "time_to" and data.get("time_to") is not None:
            value = min(value, data["time_to"])
        data[key] = value
    return IndexFilter(**data)


def view_filter(plan: QueryPlan, route: str, base: IndexFilter | None,
                relaxed: Sequence[str] = ()) -> IndexFilter:
    """Scope filter of one view: caller's filter + plan window/speakers/tier minus ``relaxed``."""
    use_time = plan.time_strict and plan.has_window and "time" not in relaxed
    use_speakers = plan.speaker_filter and bool(plan.speakers) and "speakers" not in relaxed
    use_tier = route in ("mtm", "ltm") and "tier" not in relaxed
    return _merge_filter(
        base,
        time_from=plan.time_from if use_time else None,
        time_to=plan.time_to if use_time else None,
        speakers=list(plan.speakers) if use_speakers else None,
        tier=route if use_tier else None,
    )


def active_filters(plan: QueryPlan, route: str) -> list[str]:
    """The constraints a view applies (relaxable, in ``_RELAX_ORDER``'s vocabulary)."""
    active = []
    if route in ("mtm", "ltm"):
        active.append("tier")
    if plan.speaker_filter and plan.speakers:
        active.append("speakers")
    if plan.time_strict and plan.has_window:
        active.append("time")
    return active


def embed_views(embedder: Embedder, plan: QueryPlan) -> np.ndarray:
    """All HQ vectors in one call, shape (n, dim): through the embedder's query cache when it has
    one (``embed_queries``), else one ``embed`` call."""
    texts = [h.text for h in plan.hqs]
    cached = getattr(embedder, "embed_queries", None)
    return cached(texts) if callable(cached) else embedder.embed(texts)


def search_views(index: VectorIndex, user_id: str, plan: QueryPlan, vectors: np.ndarray, *, k: int,
                 base_filter: IndexFilter | None = None, dense_weight: float | None = DENSE_WEIGHT
                 ) -> tuple[list[Candidate], list[str]]:
    """One hybrid query per view (all views in one batch request), union by id: at most ``2k``
    candidates, best first, and the filters that had to be dropped because they matched nothing
    (a view that found nothing is asked again with its next filter relaxed). ``dense_weight`` goes to
    ``hybrid_search`` (convex fusion; None: RRF, see ``ReadSettings.fusion_weight``)."""
    budget = per_view_budget(k, len(plan.hqs))
    prefetch = max(2 * budget, 20)
    texts = [lexical_text(hq.text, plan) for hq in plan.hqs]
    first = index.hybrid_search_batch(
        user_id, vectors, texts, limit=budget, prefetch_limit=prefetch, dense_weight=dense_weight,
        flts=[view_filter(plan, hq.route, base_filter) for hq in plan.hqs]) if plan.hqs else []
    merged: dict[str, Candidate] = {}
    dropped: list[str] = []
    for hq, vector, text, hits in zip(plan.hqs, vectors, texts, first, strict=True):
        relaxed: list[str] = []
        for step in (s for s in _RELAX_ORDER if s in active_filters(plan, hq.route)):
            if hits:
                break
            relaxed.append(step)
            if step not in dropped:
                dropped.append(step)
            hits = index.hybrid_search(user_id, vector, text, limit=budget, prefetch_limit=prefetch,
                                       flt=view_filter(plan, hq.route, base_filter, relaxed),
                                       dense_weight=dense_weight)
        for rank, hit in enumerate(hits):
            seen = merged.get(hit.record.id)
            if seen is None:
                merged[hit.record.id] = Candidate(record=hit.record, score=hit.score, rank=rank)
            else:
                seen.views += 1
                seen.score = max(seen.score, hit.score)
                seen.rank = min(seen.rank, rank)
    ordered = sorted(merged.values(), key=lambda c: (-c.views, -c.score, c.rank, c.record.id))
    return ordered[: 2 * k], dropped


def attach_vectors(index: VectorIndex, user_id: str, candidates: list[Candidate]) -> None:
    """Fill ``candidate.vector`` from the index (one ``retrieve`` call) for MMR diversity."""
    if not candidates:
        return
    got = index.retrieve([c.record.id for c in candidates], user_id, with_vectors=True)
    by_id = {rec.id: vec for rec, vec in got}
    for c in candidates:
        c.vector = by_id.get(c.record.id)


def coarse_retrieve(index: VectorIndex, embedder: Embedder, user_id: str, plan: QueryPlan, *, k: int,
                    base_filter: IndexFilter | None = None, dense_weight: float | None = DENSE_WEIGHT
                    ) -> tuple[list[Candidate], list[str]]:
    """Stage 1 in one call: embed the HQs, run one hybrid query per HQ, union to ≤ 2k (and the
    filters dropped on the way)."""
    vectors = embed_views(embedder, plan)
    return search_views(index, user_id, plan, vectors, k=k, base_filter=base_filter, dense_weight=dense_weight)
