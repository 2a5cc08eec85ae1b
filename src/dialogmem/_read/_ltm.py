"""The ``ltm`` route of the read path (seed 000 §3.3, Algorithm 1): graph facts from the shared,
de-identified LTM graph, within the same fixed budget ``K`` as the user's MTM hits.

*Routing and budget split* (``ltm_slots``, pure): a plan that routes a view to ``ltm`` (the LLM
planner), or a question without a personal reference (no personal pronoun, no speaker name of the
user — "what is a capital city?"), may give up to ``K // 2`` of its ``K`` results to graph facts; a
question about the user at most ``sleep.ltm_search_hits``. Slots are only taken by nodes whose cosine
to the query (or an ``ltm`` view) reaches ``sleep.ltm_min_score``, or whose text is one of the
query's entities or keywords; unused slots stay with MTM.

*A graph hit* is one matched node with its one-hop neighbourhood rendered as facts ("Paris — is a:
capital city; related to: France"), so a multi-hop question gets the linked knowledge in the same
line. ``tier="ltm"``. Isolation: a node (and every edge and neighbour of its facts) is a hit only
when it is visible to the user (``_sleep._visibility``: the user's own memories support it, or at
least ``sleep.ltm_min_users`` distinct users' do); node texts are de-identified and free of sensitive
values at consolidation; ``source_turn_ids`` are taken from *this user's own* memories that support
the node (their evidence links, by the user's subject key) — never another user's. A node the user
has no evidence for cites nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from .._graph import GraphEdge, GraphNode, node_id
from .._journal import GraphRows
from .._models._embed_base import Embedder
from .._sleep._visibility import Visibility, supports
from .._store import LTM_SCOPE, IndexFilter, VectorIndex
from .._text._words import query_keywords, tokens
from .._types import MemoryRecord, SearchHit
from ._plan import QueryPlan

PERSONAL_WORDS = frozenset({
    "i", "me", "my", "mine", "myself", "we", "us", "our", "ours", "you", "your", "yours", "yourself",
    "he", "she", "him", "her", "his", "hers", "they", "them", "their", "theirs"})
MAX_FACTS = 4
MAX_CITED_TURNS = 20
_LTM = IndexFilter(tier="ltm")
_RELATION_WORDS = {"IsA": "is a", "HasProperty": "has property", "RelatedTo": "related to", "Implies": "implies"}
_OVERFETCH = 5  # index hits read per slot: hits the user may not see are dropped after the search


def personal_reference(query: str, speakers: Sequence[str]) -> bool:
    """Whether the question is about someone: a personal pronoun or a word of a speaker's name."""
    words = {w.lower() for w in tokens(query)}
    names = {w.lower() for s in speakers for w in tokens(s) if len(w) >= 2}
    return bool(words & PERSONAL_WORDS or words & names)


