"""The whole of one user's search, from a validated query to the ``SearchResult``: the read pipeline
(plan, views, hybrid retrieval, selection), the ``ltm`` route into the shared graph within the same
budget, access counting of the hits, and ``expand`` (each hit's own raw turns).

The facade validates the caller's arguments and makes this one call; nothing computed here (the plan,
the views' vectors) travels out to be handed back in.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime

from .._journal import UserRows
from .._settings import ReadSettings, SleepSettings
from .._store import IndexFilter
from .._sync._access import AccessLog
from .._sync._writer import ChangeWriter
from .._types import SearchHit, SearchResult, SourceTurn
from .._usage import UsageTracker
from ._ltm import GraphSearcher, route_ltm
from ._pipeline import ReadPipeline, ReadResult, describe_plan


class Searcher:
    """Runs ``Memory.search`` against the open store's parts. ``subject_key(user_id)``: the user's
    opaque key in the graph's evidence links; ``read_only``: a read-only store counts no access."""

    def __init__(self, pipeline: ReadPipeline, graph: GraphSearcher, journal: UserRows, access: AccessLog,
                 writer: ChangeWriter, usage: UsageTracker, *, read: ReadSettings, sleep: SleepSettings,
                 subject_key: Callable[[str], str], read_only: bool) -> None:
        self.pipeline = pipeline
        self.graph = graph
        self.journal = journal
        self.access = access
        self.writer = writer
        self.usage = usage
        self.read = read
        self.sleep = sleep
        self.subject_key = subject_key
        self.read_only = read_only

    def search(self, query: str, user_id: str, *, limit: int | None, flt: IndexFilter | None,
               reference_time: datetime | None, recent_context: list[str], speakers: Sequence[str],
               expand: bool) -> SearchResult:
        result = self.pipeline.search(query, user_id, limit=limit, flt=flt, reference_time=reference_time,
                                      recent_context=recent_context, known_speakers=speakers)
        hits = [SearchHit.from_record(s.record, s.score) for s in result.hits]
        if self.sleep.ltm:
            hits = self._with_ltm(user_id, result, hits, limit, speakers)
        mtm_ids = [h.id for h in hits if h.tier != "ltm"]
        if self.read.track_access and mtm_ids and not self.read_only \
                and self.access.record(user_id, mtm_ids, time.time()):
            self.writer.flush_counters_soon()
        if expand:
            hits = self._expanded(user_id, hits)
        return SearchResult(query=query, hits=hits, plan=describe_plan(result), timings_ms=result.timings_ms)

    def _with_ltm(self, user_id: str, result: ReadResult, hits: list[SearchHit], limit: int | None,
                  speakers: Sequence[str]) -> list[SearchHit]:
        """The ``ltm`` route: graph facts within the same budget (``_ltm``)."""
        s = self.sleep
        merged, ms = route_ltm(
            self.graph, result.plan, hits, limit if limit is not None else result.plan.k,
            speakers=speakers, personal_hits=s.ltm_search_hits, min_score=s.ltm_min_score,
            subject_key=self.subject_key(user_id),
            memories=lambda ids: self.journal.memories(user_id, statuses=("active", "evicted"), ids=ids,
                                                       limit=len(ids) or 1),
            view_vectors=result.view_vectors)
        if ms is not None:  # the graph was searched
            result.timings_ms["ltm"] = ms
            self.usage.record("latency", "search.ltm", calls=1, latency_ms=ms)
        return merged

    def _expanded(self, user_id: str, hits: list[SearchHit]) -> list[SearchHit]:
        """Hits with their own (this user's) source turns; shared LTM facts have none."""
        own = [tid for h in hits if h.tier != "ltm" for tid in h.source_turn_ids]
        found = {t.id: SourceTurn.from_turn(t) for t in self.journal.turns(user_id, ids=own)}
        return [h.model_copy(update={"sources": [found[t] for t in h.source_turn_ids if t in found]
                                     if h.tier != "ltm" else []}) for h in hits]
