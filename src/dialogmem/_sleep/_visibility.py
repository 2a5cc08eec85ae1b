"""Who may see what of the shared LTM graph: k-anonymity over the evidence links.

Consolidation learns from every user's memories; reading shows only what passes this rule. A node
or edge is *visible* to a viewer when

- the viewer's own memories support it (one of its evidence links carries the viewer's subject
  key), or
- at least ``min_users`` distinct subjects support it (``sleep.ltm_min_users``, at least 2).

An edge is visible only when it passes the rule itself *and* both of its endpoints are visible, so
a one-hop fact never shows a node the viewer could not see. The public viewer (``subject_key``
``None``: ``Memory.graph()`` without a user) has no evidence of its own and sees the k-anonymous part
only. Because a memory supports an existing node by similarity only when it said every word of the
node's text (``_consolidate.says_all``), a word said by fewer than ``min_users`` users never reaches
a node another user can see.

``audit`` is the admin view (``dialogmem graph --audit``): every live node and edge with its number
of distinct supporters and why it is visible to everyone or to its supporters only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .._graph import GraphEdge, GraphNode
from ..types import AuditRow, GraphAudit


class Support(BaseModel):
    """Distinct subjects supporting one node or edge, and whether the viewer is one of them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    supporters: int = Field(ge=0)
    own: bool = False


class Visibility:
    """The visibility rule for one viewer, over the support rows of the nodes and edges at hand."""

    def __init__(self, support: Mapping[str, Support], min_users: int) -> None:
        self._support = support
        self.min_users = min_users

    def shows(self, target_id: str) -> bool:
        """Whether a node (or an edge, endpoints aside) passes the rule."""
        s = self._support.get(target_id)
        return s is not None and (s.own or s.supporters >= self.min_users)

    def shows_edge(self, edge: GraphEdge) -> bool:
        return self.shows(edge.id) and self.shows(edge.source) and self.shows(edge.target)

    def nodes(self, nodes: Iterable[GraphNode]) -> list[GraphNode]:
        return [n for n in nodes if self.shows(n.id)]

    def edges(self, edges: Iterable[GraphEdge]) -> list[GraphEdge]:
        return [e for e in edges if self.shows_edge(e)]


def supports(rows: Mapping[str, tuple[int, bool]]) -> dict[str, Support]:
    """``Support`` rows from the journal's ``graph_support`` answer."""
    return {tid: Support(supporters=n, own=own) for tid, (n, own) in rows.items()}


def audit(nodes: Iterable[GraphNode], edges: Iterable[GraphEdge], support: Mapping[str, Support],
          min_users: int) -> GraphAudit:
    """Rows for the live nodes (most supporters first) then the live edges between live nodes."""
    public = Visibility(support, min_users)
    live = {n.id: n for n in nodes if n.live}
    rows = []
    for n in sorted(live.values(), key=lambda n: (-_count(support, n.id), n.text, n.id)):
        rows.append(_row(n.id, "node", n.type, n.text, n.evidence, _count(support, n.id), public.shows(n.id),
                         min_users, ""))
    for e in sorted((e for e in edges if e.live and e.source in live and e.target in live),
                    key=lambda e: (-_count(support, e.id), e.id)):
        text = f"{live[e.source].text} -> {live[e.target].text}"
        ends = "" if public.shows(e.source) and public.shows(e.target) else "an endpoint is not public"
        rows.append(_row(e.id, "edge", e.type, text, e.evidence, _count(support, e.id), public.shows_edge(e),
                         min_users, ends))
    return GraphAudit(min_users=min_users, rows=rows)


def _count(support: Mapping[str, Support], target_id: str) -> int:
    s = support.get(target_id)
    return s.supporters if s is not None else 0


def _row(rid: str, kind: Literal["node", "edge"], rtype: str, text: str, evidence: int, count: int, public: bool,
         min_users: int, ends: str) -> AuditRow:
    users = f"{count} user{'s' if count != 1 else ''}"
    if public:
        reason = f"{users} >= {min_users}"
    elif count >= min_users:
        reason = f"{users} >= {min_users}, but {ends}: only visible to its supporters"
    else:
        reason = f"{users} < {min_users}: only visible to its supporters"
    return AuditRow(id=rid, kind=kind, type=rtype, text=text, evidence=evidence, supporters=count,
                    visible_to="everyone" if public else "its supporters", reason=reason)
