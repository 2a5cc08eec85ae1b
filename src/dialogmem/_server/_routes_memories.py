"""Routes of the write path and of single memories: add, conversations, flush, list, get, update,
delete, history. Handlers are plain functions: FastAPI runs them in its worker threads, so one
user's slow call (an LLM extraction) holds one thread and never the event loop."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from .._errors import InputError
from .._facade._memory import Memory
from .._input import MAX_CONTAINS_CHARS, MAX_ID_LEN
from .._transfer import read_conversation_source
from .._types import AddResult, HistoryEntry, MemoryRecord, SearchHit, SourceTurn
from ._auth import scope_user
from ._deps import KeyDep, MemoryDep, SettingsDep
from ._errors import BODY_ERRORS, COMMON_ERRORS, LLM_ERRORS, error_responses
from ._limits import check_batch
from ._models import AddRequest, ConversationRequest, Deleted, MemoryPage, UpdateRequest, UserRequest

router = APIRouter(prefix="/v1", tags=["memories"], responses=error_responses(*COMMON_ERRORS))
_WRITE = (*BODY_ERRORS, *LLM_ERRORS)  # the write path may call the LLM
#: the largest ``offset`` given as a count of memories to skip (more digits are refused, not parsed)
MAX_SKIP_DIGITS = 9
#: a count of at most MAX_SKIP_DIGITS digits, or a cursor (anything holding a non-digit)
OFFSET_PATTERN = rf"^(?:[0-9]{{1,{MAX_SKIP_DIGITS}}}|[\s\S]*[^0-9][\s\S]*)$"
UserQuery = Annotated[str | None, Query(description="the user (implied by a user key)")]
#: memory ids are UUIDs; any other text is simply not found (404)
MemoryId = Annotated[str, Path(description="a memory's id (a UUID)", json_schema_extra={"format": "uuid"})]


@router.post("/memories", response_model=AddResult, responses=error_responses(*_WRITE))
def add(body: AddRequest, mem: MemoryDep, key: KeyDep, settings: SettingsDep) -> AddResult:
    """``Memory.add``: journal one message or a list of them, then run the write path."""
    user = scope_user(key, body.user_id)
    count = len(body.messages) if isinstance(body.messages, list) else 1
    check_batch("messages", count, settings.max_batch_messages, "max_batch_messages")
    return mem.add(body.messages, user, session_id=body.session_id, timestamp=body.timestamp,
                   metadata=body.metadata, agent_id=body.agent_id, flush=body.flush)


@router.post("/conversations", response_model=AddResult, responses=error_responses(*_WRITE))
def add_conversation(body: ConversationRequest, mem: MemoryDep, key: KeyDep, settings: SettingsDep) -> AddResult:
    """``Memory.add_conversation``: a whole conversation (LLM-free, a session's messages per write)."""
    user = scope_user(key, body.user_id)
    batches = read_conversation_source(body.conversation)
    check_batch("turns", sum(len(b.messages) for b in batches), settings.max_conversation_turns,
                "max_conversation_turns")
    return mem.add_conversation(batches, user, flush=body.flush)


@router.post("/flush", response_model=list[SearchHit], responses=error_responses(*_WRITE))
def flush(body: UserRequest, mem: MemoryDep, key: KeyDep) -> list[SearchHit]:
    """``Memory.flush``: process this user's pending turns now."""
    return mem.flush(scope_user(key, body.user_id))


@router.get("/memories", response_model=MemoryPage)
def get_all(mem: MemoryDep, key: KeyDep, user_id: UserQuery = None,
            limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
            offset: Annotated[str | None, Query(max_length=MAX_ID_LEN, pattern=OFFSET_PATTERN,
                                                description="the next_offset of the previous page, or a "
                                                            "number of memories to skip")] = None,
            include_evicted: bool = False,
            filters: Annotated[str | None, Query(max_length=4_096, description="a JSON object of "
                                                 "IndexFilter fields (agent_id, session_id, speakers...)")
                               ] = None,
            contains: Annotated[str | None, Query(max_length=MAX_CONTAINS_CHARS, description="only memories whose "
                                                  "text holds this (case-insensitive for ASCII letters)")
                                ] = None) -> MemoryPage:
    """``Memory.get_all``: this user's memories ordered by id, a page at a time."""
    user = scope_user(key, user_id)
    flt = _filters(filters)
    count = _skip_count(offset)
    cursor = _skip(mem, user, count, include_evicted) if count is not None else offset or None
    if cursor == "":
        return MemoryPage(memories=[])
    records = mem.get_all(user, limit=limit, offset=cursor, include_evicted=include_evicted, filters=flt,
                          contains=contains)
    return MemoryPage(memories=records, next_offset=records[-1].id if len(records) == limit else None)


def _filters(text: str | None) -> dict[str, Any] | None:
    """The ``filters`` query parameter: JSON text of an object (``Memory.get_all`` checks its fields)."""
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InputError(f"filters: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise InputError("filters: a JSON object of IndexFilter fields")
    return data


def _skip_count(offset: str | None) -> int | None:
    """The number of memories to skip when ``offset`` is one (ASCII digits), else None (a cursor)."""
    if not offset or not (offset.isascii() and offset.isdigit()):
        return None
    if len(offset) > MAX_SKIP_DIGITS:  # checked before int(): Python refuses to parse very long numbers
        raise InputError(f"offset: a number of memories to skip has at most {MAX_SKIP_DIGITS} digits; "
                         "page with next_offset instead")
    return int(offset)


def _skip(mem: Memory, user: str, count: int, include_evicted: bool) -> str | None:
    """The id cursor after the first ``count`` memories ("" when there are fewer)."""
    cursor: str | None = None
    while count > 0:
        chunk = mem.get_all(user, limit=min(count, 1000), offset=cursor, include_evicted=include_evicted)
        if len(chunk) < min(count, 1000):
            return ""
        cursor, count = chunk[-1].id, count - len(chunk)
    return cursor


@router.get("/memories/{memory_id}", response_model=MemoryRecord, responses=error_responses(404))
def get(memory_id: MemoryId, mem: MemoryDep, key: KeyDep, user_id: UserQuery = None,
        include_evicted: bool = True) -> MemoryRecord:
    """``Memory.get``: one memory (404 for an unknown id or another user's)."""
    return mem.get(memory_id, scope_user(key, user_id), include_evicted=include_evicted)


@router.put("/memories/{memory_id}", response_model=MemoryRecord, responses=error_responses(404, *BODY_ERRORS))
def update(memory_id: MemoryId, body: UpdateRequest, mem: MemoryDep, key: KeyDep,
           user_id: UserQuery = None) -> MemoryRecord:
    """``Memory.update``: replace a memory's text (version + 1, a history row)."""
    return mem.update(memory_id, body.text, scope_user(key, user_id), actor=f"key:{key.key_id}",
                      metadata=body.metadata)


@router.delete("/memories/{memory_id}", response_model=Deleted, responses=error_responses(404))
def delete(memory_id: MemoryId, mem: MemoryDep, key: KeyDep, user_id: UserQuery = None) -> Deleted:
    """``Memory.delete``: remove a memory from search (its history stays)."""
    mem.delete(memory_id, scope_user(key, user_id), actor=f"key:{key.key_id}")
    return Deleted(id=memory_id)


@router.get("/memories/{memory_id}/sources", response_model=list[SourceTurn], responses=error_responses(404))
def sources(memory_id: MemoryId, mem: MemoryDep, key: KeyDep, user_id: UserQuery = None,
            around: Annotated[int, Query(ge=0, le=20, description="also the turns just before and after")] = 0
            ) -> list[SourceTurn]:
    """``Memory.sources``: the raw turns (L2) one memory was made from (404 for another user's id)."""
    return mem.sources(memory_id, scope_user(key, user_id), around=around)


@router.get("/memories/{memory_id}/history", response_model=list[HistoryEntry], responses=error_responses(404))
def history(memory_id: MemoryId, mem: MemoryDep, key: KeyDep, user_id: UserQuery = None) -> list[HistoryEntry]:
    """``Memory.history``: every change of one memory."""
    return mem.history(memory_id, scope_user(key, user_id))
