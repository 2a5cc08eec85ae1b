"""Pydantic models at the boundaries: input messages, journal turns, memory records, results."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ._text._render import render_hits
from ._text._tokens import count_tokens

logger = logging.getLogger(__name__)

Tier = Literal["mtm", "ltm"]
Level = Literal["L1", "L2"]

#: the Unix seconds of the years 1 to 9999, the times ``datetime`` can show (and both journals store)
UNIX_MIN = -62_135_596_800.0
UNIX_MAX = 253_402_300_799.0
#: the integers both journals store (SQLite's and PostgreSQL's BIGINT)
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

#: Numbers that enter a record: finite and in range, so no stored row can fail to read back, sort
#: or score (NaN in one row once made every sleep fail). Refused with the field's name otherwise.
UnixTime = Annotated[float, Field(allow_inf_nan=False, ge=UNIX_MIN, le=UNIX_MAX)]
Fraction = Annotated[float, Field(allow_inf_nan=False, ge=0.0, le=1.0)]
Count = Annotated[int, Field(ge=0, le=INT64_MAX)]
Finite = Annotated[float, Field(allow_inf_nan=False)]
Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]


class Message(BaseModel):
    """One dialogue message as a caller gives it to ``Memory.add``.

    ``name`` is the speaker; without it the role is the speaker. ``id`` is the caller's own
    message id: when given it is kept, and memories cite it in ``source_turn_ids``.
    """

    model_config = ConfigDict(extra="forbid")

    content: str
    role: str | None = None
    name: str | None = None
    timestamp: str | float | int | datetime | None = None
    id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("timestamp", mode="before")
    @classmethod
    def _no_bool(cls, v: object) -> object:
        if isinstance(v, bool):  # bool is an int to pydantic; as a timestamp it is a mistake
            raise ValueError("a timestamp cannot be a boolean")
        return v


class Turn(BaseModel):
    """A raw turn as the journal keeps it (also HyMem's L2 raw text)."""

    id: str
    seq: Count = 0
    user_id: str
    agent_id: str | None = None
    session_id: str | None = None
    speaker: str
    role: str | None = None
    content: str
    time_stamp: str
    float_time_stamp: UnixTime
    weekday: str
    metadata: dict[str, Any] = Field(default_factory=dict)


class MemoryRecord(BaseModel):
    """A stored memory: seed 002's payload plus provenance, scope, tier and bookkeeping."""

    id: str
    user_id: str
    agent_id: str | None = None
    session_id: str | None = None
    tier: Tier = "mtm"
    level: Level = "L1"
    memory: str
    original_memory: str = ""
    compressed_memory: str = ""
    time_stamp: str
    float_time_stamp: UnixTime
    weekday: str
    topic_id: Int64 | None = None
    topic_summary: str = ""
    category: str = ""
    subcategory: str = ""
    memory_class: str = "fact"
    speaker_id: Int64 | None = None
    speaker_name: str = ""
    entities: list[str] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)
    salience: Fraction = 0.5
    source_turn_ids: list[str] = Field(default_factory=list)
    update_queue: list[dict[str, Any]] = Field(default_factory=list)
    access_count: Count = 0
    last_accessed: UnixTime | None = None
    confidence: Fraction = 1.0
    created_at: UnixTime
    updated_at: UnixTime
    version: Count = 1
    metadata: dict[str, Any] = Field(default_factory=dict)
    # Validity: when the memory's evidence was said (``time_stamp`` unless given), and, once a later
    # statement about the same holder and attribute replaced it, when (that statement's time) and by
    # which memory. A superseded memory is kept: a past-state question still reaches it.
    valid_from: str | None = None
    invalid_at: str | None = None
    superseded_by: str | None = None

    @model_validator(mode="after")
    def _valid_from_evidence(self) -> MemoryRecord:
        if self.valid_from is None:  # a record written before validity existed: its evidence's time
            self.valid_from = self.time_stamp
        return self

    @property
    def is_current(self) -> bool:
        """Not replaced by a later statement."""
        return self.superseded_by is None and self.invalid_at is None


class ScoredRecord(BaseModel):
    """A record returned by the vector index with its score."""

    record: MemoryRecord
    score: float


class SourceTurn(BaseModel):
    """A raw turn a memory was made from (HyMem's level 2, L2; the memory is level 1, L1)."""

    id: str
    text: str
    speaker: str
    time_stamp: str
    session_id: str | None = None

    @classmethod
    def from_turn(cls, turn: Turn) -> SourceTurn:
        return cls(id=turn.id, text=turn.content, speaker=turn.speaker, time_stamp=turn.time_stamp,
                   session_id=turn.session_id)


