"""Temporal phrases in a question → an absolute time window (pure, no I/O).

Every window is computed against the *reference time* the caller passes (the moment the question
is asked), never the wall clock. Calendar arithmetic is done here directly, because the windows
must be exact and this runs on every search (explicit dates too: dateparser took 3-70 ms a date
on the search path, 0.3 s on its first; the dates are the ones it gives, tested).

Conventions (all windows inclusive, unix seconds):

* days start at 00:00 in the reference time's zone; a naive reference time is taken as UTC;
* a window ends 1 ms before the next period starts (``time_to`` is inclusive);
* "last week" is the previous Monday–Sunday week; "last month"/"last year" the previous calendar
  month/year; "N weeks ago" the Monday–Sunday week holding the day N weeks back, likewise
  "N months/years ago"; "N days ago" that day;
* "in/over the past N days/weeks" is a trailing window ending with the reference day;
* "recently", "lately", "these days" are the last 30 days and "the other day" the last 7 — these
  are *soft*: retrieval prefers memories inside them but does not filter on them;
* "before/until/by <date>" keeps only the part of the timeline before it, "after/since <date>"
  the part after it;
* relational phrases ("before the trip", "after her birthday") need an event lookup to become
  dates; they yield no window here — their nouns stay in the keywords and the question counts as
  a temporal comparison.

Several phrases in one question give the smallest window covering all of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo

from .._text._calendar import MONTHS, NUMBER_WORDS, VAGUE_NUMBER_WORDS, WEEKDAYS, alternation

_MS = 0.001
_NUMBERS = {**NUMBER_WORDS, **VAGUE_NUMBER_WORDS}
_SOFT_DAYS = {"recently": 30, "lately": 30, "these days": 30, "nowadays": 30,
              "the other day": 7}

_MONTH_RE = r"(?P<month>" + alternation(MONTHS) + r")\.?"
_DAY_RE = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR_RE = r"(?P<year>(?:19|20)\d{2})"
_NUM_RE = r"(?P<num>\d{1,3}|" + alternation(_NUMBERS) + r")"
_UNIT_RE = r"(?P<unit>day|week|month|year)s?"
# a day and month followed by a year are the dated patterns' (an off-calendar "Feb 29th, 2023" is no
# day at all, not the last 29 February)
_NO_YEAR = r"(?!,?\s+(?:19|20)\d{2}\b)"
_WEEKDAY_RE = r"(?P<weekday>" + "|".join(WEEKDAYS) + r")s?"

# (kind, pattern), tried in this order; an earlier match claims its span.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(p, re.IGNORECASE))
    for kind, p in (
        ("iso", r"\b(?P<year>(?:19|20)\d{2})-(?P<m>[01]?\d)-(?P<d>[0-3]?\d)\b"),
        ("dmy", rf"\b{_DAY_RE}\s+(?:of\s+)?{_MONTH_RE},?\s+{_YEAR_RE}\b"),
        ("mdy", rf"\b{_MONTH_RE}\s+{_DAY_RE},?\s+{_YEAR_RE}\b"),
        ("my", rf"\b{_MONTH_RE},?\s+(?:of\s+)?{_YEAR_RE}\b"),
        ("dm", rf"\b{_DAY_RE}\s+(?:of\s+)?{_MONTH_RE}(?![\w-]){_NO_YEAR}"),
        ("md", rf"\b(?:(?P<prep>on|in|since|before|after|until|by)\s+)?{_MONTH_RE}\s+{_DAY_RE}\b{_NO_YEAR}"),
        ("m", rf"\b(?P<prep>in|during|since|before|after|until|by|of|early|late|mid)\s+{_MONTH_RE}(?![\w-])"),
        ("y", rf"\b(?P<prep>in|during|since|before|after|until|by|of|throughout|year)\s+{_YEAR_RE}\b"),
        ("daybefore", r"\bthe\s+day\s+before\s+yesterday\b"),
        ("yesterday", r"\byesterday\b"),
        ("lastnight", r"\blast\s+night\b"),
        ("daypart", r"\b(?:this|earlier\s+this)\s+(?P<part>morning|afternoon|evening)\b|\btonight\b"),
        ("today", r"\b(?:today|earlier\s+today)\b"),
        ("trailing", rf"\b(?:in|over|during|within|for)\s+the\s+(?:past|last|previous)\s+"
                     rf"{_NUM_RE}?\s*{_UNIT_RE}\b"),
        ("trailing", rf"\b(?:the\s+)?past\s+{_NUM_RE}?\s*{_UNIT_RE}\b"),
        ("lastn", rf"\b(?:last|previous)\s+(?P<num>\d{{1,3}}|two|three|four|five|six|seven|eight|nine|ten|"
                  rf"eleven|twelve|few|couple\s+of)\s+{_UNIT_RE}\b"),
        ("ago", rf"\b{_NUM_RE}\s+{_UNIT_RE}\s+ago\b"),
        ("lastweekend", r"\b(?:last|previous|this\s+past)\s+weekend\b"),
        ("thisweekend", r"\bthis\s+weekend\b"),
        ("last", r"\b(?:last|previous)\s+(?P<unit>week|month|year)\b"),
        ("this", r"\bthis\s+(?P<unit>week|month|year)\b"),
        ("weekday", rf"\b(?P<mod>last|on|this\s+past|past)\s+{_WEEKDAY_RE}\b"),
        ("soft", r"\b(?:recently|lately|these\s+days|nowadays|the\s+other\s+day)\b"),
    )
)
_BOUND_BEFORE = re.compile(r"\b(?P<word>before|until|till|by|prior\s+to|since|after)\s+(?:the\s+)?$",
                           re.IGNORECASE)


@dataclass(frozen=True)
class TimeWindow:
    """An inclusive window in unix seconds; ``None`` on a side means open."""

    time_from: float | None
    time_to: float | None
    strict: bool
    phrases: tuple[str, ...]


def _zone(ref: datetime) -> tzinfo:
    return ref.tzinfo if ref.tzinfo is not None else UTC


def _start(d: date, tz: tzinfo) -> float:
    return datetime.combine(d, time(0), tzinfo=tz).timestamp()


def _days(first: date, last: date, tz: tzinfo) -> tuple[float, float]:
    return _start(first, tz), _start(last + timedelta(days=1), tz) - _MS


def _month(year: int, month: int, tz: tzinfo) -> tuple[float, float]:
    nxt = date(year + (month == 12), month % 12 + 1, 1)
    return _start(date(year, month, 1), tz), _start(nxt, tz) - _MS


def _year(year: int, tz: tzinfo) -> tuple[float, float]:
    return _start(date(year, 1, 1), tz), _start(date(year + 1, 1, 1), tz) - _MS


def _shift_month(year: int, month: int, by: int) -> tuple[int, int]:
    idx = year * 12 + (month - 1) - by
    return idx // 12, idx % 12 + 1


def _week_of(d: date, tz: tzinfo) -> tuple[float, float]:
    monday = d - timedelta(days=d.weekday())
    return _days(monday, monday + timedelta(days=6), tz)


def _num(raw: str | None) -> int:
    if not raw:
        return 1
    raw = " ".join(raw.lower().split())
    return int(raw) if raw.isdigit() else _NUMBERS.get(raw, 1)


def _explicit_day(day: str, month: str, year: str | None, today: date) -> date | None:
    """The date of an explicit "8 May 2023" / "May 8th"; without a year, the latest such date not after
    ``today`` (as dateparser reads it with dates preferred from the past: "29 February" is the last
    leap day). None off the calendar ("31 April", "0 May")."""
    d, m = int(day), MONTHS[month.lower()]
    if year:
        try:
            return date(int(year), m, d)
        except ValueError:
            return None
    for back in range(9):  # a leap day recurs within 8 years
        try:
            found = date(today.year - back, m, d)
        except ValueError:
            continue
        if found <= today:
            return found
    return None


def _window(kind: str, m: re.Match[str], ref: datetime, tz: tzinfo) -> tuple[float, float] | None:
    today = ref.date()
    g = m.groupdict()
    if kind == "iso":
        try:
            d = date(int(g["year"]), int(g["m"]), int(g["d"]))
        except ValueError:
            return None
        return _days(d, d, tz)
    if kind in ("dmy", "mdy", "dm", "md"):
        day = _explicit_day(g["day"], g["month"], g.get("year"), today)
        return _days(day, day, tz) if day is not None else None
    if kind == "my":
        return _month(int(g["year"]), MONTHS[g["month"].lower()], tz)
    if kind == "m":
        month = MONTHS[g["month"].lower()]
        return _month(today.year if month <= today.month else today.year - 1, month, tz)
    if kind == "y":
        return _year(int(g["year"]), tz)
    if kind == "daybefore":
        d = today - timedelta(days=2)
        return _days(d, d, tz)
    if kind == "yesterday":
        d = today - timedelta(days=1)
        return _days(d, d, tz)
    if kind == "lastnight":
        eve = datetime.combine(today - timedelta(days=1), time(18), tzinfo=tz)
        return eve.timestamp(), datetime.combine(today, time(6), tzinfo=tz).timestamp() - _MS
    if kind == "daypart":
        lo, hi = {"morning": (0, 12), "afternoon": (12, 18)}.get((g.get("part") or "").lower(), (18, 24))
        base = datetime.combine(today, time(0), tzinfo=tz)
        return (base + timedelta(hours=lo)).timestamp(), (base + timedelta(hours=hi)).timestamp() - _MS
    if kind == "today":
        return _days(today, today, tz)
    if kind in ("trailing", "lastn"):
        n, unit = _num(g.get("num")), g["unit"].lower()
        if unit == "month":
            y, mo = _shift_month(today.year, today.month, n)
            first = date(y, mo, min(today.day, 28))
        elif unit == "year":
            first = date(today.year - n, today.month, min(today.day, 28))
        else:
            first = today - timedelta(days=n * (7 if unit == "week" else 1))
        return _days(first, today, tz)
    if kind == "ago":
        n, unit = _num(g["num"]), g["unit"].lower()
        if unit == "day":
            d = today - timedelta(days=n)
            return _days(d, d, tz)
        if unit == "week":
            return _week_of(today - timedelta(weeks=n), tz)
        if unit == "month":
            return _month(*_shift_month(today.year, today.month, n), tz)
        return _year(today.year - n, tz)
    if kind == "lastweekend":
        sat = today - timedelta(days=today.weekday() + 2)
        return _days(sat, sat + timedelta(days=1), tz)
    if kind == "thisweekend":
        sat = today + timedelta(days=5 - today.weekday())
        return _days(sat, sat + timedelta(days=1), tz)
    if kind == "last":
        unit = g["unit"].lower()
        if unit == "week":
            return _week_of(today - timedelta(weeks=1), tz)
        if unit == "month":
            return _month(*_shift_month(today.year, today.month, 1), tz)
        return _year(today.year - 1, tz)
    if kind == "this":
        unit = g["unit"].lower()
        if unit == "week":
            return _week_of(today, tz)
        if unit == "month":
            return _month(today.year, today.month, tz)
        return _year(today.year, tz)
    if kind == "weekday":
        wd = WEEKDAYS[g["weekday"].lower()]
        back = (today.weekday() - wd) % 7
        if back == 0 and g["mod"].lower() != "on":
            back = 7
        d = today - timedelta(days=back)
        return _days(d, d, tz)
    if kind == "soft":
        key = " ".join(m.group(0).lower().split())
        return _days(today - timedelta(days=_SOFT_DAYS[key] - 1), today, tz)
    return None


def _bound(text: str, m: re.Match[str], window: tuple[float, float]) -> tuple[float | None, float | None]:
    """Apply a "before/after/since/until" word in front of (or leading) a date phrase."""
    word = (m.groupdict().get("prep") or "").lower()
    if word not in ("before", "until", "till", "by", "since", "after"):
        before = _BOUND_BEFORE.search(text, max(0, m.start() - 14), m.start())
        if before is None:
            return window
        word = " ".join(before.group("word").lower().split())
    if word in ("before", "until", "till", "by") or word.startswith("prior"):
        return None, (window[0] - _MS if word in ("before",) or word.startswith("prior") else window[1])
    if word == "after":
        return window[1] + _MS, None
    return window[0], None  # since


def parse_time_window(text: str, reference_time: datetime) -> TimeWindow | None:
    """The window that the temporal phrases of ``text`` name, or ``None`` when there are none."""
    tz = _zone(reference_time)
    ref = reference_time.astimezone(tz) if reference_time.tzinfo is not None else reference_time
    taken: list[tuple[int, int]] = []
    lows: list[float | None] = []
    highs: list[float | None] = []
    phrases: list[str] = []
    strict = False
    for kind, pattern in _PATTERNS:
        for m in pattern.finditer(text):
            s, e = m.span()
            if any(s < te and ts < e for ts, te in taken):
                continue
            window = _window(kind, m, ref, tz)
            if window is None:
                continue
            taken.append((s, e))
            lo, hi = _bound(text, m, window) if kind not in ("trailing", "ago", "soft") else window
            lows.append(lo)
            highs.append(hi)
            phrases.append(m.group(0))
            strict = strict or kind != "soft"
    if not phrases:
        return None
    time_from = None if any(v is None for v in lows) else min(v for v in lows if v is not None)
    time_to = None if any(v is None for v in highs) else max(v for v in highs if v is not None)
    return TimeWindow(time_from, time_to, strict, tuple(phrases))
