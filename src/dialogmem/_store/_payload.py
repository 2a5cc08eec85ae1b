"""The data model both index adapters share: vector names, BM25 settings, record <-> payload.

Nothing here does I/O, so the Edge and the remote adapter store byte-for-byte the same points.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import qdrant_edge
from pydantic import ValidationError

from .._errors import DialogmemError, InputError, StoreError
from .._text._words import missing_words
from .._types import MemoryRecord, stored_record

_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

DENSE = "dense"
SPARSE = "bm25"
#: the usual RRF constant; set explicitly because the two Qdrant flavours default differently
RRF_K = 60
#: keyword payload indexes besides the tenant field ``user_id``
KEYWORD_FIELDS = ("speaker_name", "tier", "entities", "session_id", "agent_id", "level")
FLOAT_FIELDS = ("float_time_stamp",)
#: the record fields a filter reads, kept as top-level payload fields (``to_payload``)
FILTER_FIELDS = ("user_id", *KEYWORD_FIELDS, *FLOAT_FIELDS)
#: the payload field holding the whole record as JSON
RECORD_FIELD = "record"
#: fields a payload update may not touch: they are the point's identity and scope
FROZEN_FIELDS = frozenset({"id", "user_id"})


def bm25_config() -> qdrant_edge.Bm25Config:
    """The one tokenizer setting for every adapter, so documents and queries agree everywhere."""
    # avg_len near the length of a memory sentence: the 256 default would treat every memory
    # as short and flatten the length normalisation.
    return qdrant_edge.Bm25Config(k=1.2, b=0.75, avg_len=24.0, language="english")


class Bm25Encoder:
    """BM25 sparse vectors for records (documents) and query text."""

    def __init__(self) -> None:
        self._model = qdrant_edge.Bm25(bm25_config())

    def document(self, record: MemoryRecord) -> qdrant_edge.SparseVector:
        return self._model.embed_document(bm25_text(record))

    def query(self, text: str) -> qdrant_edge.SparseVector:
        return self._model.embed_query(text)


def bm25_text(record: MemoryRecord) -> str:
    """What lexical search sees: the memory, its keywords (so keywords count as terms) and the
    content words of its source turns (``original_memory``, HyMem's level 2) that the memory's own
    text lacks, once each. A fact an LLM wrote in its own words stays findable by the words that
    were said; a memory that quotes its turns adds only what clipping left out."""
    return " ".join([record.memory, *record.keywords, *missing_words(record.original_memory, record.memory)])


def to_payload(record: MemoryRecord, *, nulls: bool = False, with_record: bool = True) -> dict[str, Any]:
    """A point's payload: the fields filters and payload indexes read (``FILTER_FIELDS``, top level;
    ``nulls``: also those that are None, so a partial update clears them), and, ``with_record``, the
    whole record as one JSON string (``RECORD_FIELD``); without it the record is read from where the
    index's ``RecordSource`` keeps it (``has_record`` tells the two apart). The bindings turn a
    payload into the engine's values field by field, about 7 us each here: the record's 31 fields
    cost ~210 us a point, a third of an import's time, against ~55 us packed (benchmarks/bench_import.py)."""
    data = record.model_dump(mode="json", include=set(FILTER_FIELDS))
    out = {k: v for k, v in data.items() if nulls or v is not None}
    if with_record:
        out[RECORD_FIELD] = packed_record(record)
    elif nulls:
        out[RECORD_FIELD] = None  # an update drops a copy the point was written with
    return out


def has_record(payload: dict[str, Any]) -> bool:
    """Whether a payload holds its record: packed (``RECORD_FIELD``), or spread over its fields as
    points were written before packing (they always hold ``memory``)."""
    return isinstance(payload.get(RECORD_FIELD), str) or "memory" in payload


def packed_record(record: MemoryRecord) -> str:
    """The record as JSON without the fields that hold their default, which reading fills back in:
    a rule memory's record leaves out about 20 of its 31 fields, ~390 of ~710 bytes a point (every
    index keeps one per memory), and pydantic writes it faster than the whole record. The record's
    defaults are therefore part of the stored format: tests/storage/test_footprint.py pins
    them, so that changing one is a decision about the points already written."""
    return record.model_dump_json(exclude_defaults=True)


