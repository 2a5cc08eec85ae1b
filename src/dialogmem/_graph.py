"""The long-term memory graph (seed 000 §3.2, §10.1): typed nodes and edges, evidence links, the
delta one consolidation cycle produces, and one-hop expansion for multi-hop retrieval.

Nodes are ``Entity`` (concrete things: "Paris", "Python script") or ``Concept`` (classes and
properties: "capital city", "completed"). Edges are ``IsA``, ``HasProperty``, ``RelatedTo``
(symmetric: its endpoints are stored in sorted order) and ``Implies``. Ids are UUIDs derived from the
normalised text (nodes) or from type and endpoints (edges), so the same knowledge always lands on
the same id, whichever user or cycle produced it, and the index can hold nodes as ``tier="ltm"``
points.

An ``EvidenceLink`` says that one memory of one subject supports one node or edge. The subject key is
opaque: the facade stores ``HMAC(store_secret, user_id)``, never the user id. Links are how
``forget_subject`` finds what rested on a user, and how evidence is counted once per memory.

A soft-dropped node or edge keeps its row with ``dropped_at`` set (history stays); it is no anchor,
no neighbour and no search result, and is revived when the same knowledge is consolidated again.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

NodeType = Literal["Entity", "Concept"]
EdgeType = Literal["IsA", "HasProperty", "RelatedTo", "Implies"]
EDGE_TYPES: tuple[EdgeType, ...] = ("IsA", "HasProperty", "RelatedTo", "Implies")
SYMMETRIC: frozenset[str] = frozenset({"RelatedTo"})

_NAMESPACE = uuid.UUID("6b1f3c52-4f0e-4a43-9d1e-2f6c3b7a9e10")
_ARTICLE = re.compile(r"^(?:a|an|the|some|my|your|his|her|their|our|its)\s+", re.IGNORECASE)


class GraphNode(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    type: NodeType
    text: str
    evidence: int = Field(ge=0)
    confidence: float = Field(ge=0.0, le=1.0)
    created_at: float
    updated_at: float
    dropped_at: float | None = None

    @property
    def live(self) -> bool:
        return self.dropped_at is None


class GraphEdge(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    type: EdgeType
    source: str
    target: str
    evidence: int = Field(ge=0)
    confidence: float = Field(ge=0.0, le=1.0)
    created_at: float = 0.0
    updated_at: float = 0.0
    dropped_at: float | None = None

    @property
    def live(self) -> bool:
        return self.dropped_at is None


class EvidenceLink(BaseModel):
    """Memory ``memory_id`` of subject ``subject_key`` supports node or edge ``target_id``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    subject_key: str
    memory_id: str
    target_id: str

    def key(self) -> tuple[str, str, str]:
        return (self.subject_key, self.memory_id, self.target_id)


class GraphView(BaseModel):
    """What consolidation reads: every node and edge (dropped ones included) and every link."""

    nodes: dict[str, GraphNode] = Field(default_factory=dict)
    edges: dict[str, GraphEdge] = Field(default_factory=dict)
    links: list[EvidenceLink] = Field(default_factory=list)

    def live_nodes(self) -> list[GraphNode]:
        return [n for n in self.nodes.values() if n.live]

    def with_delta(self, delta: GraphDelta) -> GraphView:
        """The view after ``delta`` (what the journal holds once the lead applied it)."""
        nodes = dict(self.nodes)
        for n in [*delta.insert_nodes, *delta.update_nodes, *delta.drop_nodes]:
            nodes[n.id] = n
        edges = dict(self.edges)
        for e in [*delta.insert_edges, *delta.update_edges, *delta.drop_edges]:
            edges[e.id] = e
        gone = {link.key() for link in delta.remove_links}
        links = [link for link in self.links if link.key() not in gone]
        known = {link.key() for link in links}
        links += [link for link in delta.add_links if link.key() not in known]
        return GraphView(nodes=nodes, edges=edges, links=links)


class GraphDelta(BaseModel):
    """One cycle's changes, applied by the facade in one journal transaction.

    ``insert_*``: new rows; ``update_*``: the new state of existing rows (a revived row too);
    ``drop_*``: the new state of rows soft-dropped now (``dropped_at`` set). Every node or edge
    appears in at most one list. ``add_links`` / ``remove_links``: evidence links.
    """

    insert_nodes: list[GraphNode] = Field(default_factory=list)
    update_nodes: list[GraphNode] = Field(default_factory=list)
    drop_nodes: list[GraphNode] = Field(default_factory=list)
    insert_edges: list[GraphEdge] = Field(default_factory=list)
    update_edges: list[GraphEdge] = Field(default_factory=list)
    drop_edges: list[GraphEdge] = Field(default_factory=list)
    add_links: list[EvidenceLink] = Field(default_factory=list)
    remove_links: list[EvidenceLink] = Field(default_factory=list)
    merged: int = 0  # units merged into an existing node
    fallbacks: int = 0  # batches the LLM backend could not abstract (rules used instead)

    def is_empty(self) -> bool:
        return not any((self.insert_nodes, self.update_nodes, self.drop_nodes, self.insert_edges,
                        self.update_edges, self.drop_edges, self.add_links, self.remove_links))