class SearchHit(BaseModel):
    """One search result, with what a caller needs to cite its source."""

    id: str
    memory: str
    score: float
    time_stamp: str
    weekday: str
    speaker_name: str
    source_turn_ids: list[str]
    tier: Tier = "mtm"  # "ltm": shared, de-identified knowledge, not this user's own episode
    memory_class: str = "fact"  # "event": an event unit's summary (write.events)
    sources: list[SourceTurn] | None = None  # the L2 raw turns, with ``search(..., expand=True)``
    # validity (``MemoryRecord``): a superseded hit says until when it held and what replaced it
    valid_from: str | None = None
    invalid_at: str | None = None
    superseded_by: str | None = None

    @classmethod
    def from_record(cls, record: MemoryRecord, score: float) -> SearchHit:
        return cls(
            id=record.id, memory=record.memory, score=score, time_stamp=record.time_stamp,
            weekday=record.weekday, speaker_name=record.speaker_name,
            source_turn_ids=list(record.source_turn_ids), tier=record.tier, memory_class=record.memory_class,
            valid_from=record.valid_from, invalid_at=record.invalid_at, superseded_by=record.superseded_by,
        )


def render_context(hits: Sequence[SearchHit]) -> str:
    """The reader's context for hits: one time header per distinct time, oldest first, and every
    line of the memories shown once (``_text._render.render_hits``). A superseded memory's own line
    says until when it held ("[until 2023-06-24]"), and the memory that replaced it, when it is among
    the hits, since when ("[since 2023-06-24]"), so a reader does not answer with the stale fact."""
    return render_hits(with_validity(hits))


def with_validity(hits: Sequence[SearchHit]) -> list[SearchHit]:
    """``hits`` whose memories end with their validity marks (see ``render_context``)."""
    successors = {h.superseded_by for h in hits if h.superseded_by}
    out: list[SearchHit] = []
    for h in hits:
        mark = ""
        if h.invalid_at or h.superseded_by:
            mark = f" [until {(h.invalid_at or '')[:10] or 'a later statement'}; superseded]"
        elif h.id in successors:
            mark = f" [since {(h.valid_from or h.time_stamp)[:10]}]"
        out.append(h.model_copy(update={"memory": h.memory + mark}) if mark else h)
    return out


class SearchPlan(BaseModel):
    """How a search was run: the views it searched and the constraints it applied or dropped."""

    views: list[str]  # the hypothetical queries, one hybrid query each
    routes: list[str]  # per view: "mtm", "ltm" or "any"
    keywords: list[str] = Field(default_factory=list)
    entities: list[str] = Field(default_factory=list)
    speakers: list[str] = Field(default_factory=list)
    time_from: str | None = None  # ISO, inclusive
    time_to: str | None = None
    complexity: str = "moderate"
    k: int = 10
    source: Literal["rules", "llm"] = "rules"
    filters: list[str] = Field(default_factory=list)  # constraints applied ("time", "speakers", "tier", ...)
    relaxed: list[str] = Field(default_factory=list)  # constraints dropped because they matched nothing


class SearchResult(BaseModel):
    """The hits of one search, how it was planned, where its time went, and a rendering for an LLM."""

    query: str
    hits: list[SearchHit]
    plan: SearchPlan | None = None
    timings_ms: dict[str, float] = Field(default_factory=dict)

    def context(self) -> str:
        """The hits as a reader's context (``render_context``): time headers, oldest first, each
        line once."""
        return render_context(self.hits)

    @property
    def context_tokens(self) -> int:
        """Size of :meth:`context` in the project's token count."""
        return count_tokens(self.context())

    def __len__(self) -> int:
        return len(self.hits)

    def __iter__(self) -> Iterator[SearchHit]:  # type: ignore[override]  # iterates hits, not pydantic fields
        return iter(self.hits)

    def __getitem__(self, i: int) -> SearchHit:
        return self.hits[i]


class Event(StrEnum):
    ADD = "ADD"
    UPDATE = "UPDATE"
    DELETE = "DELETE"
    EVICT = "EVICT"  # left the MTM index under the capacity bound; still readable with get()


class HistoryEntry(BaseModel):
    """One change to one memory; ``previous`` is the whole record before it (to undo a change)."""

    memory_id: str
    event: Event
    old_memory: str | None
    new_memory: str | None
    timestamp: UnixTime
    actor: str
    previous: MemoryRecord | None = None


