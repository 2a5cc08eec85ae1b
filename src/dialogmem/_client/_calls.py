"""Each verb as an HTTP request of the REST API, and how its answer is read back (no I/O).

A ``Call`` names the method, the path, the query and the JSON body, whether sending it twice is
harmless (``safe``: then a lost answer is retried too), and the function that turns the answer's
JSON into the library's own model. Messages without an id get one here, before the first try,
so a retried ``add`` journals each message once.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from pydantic import TypeAdapter
from pydantic_core import PydanticSerializationError, to_jsonable_python

from .._api import Messages, When
from .._errors import InputError
from ..types import (
    AddResult,
    Answer,
    AnswerMode,
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

T = TypeVar("T")


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    read: Callable[[Any], T]
    params: dict[str, Any] = field(default_factory=dict)
    body: Any = None
    safe: bool = True  # sending it twice changes nothing

    def query(self) -> dict[str, str | int]:
        """The query string's values (``None`` left out, booleans as ``true``/``false``)."""
        out: dict[str, str | int] = {}
        for k, v in self.params.items():
            if v is not None:
                out[k] = ("true" if v else "false") if isinstance(v, bool) else v
        return out


def _list(model: type[T]) -> Callable[[Any], list[T]]:
    return TypeAdapter(list[model]).validate_python  # type: ignore[valid-type]


def _none(_: Any) -> None:
    return None


def _json(what: str, value: Any) -> Any:
    """``value`` as JSON data (datetimes as ISO text, models as objects), or ``InputError``."""
    try:
        return to_jsonable_python(value)
    except PydanticSerializationError as exc:
        raise InputError(f"{what} cannot be sent as JSON: {exc}") from None


def _id(kind: str, value: object) -> str:
    """An id for a URL path, percent-encoded (an empty one would name another route)."""
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{kind} must be a non-empty string")
    return quote(value, safe="")


def _actor(actor: str) -> None:
    if actor != "user":
        raise InputError("over REST the actor of a change is the API key (key:<key id>); actor cannot be chosen")


def fresh_id() -> str:
    return f"t-{uuid.uuid4().hex}"


def with_ids(messages: Any) -> Any:
    """The messages as JSON, each with an id (kept when the caller gave one, else a fresh one)."""
    if isinstance(messages, str | dict | Message):
        return [_with_id(messages)]
    if isinstance(messages, Sequence) and not isinstance(messages, bytes):
        return [_with_id(m) for m in messages]
    return _json("messages", messages)


def _with_id(message: Any) -> Any:
    if isinstance(message, str):
        return {"content": message, "id": fresh_id()}
    if isinstance(message, Message):
        message = message.model_dump(mode="json")
    if isinstance(message, dict):
        return _json("message", message if message.get("id") is not None else {**message, "id": fresh_id()})
    return _json("message", message)


def _filters(filters: IndexFilter | dict[str, Any] | None) -> Any:
    if isinstance(filters, IndexFilter):
        return filters.model_dump(exclude_none=True)
    return _json("filters", filters)


def add(messages: Messages, user_id: str, *, session_id: str | None, timestamp: When | None,
        metadata: dict[str, Any] | None, agent_id: str | None, flush: bool) -> Call[AddResult]:
    body = {"messages": with_ids(messages), "user_id": user_id, "session_id": session_id,
            "timestamp": _json("timestamp", timestamp), "metadata": _json("metadata", metadata),
            "agent_id": agent_id, "flush": flush}
    return Call("POST", "/v1/memories", AddResult.model_validate, body=body)


def conversation_data(conversation: Any) -> Any:
    """The parsed conversation as JSON data, its messages given ids so that a retry adds nothing twice."""
    if isinstance(conversation, list) and all(isinstance(m, dict) and "content" in m for m in conversation):
        return [_with_id(m) for m in conversation]
    return _json("conversation", conversation)


def add_conversation(conversation: Any, user_id: str, *, flush: bool) -> Call[AddResult]:
    """``conversation`` parsed already (``_files.load_conversation``)."""
    body = {"conversation": conversation_data(conversation), "user_id": user_id, "flush": flush}
    return Call("POST", "/v1/conversations", AddResult.model_validate, body=body)


def flush(user_id: str | None) -> Call[list[SearchHit]]:
    return Call("POST", "/v1/flush", _list(SearchHit), body={"user_id": user_id})


def update(memory_id: str, text: str, user_id: str, *, actor: str,
           metadata: dict[str, Any] | None) -> Call[MemoryRecord]:
    _actor(actor)
    return Call("PUT", f"/v1/memories/{_id('memory_id', memory_id)}", MemoryRecord.model_validate,
                params={"user_id": user_id}, body={"text": text, "metadata": _json("metadata", metadata)}, safe=False)


def delete(memory_id: str, user_id: str, *, actor: str) -> Call[None]:
    _actor(actor)
    return Call("DELETE", f"/v1/memories/{_id('memory_id', memory_id)}", _none, params={"user_id": user_id},
                safe=False)


