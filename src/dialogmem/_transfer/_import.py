"""Import of the portable format (``_portable``): ``dialogmem import``, and mem0's data through it.

An import reads the file twice: the first pass validates every line and checks it against the store
(ids taken by another user, a turn id with other content, a vector of the wrong size) and writes
nothing; only a file that passes is written, ``BATCH`` lines per journal transaction. Rows the store
holds already are kept as they are, so importing a file again adds nothing, and an import cut off by a
crash completes when run again.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from .._errors import InputError, first_problem
from .._files import Destination
from .._input import check_bounded_text, check_id, check_metadata, check_record
from .._journal import TurnStatus, UserRows
from .._models._embed_base import Embedder
from .._settings import WriteSettings
from .._store._payload import point_id
from .._sync._writer import ChangeWriter
from .._types import HistoryEntry, ImportReport, MemoryRecord, Turn
from ._foreign import mem0_lines
from ._portable import (
    RECORD_LINE,
    TURN_STATUS,
    VERSION,
    EndLine,
    HeaderLine,
    MemoryLine,
    QuarantinedLine,
    Record,
    TurnLine,
    decode_vector,
    dump_line,
)

log = logging.getLogger(__name__)

BATCH = 500  # lines per journal transaction
KINDS = ("turn", "quarantined", "memory", "history")


@dataclass
class _Plan:
    """What the validating pass learnt: the header, what to skip, and what to report."""

    header: HeaderLine
    use_vectors: bool
    users: set[str] = field(default_factory=set)
    skip_memories: set[str] = field(default_factory=set)
    file_turns: dict[str, set[str]] = field(default_factory=dict)
    file_memories: dict[str, str] = field(default_factory=dict)  # memory id -> user
    sources: dict[str, tuple[str, list[str]]] = field(default_factory=dict)  # memory id -> (user, turn ids)


@dataclass
class _Batch:
    turns: list[tuple[Turn, TurnStatus, str | None]] = field(default_factory=list)
    memories: list[tuple[MemoryRecord, str, np.ndarray | None]] = field(default_factory=list)
    history: list[HistoryEntry] = field(default_factory=list)


class Importer:
    """Checks, then writes, portable files into a store: through its journal, the change writer
    (the index side) and its embedder (vectors a file lacks, or made by another embedder);
    ``user_lock`` serialises each user's writes with the store's other writers."""

    def __init__(self, journal: UserRows, writer: ChangeWriter, embedder: Embedder, embedder_id: str,
                 write: WriteSettings, user_lock: Callable[[str], AbstractContextManager[None]],
                 index_min_points: int) -> None:
        self.journal = journal
        self.writer = writer
        self.embedder = embedder
        self.embedder_id = embedder_id
        self.write = write
        self.user_lock = user_lock
        self.index_min_points = index_min_points

    def import_file(self, source: Destination) -> ImportReport:
        """Add the records of an export file: every line is validated first, against the format and
        the store; a bad line is an ``InputError`` naming it, and nothing of the file is written."""
        started = time.perf_counter()
        with _reading(source) as (name, f):
            plan = self._check_file(name, f)
            f.seek(0)
            report = self._write_file(f, plan)
        report.without_sources = self._without_sources(plan)
        if report.without_sources:
            log.info("%d imported memories have no raw turns (L2) in the store", len(report.without_sources))
        self.writer.checkpoint()  # every imported row is in the index's segments
        report.indexed = self.writer.build_index(self.index_min_points)
        report.seconds = round(time.perf_counter() - started, 3)
        return report

    def import_mem0(self, memories: Mapping[str, Any] | Sequence[Mapping[str, Any]], user_id: str, *,
                    history: Mapping[str, Sequence[Mapping[str, Any]]] | None = None) -> ImportReport:
        """mem0's ``get_all`` output of one user, as a portable file, imported as ``import_file`` does."""
        with tempfile.TemporaryFile("w+", encoding="utf-8") as f:
            records = -1  # the header is not a record
            for line in mem0_lines(memories, user_id, history=history):
                try:
                    text = dump_line(line)
                except PydanticSerializationError as exc:  # a lone surrogate in any of the item's strings
                    raise InputError(f"mem0 input, record {records + 1}: {exc}") from None
                f.write(text + "\n")
                records += 1
            f.write(dump_line(EndLine(records=records)) + "\n")
            f.seek(0)
            return self.import_file(f)

    def _check_file(self, name: str, f: IO[str]) -> _Plan:
        lines = _numbered(f, name)
        first = next(lines, None)
        if first is None:
            raise InputError(f"{name} is empty: an export starts with a header line")
        header = _header(name, *first)
        store_embedder = self.embedder_id
        plan = _Plan(header=header, use_vectors=header.embedder == store_embedder)
        pending_turns: dict[str, dict[str, tuple[int, str]]] = {}
        pending_memories: dict[str, tuple[int, str]] = {}  # memory id -> (line, user), its owner not yet read
        orphans: list[tuple[int, str, str]] = []  # history rows met before their memory: (line, user, memory)
        records = 0
        end: EndLine | None = None
        for n, text in lines:
            try:
                line = RECORD_LINE.validate_json(text, strict=True)  # "0" is no number here
            except ValidationError as exc:
                where, what = first_problem(exc)
                where = where.partition(".")[2] if where.split(".")[0] in KINDS else where  # the kind's own tag
                raise InputError(f"{name} line {n}: {where + ': ' if where else ''}{what}") from None
            if end is not None:
                raise InputError(f"{name} line {n}: a line after the end line")
            if isinstance(line, EndLine):
                if line.records != records:
                    raise InputError(f"{name} line {n}: the end line counts {line.records} records, the file holds "
                                     f"{records}: it was cut or changed")
                end = line
                continue
            records += 1
            try:
                self._check_line(plan, n, line, pending_turns, pending_memories, orphans)
            except InputError as exc:
                raise InputError(f"{name} line {n}: {exc}") from None
            if sum(map(len, pending_turns.values())) >= BATCH:
                self._check_turns(name, pending_turns)
            if len(pending_memories) >= BATCH:
                self._check_owners(name, plan, pending_memories)
        self._check_turns(name, pending_turns)
        self._check_owners(name, plan, pending_memories)
        if end is None and header.version >= 2:
            raise InputError(f"{name} ends after {records} records without its end line: it was cut short (a "
                             "version 2 export ends with {\"kind\": \"end\", ...})")
        for n, uid, mid in orphans:
            if plan.file_memories.get(mid) != uid:
                raise InputError(f"{name} line {n}: a history row of memory {mid}, which is not a memory of user "
                                 f"{uid!r} in this file")
        return plan

    def _check_line(self, plan: _Plan, n: int, line: Record,
                    pending_turns: dict[str, dict[str, tuple[int, str]]],
                    pending_memories: dict[str, tuple[int, str]],
                    orphans: list[tuple[int, str, str]]) -> None:
        w = self.write
        if isinstance(line, TurnLine | QuarantinedLine):
            t = line.turn
            uid = check_id("user_id", t.user_id)
            check_id("turn id", t.id)
            check_bounded_text(f"turn {t.id}", t.content, w.max_turn_chars, "write.max_turn_chars")
            check_metadata(f"turn {t.id} metadata", t.metadata, w.max_metadata_bytes)
            seen = plan.file_turns.setdefault(uid, set())
            if t.id in seen:
                raise InputError(f"turn {t.id!r} of user {uid!r} appears twice")
            seen.add(t.id)
            plan.users.add(uid)
            pending_turns.setdefault(uid, {})[t.id] = (n, t.content)
        elif isinstance(line, MemoryLine):
            r = line.record
            if point_id(r.id) != r.id:
                raise InputError(f"memory id {r.id!r} must be a UUID string in canonical form")
            uid = check_record(r, w.max_metadata_bytes).user_id
            if r.id in plan.file_memories:
                raise InputError(f"memory {r.id} appears twice")
            self._check_vector(plan, line)
            plan.file_memories[r.id] = uid
            plan.users.add(uid)
            plan.sources[r.id] = (uid, list(r.source_turn_ids))
            pending_memories[r.id] = (n, uid)  # its owner in the store: read with its batch (_check_owners)
        else:
            uid = check_id("user_id", line.user_id)
            check_id("actor", line.entry.actor)
            if line.entry.previous is not None:
                if line.entry.previous.user_id != uid:
                    raise InputError(f"a history row of user {uid!r} holds a record of another user")
                check_record(line.entry.previous, w.max_metadata_bytes)
            if plan.file_memories.get(line.entry.memory_id) != uid:
                orphans.append((n, uid, line.entry.memory_id))

    def _check_vector(self, plan: _Plan, line: MemoryLine) -> None:
        if line.vector is None:
            return
        if plan.header.embedder is None:
            raise InputError("a vector, but the header names no embedder that wrote it")
        try:
            vector = decode_vector(line.vector)
        except ValueError as exc:
            raise InputError(f"vector: {exc}") from None
        if plan.use_vectors and vector.shape[0] != self.embedder.dim:
            raise InputError(f"vector has {vector.shape[0]} dimensions; the store's embedder makes "
                             f"{self.embedder.dim}")

    def _check_owners(self, name: str, plan: _Plan, pending: dict[str, tuple[int, str]]) -> None:
        """Memories of the file whose id the store holds: another user's is refused; the same
        user's is left as it is (skipped, and not reported as lacking its turns)."""
        owners = self.journal.memory_owners(list(pending))
        for mid, (n, uid) in pending.items():
            owner = owners.get(mid)
            if owner is not None and owner != uid:
                raise InputError(f"{name} line {n}: memory id {mid} already belongs to another user")
            if owner is not None:
                plan.skip_memories.add(mid)
                plan.sources.pop(mid, None)
        pending.clear()

    def _check_turns(self, name: str, pending: dict[str, dict[str, tuple[int, str]]]) -> None:
        """Turns of the file that the store holds with other content are refused (ids name one turn)."""
        for uid, by_id in pending.items():
            for held in self.journal.turns(uid, ids=list(by_id)):
                n, content = by_id[held.id]
                if held.content != content:
                    raise InputError(f"{name} line {n}: turn {held.id!r} of user {uid!r} is already stored with "
                                     "other content")
        pending.clear()

    def _write_file(self, f: IO[str], plan: _Plan) -> ImportReport:
        report = ImportReport(users=sorted(plan.users))
        lines = _numbered(f)
        next(lines)  # the header
        batch: list[Record] = []
        for _, text in lines:
            line = RECORD_LINE.validate_json(text, strict=True)
            if not isinstance(line, EndLine):
                batch.append(line)
            if len(batch) >= BATCH:
                self._write_batch(batch, plan, report)
                batch = []
        self._write_batch(batch, plan, report)
        return report

    def _write_batch(self, lines: list[Record], plan: _Plan,
                     report: ImportReport) -> None:
        by_user: dict[str, _Batch] = {}
        for line in lines:
            if isinstance(line, TurnLine):
                by_user.setdefault(line.turn.user_id, _Batch()).turns.append(
                    (line.turn, TURN_STATUS[line.status], None))
            elif isinstance(line, QuarantinedLine):
                by_user.setdefault(line.turn.user_id, _Batch()).turns.append(
                    (line.turn, TurnStatus.QUARANTINED, line.error[:2000]))
            elif isinstance(line, MemoryLine):
                if line.record.id in plan.skip_memories:
                    report.skipped_memories += 1
                    continue
                vector = decode_vector(line.vector) if plan.use_vectors and line.vector is not None else None
                by_user.setdefault(line.record.user_id, _Batch()).memories.append((line.record, line.status, vector))
            elif line.entry.memory_id not in plan.skip_memories:
                by_user.setdefault(line.user_id, _Batch()).history.append(line.entry)
        for uid, b in by_user.items():
            self._embed_missing(b, report)
            active = sum(1 for _, status, _ in b.memories if status == "active")
            with self.user_lock(uid):
                self.writer.index.check_room(active)
                added = self.journal.import_rows(uid, turns=b.turns, memories=b.memories, history=b.history)
                self.writer.index_imported([(r, v) for r, status, v in b.memories
                                                   if status == "active" and v is not None])
            quarantined = sum(1 for _, status, _ in b.turns if status is TurnStatus.QUARANTINED)
            report.skipped_turns += len(b.turns) - added["turns"]
            report.memories += added["memories"]
            report.history += added["history"]
            report.skipped_memories += len(b.memories) - added["memories"]
            fresh = added["turns"]
            report.quarantined += min(quarantined, fresh)
            report.turns += fresh - min(quarantined, fresh)

    def _embed_missing(self, b: _Batch, report: ImportReport) -> None:
        missing = [i for i, (_, _, v) in enumerate(b.memories) if v is None]
        if not missing:
            return
        vectors = self.embedder.embed([b.memories[i][0].memory for i in missing])
        for i, vector in zip(missing, vectors, strict=True):
            record, status, _ = b.memories[i]
            b.memories[i] = (record, status, vector)
        report.embedded += len(missing)

    def _without_sources(self, plan: _Plan) -> list[str]:
        out = []
        for mid, (uid, ids) in plan.sources.items():
            if not ids or not self.journal.turns(uid, ids=ids):
                out.append(mid)
        return sorted(out)