class AddResult(BaseModel):
    """What ``Memory.add`` accepted and produced.

    ``quarantined``: accepted turns (journaled, never lost) whose processing failed; they wait in
    quarantine for an operator (``Memory.quarantined`` / ``retry_quarantined`` / ``drop_quarantined``).
    """

    turn_ids: list[str]
    memories: list[SearchHit] = Field(default_factory=list)
    pending_turns: int = 0
    quarantined: list[str] = Field(default_factory=list)


class QuarantinedTurn(BaseModel):
    """An accepted turn whose processing failed, with the reason."""

    turn: Turn
    error: str


class _TransferCounts(BaseModel):
    """The records of an export file, by kind."""

    users: list[str]
    turns: int = 0
    quarantined: int = 0
    memories: int = 0
    history: int = 0


class ExportReport(_TransferCounts):
    """What ``Memory.export`` wrote."""

    vectors: bool = False
    seconds: float = 0.0


class ImportReport(_TransferCounts):
    """What ``Memory.import_`` added (rows the store held already are ``skipped``, never changed)."""

    skipped_turns: int = 0
    skipped_memories: int = 0
    embedded: int = Field(0, description="memories whose vector was computed on import (none in the file, or "
                                         "written by another embedder)")
    without_sources: list[str] = Field(default_factory=list, description="ids of imported memories none of "
                                       "whose source turns (L2) the store holds: they cannot be expanded")
    indexed: int = Field(0, description="points put into the index's search graph after the import "
                                        "(store.index_min_points)")
    seconds: float = 0.0


_Stored = TypeVar("_Stored", bound=BaseModel)


# -- rows written by an older dialogmem -------------------------------------------------------------
#: a time field that is not a number in range falls back to the first good one of these, else 0
_TIME_FIELDS = ("float_time_stamp", "created_at", "updated_at", "timestamp")


def mend_stored(model: type[_Stored], data: dict[str, Any], what: str) -> _Stored:
    """A stored row as ``model``, where an older dialogmem let a bad number in (NaN, ±Infinity, out of
    range): each such field takes its default (a time takes the row's first good time), and a warning
    names the row and the fields. Every other user's work goes on; the row reads, lists and exports
    with the mended values, and is written back mended by its next change. A row bad in any other
    way still raises ``ValidationError``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        bad = sorted({str(e["loc"][0]) for e in exc.errors() if e["loc"] and e["type"] in _NUMBER_ERRORS})
        if not bad or len(bad) != len({str(e["loc"][0]) for e in exc.errors() if e["loc"]}):
            raise
    fixed = dict(data)
    good_time = next((float(data[f]) for f in _TIME_FIELDS if f not in bad and _finite(data.get(f))), 0.0)
    for name in bad:
        info = model.model_fields[name]
        fixed[name] = good_time if name in _TIME_FIELDS else info.get_default(call_default_factory=True)
    logger.warning("%s holds numbers out of range in %s: read with %s", what, ", ".join(bad),
                   ", ".join(f"{n}={fixed[n]!r}" for n in bad))
    return model.model_validate(fixed)


_NUMBER_ERRORS = frozenset({"finite_number", "greater_than_equal", "less_than_equal", "greater_than", "less_than",
                            "float_type", "int_type", "int_from_float", "float_parsing", "int_parsing"})


def unix_time_or_none(v: object) -> float | None:
    """``v`` when it is a time :data:`UnixTime` takes, else None (a stored column an older version wrote)."""
    return float(v) if _finite(v) else None  # type: ignore[arg-type]


def _finite(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and UNIX_MIN <= float(v) <= UNIX_MAX


def stored_record(raw: str | dict[str, Any], what: str = "a stored memory") -> MemoryRecord:
    """A memory record as a journal or an index payload holds it (JSON text or its fields), read
    with :func:`mend_stored`."""
    if isinstance(raw, str):
        try:
            return MemoryRecord.model_validate_json(raw)  # the usual case, at JSON-parser speed
        except ValidationError:
            pass
    data = json.loads(raw) if isinstance(raw, str) else raw  # Python's parser takes NaN and Infinity
    if not isinstance(data, dict):
        raise ValueError(f"{what} is not a JSON object")
    return mend_stored(MemoryRecord, data, f"memory {data.get('id')!r} of user {data.get('user_id')!r}")
