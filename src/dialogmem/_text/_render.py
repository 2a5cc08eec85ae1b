"""The context a reader gets for a set of hits (``SearchResult.context()``), rendered compactly.

Hits are grouped under one header per distinct time (``[Mon 8 May 2023 13:56]``, the date as people
write it, which costs 10 tokens where ``[2023-05-08 13:56 (Mon)]`` cost 14; a later time of the same
day shows only ``[14:02]``), oldest first, and every line of every memory is shown once:

* a memory's lines are its own line breaks (an LLM-free memory is its turn, after the turns before
  it as context; a memory written by an LLM is usually one line);
* within one time, memories that continue each other are chained into one run of lines: when the
  first lines of one memory are the last lines of another (the turn it carries as context is the
  other's own turn), it follows that memory and its overlapping lines are not repeated;
* a line already shown that day is not shown again, and a line that a memory carries clipped
  (ending in ``" ..."``) is dropped when the same line is shown in full that day. (Across days a
  line is repeated: when it was said again matters.)

So two hits on neighbouring turns cost their turns once, not twice, and a run of hits from one
session pays for its date once. Nothing a hit says is dropped: every line left out is shown
elsewhere in the same context, in full, under the same day. Pure functions; the order of the hits given does not change
which lines are shown, only the order of runs within one time (first hit first).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from ._words import CLIP_MARK


class SearchHit(Protocol):
    """What rendering reads of a hit (``dialogmem.SearchHit`` has it; so may a test's plain object)."""

    @property
    def id(self) -> str: ...
    @property
    def memory(self) -> str: ...
    @property
    def time_stamp(self) -> str: ...
    @property
    def weekday(self) -> str: ...
    @property
    def source_turn_ids(self) -> Sequence[str]: ...


# English month names whatever the process locale (strftime's %B follows it)
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December")


def _norm(line: str) -> str:
    return " ".join(line.split())


def covers(full: str, line: str) -> bool:
    """Whether showing ``full`` makes ``line`` redundant: the same text, or ``line`` is a clipped
    (``" ..."``) beginning of it. Both normalised for whitespace."""
    if full == line:
        return True
    return line.endswith(CLIP_MARK) and len(line) > len(CLIP_MARK) and full.startswith(line[: -len(CLIP_MARK)])


def _same(a: str, b: str) -> bool:
    return covers(a, b) or covers(b, a)


def _fuller(a: str, b: str) -> str:
    """Of two matching lines, the one that shows more."""
    return a if len(a) >= len(b) else b


def _overlap(run: Sequence[str], lines: Sequence[str]) -> int:
    """The longest m such that the last m lines of ``run`` match the first m of ``lines``."""
    for m in range(min(len(run), len(lines)), 0, -1):
        if all(_same(run[len(run) - m + i], lines[i]) for i in range(m)):
            return m
    return 0


def chain_runs(memories: Sequence[Sequence[str]]) -> list[list[str]]:
    """Memories (each a list of lines) joined into runs where one continues another (see module
    docstring); a memory that continues none starts a new run. Runs keep first-seen order."""
    runs: list[list[str]] = []
    for lines in memories:
        if not lines:
            continue
        placed = False
        for run in runs:
            m = _overlap(run, lines)
            if m:
                tail = len(run) - m
                run[tail:] = [_fuller(run[tail + i], lines[i]) for i in range(m)]
                run.extend(lines[m:])
                placed = True
                break
            m = _overlap(lines, run)
            if m:
                head = len(lines) - m
                run[:m] = [_fuller(lines[head + i], run[i]) for i in range(m)]
                run[:0] = lines[:head]
                placed = True
                break
        if not placed:
            runs.append(list(lines))
    return runs


def _day_clock(time_stamp: str) -> tuple[str, str | None]:
    """(day, clock) of an ISO time stamp (``HH:MM``, seconds only when not zero); a stamp that is
    not ISO is its own day, with no clock."""
    try:
        when = datetime.fromisoformat(time_stamp)
    except ValueError:
        return time_stamp, None
    return when.strftime("%Y-%m-%d"), when.strftime("%H:%M:%S" if when.second else "%H:%M")


def _header(time_stamp: str, weekday: str, previous_day: str | None) -> str:
    """``[Wkd D Month YYYY HH:MM]``, or ``[HH:MM]`` on the day of the previous header."""
    day, clock = _day_clock(time_stamp)
    if clock is None:
        return f"[{time_stamp} ({weekday})]" if weekday else f"[{time_stamp}]"
    if day == previous_day:
        return f"[{clock}]"
    when = datetime.fromisoformat(time_stamp)
    wd = f"{weekday} " if weekday else ""
    return f"[{wd}{when.day} {_MONTHS[when.month - 1]} {when.year} {clock}]"


@dataclass(frozen=True)
class ShownLine:
    """One line of the reader's context: its memory time, its text, the memories (with the turns of
    theirs it stands for) that it shows, and its excerpt (lines of one run of neighbouring turns
    share the number; ``shown_text``). A line shared by neighbouring memories is shown once and
    belongs to each of them."""

    time_stamp: str
    weekday: str
    text: str
    memory_ids: tuple[str, ...]
    turn_ids: tuple[str, ...]
    excerpt: int


def _memory_lines(hit: SearchHit) -> list[str]:
    """A memory's lines (its own line breaks), whitespace-normalised, empty ones left out."""
    return [n for n in (_norm(x) for x in hit.memory.splitlines()) if n]


def _lines_of(hit: SearchHit) -> list[tuple[str, tuple[str, ...]]]:
    """A memory's lines, each with the turns it stands for: line i is turn i when a memory has one
    line per source turn (an LLM-free memory: its context turns, then its own), else every line
    stands for all of the memory's turns."""
    lines = _memory_lines(hit)
    turns = list(hit.source_turn_ids)
    if len(turns) == len(lines):
        return [(line, (turn,)) for line, turn in zip(lines, turns, strict=True)]
    return [(line, tuple(turns)) for line in lines]


def shown_text(hits: Sequence[SearchHit]) -> list[tuple[str, str, str, int]]:
    """(time stamp, weekday, line, excerpt) of every line the reader's context shows, in its order:
    what ``shown_lines`` gives without matching each line to its memories and turns. ``excerpt``
    numbers the runs (0, 1, ... in order; a run whose lines are all shown elsewhere takes none)."""
    groups: dict[tuple[str, str], list[list[str]]] = {}
    for h in sorted(hits, key=lambda h: h.time_stamp):
        groups.setdefault((h.time_stamp, h.weekday), []).append(_memory_lines(h))
    full: dict[str, list[str]] = {}  # per day, the lines that are not clipped
    for (stamp, _), memories in groups.items():
        day = _day_clock(stamp)[0]
        full.setdefault(day, []).extend(x for lines in memories for x in lines if not x.endswith(CLIP_MARK))
    out: list[tuple[str, str, str, int]] = []  # (stamp, weekday, line, excerpt)
    shown: set[tuple[str, str]] = set()
    excerpt = 0
    for (stamp, weekday), memories in groups.items():
        day = _day_clock(stamp)[0]
        for run in chain_runs(memories):
            taken = False
            for line in run:
                if (day, line) in shown or (line.endswith(CLIP_MARK) and any(covers(f, line) for f in full[day])):
                    continue
                shown.add((day, line))
                out.append((stamp, weekday, line, excerpt))
                taken = True
            excerpt += taken
    return out


def shown_lines(hits: Sequence[SearchHit]) -> list[ShownLine]:
    """The lines ``render_hits`` shows for ``hits``, in its order, each with the memories and turns it
    stands for (a line left out as shown elsewhere counts for the line that shows it)."""
    out = shown_text(hits)
    owners: list[tuple[dict[str, None], dict[str, None]]] = [({}, {}) for _ in out]
    by_day: dict[str, list[int]] = {}
    for i, (stamp, _, _, _) in enumerate(out):
        by_day.setdefault(_day_clock(stamp)[0], []).append(i)
    for h in hits:
        for line, turns in _lines_of(h):
            for i in by_day.get(_day_clock(h.time_stamp)[0], []):
                if _same(out[i][2], line):
                    owners[i][0][h.id] = None
                    owners[i][1].update(dict.fromkeys(turns))
                    break
    return [ShownLine(time_stamp=stamp, weekday=weekday, text=line, memory_ids=tuple(mids), turn_ids=tuple(tids),
                      excerpt=excerpt)
            for (stamp, weekday, line, excerpt), (mids, tids) in zip(out, owners, strict=True)]


def render_hits(hits: Sequence[SearchHit]) -> str:
    """The reader's context for ``hits``: headers per time, oldest first, every line once a day."""
    out: list[str] = []
    group: tuple[str, str] | None = None
    last_day: str | None = None
    for stamp, weekday, line, _ in shown_text(hits):  # the lines alone: which memories own them is not needed here
        if (stamp, weekday) != group:
            group = (stamp, weekday)
            out.append(_header(stamp, weekday, last_day))
            last_day = _day_clock(stamp)[0]
        out.append(line)
    return "\n".join(out)