def from_payload(payload: dict[str, Any] | None) -> MemoryRecord:
    """The record of a payload, packed or (a point written before packing) spread over fields."""
    payload = payload or {}
    packed = payload.get(RECORD_FIELD)
    try:
        return stored_record(packed if isinstance(packed, str) else payload)
    except (ValidationError, ValueError) as exc:
        raise StoreError(f"stored payload is not a valid memory record: {exc}") from exc


def merge_payload(record: MemoryRecord, fields: dict[str, Any]) -> MemoryRecord:
    """The record with ``fields`` applied, validated as a whole before anything is written."""
    frozen = FROZEN_FIELDS & fields.keys()
    if frozen:
        raise InputError(f"cannot change {sorted(frozen)} of memory {record.id} with set_payload")
    try:
        return MemoryRecord.model_validate({**record.model_dump(mode="json"), **fields})
    except ValidationError as exc:
        raise InputError(f"invalid fields for memory {record.id}: {exc}") from exc


def changes_text(fields: dict[str, Any]) -> bool:
    """Whether an update touches what the BM25 vector is built from."""
    return "memory" in fields or "keywords" in fields or "original_memory" in fields


def point_id(value: str) -> str | None:
    """Canonical UUID string, or None for a value that cannot be a point id (so cannot exist)."""
    if isinstance(value, str) and _CANONICAL_UUID.fullmatch(value):
        return value  # already canonical (every id the index hands back): parsing costs ~15 us an id
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        return None


def point_ids(values: Iterable[str]) -> list[str]:
    """Valid ids in first-seen order, duplicates dropped."""
    out = {pid: None for v in values if (pid := point_id(v)) is not None}
    return list(out)


def half_precision(vector: np.ndarray | Sequence[float]) -> np.ndarray:
    """What every index stores and searches with of a dense vector: its direction (all indexes rank
    by cosine), at unit length, rounded to float16 values (kept as float32). The write path hands
    over unit vectors already rounded so (the journal keeps them at half precision), which this gives
    back unchanged (re-normalising a unit half vector moves it by far less than half a float16 step:
    no value of 2,000 random 384-d vectors changed). Edge keeps its originals in float16
    (``_edge.py``) and rounds a query to float16 before scoring; rounding stored vectors and queries
    here makes every backend hold, return and score the same values. A zero or non-finite vector
    passes unchanged, for ``dense_list`` to refuse."""
    arr = np.asarray(vector, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(arr.astype(np.float64)))  # float64: no overflow for huge components
    if not np.isfinite(norm) or norm == 0.0:
        return arr
    return (arr.astype(np.float64) / norm).astype(np.float16).astype(np.float32)


def dense_list(vector: np.ndarray | Sequence[float], dim: int) -> list[float]:
    arr = np.asarray(vector, dtype=np.float32).reshape(-1)
    if arr.shape[0] != dim:
        raise InputError(f"vector has {arr.shape[0]} dimensions, the index expects {dim}")
    if not np.all(np.isfinite(arr)) or not np.any(arr):
        raise InputError("vector must be finite and non-zero")
    return arr.tolist()


def dense_array(vector: Any) -> np.ndarray | None:
    """A backend's named-vector answer as float32, or None when it holds no dense vector."""
    if isinstance(vector, dict):
        vector = vector.get(DENSE)
    return None if vector is None else np.asarray(vector, dtype=np.float32)


def check_limit(limit: int, name: str = "limit") -> int:
    if not isinstance(limit, int) or limit < 1:
        raise InputError(f"{name} must be a positive integer, got {limit!r}")
    return limit


def prefetch_size(limit: int, prefetch_limit: int | None) -> int:
    """How many candidates each view contributes to the fusion."""
    if prefetch_limit is not None:
        return max(check_limit(prefetch_limit, "prefetch_limit"), limit)
    return max(limit * 4, 50)


@contextmanager
def backend_errors(operation: str) -> Iterator[None]:
    """Map whatever the Qdrant binding raises to ``StoreError``; our own errors pass through."""
    try:
        yield
    except DialogmemError:
        raise
    except Exception as exc:  # the Edge binding raises bare Exception/ValueError
        raise StoreError(f"{operation} failed: {exc}") from exc
