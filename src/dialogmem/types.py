"""Every type a caller of dialogmem meets, in one public module: what the verbs take and return.

Only pydantic models and type aliases live here, and this module imports nothing of the engine (no
numpy, no index, no journal, no model): ``Client`` and ``AsyncClient`` read a server's answers
into these same classes without installing the engine (an import-linter contract in pyproject.toml
keeps it so). The engine's modules import their result types from here; the older import paths
(``dialogmem._read.Answer``, ``dialogmem._sleep._updater.SleepReport``, …) name the same classes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from ._graph import GraphEdge, GraphNode, LTMGraph
from ._types import (
    AddResult,
    Event,
    ExportReport,
    Finite,
    HistoryEntry,
    ImportReport,
    MemoryRecord,
    Message,
    QuarantinedTurn,
    SearchHit,
    SearchPlan,
    SearchResult,
    SourceTurn,
    Turn,
)

#: how ``answer`` works: ``light`` (one call), ``deep`` (rounds of retrieval), ``auto`` (light, deep when needed)
AnswerMode = Literal["auto", "light", "deep"]


class Answer(BaseModel):
    """An answer and the ids of the memories (L1) and raw turns (L2) it rests on — only ids of lines
    the model was shown."""

    text: str
    memory_ids: list[str] = Field(default_factory=list)
    turn_ids: list[str] = Field(default_factory=list)
    mode: Literal["light", "deep"] = "light"  # deep when the deep module ran
    used: Literal["light", "deep"] = "light"  # the module whose answer stands
    rounds: int = 0  # deep rounds run (0: the light answer was complete)
    context_tokens: int = 0  # context lines shown to the model over all calls (the project's token count)
    prompt_tokens: int = 0  # whole prompts sent over all calls (same count)
    garbage: int = 0  # model replies that could not be used (kept the earlier answer instead)
    light_text: str | None = None  # the light module's own answer, when it ran (equal to text without deep)


class IndexFilter(BaseModel):
    """Optional constraints on top of the user scope (``search`` / ``get_all`` ``filters``). ``None``
    means "no constraint"."""

    model_config = {"extra": "forbid"}

    agent_id: str | None = None
    session_id: str | None = None
    time_from: Finite | None = None  # inclusive, unix seconds
    time_to: Finite | None = None  # inclusive
    speakers: list[str] | None = None  # any of
    tier: str | None = None
    level: str | None = None
    entities: list[str] | None = None  # any of
    ids: list[str] | None = None  # restrict to these ids
    exclude_ids: list[str] | None = None

    def is_empty(self) -> bool:
        return all(v is None for v in self.model_dump().values())


class ConsolidationReport(BaseModel):
    """What one LTM consolidation cycle (part of ``sleep``) read and changed in the shared graph."""

    memories: int = 0  # items in the batch
    evicted_in_batch: int = 0
    units: int = 0
    nodes_added: int = 0
    nodes_merged: int = 0
    nodes_dropped: int = 0
    edges_added: int = 0
    edges_dropped: int = 0
    links_added: int = 0
    fallbacks: int = 0
    method: str = "rule"
    seconds: float = 0.0


class SleepReport(BaseModel):
    """What one ``Memory.sleep`` call examined and changed."""

    users: int = 0
    new_entries: int = 0
    targets: int = 0
    updated: int = 0
    # memories a later statement replaced: kept, with ``invalid_at`` and ``superseded_by`` set
    superseded: int = 0
    deleted: int = 0
    merged: int = 0
    ignored: int = 0
    llm_calls: int = 0
    seconds: float = 0.0
    # MTM capacity bound (``sleep.mtm_capacity``): items evicted, items compressed into a near-duplicate
    evicted: int = 0
    compressed: int = 0
    # points put into the index's search graph (``store.index_min_points``; 0: none waited enough)
    indexed: int = 0
    # the LTM consolidation cycle (``sleep.ltm``); ``None`` when it did not run
    ltm: ConsolidationReport | None = None

    def add(self, other: SleepReport) -> None:
        for name in ("users", "new_entries", "targets", "updated", "superseded", "deleted", "merged", "ignored",
                     "llm_calls", "evicted", "compressed"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


class AuditRow(BaseModel):
    """One live node or edge of the shared graph, with how many users support it and who may see it."""

    id: str
    kind: Literal["node", "edge"]
    type: str
    text: str
    evidence: int
    supporters: int
    visible_to: Literal["everyone", "its supporters"]
    reason: str


class GraphAudit(BaseModel):
    """The admin view of the shared graph: every live node and edge, with who may see it."""

    min_users: int
    rows: list[AuditRow] = Field(default_factory=list)


class RepairReport(BaseModel):
    """What ``dialogmem repair`` did."""

    memories_indexed: int = 0
    memories_recovered: int = 0  # --from-index: memory rows rebuilt from the index into a new journal
    index_moved_to: str | None = None
    seconds: float = 0.0


__all__ = [
    "AddResult",
    "Answer",
    "AnswerMode",
    "AuditRow",
    "ConsolidationReport",
    "Event",
    "ExportReport",
    "GraphAudit",
    "GraphEdge",
    "GraphNode",
    "HistoryEntry",
    "ImportReport",
    "IndexFilter",
    "LTMGraph",
    "MemoryRecord",
    "Message",
    "QuarantinedTurn",
    "RepairReport",
    "SearchHit",
    "SearchPlan",
    "SearchResult",
    "SleepReport",
    "SourceTurn",
    "Turn",
]
