"""Request and response bodies of the REST API. Responses reuse the library's own result models
(``AddResult``, ``SearchResult``, ``MemoryRecord``, ``HistoryEntry``, ``Answer``, ``SleepReport``)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt

from .._types import MemoryRecord, Message
from ..types import SleepReport

# strict numbers and booleans: lax parsing took ``false`` for a time and ``0`` for a flag, which
# the OpenAPI document says are refused
When = str | StrictInt | StrictFloat | datetime
Flag = StrictBool
#: a text that must hold something besides white space (the library refuses blank ones)
Text = Annotated[str, Field(min_length=1, pattern=r"\S")]
MessageIn = Text | Message


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AddRequest(_Body):
    """``POST /v1/memories``: one message (a string or an object) or a list of them."""

    messages: MessageIn | Annotated[list[MessageIn], Field(min_length=1)]
    user_id: str | None = None  # implied by a user key
    session_id: str | None = None
    timestamp: When | None = None
    metadata: dict[str, Any] | None = None
    agent_id: str | None = None
    flush: Flag = False


class ConversationRequest(_Body):
    """``POST /v1/conversations``: a whole conversation (a list of messages, or LoCoMo's format)."""

    conversation: list[dict[str, Any]] | dict[str, Any]
    user_id: str | None = None
    flush: Flag = True


class UserRequest(_Body):
    user_id: str | None = None


class SearchRequest(_Body):
    query: Text
    user_id: str | None = None
    limit: Annotated[StrictInt, Field(ge=1, le=200)] | None = None
    filters: dict[str, Any] | None = None
    reference_time: When | None = None
    recent_context: list[str] | None = None
    expand: Flag = False  # hits carry their raw source turns (``sources``)


class AnswerRequest(_Body):
    query: Text
    user_id: str | None = None
    limit: Annotated[StrictInt, Field(ge=1, le=200)] | None = None
    reference_time: When | None = None
    mode: Literal["auto", "light", "deep"] | None = None
    max_rounds: Annotated[StrictInt, Field(ge=1, le=5)] | None = None


class UpdateRequest(_Body):
    text: Text
    metadata: dict[str, Any] | None = None  # replaces the memory's metadata when given


class MemoryPage(BaseModel):
    """One page of ``GET /v1/memories``; pass ``next_offset`` as ``offset`` for the next page."""

    memories: list[MemoryRecord]
    next_offset: str | None = None


class Deleted(BaseModel):
    id: str
    deleted: bool = True


class Forgotten(BaseModel):
    user_id: str
    turns: int
    memories: int


class SleepJob(BaseModel):
    """A sleep run started by ``POST /v1/sleep``; poll ``GET /v1/sleep/{job_id}``."""

    job_id: str
    user_id: str | None  # None: every user (an admin's job)
    status: Literal["queued", "running", "done", "failed"]
    created_at: float
    finished_at: float | None = None
    report: SleepReport | None = None
    error: str | None = None


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    version: str
    auth: bool


class ErrorBody(BaseModel):
    """Every error response: the error's kind and a one-line message."""

    error: str
    detail: str = Field(description="one line, safe to show")


class QuarantineRequest(_Body):
    """``POST /v1/quarantine/retry``: all of the user's quarantined turns, or these."""

    user_id: str | None = None
    turn_ids: list[str] | None = None


class DropRequest(_Body):
    """``POST /v1/quarantine/drop``: the quarantined turns to give up on."""

    user_id: str | None = None
    turn_ids: list[str]


class Dropped(BaseModel):
    dropped: int
