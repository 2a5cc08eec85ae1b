"""Validation of what callers pass in: ids, text, metadata, bounds, and messages turned into turns.

Everything here raises ``InputError`` with the position of the bad message, before anything is
written, so a rejected call leaves the store as it was. What passes is exactly what the journal
and the index can store and read back: valid Unicode, JSON-only metadata of bounded depth and
size, bounded text — so no accepted input can make a store fail to open.
"""

from __future__ import annotations

import json
import math
import time
import unicodedata
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from ._errors import InputError, first_problem
from ._text._timeparse import parse_timestamp, to_fields
from ._types import MemoryRecord, Message, Turn

MAX_ID_LEN = 256
MAX_METADATA_DEPTH = 16
#: Unicode categories an id may not hold: control, format, line and paragraph separators
_INVISIBLE = frozenset({"Cc", "Cf", "Zl", "Zp"})
#: metadata keys whose value is appended to the turn text as an image caption
CAPTION_KEYS = ("image_caption", "blip_caption", "caption")


def check_id(kind: str, value: object) -> str:
    """An id (user, session, agent, memory, message, actor) that names one thing only: at most
    ``MAX_ID_LEN`` characters, no control, format or line/paragraph separator characters (Unicode
    categories Cc, Cf, Zl, Zp: invisible, so two ids that print alike could differ), and in NFC form
    (so the composed and decomposed spellings of "éve" cannot become two users). A non-NFC id is
    refused rather than rewritten: callers keep using the id they passed, so it must already be
    the one stored."""
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{kind} must be a non-empty string")
    if len(value) > MAX_ID_LEN:
        raise InputError(f"{kind} has {len(value)} characters; at most {MAX_ID_LEN}")
    check_text(kind, value)
    for i, c in enumerate(value):
        if unicodedata.category(c) in _INVISIBLE:
            raise InputError(f"{kind} holds the invisible character {_name(c)} at position {i}; "
                             "ids take no control, format or separator characters")
    if not unicodedata.is_normalized("NFC", value):
        raise InputError(f"{kind} is not in Unicode NFC form: send "
                         f"{unicodedata.normalize('NFC', value)!r} (unicodedata.normalize('NFC', id))")
    return value


def check_text(what: str, text: str) -> None:
    """Valid Unicode without NUL: both journals store exactly this (PostgreSQL text cannot hold
    U+0000, so SQLite refuses it too and the same input behaves the same on both)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"{what} is not valid Unicode (lone surrogate at position {exc.start})") from exc
    nul = text.find("\x00")
    if nul >= 0:
        raise InputError(f"{what} holds a NUL character (U+0000) at position {nul}; no store accepts NUL")


def _name(c: str) -> str:
    return f"U+{ord(c):04X} ({unicodedata.name(c, unicodedata.category(c))})"


#: the longest text ``get_all(contains=...)`` looks for
MAX_CONTAINS_CHARS = 1000


def check_bounded_text(what: str, text: object, max_chars: int, setting: str) -> str:
    """A non-empty string of valid Unicode within ``max_chars`` (named by its ``setting``)."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"{what} must be a non-empty string")
    if len(text) > max_chars:
        raise InputError(f"{what} has {len(text)} characters; the limit is {setting} = {max_chars}")
    check_text(what, text)
    return text