def normalise(text: str) -> str:
    """The comparison form of a node text: lower case, single spaces, no leading article, a plural
    "-s" removed from the last word ("The Dogs" and "dog" are one node)."""
    words = " ".join(text.lower().replace("’", "'").split())
    words = _ARTICLE.sub("", words).strip(" .,;:!?\"'")
    head, _, last = words.rpartition(" ")
    if len(last) > 3 and last.endswith("s") and not last.endswith(("ss", "us", "is")):
        last = last[:-1]
    return f"{head} {last}".strip()


def node_id(text: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, "node:" + normalise(text)))


def edge_id(edge_type: str, source: str, target: str) -> str:
    if edge_type in SYMMETRIC:
        source, target = sorted((source, target))
    return str(uuid.uuid5(_NAMESPACE, f"edge:{edge_type}:{source}:{target}"))


def edge_ends(edge_type: str, source: str, target: str) -> tuple[str, str]:
    """Endpoints in stored order (sorted for symmetric types)."""
    if edge_type in SYMMETRIC:
        a, b = sorted((source, target))
        return a, b
    return source, target


def expand_one_hop(node_ids: Iterable[str], edges: Iterable[GraphEdge], *,
                   nodes: Mapping[str, GraphNode] | None = None, limit: int | None = None) -> list[str]:
    """The live neighbours of ``node_ids`` over live edges (either direction), not the seeds.

    Order: by the strongest connecting edge (confidence, then evidence), then id — so a caller can
    cut the list at ``limit``. With ``nodes``, neighbours that are unknown or dropped are skipped.
    """
    seeds = set(node_ids)
    strength: dict[str, tuple[float, int]] = {}
    for e in edges:
        if not e.live:
            continue
        for a, b in ((e.source, e.target), (e.target, e.source)):
            if a in seeds and b not in seeds:
                if nodes is not None and (b not in nodes or not nodes[b].live):
                    continue
                strength[b] = max(strength.get(b, (0.0, 0)), (e.confidence, e.evidence))
    ordered = sorted(strength, key=lambda n: (-strength[n][0], -strength[n][1], n))
    return ordered[:limit] if limit is not None else ordered


class LTMGraph(BaseModel):
    """What ``Memory.graph`` returns: live nodes and the live edges between them. With a user,
    ``evidence`` maps each node or edge id to that user's own memory ids supporting it."""

    nodes: list[GraphNode] = Field(default_factory=list)
    edges: list[GraphEdge] = Field(default_factory=list)
    evidence: dict[str, list[str]] = Field(default_factory=dict)

    def to_graphml(self) -> str:
        """GraphML (nodes with type, text, evidence, confidence; edges with type)."""
        from xml.sax.saxutils import quoteattr

        def data(key: str, value: object) -> str:
            text = str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            return f'<data key="{key}">{text}</data>'

        lines = ['<?xml version="1.0" encoding="UTF-8"?>',
                 '<graphml xmlns="http://graphml.graphdrawing.org/xmlns">']
        for key, target, kind in (("type", "node", "string"), ("text", "node", "string"),
                                  ("evidence", "node", "int"), ("confidence", "node", "double"),
                                  ("etype", "edge", "string"), ("econfidence", "edge", "double")):
            name = key.removeprefix("e") if target == "edge" else key
            lines.append(f'<key id="{key}" for="{target}" attr.name="{name}" attr.type="{kind}"/>')
        lines.append('<graph id="ltm" edgedefault="directed">')
        for n in self.nodes:
            lines.append(f"<node id={quoteattr(n.id)}>{data('type', n.type)}{data('text', n.text)}"
                         f"{data('evidence', n.evidence)}{data('confidence', n.confidence)}</node>")
        for e in self.edges:
            lines.append(f"<edge id={quoteattr(e.id)} source={quoteattr(e.source)} target={quoteattr(e.target)}>"
                         f"{data('etype', e.type)}{data('econfidence', e.confidence)}</edge>")
        lines += ["</graph>", "</graphml>"]
        return "\n".join(lines)
