"""Routes of the write path and of single memories: add, conversations, flush, list, get, update,
delete, history. Handlers are plain functions: FastAPI runs them in its worker threads, so one
user's slow call (an LLM extraction) holds one thread and never the event loop."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from .._conversation import read_conversation_source
from .._memory import Memory
from .._types import AddResult, HistoryEntry, MemoryRecord, SearchHit, SourceTurn
from ._auth import scope_user
from ._deps import KeyDep, MemoryDep, SettingsDep
from ._limits import check_batch
from ._models import AddRequest, ConversationRequest, Deleted, MemoryPage, UpdateRequest, UserRequest

router = APIRouter(prefix="/v1", tags=["memories"])
UserQuery = Annotated[str | None, Query(description="the user (implied by a user key)")]


@router.post("/memories", response_model=AddResult)
def add(body: AddRequest, mem: MemoryDep, key: KeyDep, settings: SettingsDep) -> AddResult:
    """``Memory.add``: journal one message or a list of them, then run the write path."""
    user = scope_user(key, body.user_id)
    count = len(body.messages) if isinstance(body.messages, list) else 1
    check_batch("messages", count, settings.max_batch_messages, "max_batch_messages")
    return mem.add(body.messages, user, session_id=body.session_id, timestamp=body.timestamp,
                   metadata=body.metadata, agent_id=body.agent_id, flush=body.flush)


@router.post("/conversations", response_model=AddResult)
def add_conversation(body: ConversationRequest, mem: MemoryDep, key: KeyDep, settings: SettingsDep) -> AddResult:
    """``Memory.add_conversation``: a whole conversation, turn by turn."""
    user = scope_user(key, body.user_id)
    batches = read_conversation_source(body.conversation)
    check_batch("turns", sum(len(b.messages) for b in batches), settings.max_conversation_turns,
                "max_conversation_turns")
    return mem.add_conversation(batches, user, flush=body.flush)


@router.post("/flush", response_model=list[SearchHit])
def flush(body: UserRequest, mem: MemoryDep, key: KeyDep) -> list[SearchHit]:
    """``Memory.flush``: process this user's pending turns now."""
    return mem.flush(scope_user(key, body.user_id))


@router.get("/memories", response_model=MemoryPage)
def get_all(mem: MemoryDep, key: KeyDep, user_id: UserQuery = None,
            limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
            offset: Annotated[str | None, Query(description="the next_offset of the previous page, or a "
                                                            "number of memories to skip")] = None,
            include_evicted: bool = False) -> MemoryPage:
    """``Memory.get_all``: this user's memories ordered by id, a page at a time."""
    user = scope_user(key, user_id)
    cursor = _skip(mem, user, int(offset), include_evicted) if offset and offset.isdigit() else offset or None
    if cursor == "":
        return MemoryPage(memories=[])
    records = mem.get_all(user, limit=limit, offset=cursor, include_evicted=include_evicted)
    return MemoryPage(memories=records, next_offset=records[-1].id if len(records) == limit else None)


def _skip(mem: Memory, user: str, count: int, include_evicted: bool) -> str | None:
    """The id cursor after the first ``count`` memories ("" when there are fewer)."""
    cursor: str | None = None
    while count > 0:
        chunk = mem.get_all(user, limit=min(count, 1000), offset=cursor, include_evicted=include_evicted)
        if len(chunk) < min(count, 1000):
            return ""
        cursor, count = chunk[-1].id, count - len(chunk)
    return cursor


@router.get("/memories/{memory_id}", response_model=MemoryRecord)
def get(memory_id: str, mem: MemoryDep, key: KeyDep, user_id: UserQuery = None) -> MemoryRecord:
    """``Memory.get``: one memory (404 for an unknown id or another user's)."""
    return mem.get(memory_id, scope_user(key, user_id))


@router.put("/memories/{memory_id}", response_model=MemoryRecord)
def update(memory_id: str, body: UpdateRequest, mem: MemoryDep, key: KeyDep,
           user_id: UserQuery = None) -> MemoryRecord:
    """``Memory.update``: replace a memory's text (version + 1, a history row)."""
    return mem.update(memory_id, body.text, scope_user(key, user_id), actor=f"key:{key.key_id}")


@router.delete("/memories/{memory_id}", response_model=Deleted)
def delete(memory_id: str, mem: MemoryDep, key: KeyDep, user_id: UserQuery = None) -> Deleted:
    """``Memory.delete``: remove a memory from search (its history stays)."""
    mem.delete(memory_id, scope_user(key, user_id), actor=f"key:{key.key_id}")
    return Deleted(id=memory_id)


@router.get("/memories/{memory_id}/sources", response_model=list[SourceTurn])
def sources(memory_id: str, mem: MemoryDep, key: KeyDep, user_id: UserQuery = None) -> list[SourceTurn]:
    """``Memory.sources``: the raw turns (L2) one memory was made from (404 for another user's id)."""
    return mem.sources(memory_id, scope_user(key, user_id))


@router.get("/memories/{memory_id}/history", response_model=list[HistoryEntry])
def history(memory_id: str, mem: MemoryDep, key: KeyDep, user_id: UserQuery = None) -> list[HistoryEntry]:
    """``Memory.history``: every change of one memory."""
    return mem.history(memory_id, scope_user(key, user_id))
