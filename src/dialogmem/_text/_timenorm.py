"""Relative time expressions made absolute against the time a turn was said (seed 003's g_time).

``absolutize("I went hiking yesterday", 2023-05-08)`` gives
``"I went hiking yesterday (2023-05-07)"``. The phrase itself stays, the resolved date is appended in
brackets, so nothing the speaker said is lost and a later reader (or retriever) sees both.

Granularity follows the phrase: days give ``2023-05-07``; weeks ``the week of 2023-05-01`` (its
Monday); weekends ``the weekend of 2023-05-13`` (its Saturday); months ``April 2023``; years ``2022``.

``anchored`` re-says week-grained phrases for a reader from the day they were said, the way people
(and LoCoMo's annotators) state them: ``last week (the week of 2023-05-29)`` said on 9 June 2023
reads ``the week before 2023-06-09``, ``last Friday (2023-07-14)`` said on 15 July reads ``the
Friday before 2023-07-15``. The calendar week's Monday is a date nobody said; the stored text keeps
the phrase and the exact day.

Phrases are found with our own regular expressions (one compiled pattern, so a turn without any
temporal phrase costs a few microseconds) and resolved by calendar arithmetic against the turn
time, never the wall clock: the dates ``dateparser`` gives for the same phrases (tested against it),
without its ~40 ms for a phrase it has not seen (that was ~2 ms a LoCoMo turn on average at
ingest). Calendar anchors that dateparser does not know (``this weekend``) or reads differently from
everyday use (``this Monday`` said on a Tuesday means the Monday of the current week) are computed
here as before. The output is deterministic, and ``absolutize`` is idempotent: a phrase already
followed by its bracket is left alone.
"""

from __future__ import annotations

import calendar
import re
from datetime import date, datetime, timedelta

from ._calendar import NUMBER_WORDS, WEEKDAY_NAMES, alternation

_NUM = alternation(NUMBER_WORDS)
_NUM_RE = rf"(?:\d{{1,3}}|{_NUM})"
_UNIT_RE = r"(?:day|week|month|year)s?"
_DAY_RE = "|".join(WEEKDAY_NAMES)

_PATTERN = re.compile(
    rf"""\b(?:
        (?P<dayword>the\ day\ before\ yesterday|the\ day\ after\ tomorrow|yesterday|today|tomorrow
            |tonight|last\ night|this\ (?:morning|afternoon|evening))
      | (?P<ago>(?P<ago_n>{_NUM_RE})\s+(?P<ago_u>{_UNIT_RE})\s+ago)
      | (?P<in>in\s+(?P<in_n>{_NUM_RE})\s+(?P<in_u>{_UNIT_RE}))
      | (?P<rel>(?P<rel_w>last|next|this)\s+(?P<rel_u>week|weekend|month|year|{_DAY_RE}))
    )(?:['’]s)?\b""",
    re.IGNORECASE | re.VERBOSE | re.ASCII,  # ASCII: "ſ" (long s) would match "s" but not lower to it
)
# What ``absolutize`` itself writes after a phrase; seeing it means "already done".
_DONE = re.compile(
    r"\s*\((?:\d{4}(?:-\d{2}-\d{2})?|the week(?:end)? of \d{4}-\d{2}-\d{2}|[A-Z][a-z]+ \d{4})\)"
)
# Before "in N units", words that make it a span looked back over, not a date ahead: "single for the
# first time in five years", "the best sleep in weeks", "haven't seen her in two years". Bounded to the
# clause just before the phrase (no sentence break in between).
_DURATION_BEFORE = re.compile(
    r"\b(?:time|times|once|twice|first|ever|never|not|no|best|worst|longest|shortest|biggest|hardest|most|least"
    r"|\w+n[’']t)\b[^.,;!?()]{0,40}$", re.IGNORECASE)
# Day words and their offsets in days ("last night" is the evening of the day before).
_DAY_WORDS = {"yesterday": -1, "tomorrow": 1, "the day before yesterday": -2, "the day after tomorrow": 2,
              "last night": -1}


def absolutize(text: str, reference: datetime) -> str:
    """Append the absolute date after every relative time phrase in ``text``.

    ``reference`` is when the text was said; a timezone-aware reference is read in its own zone.
    Phrases that cannot be resolved are left as they are.
    """
    if not text:
        return text
    matches = list(_PATTERN.finditer(text))
    if not matches:
        return text
    ref = reference.replace(tzinfo=None).date() if reference.tzinfo else reference.date()
    out: list[str] = []
    last = 0
    for m in matches:
        if _DONE.match(text, m.end()) or _is_duration(text, m):
            continue
        label = _resolve_match(m, ref)
        if label is None:
            continue
        out.append(text[last:m.end()])
        out.append(f" ({label})")
        last = m.end()
    out.append(text[last:])
    return "".join(out)


def _is_duration(text: str, m: re.Match[str]) -> bool:
    """Whether an "in N units" phrase is a span looked back over ("the first time in five years")."""
    return bool(m.group("in")) and _DURATION_BEFORE.search(text, max(0, m.start() - 60), m.start()) is not None


_BRACKET = re.compile(r"\s*\(([^()]*)\)")


