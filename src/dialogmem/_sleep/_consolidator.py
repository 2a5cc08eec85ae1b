"""Carries out offline LTM consolidation (seed 000 Algorithm 3) and the LTM side of ``forget_user``.

One cycle, run by ``Memory.sleep()`` (never on the online path):

1. the batch: every active or evicted MTM item of every user committed since the previous cycle
   (new, changed, evicted or compressed), plus items retrieved at least ``MIN_ACCESS`` times with a
   retrieval since then (reactivated) — ``GraphRows.consolidation_candidates``;
2. knowledge units, de-identified against every speaker name and user id of the store: the LLM
   backend (``LLMUnitExtractor``, consolidation prompt, per-chunk fallback to the rules counted under
   stage ``consolidate``) or the LLM-free one (``RuleUnitExtractor``), chosen by ``use_llm``;
3. the decision (``_sleep._consolidate.consolidate``: resolve, merge by cosine, anchor, support,
   decay, drop), with ``similar`` = MiniLM cosine against the live nodes' stored embeddings;
4. one ``ChangeSet`` whose ``graph`` carries the delta, the new nodes' embeddings and the time the
   batch was read up to: one journal transaction, so a crash leaves the previous cycle's state and
   the next cycle takes the same batch again (links count a memory once per node, so nothing is
   counted twice).

A cycle covers the whole store even when ``sleep(user_id)`` names one user: the graph is shared and
decay counts cycles. Evidence links carry ``subject_key = HMAC-SHA256(store_id, user_id)``.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
from collections.abc import Sequence

import numpy as np

from .._backends import use_llm
from .._changes import ChangeSet, GraphCommit
from .._graph import GraphDelta, GraphNode
from .._journal import GraphRows
from .._models._embed_base import Embedder
from .._models._llm_base import LLMClient
from .._settings import SleepSettings
from .._sync._writer import ChangeWriter
from .._types import MemoryRecord
from ..types import ConsolidationReport
from ._consolidate import ConsolidationThresholds, consolidate, forget_memories, forget_subject
from ._deid import Deidentifier
from ._llmunits import LLMUnitExtractor
from ._units import KnowledgeUnit, RuleUnitExtractor

log = logging.getLogger(__name__)

MIN_ACCESS = 3  # retrievals that make an unchanged item part of the next batch (reactivated)
_TOP_SIMILAR = 5
_EXISTING_FOR_LLM = 30  # node texts the model may reuse


def subject_key(secret: str, user_id: str) -> str:
    """The opaque key of a user in evidence links (the user id itself never reaches LTM)."""
    return hmac.new(secret.encode(), user_id.encode(), hashlib.sha256).hexdigest()[:32]


class _Similar:
    """``similar(text) -> [(node id, cosine)]`` against the live nodes, from embeddings computed once."""

    def __init__(self, embedder: Embedder, nodes: list[GraphNode], matrix: np.ndarray, texts: Sequence[str]) -> None:
        self.ids = [n.id for n in nodes]
        self.matrix = matrix
        unique = list(dict.fromkeys(texts))
        vecs = embedder.embed(unique) if unique else np.zeros((0, 1), np.float32)
        self.vectors = {t: np.asarray(v, dtype=np.float32) for t, v in zip(unique, vecs, strict=True)}

    def __call__(self, text: str) -> list[tuple[str, float]]:
        vec = self.vectors.get(text)
        if vec is None or not self.ids:
            return []
        sims = self.matrix @ vec
        top = np.argsort(-sims)[:_TOP_SIMILAR]
        return [(self.ids[i], float(sims[i])) for i in top]


class LTMConsolidator:
    def __init__(self, journal: GraphRows, writer: ChangeWriter, embedder: Embedder, llm: LLMClient,
                 settings: SleepSettings, thresholds: ConsolidationThresholds | None = None) -> None:
        self.journal = journal
        self.writer = writer
        self.embedder = embedder
        self.llm = llm
        self.thresholds = thresholds or ConsolidationThresholds()
        self.use_llm = use_llm("sleep.consolidator", settings.consolidator, llm)
        self.min_users = settings.ltm_min_users
        self._secret: str | None = None
        self._lock = threading.Lock()  # one cycle at a time: each reads the graph the previous one wrote

    def subject_key(self, user_id: str) -> str:
        if self._secret is None:  # the store's identity never changes once written
            self._secret = self.journal.meta("store_id") or ""
        return subject_key(self._secret, user_id)

    def run(self) -> ConsolidationReport:
        with self._lock:
            return self._run()

    def _run(self) -> ConsolidationReport:
        started = time.time()
        t0 = time.perf_counter()
        queued = self.journal.ltm_queued()  # first: every mark read here is in the batch read next
        rows = self.journal.consolidation_candidates(self.journal.ltm_since(), min_access=MIN_ACCESS)
        report = ConsolidationReport(memories=len(rows), evicted_in_batch=sum(s == "evicted" for _, s in rows))
        if not rows:
            if queued:  # marks of items no longer in MTM (deleted meanwhile): nothing to hand over
                self.writer.apply(ChangeSet("", graph=GraphCommit(delta=GraphDelta(), done=queued)))
            return report
        batch = [r for r, _ in rows]
        units = self._units(batch, report)
        nodes, matrix = self.journal.graph_node_vectors()
        similar = _Similar(self.embedder, nodes, matrix, [n.text for u in units for n in u.nodes])
        delta = consolidate(units, self.journal.graph_view(), similar=similar, now=started, thresholds=self.thresholds)
        vectors = {n.id: similar.vectors[n.text] for n in delta.insert_nodes if n.text in similar.vectors}
        self.writer.apply(ChangeSet("", graph=GraphCommit(delta=delta, vectors=vectors, since=started, done=queued)))
        report.units = len(units)
        report.nodes_added, report.nodes_merged = len(delta.insert_nodes), delta.merged
        report.nodes_dropped, report.edges_added = len(delta.drop_nodes), len(delta.insert_edges)
        report.edges_dropped, report.links_added = len(delta.drop_edges), len(delta.add_links)
        report.seconds = round(time.perf_counter() - t0, 3)
        log.info("ltm cycle: %d memories, %d units, +%d nodes (%d merged), +%d edges, %d dropped",
                 report.memories, report.units, report.nodes_added, report.nodes_merged, report.edges_added,
                 report.nodes_dropped)
        return report

    def _units(self, batch: list[MemoryRecord], report: ConsolidationReport) -> list[KnowledgeUnit]:
        names, users = self.journal.store_identities()
        deid = Deidentifier(names, users)
        rules = RuleUnitExtractor(deid)
        if not self.use_llm:
            return rules.units(batch, self.subject_key)
        # only k-anonymous texts: a model that copied one user's rare node text into another
        # user's unit would lend it that user's support
        support = self.journal.graph_support()
        live = [n for n in self.journal.graph_view(with_links=False).live_nodes()
                if support.get(n.id, (0, False))[0] >= self.min_users]
        existing = [n.text for n in sorted(live, key=lambda n: (-n.evidence, n.id))[:_EXISTING_FOR_LLM]]
        got = LLMUnitExtractor(self.llm, deid, fallback=rules).units(batch, self.subject_key, existing=existing)
        report.fallbacks, report.method = got.fallbacks, got.method
        return got.units

    def forget(self, user_id: str) -> int:
        """Remove this user's evidence links and weaken (or delete) what rested on them, in one
        transaction. Returns how many links were removed."""
        key = self.subject_key(user_id)
        with self._lock:
            if not self.journal.graph_links(key):
                return 0
            view = self.journal.graph_view()
            delta = forget_subject(key, view.links, view, now=time.time(), floor=self.thresholds.floor)
            self.writer.apply(ChangeSet("", graph=GraphCommit(delta=delta)))
            return len(delta.remove_links)

    def apply_removal(self, cs: ChangeSet) -> int:
        """Apply ``cs`` (one user's deleted memories) with the removal of those memories' evidence
        links and the weakening of what rested on them, in the same transaction. Returns how many
        links were removed."""
        key = self.subject_key(cs.user_id)
        ids = {r.record.id for r in cs.removals if r.status == "deleted"}
        with self._lock:
            mine = [link for link in self.journal.graph_links(key) if link.memory_id in ids]
            if mine:
                targets = sorted({link.target_id for link in mine})
                view = self.journal.graph_view(with_links=False)
                links = self.journal.graph_links(target_ids=targets)
                cs.graph = GraphCommit(delta=forget_memories(key, ids, links, view, now=time.time(),
                                                             floor=self.thresholds.floor))
            self.writer.apply(cs)
            return len(mine)
