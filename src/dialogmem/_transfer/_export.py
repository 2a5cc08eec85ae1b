"""Export of whole users in the portable format (``_portable``): ``dialogmem export``.

Streams turns a page at a time in journal order, then memories a page at a time (active, evicted,
deleted), each followed by its history, and ends with the end line that counts the records, so a
reader knows it has them all. A path is written to a temporary file and renamed when complete.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from .._files import Destination, writing
from .._journal import TurnStatus, UserRows
from .._types import ExportReport
from ._portable import (
    EndLine,
    HeaderLine,
    HistoryLine,
    MemoryLine,
    MemoryStatus,
    QuarantinedLine,
    TurnLine,
    dump_line,
    encode_vector,
)

PAGE = 500  # rows per journal read
_STATUSES: tuple[MemoryStatus, ...] = ("active", "evicted", "deleted")


class Exporter:
    """Writes users' records from a journal; ``embedder`` names the embedder that wrote its vectors."""

    def __init__(self, journal: UserRows, embedder: str) -> None:
        self.journal = journal
        self.embedder = embedder

    def export(self, destination: Destination, users: list[str], *, vectors: bool) -> ExportReport:
        started = time.perf_counter()
        report = ExportReport(users=users, vectors=vectors)
        with writing(destination) as out:
            header = HeaderLine(embedder=self.embedder if vectors else None, users=users, exported_at=time.time())
            out.write(dump_line(header) + "\n")
            records = 0
            for uid in users:
                for line in self.user_lines(uid, vectors):
                    out.write(dump_line(line) + "\n")
                    _count(report, line)
                    records += 1
            out.write(dump_line(EndLine(records=records)) + "\n")
        report.seconds = round(time.perf_counter() - started, 3)
        return report

    def user_lines(self, user_id: str, vectors: bool) -> Iterator[BaseModel]:
        """One user's record lines: turns in journal order, then memories by status, each with its history."""
        j = self.journal
        after = 0
        while page := j.turn_rows(user_id, after_seq=after, limit=PAGE):
            for turn, status, error in page:
                after = turn.seq
                turn = turn.model_copy(update={"seq": 0})
                if status is TurnStatus.QUARANTINED:
                    yield QuarantinedLine(turn=turn, error=error or "")
                else:
                    yield TurnLine(turn=turn, status=_turn_state(status))
        for memory_status in _STATUSES:
            last: str | None = None
            while page_m := j.memories(user_id, statuses=(memory_status,), after_id=last, limit=PAGE):
                ids = [r.id for r in page_m]
                vecs = j.vectors(user_id, ids) if vectors else {}
                histories = self.journal.histories(user_id, ids)
                for r in page_m:
                    v = vecs.get(r.id)
                    yield MemoryLine(record=r, status=memory_status, vector=encode_vector(v) if v is not None else None)
                    for entry in histories.get(r.id, ()):
                        yield HistoryLine(user_id=user_id, entry=entry)
                last = page_m[-1].id


def _count(report: ExportReport, line: BaseModel) -> None:
    if isinstance(line, TurnLine):
        report.turns += 1
    elif isinstance(line, QuarantinedLine):
        report.quarantined += 1
    elif isinstance(line, MemoryLine):
        report.memories += 1
    else:
        report.history += 1


def _turn_state(status: TurnStatus) -> Any:
    return {TurnStatus.PROCESSED: "processed", TurnStatus.PENDING: "pending", TurnStatus.DROPPED: "dropped"}[status]
