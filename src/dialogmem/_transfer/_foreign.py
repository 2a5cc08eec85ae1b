"""Other layers' data: mem0's ``get_all`` output and its history (as portable lines), plain chat logs.

mem0 keeps memories without the turns they came from, so what it gives becomes memories without L2
sources (``source_turn_ids`` empty, ``metadata.imported_from = "mem0"``); ``ImportReport.without_sources``
lists them. Pure conversion: the lines are then validated and written by ``Memory.import_``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .._errors import InputError, first_problem
from .._input import check_metadata
from .._text._timeparse import to_fields
from .._types import UNIX_MAX, UNIX_MIN, Event, HistoryEntry, MemoryRecord
from ._portable import HeaderLine, HistoryLine, MemoryLine

_EVENTS = {"ADD": Event.ADD, "UPDATE": Event.UPDATE, "DELETE": Event.DELETE}


def mem0_lines(memories: Mapping[str, Any] | Sequence[Mapping[str, Any]], user_id: str, *,
               history: Mapping[str, Sequence[Mapping[str, Any]]] | None = None
               ) -> Iterator[HeaderLine | MemoryLine | HistoryLine]:
    """Portable lines for mem0's ``get_all`` output (``{"results": [...]}`` or the list) of one user,
    and optionally ``history``: memory id -> mem0's ``history(memory_id)`` rows."""
    items = memories.get("results") if isinstance(memories, Mapping) else memories
    if not isinstance(items, Sequence) or isinstance(items, str):
        raise InputError("mem0 data must be get_all's output: {'results': [...]} or a list of memories")
    if history is not None and not isinstance(history, Mapping):
        raise InputError(f"mem0 history must map memory ids to their history rows, got {type(history).__name__}")
    yield HeaderLine(users=[user_id], source="mem0")
    for i, item in enumerate(items):
        if not isinstance(item, Mapping) or not isinstance(item.get("id"), str) or not isinstance(
                item.get("memory"), str):
            raise InputError(f"mem0 memory {i}: needs a string 'id' and 'memory'")
        with _naming(f"mem0 memory {i}"):
            record = _record(item, user_id)
        yield MemoryLine(record=record, status="active")
        rows = (history or {}).get(record.id) or []
        if not isinstance(rows, Sequence) or isinstance(rows, str):
            raise InputError(f"mem0 history of memory {record.id}: expected a list of rows, got {type(rows).__name__}")
        for j, row in enumerate(rows):
            where = f"mem0 history of memory {record.id}, row {j}"
            if not isinstance(row, Mapping):
                raise InputError(f"{where}: expected an object, got {type(row).__name__}")
            event = _EVENTS.get(str(row.get("event", "")).upper())
            if event is None:  # mem0's NONE rows change nothing
                continue
            with _naming(where):
                entry = HistoryEntry(
                    memory_id=record.id, event=event, old_memory=row.get("old_memory"),
                    new_memory=row.get("new_memory"), timestamp=_seconds(row.get("created_at"), record.created_at),
                    actor=str(row.get("actor_id") or row.get("role") or "mem0"))
            yield HistoryLine(user_id=user_id, entry=entry)


@contextmanager
def _naming(where: str) -> Iterator[None]:
    """A field refused inside the block, as an ``InputError`` of ``where``."""
    try:
        yield
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    except ValidationError as exc:
        field, what = first_problem(exc)
        raise InputError(f"{where}: {field + ': ' if field else ''}{what}") from None


def _record(item: Mapping[str, Any], user_id: str) -> MemoryRecord:
    created = _seconds(item.get("created_at"), 0.0, "created_at")
    time_stamp, float_time, weekday = to_fields(datetime.fromtimestamp(created, UTC).replace(tzinfo=None))
    raw_metadata = item.get("metadata") or {}
    if not isinstance(raw_metadata, Mapping):
        raise InputError(f"metadata must be an object, got {type(raw_metadata).__name__}")
    metadata = check_metadata("metadata", dict(raw_metadata), 2**62)  # the store's own size bound: on import
    metadata["imported_from"] = "mem0"
    if item.get("hash"):
        metadata["mem0_hash"] = item["hash"]
    return MemoryRecord(
        id=item["id"], user_id=user_id, agent_id=item.get("agent_id"), session_id=item.get("run_id"),
        memory=item["memory"], original_memory=item["memory"], time_stamp=time_stamp, float_time_stamp=float_time,
        weekday=weekday, created_at=created, updated_at=_seconds(item.get("updated_at"), created, "updated_at"),
        source_turn_ids=[], metadata=metadata)


def _seconds(value: Any, default: float, name: str = "created_at") -> float:
    """mem0 writes ISO times (with a zone), or Unix seconds; a missing one takes ``default``. A time
    outside the years 1 to 9999 (or not a number) is refused."""
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise InputError(f"{name} must be an ISO 8601 time or Unix seconds, got a boolean")
    if isinstance(value, int | float):
        if not (math.isfinite(value) and UNIX_MIN <= value <= UNIX_MAX):
            raise InputError(f"{name} {value!r} is not a time between the years 1 and 9999")
        return float(value)
    try:
        dt = datetime.fromisoformat(str(value))
    except ValueError:
        raise InputError(f"{name} {str(value)[:80]!r} is not ISO 8601") from None
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


def chat_logs(path: Path) -> list[list[dict[str, Any]]]:
    """The conversations of a chat log file: one OpenAI ``messages`` list (or ``{"messages": [...]}``)
    as JSON, or one per line as JSON Lines. ``InputError`` names the line of a bad one."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    try:
        return [_messages(json.loads(text), path.name)]
    except json.JSONDecodeError:
        pass  # not one JSON document: JSON Lines
    out = []
    for n, line in enumerate(text.split("\n"), 1):  # not splitlines: U+2028 and kin stay inside a line
        if not line.strip():
            continue
        try:
            out.append(_messages(json.loads(line), f"{path.name} line {n}"))
        except json.JSONDecodeError as exc:
            raise InputError(f"{path.name} line {n}: not JSON ({exc.msg})") from None
    if not out:
        raise InputError(f"{path.name} holds no conversation")
    return out


def _messages(data: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(data, Mapping) and "messages" in data:
        data = data["messages"]
    if not isinstance(data, list) or not data or not all(
            isinstance(m, Mapping) and isinstance(m.get("content"), str) for m in data):
        raise InputError(f"{where}: expected a non-empty list of messages with string 'content' (OpenAI format)")
    return [{k: m[k] for k in ("role", "content", "name") if m.get(k) is not None} for m in data]


def with_content_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages of one conversation, each with an id made of the conversation's content and the
    message's place in it (``chat-<digest>-<n>``): the same conversation always gets the same ids,
    so adding it again is a retry that changes nothing."""
    digest = hashlib.sha256(json.dumps(messages, ensure_ascii=False, sort_keys=True).encode("utf-8",
                                                                                          "surrogatepass"))
    prefix = f"chat-{digest.hexdigest()[:24]}"
    return [{**m, "id": f"{prefix}-{i}"} for i, m in enumerate(messages)]