def check_int(what: str, value: object, lo: int, hi: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputError(f"{what} must be an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise InputError(f"{what} must be between {lo} and {hi}, got {value}")
    return value


def check_metadata(what: str, value: object, max_bytes: int) -> dict[str, Any]:
    """JSON-only metadata (a dict of str keys; str, finite numbers, bools, None, lists and dicts
    inside), at most ``MAX_METADATA_DEPTH`` levels and ``max_bytes`` of UTF-8 JSON."""
    if not isinstance(value, dict):
        raise InputError(f"{what} must be a dict, got {type(value).__name__}")
    _check_json(what, value, 1)
    size = len(json.dumps(value, ensure_ascii=False).encode("utf-8"))
    if size > max_bytes:
        raise InputError(f"{what} is {size} bytes as JSON; the limit is write.max_metadata_bytes = {max_bytes}")
    return value


def _check_json(where: str, value: object, depth: int) -> None:
    if depth > MAX_METADATA_DEPTH:
        raise InputError(f"{where} is nested more than {MAX_METADATA_DEPTH} levels deep")
    if value is None or isinstance(value, bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InputError(f"{where} holds {value!r}, which JSON cannot represent")
        return
    if isinstance(value, str):
        check_text(where, value)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InputError(f"{where} has a key of type {type(key).__name__}; keys must be strings")
            check_text(f"{where} key", key)
            _check_json(f"{where}.{key[:40]}", item, depth + 1)
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check_json(f"{where}[{i}]", item, depth + 1)
        return
    raise InputError(f"{where} holds a {type(value).__name__}; metadata takes JSON types only "
                     "(str, int, float, bool, None, list, dict)")


def check_record(record: MemoryRecord, max_metadata_bytes: int) -> MemoryRecord:
    """A memory record's own parts that pydantic does not check: its user id, text and JSON fields
    (its numbers are finite and in range by its model)."""
    check_id("user_id", record.user_id)
    check_bounded_text(f"memory {record.id}", record.memory, 10_000_000, "the text limit")
    check_metadata(f"memory {record.id} metadata", record.metadata, max_metadata_bytes)
    _check_json(f"memory {record.id} update_queue", record.update_queue, 1)
    for name in ("original_memory", "compressed_memory", "topic_summary", "time_stamp", "valid_from", "invalid_at",
                 "superseded_by"):
        value = getattr(record, name)
        if value is not None:
            check_text(f"memory {record.id} {name}", value)
    for name in ("entities", "keywords", "source_turn_ids"):
        for item in getattr(record, name):
            check_text(f"memory {record.id} {name}", item)
    return record


def to_turns(messages: Any, user_id: str, *, session_id: str | None,
             timestamp: str | float | datetime | None, metadata: dict[str, Any] | None,
             agent_id: str | None, max_chars: int, max_metadata_bytes: int) -> list[Turn]:
    """Validated turns for one ``Memory.add`` call; one bad message rejects the whole call."""
    metadata = check_metadata("metadata", metadata if metadata is not None else {}, max_metadata_bytes)
    if isinstance(messages, str | dict | Message):
        messages = [messages]
    if not isinstance(messages, Sequence) or len(messages) == 0:
        raise InputError("messages must be a non-empty list of messages")
    default_dt = parse_timestamp(timestamp) if timestamp is not None else None
    turns: list[Turn] = []
    for i, raw in enumerate(messages):
        msg = to_message(i, raw)
        text = msg.content
        caption = next((msg.metadata[k] for k in CAPTION_KEYS if msg.metadata.get(k)), None)
        if caption:
            text = f"{text} [image: {caption}]"
        if not text.strip():
            raise InputError(f"message {i}: empty content")
        check_text(f"message {i} content", text)
        if len(text) > max_chars:
            raise InputError(f"message {i}: {len(text)} characters exceeds write.max_turn_chars ({max_chars})")
        speaker = (msg.name or msg.role or "user").strip() or "user"
        if len(speaker) > MAX_ID_LEN:
            raise InputError(f"message {i}: the speaker name has {len(speaker)} characters; at most {MAX_ID_LEN}")
        check_text(f"message {i} speaker", speaker)
        if msg.role is not None:
            check_bounded_text(f"message {i} role", msg.role, MAX_ID_LEN, "the role limit")
        merged = check_metadata(f"message {i} metadata", {**metadata, **msg.metadata}, max_metadata_bytes)
        if msg.id is not None:
            check_id(f"message {i} id", msg.id)
        try:
            dt = parse_timestamp(msg.timestamp) if msg.timestamp is not None else default_dt
        except InputError as exc:
            raise InputError(f"message {i}: {exc}") from exc
        dt = dt or datetime.now().replace(microsecond=0)
        iso, ts, weekday = to_fields(dt)
        turns.append(Turn(
            id=msg.id or f"t-{uuid.uuid4().hex}",
            user_id=user_id, agent_id=agent_id, session_id=session_id,
            speaker=speaker, role=msg.role, content=text,
            time_stamp=iso, float_time_stamp=ts, weekday=weekday, metadata=merged,
        ))
    ids = [t.id for t in turns]
    if len(set(ids)) != len(ids):
        raise InputError("duplicate message ids in one call")
    return turns


def to_message(i: int, raw: Any) -> Message:
    if isinstance(raw, Message):
        return raw
    if isinstance(raw, str):
        return Message(content=raw)
    if not isinstance(raw, dict):
        raise InputError(f"message {i}: expected a dict with 'content', got {type(raw).__name__}")
    try:
        return Message.model_validate(raw)
    except ValidationError as exc:
        where, what = first_problem(exc)
        raise InputError(f"message {i}: {where or 'message'}: {what}") from exc


def check_importable(item: MemoryRecord | dict[str, Any], max_metadata_bytes: int) -> MemoryRecord:
    """A record (``import_records``) that the journal and the index will both take, or ``InputError`` saying why not."""
    if isinstance(item, MemoryRecord):  # validated again: a copy made with model_copy(update=) never was
        item = item.model_dump()
    if not isinstance(item, dict):
        raise InputError(f"a record must be a MemoryRecord or a dict, got {type(item).__name__}")
    now = time.time()
    try:
        record = MemoryRecord.model_validate({"created_at": now, "updated_at": now, **item})
    except ValidationError as exc:
        where, what = first_problem(exc)
        raise InputError(f"not a memory record: {where}: {what}") from exc
    try:
        uuid.UUID(record.id)
    except ValueError:
        raise InputError(f"memory id {record.id!r} must be a UUID string") from None
    return check_record(record, max_metadata_bytes)
