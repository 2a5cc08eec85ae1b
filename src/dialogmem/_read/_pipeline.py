"""The read path: plan → embed the views → one hybrid query per view → select K.

``ReadPipeline`` only wires the roles together and times them; every decision lives in the
planner, ``_retrieve`` and the selector. Per-stage latency goes to the usage tracker under kind
``"latency"`` and stages ``search.plan``, ``search.embed``, ``search.retrieve``, ``search.select``
and ``search`` (the whole call).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from .._models._embed_base import Embedder
from .._settings import DENSE_WEIGHT
from .._store._base import IndexFilter, VectorIndex
from .._text._facts import question_kinds
from .._types import ScoredRecord, SearchHit, SearchPlan, render_context
from .._usage import UsageTracker
from ._attributes import AttributeSpace
from ._plan import Planner, QueryPlan
from ._retrieve import active_filters, attach_vectors, embed_views, search_views
from ._select import Selector
from ._state import implied_state, shows_change, with_affinity

#: the smallest K whose 2K candidates a present- or past-state question is selected from (40, was 20: the
#: newest statement is often small-talk-like and ranks low on words and vector alike; on the first changes
#: probe set, with own-turn affinities, present rank 1 71 -> 78 %, past recall@3 86 -> 93 %; the pool is
#: read only for questions that say "now", "before", ... about a mutable attribute)
STATE_POOL_K = 40
#: the same for a state question that names no attribute kind in words ("What did Kai do before the
#: trip?"): no reading of the attribute's history runs for it (``_validity``), so its pool stays as it was
STATE_POOL_PLAIN_K = 20
#: read a state question's candidates' own turns against the attribute prototypes (each embedded), not
#: their stored window vectors
LINE_AFFINITY = True
#: a question that says no "now" or "before" is a state question when its grammar says so (present tense
#: about a mutable attribute of a person, or past tense with a time: ``_state.implied_state``) and its
#: candidates hold a change of that person's found at sleep time (``_state.shows_change``). Without that
#: second condition, on 2 LoCoMo dev conversations (263 questions) a third of the questions became state
#: questions and turn recall@10 fell 0.755 -> 0.722, at 512 tokens 0.689 -> 0.582: LoCoMo's present-tense
#: questions ("How does Audrey help out the animal shelter?") are about facts that did not change.
IMPLIED_STATE = True


class ReadResult(BaseModel):
    """The K selected memories, the plan that found them, and where the time went."""

    hits: list[ScoredRecord]
    plan: QueryPlan
    candidates: int = 0  # size of the stage-1 pool
    filters: list[str] = Field(default_factory=list)  # constraints the plan asked for
    relaxed: list[str] = Field(default_factory=list)  # of those, dropped because they matched nothing
    timings_ms: dict[str, float] = Field(default_factory=dict)
    view_vectors: Any = Field(default=None, exclude=True, repr=False)  # np.ndarray (n views, dim), for the ltm route


def describe_plan(result: ReadResult) -> SearchPlan:
    """The public account of how a search ran."""
    plan = result.plan

    def iso(t: float | None) -> str | None:
        return None if t is None else datetime.fromtimestamp(t, UTC).replace(tzinfo=None).isoformat()

    return SearchPlan(
        views=[h.text for h in plan.hqs], routes=[h.route for h in plan.hqs], keywords=list(plan.keywords),
        entities=list(plan.entities), speakers=list(plan.speakers), time_from=iso(plan.time_from),
        time_to=iso(plan.time_to), complexity=plan.complexity, k=plan.k, source=plan.source,
        filters=list(result.filters), relaxed=list(result.relaxed))


def to_hit(scored: ScoredRecord) -> SearchHit:
    return SearchHit.from_record(scored.record, scored.score)


def context_tokens(hits: Sequence[SearchHit]) -> int:
    """Tokens of ``render_context(hits)`` with the project-wide counter."""
    from .._text._tokens import count_tokens

    return count_tokens(render_context(hits))


class ReadPipeline:
    """Plans, retrieves (stage 1, ≤ 2K) and selects (stage 2, ≤ K) for one user.

    ``mmr_vectors`` fetches the candidates' stored vectors (one ``retrieve`` call) so the rule
    selector's diversity uses cosine similarity instead of the token-overlap proxy. It is off by
    default: on 3 LoCoMo dev conversations (raw turns, 383 questions, evidence recall@10) the
    token proxy scored 0.639 against 0.622 for cosine, and it saves the extra call.
    """

    def __init__(self, index: VectorIndex, embedder: Embedder, planner: Planner, selector: Selector,
                 usage: UsageTracker | None = None, *, mmr_vectors: bool = False,
                 dense_weight: float | None = DENSE_WEIGHT) -> None:
        self.index = index
        self.embedder = embedder
        self.planner = planner
        self.selector = selector
        self.usage = usage if usage is not None else UsageTracker()
        self.mmr_vectors = mmr_vectors
        self.dense_weight = dense_weight  # convex fusion's weight; None: RRF
        self._attributes: AttributeSpace | None = None  # the attribute prototypes, embedded on first use
        self.line_affinity = LINE_AFFINITY
        self.implied_state = IMPLIED_STATE

    def attributes(self) -> AttributeSpace:
        """The attribute prototypes' vectors for this pipeline's embedder, embedded once."""
        if self._attributes is None:
            self._attributes = AttributeSpace(self.embedder)
        return self._attributes

    def search(self, query: str, user_id: str, *, limit: int | None = None, flt: IndexFilter | None = None,
               reference_time: datetime | None = None, recent_context: list[str] | None = None,
               known_speakers: Sequence[str] = ()) -> ReadResult:
        """Plan, retrieve and select for a query the facade has validated (non-empty, ``limit`` >= 1)."""
        timings: dict[str, float] = {}
        start = time.perf_counter()

        plan = self.planner.plan(query, reference_time=reference_time, recent_context=recent_context,
                                 known_speakers=list(known_speakers))
        k = limit if limit is not None else plan.k
        t_plan = time.perf_counter()
        vectors = embed_views(self.embedder, plan)
        implied = implied_state(plan, vectors[0], self.attributes()) \
            if self.implied_state and plan.state is None and len(vectors) else plan
        t_embed = time.perf_counter()
        # a question about a changing fact looks wider: the newest statement may rank low on words alone
        pool = max(k, STATE_POOL_K if question_kinds(plan.query) else STATE_POOL_PLAIN_K) if plan.state else k
        candidates, relaxed = search_views(self.index, user_id, plan, vectors, k=pool, base_filter=flt,
                                          dense_weight=self.dense_weight)
        if implied.state is not None and plan.state is None and shows_change(implied, candidates):
            plan = implied  # said by its grammar alone: a state question only where a change was found
        if plan.state is not None and len(vectors):
            # every candidate's affinity to the asked attribute (its stored vector against the prototypes)
            candidates = with_affinity(self.index, user_id, plan, vectors[0], candidates, self.attributes(),
                                       self.embedder if self.line_affinity else None)
        if self.mmr_vectors and len(candidates) > k:
            attach_vectors(self.index, user_id, candidates)
        t_retrieve = time.perf_counter()
        hits = self.selector.select(query, plan, list(candidates), k)[:k] if candidates else []
        t_select = time.perf_counter()

        for stage, a, b in (("plan", start, t_plan), ("embed", t_plan, t_embed),
                            ("retrieve", t_embed, t_retrieve), ("select", t_retrieve, t_select)):
            timings[stage] = (b - a) * 1000.0
            self.usage.record("latency", f"search.{stage}", calls=1, latency_ms=timings[stage])
        self.usage.record("latency", "search", calls=1, latency_ms=(t_select - start) * 1000.0)
        filters = sorted({f for hq in plan.hqs for f in active_filters(plan, hq.route)})
        if flt is not None and not flt.is_empty():
            filters.append("caller")
        return ReadResult(hits=hits, plan=plan, candidates=len(candidates), filters=filters, relaxed=relaxed,
                          timings_ms=timings, view_vectors=vectors)