def _header(name: str, n: int, text: str) -> HeaderLine:
    try:
        header = HeaderLine.model_validate_json(text)
    except ValidationError as exc:
        where, what = first_problem(exc)
        raise InputError(f"{name} line {n}: not a dialogmem export header ({where + ': ' if where else ''}"
                         f"{what})") from None
    if header.version > VERSION:
        raise InputError(f"{name} is format version {header.version}, written by a newer dialogmem; this one "
                         f"reads version {VERSION}")
    return header


def _numbered(f: IO[str], name: str = "the import file") -> Iterator[tuple[int, str]]:
    """(line number, text) of every line that is not blank."""
    n = 0
    try:
        for n, text in enumerate(f, 1):
            if text.strip():
                yield n, text
    except UnicodeDecodeError as exc:
        raise InputError(f"{name} is not UTF-8 text (after line {n}: {exc.reason})") from None


@contextmanager
def _reading(source: Destination) -> Iterator[tuple[str, IO[str]]]:
    """The source as a seekable text file (a pipe is copied to a temporary file first)."""
    if isinstance(source, str | Path):
        path = Path(source)
        try:
            f = path.open(encoding="utf-8", newline="\n")
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc.strerror}") from None
        with f:
            yield str(path), f
        return
    name = getattr(source, "name", None)
    name = name if isinstance(name, str) else "the import data"
    if source.seekable():
        yield name, source
        return
    with tempfile.TemporaryFile("w+", encoding="utf-8") as copy:
        for text in source:
            copy.write(text)
        copy.seek(0)
        yield name, copy
