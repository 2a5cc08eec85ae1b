"""Validation of what callers pass in: ids, text, and messages turned into journal turns.

Everything here raises ``InputError`` with the position of the bad message, before anything is
written, so a rejected call leaves the store as it was.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from ._errors import InputError
from ._timeparse import parse_timestamp, to_fields
from ._types import Message, Turn

MAX_ID_LEN = 256
#: metadata keys whose value is appended to the turn text as an image caption
CAPTION_KEYS = ("image_caption", "blip_caption", "caption")


def check_id(kind: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{kind} must be a non-empty string")
    if len(value) > MAX_ID_LEN or any(ord(c) < 32 for c in value):
        raise InputError(f"{kind} must be at most {MAX_ID_LEN} printable characters")
    check_text(kind, value)
    return value


def check_text(what: str, text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"{what} is not valid Unicode (lone surrogate at position {exc.start})") from exc


def to_turns(messages: Any, user_id: str, *, session_id: str | None,
             timestamp: str | float | datetime | None, metadata: dict[str, Any],
             agent_id: str | None, max_chars: int) -> list[Turn]:
    """Validated turns for one ``Memory.add`` call; one bad message rejects the whole call."""
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
        speaker = msg.name or msg.role or "user"
        check_text(f"message {i} speaker", speaker)
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
            speaker=speaker.strip() or "user", role=msg.role, content=text,
            time_stamp=iso, float_time_stamp=ts, weekday=weekday,
            metadata={**metadata, **msg.metadata},
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
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "message"
        raise InputError(f"message {i}: {where}: {err['msg']}") from exc
