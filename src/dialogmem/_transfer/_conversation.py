"""Reading conversation files: a JSON list of messages, or a LoCoMo-format conversation."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .._errors import InputError

_SESSION_KEY = re.compile(r"^session_(\d+)$")


class SessionBatch(BaseModel):
    """Messages of one session, in order, with the session's date-time."""

    session_id: str | None
    timestamp: str | None
    messages: list[dict[str, Any]]


#: most messages of a session that ``Memory.add_conversation`` hands to one ``add`` (LLM-free)
CONVERSATION_CHUNK = 256


def message_chunks(messages: list[dict[str, Any]], size: int) -> list[list[dict[str, Any]]]:
    """``messages`` in order, in runs of at most ``size``; a run ends before a message whose id it
    already holds, so a repeated id arrives in a later call, as a retry (one ``add`` refuses two
    messages with one id)."""
    out: list[list[dict[str, Any]]] = []
    run: list[dict[str, Any]] = []
    ids: set[str | int] = set()
    for message in messages:
        mid = message.get("id")
        key = mid if isinstance(mid, str | int) else None
        if run and (len(run) >= size or (key is not None and key in ids)):
            out.append(run)
            run, ids = [], set()
        run.append(message)
        if key is not None:
            ids.add(key)
    if run:
        out.append(run)
    return out


#: what ``Memory.add_conversation`` takes: a JSON file, the parsed JSON, or session batches
Conversation = str | Path | list[Any] | dict[str, Any]


def read_conversation_source(conversation: Conversation) -> list[SessionBatch]:
    """Session batches from a file path, from already-parsed JSON, or as given."""
    if isinstance(conversation, str | Path):
        return read_conversation(Path(conversation))
    if isinstance(conversation, list) and conversation and all(isinstance(b, SessionBatch) for b in conversation):
        return list(conversation)
    return parse_conversation(conversation)


def sample_path() -> Path:
    """The sample conversation shipped with the package."""
    return Path(str(resources.files("dialogmem") / "data" / "sample_conversation.json"))


def read_conversation(path: Path) -> list[SessionBatch]:
    """Parse a conversation file into session batches; ``InputError`` with the reason otherwise."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not valid UTF-8 (byte {exc.start})") from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}") from exc
    return parse_conversation(data, source=str(path))


def parse_conversation(data: Any, *, source: str = "input") -> list[SessionBatch]:
    if isinstance(data, list) and data and all(isinstance(m, dict) and "content" in m for m in data):
        return [SessionBatch(session_id=None, timestamp=None, messages=data)]
    if isinstance(data, list) and len(data) == 1 and isinstance(data[0], dict):
        data = data[0]  # a LoCoMo file holding one sample
    if isinstance(data, dict) and isinstance(data.get("conversation"), dict):
        return _locomo(data["conversation"], data.get("sample_id"))
    raise InputError(
        f"{source}: expected a JSON list of messages ({{'content': ...}}) or a LoCoMo conversation"
    )


def _locomo(conv: dict[str, Any], sample_id: str | None) -> list[SessionBatch]:
    sessions = sorted(
        (int(m.group(1)), key) for key in conv if (m := _SESSION_KEY.match(key)) and isinstance(conv[key], list)
    )
    if not sessions:
        raise InputError("LoCoMo conversation has no session_N lists")
    out: list[SessionBatch] = []
    for n, key in sessions:
        messages = []
        for turn in conv[key]:
            if not isinstance(turn, dict) or not isinstance(turn.get("text"), str):
                raise InputError(f"{key}: every turn needs a 'text' string")
            msg: dict[str, Any] = {"content": turn["text"], "name": turn.get("speaker")}
            if turn.get("dia_id"):
                msg["id"] = str(turn["dia_id"])
            if turn.get("blip_caption"):
                msg["metadata"] = {"image_caption": turn["blip_caption"]}
            messages.append(msg)
        if messages:
            prefix = f"{sample_id}:" if sample_id else ""
            out.append(SessionBatch(session_id=f"{prefix}session_{n}",
                                    timestamp=conv.get(f"{key}_date_time"), messages=messages))
    return out
