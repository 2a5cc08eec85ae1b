"""The offline and bookkeeping verbs: sleep time (update, eviction, LTM consolidation), the LTM graph,
statistics, and API-key checks for the servers.

A mixin of ``Memory``: it relies on the facade's ``_parts``, ``config``, ``_call()`` and ``_writable()``.
"""

from __future__ import annotations

import time
from typing import Any

from .._apikeys import ApiKey
from .._graph import LTMGraph
from .._journal import IndexState, TurnStatus
from .._read._graphview import read_audit, read_graph
from ..types import GraphAudit, SleepReport
from ._host import FacadeHost
from ._input import check_bounded_text, check_id, check_int


class Offline(FacadeHost):
    """Sleep time, the LTM graph, usage and keys: the offline and bookkeeping verbs of ``Memory``."""

    # -- sleep time ---------------------------------------------------------------------------
    def sleep(self, user_id: str | None = None) -> SleepReport:
        """Offline work: reconcile entries added since the last sleep with their older neighbours;
        bound each user's MTM to ``sleep.mtm_capacity`` (evicted items stay readable with ``get``);
        then, with ``sleep.ltm``, one consolidation cycle of the shared LTM graph (over every user's
        new and evicted items, whichever ``user_id`` is given: the graph is shared)."""
        with self._call():
            self._writable()
            started = time.perf_counter()
            scope = check_id("user_id", user_id) if user_id else None
            pending = self._parts.journal.sleep_pending(scope)
            report = SleepReport()
            for uid in pending:
                with self._parts.ingest.user_lock(uid):
                    # read again under the lock: another process may have slept this user meanwhile
                    ids = self._parts.journal.sleep_pending(uid).get(uid, [])
                    if ids:
                        report.add(self._parts.sleeper.run_user(uid, ids))
            capacity = self.config.sleep.mtm_capacity
            self._parts.writer.flush_counters()  # eviction weighs access counts: the latest ones too
            for uid in self._parts.journal.users_over_capacity(capacity, scope):
                with self._parts.ingest.user_lock(uid):
                    got = self._parts.evictor.run_user(uid, capacity)
                report.evicted += got.evicted
                report.compressed += got.compressed
            if self.config.sleep.ltm:
                report.ltm = self._parts.consolidator.run()
            report.indexed = self._parts.writer.build_index(self.config.store.index_min_points)
            self._parts.writer.checkpoint()
            report.seconds = round(time.perf_counter() - started, 3)
            return report

    def graph(self, user_id: str | None = None, *, query: str | None = None, limit: int = 100) -> LTMGraph:
        """The shared LTM graph: live nodes (strongest evidence first) and the live edges between
        them. Without ``user_id``: only what at least ``sleep.ltm_min_users`` distinct users' memories
        support (what every user may see); ``user_id``: only what this user's memories support
        (``evidence`` lists their ids); ``query``: the nodes matching it and their one-hop neighbours."""
        with self._call():
            check_int("limit", limit, 1, 10_000)
            key = self._parts.consolidator.subject_key(check_id("user_id", user_id)) if user_id is not None else None
            if query is not None:
                check_bounded_text("query", query, self.config.read.max_query_chars, "read.max_query_chars")
            return read_graph(self._parts.journal, self._parts.search.graph, subject_key=key, query=query,
                              limit=limit, min_score=self.config.sleep.ltm_min_score)

    def graph_audit(self) -> GraphAudit:
        """Admin view of the shared graph (``dialogmem graph --audit``): every live node and edge with
        its number of distinct supporting users and whether it is visible to everyone (at least
        ``sleep.ltm_min_users`` supporters, and for an edge both ends visible) or only to its
        supporters. Holds no user id or subject key."""
        with self._call():
            return read_audit(self._parts.journal, self.config.sleep.ltm_min_users)

    # -- statistics ---------------------------------------------------------------------------
    def stats(self, user_id: str | None = None) -> dict[str, Any]:
        """Token statistics per stage (seed 002's shape), latency per stage and counts.

        With ``user_id``, counts are that user's only; without, they cover the whole store.
        """
        with self._call():
            if user_id is not None:
                check_id("user_id", user_id)
            j = self._parts.journal
            out = self._parts.usage.snapshot()
            out["counts"] = {
                "memories": j.count_memories(user_id),
                "evicted": j.count_memories(user_id, status="evicted"),
                "turns": j.count_turns(user_id),
                "pending_turns": j.count_turns(user_id, TurnStatus.PENDING),
                "quarantined_turns": j.count_turns(user_id, TurnStatus.QUARANTINED),
            }
            out["counts"].update(self._graph_counts(user_id))
            out["answers"] = answer_summary(out.get("answer", {}))
            if user_id is None:
                out["counts"]["index_failed"] = j.count_index_state(IndexState.FAILED)
            return out

    # -- API keys (the REST and MCP servers) --------------------------------------------------
    def verify_key(self, key: str) -> ApiKey | None:
        """The active API key this text proves, or None (malformed, unknown, wrong secret, revoked).
        Keys are made with ``dialogmem keys create``; only their SHA-256 is stored."""
        with self._call():
            return self._parts.journal.verify_key(key)

    def _graph_counts(self, user_id: str | None) -> dict[str, int]:
        """Live LTM nodes and edges (store-wide: the graph is shared); with a user, also how many
        evidence links that user's memories hold."""
        counts = self._parts.journal.graph_counts()
        if user_id is None:
            return counts
        key = self._parts.consolidator.subject_key(user_id)
        return {"ltm_nodes": counts["ltm_nodes"], "ltm_edges": counts["ltm_edges"],
                "ltm_links": len(self._parts.journal.graph_links(key))}


def answer_summary(answer_usage: dict[str, Any]) -> dict[str, Any]:
    """``answer()`` calls (store-wide), the share that ran the deep module, and prompt tokens per answer."""
    light = answer_usage.get("light", {})
    deep = answer_usage.get("deep", {})
    n = int(light.get("calls", 0)) + int(deep.get("calls", 0))
    tokens = int(light.get("prompt_tokens", 0)) + int(deep.get("prompt_tokens", 0))
    return {"answers": n, "deep": int(deep.get("calls", 0)),
            "deep_rate": round(int(deep.get("calls", 0)) / n, 4) if n else None,
            "prompt_tokens_per_answer": round(tokens / n, 1) if n else None}