def ltm_slots(plan: QueryPlan, k: int, *, speakers: Sequence[str], personal_hits: int) -> int:
    """How many of the ``k`` results graph facts may take (see the module docstring)."""
    if any(h.route == "ltm" for h in plan.hqs) or not personal_reference(plan.query, speakers):
        return k // 2
    # a question about the user: MTM keeps the top ranks; graph facts take one slot in ten at most
    # (given a slot at every k they cost recall@1/@5 on LoCoMo dev: 0.372 -> 0.296 at k = 1)
    return min(personal_hits, k // 10)


def render_node(node: GraphNode, edges: Sequence[GraphEdge], nodes: Mapping[str, GraphNode]) -> str:
    """The node with up to ``MAX_FACTS`` one-hop facts as triples, strongest edge first:
    ``museum — Louvre is a museum; museum related to Paris``."""
    facts = []
    for e in sorted(edges, key=lambda e: (-e.confidence, -e.evidence, e.id)):
        source, target = nodes.get(e.source), nodes.get(e.target)
        if source is not None and target is not None:
            facts.append(f"{source.text} {_RELATION_WORDS[e.type]} {target.text}")
        if len(facts) == MAX_FACTS:
            break
    return f"{node.text} — {'; '.join(facts)}" if facts else node.text


class GraphSearcher:
    """Graph hits for one user's query: the nodes' points in the index (scope ``LTM_SCOPE``, see
    ``_sync._ltmindex``) answer the similarity search; the journal, the keyword matches and what a hit shows.
    ``min_users``: the k of the visibility rule (``sleep.ltm_min_users``)."""

    def __init__(self, journal: GraphRows, index: VectorIndex, embedder: Embedder, *, min_users: int) -> None:
        self.journal = journal
        self.index = index
        self.embedder = embedder
        self.min_users = min_users
        self._lock = threading.Lock()
        self._live: tuple[int, int] | None = None  # (graph generation, live nodes)

    def empty(self) -> bool:
        generation = self.journal.graph_generation()
        with self._lock:
            if self._live is None or self._live[0] != generation:
                self._live = (generation, self.journal.graph_counts()["ltm_nodes"])
            return self._live[1] == 0

    def search(self, queries: Sequence[str], n: int, *, min_score: float, subject_key: str | None,
               memories: Callable[[list[str]], list[MemoryRecord]],
               known: Mapping[str, np.ndarray] | None = None) -> list[SearchHit]:
        """Up to ``n`` graph hits for the query texts (best first), only nodes, edges and neighbours
        visible to ``subject_key`` (``None``: the public viewer, k-anonymous knowledge only);
        ``memories(ids)`` reads this user's own memories (active or evicted) for the citations;
        ``known``: vectors of query texts embedded already (the read pipeline's views), so the route
        costs no second embedding."""
        if n <= 0 or not queries or self.empty():
            return []
        have = dict(known or {})
        missing = [q for q in dict.fromkeys(queries) if q not in have]
        if missing:
            have.update(zip(missing, self.embedder.embed(missing), strict=True))
        vecs = np.stack([np.asarray(have[q], dtype=np.float32) for q in queries])
        scores: dict[str, float] = {}
        fetch = n * _OVERFETCH
        for found in self.index.dense_search_batch(LTM_SCOPE, vecs, limit=fetch, flts=[_LTM] * len(queries)):
            for hit in found:
                if hit.score >= min_score:
                    scores[hit.record.id] = max(scores.get(hit.record.id, hit.score), hit.score)
        named = {node_id(kw) for q in queries for kw in query_keywords(q)}  # a node whose text is a keyword
        nodes = {node.id: node for node in self.journal.graph_nodes(sorted({*scores, *named}))}
        for nid in named & nodes.keys():
            scores[nid] = 1.0
        # the journal is the truth: a point whose node was dropped since, or one this user may not
        # see, is no hit
        seen = self._visibility(sorted(nodes), subject_key)
        top = sorted((i for i in scores if i in nodes and seen.shows(i)), key=lambda i: (-scores[i], i))[:n]
        edges = self.journal.graph_live_edges(touching=top)
        ends = {end for e in edges for end in (e.source, e.target)} - nodes.keys()
        nodes.update({node.id: node for node in self.journal.graph_nodes(sorted(ends))})
        seen = self._visibility(sorted({*top, *(x for e in edges for x in (e.id, e.source, e.target))}), subject_key)
        edges = seen.edges(edges)  # a fact shows a visible edge between visible nodes only
        cited = self._citations(top, subject_key, memories) if subject_key is not None else {}
        hits = []
        for nid in top:
            turns, stamp, weekday = cited.get(nid, ([], "", ""))
            around = [e for e in edges if nid in (e.source, e.target)]
            hits.append(SearchHit(id=nid, memory=render_node(nodes[nid], around, nodes),
                                  score=round(scores[nid], 6), time_stamp=stamp, weekday=weekday, speaker_name="",
                                  source_turn_ids=turns, tier="ltm"))
        return hits

    def _visibility(self, ids: Sequence[str], subject_key: str | None) -> Visibility:
        return Visibility(supports(self.journal.graph_support(ids, subject_key)), self.min_users)

    def _citations(self, node_ids: list[str], subject_key: str,
                   memories: Callable[[list[str]], list[MemoryRecord]]) -> dict[str, tuple[list[str], str, str]]:
        """Per node: this user's supporting memories' turns (newest memory first), time stamp, weekday."""
        support: dict[str, list[str]] = {}
        for link in self.journal.graph_links(subject_key, target_ids=node_ids):
            support.setdefault(link.target_id, []).append(link.memory_id)
        records = {r.id: r for r in memories(sorted({m for ms in support.values() for m in ms}))}
        out: dict[str, tuple[list[str], str, str]] = {}
        for nid, mids in support.items():
            own = sorted((records[m] for m in mids if m in records), key=lambda r: (-r.float_time_stamp, r.id))
            if own:
                turns = list(dict.fromkeys(t for r in own for t in r.source_turn_ids))[:MAX_CITED_TURNS]
                out[nid] = (turns, own[0].time_stamp, own[0].weekday)
        return out


def route_ltm(searcher: GraphSearcher, plan: QueryPlan, mtm_hits: list[SearchHit], k: int, *,
              speakers: Sequence[str], personal_hits: int, min_score: float, subject_key: str,
              memories: Callable[[list[str]], list[MemoryRecord]],
              view_vectors: np.ndarray | None = None) -> tuple[list[SearchHit], float | None]:
    """The ``k`` results: graph hits in their slots, MTM hits in the rest (MTM first, each list in
    its own order); and the milliseconds the route took (``None``: no slot, or an empty graph)."""
    started = time.perf_counter()
    slots = ltm_slots(plan, k, speakers=speakers, personal_hits=personal_hits)
    if slots <= 0 or searcher.empty():
        return mtm_hits[:k], None
    views = [h.text for h in plan.hqs if h.route == "ltm"] or [plan.query.strip() or plan.query]
    known = {} if view_vectors is None else {h.text: v for h, v in zip(plan.hqs, view_vectors, strict=False)}
    found = searcher.search(views, slots, min_score=min_score, subject_key=subject_key, memories=memories,
                            known=known)
    ltm = useful_graph_hits(mtm_hits, found, k)
    return [*mtm_hits[: k - len(ltm)], *ltm], (time.perf_counter() - started) * 1000.0


def useful_graph_hits(mtm_hits: Sequence[SearchHit], graph_hits: Sequence[SearchHit], k: int) -> list[SearchHit]:
    """The graph hits worth a slot, best first: a hit that cites only turns the MTM hits it would
    sit beside already cite adds nothing the user's own memories do not say, and leaves its slot to
    MTM. A hit citing nothing (general knowledge the user has no evidence for) is kept."""
    kept: list[SearchHit] = []
    for hit in graph_hits:
        beside = {t for h in mtm_hits[: max(0, k - len(kept) - 1)] for t in h.source_turn_ids}
        if hit.source_turn_ids and set(hit.source_turn_ids) <= beside:
            continue
        kept.append(hit)
    return kept