def anchored(text: str, said: date) -> str:
    """``text`` for a reader: "last week", "last weekend", "last <weekday>", "this week" and "N weeks
    ago", each with the bracket ``absolutize`` wrote after it, replaced by the time re-said from
    ``said``, the day the phrase was said ("the week before 2023-06-09").

    Only a phrase whose bracket is exactly what ``absolutize`` writes for it on ``said`` is
    replaced (a text stamped with another day, or a bracket the speaker typed, is left as it is);
    other phrases (days, months, years) keep theirs. Pure; applying it twice is applying it once.
    """
    if "(" not in text:
        return text
    out: list[str] = []
    last = 0
    for m in _PATTERN.finditer(text):
        bracket = _BRACKET.match(text, m.end())
        if bracket is None or bracket[1] != _resolve_match(m, said):
            continue
        label = _said_label(m, said)
        if label is None:
            continue
        if m[0][0].isupper():
            label = label[0].upper() + label[1:]
        out.append(text[last:m.start()])
        out.append(label + ("'s" if m[0].lower().endswith(("'s", "’s")) else ""))
        last = bracket.end()
    out.append(text[last:])
    return "".join(out)


def _said_label(m: re.Match[str], said: date) -> str | None:
    day = said.isoformat()
    if m.group("ago"):
        unit = _unit(m.group("ago_u"))
        return f"{m.group('ago_n').lower()} {m.group('ago_u').lower()} before {day}" if unit == "week" else None
    if not m.group("rel"):
        return None
    which, unit = m.group("rel_w").lower(), m.group("rel_u").lower()
    if which == "last" and unit in ("week", "weekend"):
        return f"the {unit} before {day}"
    if which == "last" and unit in WEEKDAY_NAMES:
        return f"the {unit.capitalize()} before {day}"
    if which == "this" and unit == "week":
        return f"the week of {day}"
    return None


def _resolve_match(m: re.Match[str], ref: date) -> str | None:
    """The label of one matched phrase said on ``ref``; None when the calendar has no such day
    (``last week`` in year 1, ``next weekend`` on 9999-12-31): the phrase is then left as it is."""
    try:
        return _label(m, ref)
    except (ValueError, OverflowError):
        return None


def _label(m: re.Match[str], ref: date) -> str | None:
    if m.group("dayword"):
        return _day_label(m.group("dayword").lower(), ref)
    if m.group("ago"):
        n = _number(m.group("ago_n"))
        unit = _unit(m.group("ago_u"))
        return _shift_label(-n, unit, ref)
    if m.group("in"):
        n = _number(m.group("in_n"))
        unit = _unit(m.group("in_u"))
        return _shift_label(n, unit, ref)
    return _anchor_label(m.group("rel_w").lower(), m.group("rel_u").lower(), ref)


def _number(word: str) -> int:
    word = " ".join(word.lower().split())
    return int(word) if word.isdigit() else NUMBER_WORDS[word]


def _unit(word: str) -> str:
    return word.lower().rstrip("s")


def _day_label(phrase: str, ref: date) -> str | None:
    if phrase.startswith("this ") or phrase in ("today", "tonight"):
        return ref.isoformat()
    got = _shift(ref, _DAY_WORDS[phrase], "day")
    return got.isoformat() if got else None


def _shift_label(n: int, unit: str, ref: date) -> str | None:
    got = _shift(ref, n, unit)
    return _format(got, unit) if got else None


def _shift(ref: date, n: int, unit: str) -> date | None:
    """``ref`` moved by ``n`` days, weeks, months or years (calendar months: 31 March less a month
    is 28 or 29 February), as dateparser reads "N units ago" / "in N units"; None off the calendar."""
    try:
        if unit in ("day", "week"):
            return ref + timedelta(days=n * (7 if unit == "week" else 1))
        months = {"month": n, "year": 12 * n}[unit]
        month0 = ref.year * 12 + ref.month - 1 + months
        year, month = divmod(month0, 12)
        return date(year, month + 1, min(ref.day, calendar.monthrange(year, month + 1)[1]))
    except (ValueError, OverflowError):
        return None


def _anchor_label(which: str, unit: str, ref: date) -> str | None:
    step = {"last": -1, "this": 0, "next": 1}[which]
    monday = ref - timedelta(days=ref.weekday())
    if unit == "week":
        return _format(monday + timedelta(weeks=step), "week")
    if unit == "weekend":
        return _format(monday + timedelta(days=5, weeks=step), "weekend")
    if unit == "month":
        return _shift_label(step, "month", ref)
    if unit == "year":
        return str(ref.year + step)
    # A weekday: "this X" is X of the current Monday-to-Sunday week; "last X" / "next X" are
    # the nearest X strictly before / after the reference, as dateparser reads them.
    target = WEEKDAY_NAMES.index(unit)
    if step == 0:
        return (monday + timedelta(days=target)).isoformat()
    gap = ((ref.weekday() - target) % 7 or 7) if step < 0 else ((target - ref.weekday()) % 7 or 7)
    got = _shift(ref, step * gap, "day")
    return got.isoformat() if got else None


def _format(day: date, unit: str) -> str:
    if unit == "week":
        return f"the week of {(day - timedelta(days=day.weekday())).isoformat()}"
    if unit == "weekend":
        return f"the weekend of {(day + timedelta(days=5 - day.weekday())).isoformat()}"
    if unit == "month":
        return day.strftime("%B %Y")
    if unit == "year":
        return str(day.year)
    return day.isoformat()
