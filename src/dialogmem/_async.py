"""``AsyncMemory``: the same verbs as ``Memory`` for asyncio code.

The work is blocking I/O and CPU (SQLite, the index, embeddings), so each call runs the sync
implementation in a worker thread; ``Memory`` serialises writes with its own lock. No logic is
duplicated here.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any

from ._config import Config
from ._memory import Memory
from ._types import AddResult, HistoryEntry, MemoryRecord, SearchHit, SearchResult


class AsyncMemory:
    """Async facade over :class:`Memory`; open it with ``await AsyncMemory.open(...)`` or
    ``async with AsyncMemory(...)``."""

    def __init__(self, config: Config | None = None, **overrides: Any) -> None:
        self._config = config
        self._overrides = overrides
        self._mem: Memory | None = None

    @classmethod
    async def open(cls, config: Config | None = None, **overrides: Any) -> AsyncMemory:
        self = cls(config, **overrides)
        await self._ensure()
        return self

    async def _ensure(self) -> Memory:
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
        """The underlying :class:`Memory` (opened)."""
        if self._mem is None:
            raise RuntimeError("AsyncMemory is not open yet: await AsyncMemory.open(...) first")
        return self._mem

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        mem = await self._ensure()
        return await asyncio.to_thread(getattr(mem, name), *args, **kwargs)

    async def add(self, messages: Any, user_id: str, **kwargs: Any) -> AddResult:
        return await self._call("add", messages, user_id, **kwargs)

    async def flush(self, user_id: str | None = None) -> list[SearchHit]:
        return await self._call("flush", user_id)

    async def search(self, query: str, user_id: str, **kwargs: Any) -> SearchResult:
        return await self._call("search", query, user_id, **kwargs)

    async def answer(self, query: str, user_id: str, **kwargs: Any) -> Any:
        return await self._call("answer", query, user_id, **kwargs)

    async def get(self, memory_id: str, user_id: str) -> MemoryRecord:
        return await self._call("get", memory_id, user_id)

    async def get_all(self, user_id: str, **kwargs: Any) -> list[MemoryRecord]:
        return await self._call("get_all", user_id, **kwargs)

    async def update(self, memory_id: str, text: str, user_id: str) -> MemoryRecord:
        return await self._call("update", memory_id, text, user_id)

    async def delete(self, memory_id: str, user_id: str) -> None:
        await self._call("delete", memory_id, user_id)

    async def forget_user(self, user_id: str) -> dict[str, int]:
        return await self._call("forget_user", user_id)

    async def history(self, memory_id: str, user_id: str) -> list[HistoryEntry]:
        return await self._call("history", memory_id, user_id)

    async def sleep(self, user_id: str | None = None) -> Any:
        return await self._call("sleep", user_id)

    async def stats(self, user_id: str | None = None) -> dict[str, Any]:
        return await self._call("stats", user_id)

    async def close(self) -> None:
        if self._mem is not None:
            await asyncio.to_thread(self._mem.close)
