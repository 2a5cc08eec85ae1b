"""``Memory.graph``: read the shared LTM graph — its public (k-anonymous) part, what one user's
memories support, or the neighbourhood of a query (matched nodes and their one-hop neighbours) —
and ``Memory.graph_audit``, the admin view of who may see what (``_sleep._visibility``)."""

from __future__ import annotations

from .._graph import LTMGraph, expand_one_hop
from .._journal import GraphRows
from .._sleep._visibility import GraphAudit, Visibility, audit, supports
from ._ltm import GraphSearcher


def read_graph(journal: GraphRows, searcher: GraphSearcher, *, subject_key: str | None, query: str | None,
               limit: int, min_score: float) -> LTMGraph:
    """Live nodes (strongest evidence first, at most ``limit``) and the live edges between them.

    Without ``subject_key``: only what at least ``searcher.min_users`` distinct users support (the
    public view). ``subject_key``: only knowledge this user's memories support, with ``evidence``
    listing those memory ids. ``query``: the nodes matching it (as the ``ltm`` search route matches,
    within the same view) and their one-hop neighbours.
    """
    view = journal.graph_view(with_links=False)
    seen = Visibility(supports(journal.graph_support(None, subject_key)), searcher.min_users)
    live = {n.id: n for n in view.live_nodes() if seen.shows(n.id)}
    edges = [e for e in view.edges.values() if e.live and seen.shows_edge(e) and e.source in live and e.target in live]
    evidence: dict[str, list[str]] = {}
    if subject_key is not None:
        for link in journal.graph_links(subject_key):
            evidence.setdefault(link.target_id, []).append(link.memory_id)
        live = {i: n for i, n in live.items() if i in evidence}
    if query is not None:
        seeds = [h.id for h in searcher.search([query], limit, min_score=min_score, subject_key=subject_key,
                                               memories=lambda _ids: [])]
        seeds = [s for s in seeds if s in live]
        around = expand_one_hop(seeds, edges, nodes=live, limit=max(0, limit - len(seeds)))
        chosen = [live[i] for i in [*seeds, *around]]
    else:
        chosen = sorted(live.values(), key=lambda n: (-n.evidence, -n.confidence, n.text))[:limit]
    ids = {n.id for n in chosen}
    kept_edges = sorted((e for e in edges if e.source in ids and e.target in ids), key=lambda e: e.id)
    if subject_key is not None:
        kept_edges = [e for e in kept_edges if e.id in evidence]
        evidence = {k: sorted(v) for k, v in evidence.items() if k in ids or k in {e.id for e in kept_edges}}
    return LTMGraph(nodes=chosen, edges=kept_edges, evidence=evidence)


def read_audit(journal: GraphRows, min_users: int) -> GraphAudit:
    """Every live node and edge with its distinct supporters and why it is visible (admin only)."""
    view = journal.graph_view(with_links=False)
    return audit(view.nodes.values(), view.edges.values(), supports(journal.graph_support()), min_users)