def forget_user(user_id: str) -> Call[dict[str, int]]:
    def read(data: Any) -> dict[str, int]:
        return {"turns": int(data["turns"]), "memories": int(data["memories"])}
    return Call("DELETE", f"/v1/users/{_id('user_id', user_id)}", read)


def search(query: str, user_id: str, *, limit: int | None, filters: IndexFilter | dict[str, Any] | None,
           reference_time: When | None, recent_context: list[str] | None, expand: bool) -> Call[SearchResult]:
    body = {"query": query, "user_id": user_id, "limit": limit, "filters": _filters(filters),
            "reference_time": _json("reference_time", reference_time),
            "recent_context": _json("recent_context", recent_context), "expand": expand}
    return Call("POST", "/v1/search", SearchResult.model_validate, body=body)


def sources(memory_id: str, user_id: str, *, around: int) -> Call[list[SourceTurn]]:
    return Call("GET", f"/v1/memories/{_id('memory_id', memory_id)}/sources", _list(SourceTurn),
                params={"user_id": user_id, "around": around})


def answer(query: str, user_id: str, *, mode: AnswerMode | None, max_rounds: int | None, limit: int | None,
           reference_time: When | None) -> Call[Answer]:
    body = {"query": query, "user_id": user_id, "mode": mode, "max_rounds": max_rounds, "limit": limit,
            "reference_time": _json("reference_time", reference_time)}
    return Call("POST", "/v1/answer", Answer.model_validate, body=body)


def get(memory_id: str, user_id: str, *, include_evicted: bool) -> Call[MemoryRecord]:
    return Call("GET", f"/v1/memories/{_id('memory_id', memory_id)}", MemoryRecord.model_validate,
                params={"user_id": user_id, "include_evicted": include_evicted})


def get_all(user_id: str, *, limit: int, offset: str | None, filters: IndexFilter | dict[str, Any] | None,
            include_evicted: bool, contains: str | None = None) -> Call[list[MemoryRecord]]:
    flt = _filters(filters)
    params = {"user_id": user_id, "limit": limit, "offset": offset, "include_evicted": include_evicted,
              "filters": json.dumps(flt) if flt is not None else None, "contains": contains}
    return Call("GET", "/v1/memories", lambda data: _list(MemoryRecord)(data["memories"]), params=params)


def history(memory_id: str, user_id: str) -> Call[list[HistoryEntry]]:
    return Call("GET", f"/v1/memories/{_id('memory_id', memory_id)}/history", _list(HistoryEntry),
                params={"user_id": user_id})


def stats(user_id: str | None) -> Call[dict[str, Any]]:
    return Call("GET", "/v1/stats", dict, params={"user_id": user_id})


def start_sleep(user_id: str | None) -> Call[tuple[str, str | None]]:
    """Starts a sleep job; reads back (job id, the user the job is for)."""
    return Call("POST", "/v1/sleep", lambda data: (str(data["job_id"]), data.get("user_id")),
                body={"user_id": user_id}, safe=False)


def sleep_job(job_id: str, user_id: str | None) -> Call[tuple[str, SleepReport | None, str | None]]:
    """A sleep job's (status, report once done, error once failed)."""
    def read(data: Any) -> tuple[str, SleepReport | None, str | None]:
        report = SleepReport.model_validate(data["report"]) if data.get("report") is not None else None
        return str(data["status"]), report, data.get("error")
    return Call("GET", f"/v1/sleep/{_id('job_id', job_id)}", read, params={"user_id": user_id})


def quarantined(user_id: str | None) -> Call[list[QuarantinedTurn]]:
    return Call("GET", "/v1/quarantine", _list(QuarantinedTurn), params={"user_id": user_id})


def retry_quarantined(user_id: str, turn_ids: Sequence[str] | None) -> Call[AddResult]:
    ids = _json("turn_ids", list(turn_ids)) if turn_ids is not None else None
    return Call("POST", "/v1/quarantine/retry", AddResult.model_validate, body={"user_id": user_id, "turn_ids": ids},
                safe=False)


def drop_quarantined(user_id: str, turn_ids: Sequence[str]) -> Call[int]:
    return Call("POST", "/v1/quarantine/drop", lambda data: int(data["dropped"]),
                body={"user_id": user_id, "turn_ids": _json("turn_ids", list(turn_ids))}, safe=False)


def graph(user_id: str | None, *, query: str | None, limit: int) -> Call[LTMGraph]:
    return Call("GET", "/v1/graph", LTMGraph.model_validate, params={"user_id": user_id, "query": query,
                                                                    "limit": limit})


def graph_audit() -> Call[GraphAudit]:
    return Call("GET", "/v1/graph/audit", GraphAudit.model_validate)


def export(user_id: str | None, *, all_users: bool, vectors: bool) -> Call[None]:
    """The export stream (read line by line by the client, not through ``read``)."""
    return Call("GET", "/v1/export", _none, params={"user_id": user_id, "all_users": all_users, "vectors": vectors})


def import_() -> Call[ImportReport]:
    """The import request; its body is the file, streamed by the client."""
    return Call("POST", "/v1/import", ImportReport.model_validate)
