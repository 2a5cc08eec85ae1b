"""The verbs of dialogmem, once: what ``Memory`` and ``Client`` (sync) and ``AsyncMemory`` and
``AsyncClient`` (asyncio) all offer, with the same parameters and return types.

Local-only verbs stay off these protocols: ``repair``, ``rebuild_index``, ``verify_key`` and
``import_records`` act on a store's files or hand it numpy arrays, and ``import_mem0`` /
``import_chats`` read another layer's files on the caller's machine (convert them with a local
``Memory``, then ``export`` / ``import_`` the result). The public-API suite runs one body of tests
against all four implementations, and checks that each has exactly these verbs with these
parameter names, kinds, defaults and annotations, so a verb cannot drift between them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

from ._files import Destination
from .types import (
    AddResult,
    Answer,
    AnswerMode,
    ExportReport,
    GraphAudit,
    HistoryEntry,
    ImportReport,
    IndexFilter,
    LTMGraph,
    MemoryRecord,
    Message,
    QuarantinedTurn,
    SearchHit,
    SearchResult,
    SleepReport,
    SourceTurn,
)

#: what ``add`` takes: one message (text, a dict, a ``Message``) or a list of them
Messages = str | dict[str, Any] | Message | Sequence[str | dict[str, Any] | Message]
#: a point in time: ISO or free text, Unix seconds, or a datetime
When = str | float | datetime
#: what ``add_conversation`` takes: a JSON file, the parsed JSON (messages, or a LoCoMo conversation)
Conversation = str | Path | list[Any] | dict[str, Any]
#: where ``export`` writes and ``import_`` reads: a path or an open text file

#: every verb of the protocols, in the order the docs list them
VERBS: tuple[str, ...] = (
    "add", "add_conversation", "flush", "update", "delete", "forget_user", "search", "sources", "answer", "get",
    "get_all", "history", "stats", "sleep", "quarantined", "retry_quarantined", "drop_quarantined", "graph",
    "graph_audit", "export", "import_", "close",
)


@runtime_checkable
class MemoryAPI(Protocol):
    """The verbs of ``Memory`` and ``Client``. Every id-based call is scoped to ``user_id``: another
    user's id reads as ``NotFoundError``."""

    def __enter__(self) -> MemoryAPI: ...

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None: ...

    def close(self) -> None: ...

    def add(self, messages: Messages, user_id: str, *, session_id: str | None = None,
            timestamp: When | None = None, metadata: dict[str, Any] | None = None,
            agent_id: str | None = None, flush: bool = False) -> AddResult: ...

    def add_conversation(self, conversation: Conversation, user_id: str, *, flush: bool = True,
                         progress: Callable[[int, int], None] | None = None) -> AddResult: ...

    def flush(self, user_id: str | None = None) -> list[SearchHit]: ...

    def update(self, memory_id: str, text: str, user_id: str, *, actor: str = "user",
               metadata: dict[str, Any] | None = None) -> MemoryRecord: ...

    def delete(self, memory_id: str, user_id: str, *, actor: str = "user") -> None: ...

    def forget_user(self, user_id: str) -> dict[str, int]: ...

    def search(self, query: str, user_id: str, *, limit: int | None = None,
               filters: IndexFilter | dict[str, Any] | None = None, reference_time: When | None = None,
               recent_context: list[str] | None = None, expand: bool = False) -> SearchResult: ...

    def sources(self, memory_id: str, user_id: str, *, around: int = 0) -> list[SourceTurn]: ...

    def answer(self, query: str, user_id: str, *, mode: AnswerMode | None = None, max_rounds: int | None = None,
               limit: int | None = None, reference_time: When | None = None) -> Answer: ...

    def get(self, memory_id: str, user_id: str, *, include_evicted: bool = True) -> MemoryRecord: ...

    def get_all(self, user_id: str, *, limit: int = 100, offset: str | None = None,
                filters: IndexFilter | dict[str, Any] | None = None,
                include_evicted: bool = False, contains: str | None = None) -> list[MemoryRecord]: ...

    def history(self, memory_id: str, user_id: str) -> list[HistoryEntry]: ...

    def stats(self, user_id: str | None = None) -> dict[str, Any]: ...

    def sleep(self, user_id: str | None = None) -> SleepReport: ...

    def quarantined(self, user_id: str | None = None) -> list[QuarantinedTurn]: ...

    def retry_quarantined(self, user_id: str, turn_ids: Sequence[str] | None = None) -> AddResult: ...

    def drop_quarantined(self, user_id: str, turn_ids: Sequence[str]) -> int: ...

    def graph(self, user_id: str | None = None, *, query: str | None = None, limit: int = 100) -> LTMGraph: ...

    def graph_audit(self) -> GraphAudit: ...

    def export(self, destination: Destination, user_id: str | None = None, *, all_users: bool = False,
               vectors: bool = True) -> ExportReport: ...

    def import_(self, source: Destination) -> ImportReport: ...


