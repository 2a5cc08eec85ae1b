"""The portable format of ``dialogmem export`` / ``dialogmem import``: versioned JSON Lines.

A file is one header line, then one line per record, each a JSON object whose ``kind`` says what
it holds:

* ``header`` — the format's name and version, and the embedder whose vectors the file carries
  (``null`` when it carries none);
* ``turn`` — a raw turn (HyMem's L2) with its status: ``processed``, ``pending`` (waiting for its
  batch) or ``dropped`` (an operator gave up on it);
* ``quarantined`` — a turn whose processing failed, with the reason;
* ``memory`` — a memory record (id, sources, times, metadata, access counts...) with its status
  (``active``, ``evicted`` from MTM, ``deleted``) and, optionally, its vector (base64 of
  little-endian float32);
* ``history`` — one change of one memory, with its own time and the whole previous record;
* ``end`` — the last line (version 2 on): how many record lines came between the header and it. A
  file or a stream cut short at a line boundary still parses line by line; without this line (or
  with another count) it is refused instead of being taken as complete.

Pure data: no I/O. ``docs/export-schema.json`` is generated from these models (:func:`json_schema`)
and a test checks that the committed file is the generated one.
"""

from __future__ import annotations

import base64
import json
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from .._journal import TurnStatus
from .._types import HistoryEntry, MemoryRecord, Turn

FORMAT = "dialogmem-export"
#: 2: files end with an ``end`` line (version 1 files, without it, are still read)
VERSION = 2

TurnState = Literal["processed", "pending", "dropped"]
MemoryStatus = Literal["active", "evicted", "deleted"]

TURN_STATUS: dict[str, TurnStatus] = {"processed": TurnStatus.PROCESSED, "pending": TurnStatus.PENDING,
                                      "dropped": TurnStatus.DROPPED}


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HeaderLine(_Line):
    """The first line of every file."""

    kind: Literal["header"] = "header"
    format: Literal["dialogmem-export"] = "dialogmem-export"
    version: int = Field(VERSION, ge=1, le=2**31, description="the format version; this dialogmem reads versions 1 "
                         "and 2 (2: the file ends with an end line)")
    embedder: str | None = Field(None, description="identity of the embedder that wrote the vectors of the "
                                 "memory lines (null: the file carries no vectors; they are computed on import)")
    users: list[str] = Field(default_factory=list, description="the users whose records follow")
    exported_at: float = Field(0.0, description="Unix time of the export")
    source: str = Field("dialogmem", description="what wrote the file (dialogmem, mem0, ...)")


class TurnLine(_Line):
    """A raw turn, as the journal keeps it. ``turn.seq`` is not carried (0): the order of the lines is."""

    kind: Literal["turn"] = "turn"
    status: TurnState = "processed"
    turn: Turn


class QuarantinedLine(_Line):
    """A turn whose processing failed, waiting for an operator (retry or drop)."""

    kind: Literal["quarantined"] = "quarantined"
    error: str
    turn: Turn


class MemoryLine(_Line):
    """A memory record with its status and, optionally, its dense vector."""

    kind: Literal["memory"] = "memory"
    status: MemoryStatus = "active"
    vector: str | None = Field(None, description="base64 of the little-endian float32 vector, written by the "
                               "header's embedder")
    record: MemoryRecord


class HistoryLine(_Line):
    """One change of one memory of ``user_id``."""

    kind: Literal["history"] = "history"
    user_id: str
    entry: HistoryEntry


class EndLine(_Line):
    """The last line of a file (format version 2 on): a file without it was cut short."""

    kind: Literal["end"] = "end"
    records: int = Field(ge=0, le=2**63 - 1, description="the number of lines between the header and this one")


#: a line holding a record (not the header or the end line)
Record = TurnLine | QuarantinedLine | MemoryLine | HistoryLine
RecordLine = Annotated[TurnLine | QuarantinedLine | MemoryLine | HistoryLine | EndLine, Field(discriminator="kind")]
AnyLine = Annotated[HeaderLine | TurnLine | QuarantinedLine | MemoryLine | HistoryLine | EndLine,
                    Field(discriminator="kind")]

RECORD_LINE: TypeAdapter[TurnLine | QuarantinedLine | MemoryLine | HistoryLine | EndLine] = TypeAdapter(RecordLine)


#: characters that some line splitters take for a line break (Python's ``str.splitlines``, httpx's
#: ``iter_lines``) though JSON leaves them raw inside strings: written as escapes, so a text holding
#: one can never cut a line in two, whatever reads the file
_BREAKS = str.maketrans({c: f"\\u{ord(c):04x}" for c in "\x1c\x1d\x1e\x85\u2028\u2029"})


def dump_line(line: BaseModel) -> str:
    """One line of the file (no newline), compact, fields in a fixed order; nothing in it that any
    line splitter takes for a line break."""
    return line.model_dump_json(exclude_none=False).translate(_BREAKS)


def encode_vector(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def decode_vector(text: str) -> np.ndarray:
    """The float32 vector of a memory line; ``ValueError`` when the text is not one."""
    raw = base64.b64decode(text.encode("ascii"), validate=True)
    if not raw or len(raw) % 4:
        raise ValueError(f"a vector is a whole number of float32 values, got {len(raw)} bytes")
    vector = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    if not np.all(np.isfinite(vector)) or not np.any(vector):
        raise ValueError("a vector must be finite and non-zero")
    return vector


def json_schema() -> dict[str, Any]:
    """The JSON Schema of one line of the file (``docs/export-schema.json``)."""
    schema = TypeAdapter(AnyLine).json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://dialogmem.dev/schema/{FORMAT}-v{VERSION}.json",
        "title": f"{FORMAT} version {VERSION}: one line of a JSON Lines file",
        "description": ("A dialogmem export is UTF-8 JSON Lines: the first line is a header, then turn, "
                        "quarantined, memory and history records, and (version 2) an end line counting them. "
                        "Importing refuses a file whose line does not match, naming the line, and a version 2 "
                        "file whose end line is missing or counts otherwise."),
        **schema,
    }


def schema_text() -> str:
    """The committed ``docs/export-schema.json``, byte for byte."""
    return json.dumps(json_schema(), indent=2, ensure_ascii=False, sort_keys=True) + "\n"
