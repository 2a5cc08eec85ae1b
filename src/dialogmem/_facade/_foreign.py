"""Other layers' data: mem0's ``get_all`` output and its history (as portable lines), plain chat logs.

mem0 keeps memories without the turns they came from, so what it gives becomes memories without L2
sources (``source_turn_ids`` empty, ``metadata.imported_from = "mem0"``); ``ImportReport.without_sources``
lists them. Pure conversion: the lines are then validated and written by ``Memory.import_``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .._errors import InputError
from .._text._timeparse import to_fields
from .._types import Event, HistoryEntry, MemoryRecord
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
    yield HeaderLine(users=[user_id], source="mem0")
    for i, item in enumerate(items):
        if not isinstance(item, Mapping) or not isinstance(item.get("id"), str) or not isinstance(
                item.get("memory"), str):
            raise InputError(f"mem0 memory {i}: needs a string 'id' and 'memory'")
        record = _record(item, user_id)
        yield MemoryLine(record=record, status="active")
        for row in (history or {}).get(record.id, []):
            event = _EVENTS.get(str(row.get("event", "")).upper())
            if event is None:  # mem0's NONE rows change nothing
                continue
            yield HistoryLine(user_id=user_id, entry=HistoryEntry(
                memory_id=record.id, event=event, old_memory=row.get("old_memory"),
                new_memory=row.get("new_memory"), timestamp=_seconds(row.get("created_at"), record.created_at),
                actor=str(row.get("actor_id") or row.get("role") or "mem0")))


def _record(item: Mapping[str, Any], user_id: str) -> MemoryRecord:
    created = _seconds(item.get("created_at"), 0.0)
    time_stamp, float_time, weekday = to_fields(datetime.fromtimestamp(created, UTC).replace(tzinfo=None))
    metadata = dict(item.get("metadata") or {})
    metadata["imported_from"] = "mem0"
    if item.get("hash"):
        metadata["mem0_hash"] = item["hash"]
    return MemoryRecord(
        id=item["id"], user_id=user_id, agent_id=item.get("agent_id"), session_id=item.get("run_id"),
        memory=item["memory"], original_memory=item["memory"], time_stamp=time_stamp, float_time_stamp=float_time,
        weekday=weekday, created_at=created, updated_at=_seconds(item.get("updated_at"), created),
        source_turn_ids=[], metadata=metadata)


def _seconds(value: Any, default: float) -> float:
    """mem0 writes ISO times (with a zone); a missing one takes ``default``."""
    if value in (None, ""):
        return default
    if isinstance(value, int | float):
        return float(value)
    try:
        dt = datetime.fromisoformat(str(value))
    except ValueError as exc:
        raise InputError(f"mem0 time {value!r} is not ISO 8601") from exc
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
    for n, line in enumerate(text.splitlines(), 1):
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