@runtime_checkable
class AsyncMemoryAPI(Protocol):
    """The verbs of ``AsyncMemory`` and ``AsyncClient``: those of :class:`MemoryAPI`, awaited."""

    async def __aenter__(self) -> AsyncMemoryAPI: ...

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None: ...

    async def close(self) -> None: ...

    async def add(self, messages: Messages, user_id: str, *, session_id: str | None = None,
                  timestamp: When | None = None, metadata: dict[str, Any] | None = None,
                  agent_id: str | None = None, flush: bool = False) -> AddResult: ...

    async def add_conversation(self, conversation: Conversation, user_id: str, *, flush: bool = True,
                               progress: Callable[[int, int], None] | None = None) -> AddResult: ...

    async def flush(self, user_id: str | None = None) -> list[SearchHit]: ...

    async def update(self, memory_id: str, text: str, user_id: str, *, actor: str = "user",
                     metadata: dict[str, Any] | None = None) -> MemoryRecord: ...

    async def delete(self, memory_id: str, user_id: str, *, actor: str = "user") -> None: ...

    async def forget_user(self, user_id: str) -> dict[str, int]: ...

    async def search(self, query: str, user_id: str, *, limit: int | None = None,
                     filters: IndexFilter | dict[str, Any] | None = None, reference_time: When | None = None,
                     recent_context: list[str] | None = None, expand: bool = False) -> SearchResult: ...

    async def sources(self, memory_id: str, user_id: str, *, around: int = 0) -> list[SourceTurn]: ...

    async def answer(self, query: str, user_id: str, *, mode: AnswerMode | None = None,
                     max_rounds: int | None = None, limit: int | None = None,
                     reference_time: When | None = None) -> Answer: ...

    async def get(self, memory_id: str, user_id: str, *, include_evicted: bool = True) -> MemoryRecord: ...

    async def get_all(self, user_id: str, *, limit: int = 100, offset: str | None = None,
                      filters: IndexFilter | dict[str, Any] | None = None,
                      include_evicted: bool = False, contains: str | None = None) -> list[MemoryRecord]: ...

    async def history(self, memory_id: str, user_id: str) -> list[HistoryEntry]: ...

    async def stats(self, user_id: str | None = None) -> dict[str, Any]: ...

    async def sleep(self, user_id: str | None = None) -> SleepReport: ...

    async def quarantined(self, user_id: str | None = None) -> list[QuarantinedTurn]: ...

    async def retry_quarantined(self, user_id: str, turn_ids: Sequence[str] | None = None) -> AddResult: ...

    async def drop_quarantined(self, user_id: str, turn_ids: Sequence[str]) -> int: ...

    async def graph(self, user_id: str | None = None, *, query: str | None = None, limit: int = 100) -> LTMGraph: ...

    async def graph_audit(self) -> GraphAudit: ...

    async def export(self, destination: Destination, user_id: str | None = None, *, all_users: bool = False,
                     vectors: bool = True) -> ExportReport: ...

    async def import_(self, source: Destination) -> ImportReport: ...
