"""``AsyncMemory``: the same verbs as ``Memory`` for asyncio code.

The work is blocking I/O and CPU (SQLite, the index, embeddings, a local model), so each call runs
the sync implementation in a worker thread; no logic is duplicated here. The store is opened once,
under a lock, by whichever call comes first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

import numpy as np

from .._apikeys import ApiKey
from .._config import Config
from .._errors import StoreError
from .._files import Destination
from .._graph import LTMGraph
from .._transfer import Conversation
from .._types import (
    AddResult,
    ExportReport,
    HistoryEntry,
    ImportReport,
    MemoryRecord,
    QuarantinedTurn,
    SearchHit,
    SearchResult,
    SourceTurn,
)
from ..types import Answer, AnswerMode, GraphAudit, IndexFilter, RepairReport, SleepReport
from ._memory import Memory, Messages, When

P = ParamSpec("P")
R = TypeVar("R")


class AsyncMemory:
    """Async facade over :class:`Memory`; open it with ``await AsyncMemory.open(...)``, ``async with
    AsyncMemory(...)``, or simply call a verb (the first call opens the store)."""

    def __init__(self, config: Config | None = None, **overrides: Any) -> None:
        self._config = config
        self._overrides = overrides
        self._mem: Memory | None = None
        self._opening = asyncio.Lock()
        self._closed = False

    @classmethod
    async def open(cls, config: Config | None = None, **overrides: Any) -> AsyncMemory:
        self = cls(config, **overrides)
        await self._ensure()
        return self

    async def _ensure(self) -> Memory:
        if self._mem is None:
            async with self._opening:  # concurrent first calls open the store once
                if self._closed:
                    raise StoreError("this AsyncMemory is closed")
                if self._mem is None:
                    self._mem = await asyncio.to_thread(Memory, self._config, **self._overrides)
        return self._mem

    async def __aenter__(self) -> AsyncMemory:
        await self._ensure()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    @property
    def sync(self) -> Memory:
        """The underlying :class:`Memory` (once opened)."""
        if self._mem is None:
            raise StoreError("AsyncMemory is not open yet: await AsyncMemory.open(...) or call a verb first")
        return self._mem

    async def _run(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def add(self, messages: Messages, user_id: str, *, session_id: str | None = None,
                  timestamp: When | None = None, metadata: dict[str, Any] | None = None,
                  agent_id: str | None = None, flush: bool = False) -> AddResult:
        mem = await self._ensure()
        return await self._run(mem.add, messages, user_id, session_id=session_id, timestamp=timestamp,
                               metadata=metadata, agent_id=agent_id, flush=flush)

    async def add_conversation(self, conversation: Conversation, user_id: str, *, flush: bool = True,
                               progress: Callable[[int, int], None] | None = None) -> AddResult:
        mem = await self._ensure()
        return await self._run(mem.add_conversation, conversation, user_id, flush=flush, progress=progress)

    async def flush(self, user_id: str | None = None) -> list[SearchHit]:
        return await self._run((await self._ensure()).flush, user_id)

    async def import_records(self, records: Iterable[MemoryRecord | dict[str, Any]], *,
                             vectors: np.ndarray | None = None) -> int:
        return await self._run((await self._ensure()).import_records, records, vectors=vectors)

    async def derived_id(self, user_id: str, name: str) -> str:
        return await self._run((await self._ensure()).derived_id, user_id, name)

    async def export(self, destination: Destination, user_id: str | None = None, *, all_users: bool = False,
                     vectors: bool = True) -> ExportReport:
        """``Memory.export`` in a worker thread (a file object is written from that thread)."""
        return await self._run((await self._ensure()).export, destination, user_id, all_users=all_users,
                               vectors=vectors)

    async def import_(self, source: Destination) -> ImportReport:
        """``Memory.import_`` in a worker thread."""
        return await self._run((await self._ensure()).import_, source)

    async def import_mem0(self, memories: Mapping[str, Any] | Sequence[Mapping[str, Any]], user_id: str, *,
                          history: Mapping[str, Sequence[Mapping[str, Any]]] | None = None) -> ImportReport:
        return await self._run((await self._ensure()).import_mem0, memories, user_id, history=history)

    async def import_chats(self, source: str | Path, user_id: str) -> AddResult:
        return await self._run((await self._ensure()).import_chats, source, user_id)

    async def search(self, query: str, user_id: str, *, limit: int | None = None,
                     filters: IndexFilter | dict[str, Any] | None = None, reference_time: When | None = None,
                     recent_context: list[str] | None = None, expand: bool = False) -> SearchResult:
        mem = await self._ensure()
        return await self._run(mem.search, query, user_id, limit=limit, filters=filters,
                               reference_time=reference_time, recent_context=recent_context, expand=expand)

    async def answer(self, query: str, user_id: str, *, mode: AnswerMode | None = None,
                     max_rounds: int | None = None, limit: int | None = None,
                     reference_time: When | None = None) -> Answer:
        mem = await self._ensure()
        return await self._run(mem.answer, query, user_id, mode=mode, max_rounds=max_rounds, limit=limit,
                               reference_time=reference_time)

    async def sources(self, memory_id: str, user_id: str, *, around: int = 0) -> list[SourceTurn]:
        return await self._run((await self._ensure()).sources, memory_id, user_id, around=around)

    async def get(self, memory_id: str, user_id: str, *, include_evicted: bool = True) -> MemoryRecord:
        return await self._run((await self._ensure()).get, memory_id, user_id, include_evicted=include_evicted)

    async def get_all(self, user_id: str, *, limit: int = 100, offset: str | None = None,
                      filters: IndexFilter | dict[str, Any] | None = None,
                      include_evicted: bool = False, contains: str | None = None) -> list[MemoryRecord]:
        mem = await self._ensure()
        return await self._run(mem.get_all, user_id, limit=limit, offset=offset, filters=filters,
                               include_evicted=include_evicted, contains=contains)

    async def update(self, memory_id: str, text: str, user_id: str, *, actor: str = "user",
                     metadata: dict[str, Any] | None = None) -> MemoryRecord:
        return await self._run((await self._ensure()).update, memory_id, text, user_id, actor=actor,
                               metadata=metadata)

    async def delete(self, memory_id: str, user_id: str, *, actor: str = "user") -> None:
        await self._run((await self._ensure()).delete, memory_id, user_id, actor=actor)

    async def forget_user(self, user_id: str) -> dict[str, int]:
        return await self._run((await self._ensure()).forget_user, user_id)

    async def history(self, memory_id: str, user_id: str) -> list[HistoryEntry]:
        return await self._run((await self._ensure()).history, memory_id, user_id)

    async def sleep(self, user_id: str | None = None) -> SleepReport:
        return await self._run((await self._ensure()).sleep, user_id)

    async def graph(self, user_id: str | None = None, *, query: str | None = None, limit: int = 100) -> LTMGraph:
        return await self._run((await self._ensure()).graph, user_id, query=query, limit=limit)

    async def graph_audit(self) -> GraphAudit:
        return await self._run((await self._ensure()).graph_audit)

    async def stats(self, user_id: str | None = None) -> dict[str, Any]:
        return await self._run((await self._ensure()).stats, user_id)

    async def quarantined(self, user_id: str | None = None) -> list[QuarantinedTurn]:
        return await self._run((await self._ensure()).quarantined, user_id)

    async def retry_quarantined(self, user_id: str, turn_ids: Sequence[str] | None = None) -> AddResult:
        return await self._run((await self._ensure()).retry_quarantined, user_id, turn_ids)

    async def drop_quarantined(self, user_id: str, turn_ids: Sequence[str]) -> int:
        return await self._run((await self._ensure()).drop_quarantined, user_id, turn_ids)

    async def rebuild_index(self) -> RepairReport:
        return await self._run((await self._ensure()).rebuild_index)

    async def verify_key(self, key: str) -> ApiKey | None:
        return await self._run((await self._ensure()).verify_key, key)

    async def close(self) -> None:
        async with self._opening:
            self._closed = True
            if self._mem is not None:
                await asyncio.to_thread(self._mem.close)
