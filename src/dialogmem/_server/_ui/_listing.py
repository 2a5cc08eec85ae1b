"""The memories table: its query (search text, filters, sort, page) read from the URL, and one page
of rows, found without loading the user's memories all at once.

Without search text a page is one cursor step of ``Memory.get_all`` (ordered by id). Full-text
search is the same cursor with ``contains`` (the journal keeps only the memories whose text holds the
query, in SQL); the filters the journal does not know (class) are applied here, at most
``SCAN_BUDGET`` memories a request: a rare class over 10^5 memories takes several requests (the page
offers "continue"), never one unbounded one. Semantic search is ``Memory.search`` (hybrid dense +
BM25), its best ``size`` hits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from ..._errors import InputError, NotFoundError
from ..._facade._memory import Memory
from ..._input import check_id
from ..._text._timeparse import parse_timestamp
from ..._types import MemoryRecord, SearchHit, SearchResult
from ..._write._records import coerce_filter, matches
from ...types import IndexFilter

Mode = Literal["text", "semantic"]
Sort = Literal["id", "time", "-time", "salience", "-access"]
MODES: tuple[Mode, ...] = ("text", "semantic")
SORTS: tuple[Sort, ...] = ("id", "time", "-time", "salience", "-access")
SIZES = (20, 50, 100, 200)
#: memories read per journal query while scanning
CHUNK = 1000
#: memories one full-text request reads at most
SCAN_BUDGET = 20_000


@dataclass(frozen=True)
class ListQuery:
    q: str = ""
    mode: Mode = "text"
    after: str | None = None
    time_from: str = ""
    time_to: str = ""
    speaker: str = ""
    tier: str = ""
    evicted: bool = False
    cls: str = ""
    sort: Sort = "id"
    size: int = 50

    def params(self, **changes: object) -> dict[str, str]:
        """This query as URL parameters (empty ones left out), with ``changes`` applied."""
        values = {**self.__dict__, **changes}
        out = {k: str(v) for k, v in values.items() if v not in ("", None, False)}
        if values["evicted"]:
            out["evicted"] = "1"
        for name, default in (("mode", "text"), ("sort", "id"), ("size", "50")):
            if out.get(name) == default:
                del out[name]
        return out

    def index_filter(self) -> IndexFilter | None:
        data: dict[str, object] = {}
        if self.time_from:
            data["time_from"] = self.time_from
        if self.time_to:
            data["time_to"] = self.time_to + ("T23:59:59" if len(self.time_to) == 10 else "")
        if self.speaker:
            data["speakers"] = [self.speaker]
        if self.tier:
            data["tier"] = self.tier
        return coerce_filter(data) if data else None


def parse_query(params: Mapping[str, str]) -> ListQuery:
    """The table's query from URL parameters; ``InputError`` names the first bad one."""
    mode = params.get("mode") or "text"
    sort = params.get("sort") or "id"
    if mode not in MODES:
        raise InputError(f"mode must be one of {', '.join(MODES)}")
    if sort not in SORTS:
        raise InputError(f"sort must be one of {', '.join(SORTS)}")
    size_text = params.get("size") or "50"
    if not size_text.isdigit() or int(size_text) not in SIZES:
        raise InputError(f"size must be one of {', '.join(map(str, SIZES))}")
    after = params.get("after") or None
    if after is not None:
        check_id("after", after)
    tier = params.get("tier") or ""
    if tier not in ("", "mtm", "ltm"):
        raise InputError("tier must be mtm or ltm")
    q = params.get("q", "").strip()
    if len(q) > 2000:
        raise InputError("the search text is over 2000 characters")
    query = ListQuery(q=q, mode=mode, after=after, time_from=params.get("time_from", "").strip(),
                      time_to=params.get("time_to", "").strip(), speaker=params.get("speaker", "").strip(),
                      tier=tier, evicted=params.get("evicted") in ("1", "on", "true"),
                      cls=params.get("cls", "").strip(), sort=sort, size=int(size_text))
    for name, value in (("time_from", query.time_from), ("time_to", query.time_to)):
        if value:
            try:
                parse_timestamp(value)
            except InputError as exc:
                raise InputError(f"{name}: {exc}") from None
    return query


