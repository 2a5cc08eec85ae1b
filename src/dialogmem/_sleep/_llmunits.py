"""The LLM backend of abstraction (seed 000 §9.5): knowledge units from a model, de-identified on the
way in and again on the way out.

The batch is de-identified before the model sees it (so it has no name to copy), sent in chunks of
``max_items`` memories, and every node text of the answer goes through the same ``Deidentifier``: a
node it changes (the model kept a name, an address...) is dropped, never rewritten. Edges whose
ends are not nodes of the unit bring their ends in as nodes (typed by case). An ``LLMError`` for a
chunk (unreachable, timed out, or output still invalid after the client's corrective retries)
sends that chunk to ``RuleUnitExtractor`` and counts one fallback for stage ``consolidate``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel, Field, field_validator

from .._backends import with_fallback
from .._graph import EDGE_TYPES, EdgeType, NodeType, normalise
from .._models._llm_base import LLMClient
from .._prompts.consolidate import render_consolidation_messages
from .._types import MemoryRecord
from ._consolidate import node_type_of
from ._deid import Deidentifier
from ._sensitive import drop_sensitive_sentences
from ._units import KnowledgeUnit, RuleUnitExtractor, UnitEdge, UnitNode, usable_node_text

STAGE = "consolidate"
_RELATIONS: dict[str, EdgeType] = {t.lower(): t for t in EDGE_TYPES} | {
    "is_a": "IsA", "is a": "IsA", "has_property": "HasProperty", "has property": "HasProperty",
    "related_to": "RelatedTo", "related to": "RelatedTo", "relatedto": "RelatedTo"}


class _LLMNode(BaseModel):
    text: str
    type: str = "Concept"


class _LLMEdge(BaseModel):
    source: str
    relation: str
    target: str


class _LLMUnit(BaseModel):
    sources: list[int] = Field(default_factory=list)
    nodes: list[_LLMNode] = Field(default_factory=list)
    edges: list[_LLMEdge] = Field(default_factory=list)

    @field_validator("sources", mode="before")
    @classmethod
    def _numbers(cls, v: object) -> object:
        if isinstance(v, int | str):
            v = [v]
        if isinstance(v, list):
            return [int("".join(ch for ch in x if ch.isdigit()) or -1) if isinstance(x, str) else x for x in v]
        return v


class ConsolidationOutput(BaseModel):
    """The JSON the consolidation prompt asks for."""

    units: list[_LLMUnit]


class UnitBatch(BaseModel):
    units: list[KnowledgeUnit]
    fallbacks: int = 0
    method: Literal["llm", "rule", "mixed"] = "rule"


class LLMUnitExtractor:
    """Knowledge units from an LLM with a per-chunk rule fallback."""

    def __init__(self, llm: LLMClient, deid: Deidentifier, *, fallback: RuleUnitExtractor | None = None,
                 max_items: int = 20, max_tokens: int | None = None) -> None:
        self._llm = llm
        self._deid = deid
        self._fallback = fallback if fallback is not None else RuleUnitExtractor(deid)
        self.max_items = max_items
        self._max_tokens = max_tokens

    def units(self, records: Sequence[MemoryRecord], subject_key: Callable[[str], str], *,
              existing: Sequence[str] = ()) -> UnitBatch:
        """Units for ``records``; ``existing``: texts of nearby LTM nodes the model may reuse."""
        out: list[KnowledgeUnit] = []
        fallbacks = 0
        for start in range(0, len(records), self.max_items):
            chunk = list(records[start:start + self.max_items])
            used_rules: list[bool] = []

            def rules(chunk: list[MemoryRecord] = chunk, used: list[bool] = used_rules) -> list[KnowledgeUnit]:
                used.append(True)
                return self._fallback.units(chunk, subject_key)

            def ask(chunk: list[MemoryRecord] = chunk) -> list[KnowledgeUnit]:
                return self._ask(chunk, subject_key, existing)

            out += with_fallback(self._llm, STAGE, ask, rules, what=f"{len(chunk)} memories")
            fallbacks += len(used_rules)
        method: Literal["llm", "rule", "mixed"] = "llm" if not fallbacks else (
            "rule" if fallbacks * self.max_items >= len(records) else "mixed")
        return UnitBatch(units=out, fallbacks=fallbacks, method=method)

    def _ask(self, chunk: list[MemoryRecord], subject_key: Callable[[str], str],
             existing: Sequence[str]) -> list[KnowledgeUnit]:
        # sensitive sentences never reach the model, so it cannot copy a secret into a node text
        texts = [drop_sensitive_sentences(self._deid(r.memory) or "") or "(nothing general)" for r in chunk]
        answer = self._llm.complete_json(render_consolidation_messages(texts, existing), ConsolidationOutput,
                                         stage=STAGE, max_tokens=self._max_tokens)
        units: list[KnowledgeUnit] = []
        for item in answer.units:
            nodes, edges = self._clean(item)
            if not nodes:
                continue
            for i in dict.fromkeys(item.sources):
                if 1 <= i <= len(chunk):
                    r = chunk[i - 1]
                    units.append(KnowledgeUnit(memory_id=r.id, subject_key=subject_key(r.user_id),
                                               nodes=nodes, edges=edges, method="llm"))
        return units

    def _clean(self, item: _LLMUnit) -> tuple[list[UnitNode], list[UnitEdge]]:
        nodes: dict[str, UnitNode] = {}
        for n in item.nodes:
            self._keep(nodes, n.text, _node_type(n.type, n.text))
        edges: list[UnitEdge] = []
        for e in item.edges:
            relation = _RELATIONS.get(" ".join(e.relation.strip().lower().split()))
            if relation is None:
                continue
            a = self._keep(nodes, e.source, node_type_of(e.source.strip()))
            b = self._keep(nodes, e.target, node_type_of(e.target.strip()))
            if a is not None and b is not None and a != b:
                edges.append(UnitEdge(type=relation, source=a, target=b))
        return list(nodes.values()), edges

    def _keep(self, nodes: dict[str, UnitNode], raw: str, node_type: NodeType) -> str | None:
        """Add a node text if it is clean; returns its text as stored, or None when rejected."""
        text = " ".join(raw.split())
        key = normalise(text)
        if key in nodes:
            return nodes[key].text
        if not text or len(text) > 80 or not usable_node_text(text, self._deid):
            return None
        nodes[key] = UnitNode(text=text, type=node_type)
        return text


def _node_type(raw: str, text: str) -> NodeType:
    t = raw.strip().lower()
    if t == "entity":
        return "Entity"
    if t == "concept":
        return "Concept"
    return node_type_of(text.strip())
