"""Building and matching memory records (pure, no I/O): extracted facts → records, edits, filters."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from .._errors import InputError, first_problem
from .._store._base import IndexFilter
from .._text._timeparse import parse_timestamp, to_fields
from .._text._words import entities, memory_keywords
from .._types import MemoryRecord
from . import ExtractedFact

_MEMORY_NS = uuid.UUID("5b0c1f8e-3d7a-4c55-9a63-d1a1e0c0ffee")


def memory_id(user_id: str, source_turn_ids: Sequence[str], fact: str) -> str:
    """Deterministic, so replaying turns after a crash rewrites the same memories instead of copies."""
    return str(uuid.uuid5(_MEMORY_NS, "\x1f".join([user_id, *source_turn_ids, fact])))


def records_from_facts(user_id: str, facts: Sequence[ExtractedFact], *, now: float) -> list[MemoryRecord]:
    """One record per fact; provenance (agent, metadata) comes with the fact from its own turn."""
    return [
        MemoryRecord(
            id=memory_id(user_id, f.source_turn_ids, f.fact), user_id=user_id, agent_id=f.agent_id,
            session_id=f.session_id, memory=f.fact, original_memory=f.original, compressed_memory=f.compressed,
            time_stamp=f.time_stamp, float_time_stamp=f.float_time_stamp, weekday=f.weekday, topic_id=f.topic_id,
            speaker_name=f.speaker_name, entities=f.entities, keywords=f.keywords,
            source_turn_ids=list(f.source_turn_ids), salience=f.salience, memory_class=f.memory_class,
            created_at=now, updated_at=now, metadata=dict(f.metadata),
        )
        for f in facts
    ]


def edited(old: MemoryRecord, text: str, *, now: float, **changes: Any) -> MemoryRecord:
    """``old`` with new text: keywords and entities follow the text, version + 1."""
    return old.model_copy(update={
        "memory": text, "keywords": memory_keywords(text), "entities": entities(text),
        "updated_at": now, "version": old.version + 1, **changes})


def coerce_filter(filters: IndexFilter | dict[str, Any] | None) -> IndexFilter | None:
    """A caller's filter as an ``IndexFilter``; dates may be given as ISO text or datetimes."""
    if filters is None or isinstance(filters, IndexFilter):
        return filters
    if not isinstance(filters, dict):
        raise InputError(f"filters must be a dict or an IndexFilter, got {type(filters).__name__}")
    data = dict(filters)
    for key in ("time_from", "time_to"):
        if isinstance(data.get(key), str | datetime):
            data[key] = to_fields(parse_timestamp(data[key]))[1]
    try:
        return IndexFilter.model_validate(data)
    except ValidationError as exc:
        where, what = first_problem(exc)
        raise InputError(f"filters.{where}: {what}") from exc


def matches(record: MemoryRecord, flt: IndexFilter | None) -> bool:
    """Whether ``record`` satisfies ``flt`` (the same rules the index applies)."""
    if flt is None:
        return True
    for key in ("agent_id", "session_id", "tier", "level"):
        want = getattr(flt, key)
        if want is not None and getattr(record, key) != want:
            return False
    t = record.float_time_stamp
    if (flt.time_from is not None and t < flt.time_from) or (flt.time_to is not None and t > flt.time_to):
        return False
    if flt.speakers is not None and record.speaker_name not in flt.speakers:
        return False
    if flt.entities is not None and not set(flt.entities) & set(record.entities):
        return False
    if flt.ids is not None and record.id not in flt.ids:
        return False
    return not (flt.exclude_ids is not None and record.id in flt.exclude_ids)