@dataclass
class Row:
    id: str
    memory: str
    time_stamp: str
    speaker: str
    tier: str
    memory_class: str
    score: float | None = None
    salience: float | None = None
    access_count: int | None = None
    evicted: bool = False
    superseded_by: str | None = None  # the later memory that replaced this one
    invalid_at: str | None = None


@dataclass
class Page:
    rows: list[Row]
    next_after: str | None = None  # the cursor of the next page, if there may be one
    scanned: int = 0  # memories read (full-text search)
    partial: bool = False  # the scan budget ran out before the page was full
    result: SearchResult | None = None  # semantic search: the whole result (plan, timings)
    notes: list[str] = field(default_factory=list)


def list_page(mem: Memory, user_id: str, query: ListQuery) -> Page:
    semantic = bool(query.q) and query.mode == "semantic"
    page = _semantic(mem, user_id, query) if semantic else _scan(mem, user_id, query)
    if query.evicted:
        for row in page.rows:
            row.evicted = _is_evicted(mem, user_id, row.id)
    page.rows = _sorted(page.rows, query.sort)
    return page


def _scan(mem: Memory, user_id: str, query: ListQuery) -> Page:
    flt = query.index_filter()
    needle = query.q.casefold()
    if not (needle or flt or query.cls):  # one cursor step, one more row to know a next page exists
        chunk = mem.get_all(user_id, limit=query.size + 1, offset=query.after, include_evicted=query.evicted)
        rows = [_row(r) for r in chunk[:query.size]]
        return Page(rows=rows, next_after=rows[-1].id if len(chunk) > query.size else None, scanned=len(chunk))
    rows = []
    cursor = query.after
    scanned = 0
    while scanned < SCAN_BUDGET:
        chunk = mem.get_all(user_id, limit=CHUNK, offset=cursor, include_evicted=query.evicted,
                            contains=query.q if query.q.strip() else None)
        for record in chunk:
            if _keep(record, needle, flt, query.cls):
                if len(rows) == query.size:  # one more match exists: the page is full and has a next one
                    return Page(rows=rows, next_after=rows[-1].id, scanned=scanned)
                rows.append(_row(record))
            scanned += 1
            cursor = record.id
        if len(chunk) < CHUNK:
            return Page(rows=rows, scanned=scanned)
    return Page(rows=rows, next_after=cursor, scanned=scanned, partial=True)


def _keep(record: MemoryRecord, needle: str, flt: IndexFilter | None, cls: str) -> bool:
    if cls and record.memory_class != cls:
        return False
    if needle and needle not in record.memory.casefold():
        return False
    return matches(record, flt)


def _semantic(mem: Memory, user_id: str, query: ListQuery) -> Page:
    flt = query.index_filter()
    result = mem.search(query.q, user_id, limit=min(query.size, 200), filters=flt)
    rows = [_hit_row(h) for h in result.hits if not query.cls or h.memory_class == query.cls]
    return Page(rows=rows, result=result)


def _is_evicted(mem: Memory, user_id: str, memory_id: str) -> bool:
    try:
        mem.get(memory_id, user_id, include_evicted=False)
    except NotFoundError:
        return True
    return False


def _row(r: MemoryRecord) -> Row:
    return Row(id=r.id, memory=r.memory, time_stamp=r.time_stamp, speaker=r.speaker_name, tier=r.tier,
               memory_class=r.memory_class, salience=r.salience, access_count=r.access_count,
               superseded_by=r.superseded_by, invalid_at=r.invalid_at)


def _hit_row(h: SearchHit) -> Row:
    return Row(id=h.id, memory=h.memory, time_stamp=h.time_stamp, speaker=h.speaker_name, tier=h.tier,
               memory_class=h.memory_class, score=h.score, superseded_by=h.superseded_by, invalid_at=h.invalid_at)


def _sorted(rows: list[Row], sort: Sort) -> list[Row]:
    if sort == "time":
        return sorted(rows, key=lambda r: r.time_stamp)
    if sort == "-time":
        return sorted(rows, key=lambda r: r.time_stamp, reverse=True)
    if sort == "salience":
        return sorted(rows, key=lambda r: -(r.salience or 0.0))
    if sort == "-access":
        return sorted(rows, key=lambda r: -(r.access_count or 0))
    return rows
