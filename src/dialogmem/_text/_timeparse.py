"""Message timestamps: ISO strings, unix seconds, datetimes and common written dates.

Times are kept as the caller gave them (naive local time is treated as UTC for the float
timestamp), so conversations recorded in another time zone keep their wall-clock dates.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

import dateparser

from .._errors import InputError
from ._calendar import MONTHS, WEEKDAY_ABBREVIATIONS

# "1:56 pm on 8 May, 2023" (LoCoMo's session dates) parsed without dateparser: it is the hot path
_LOCOMO = re.compile(
    r"^\s*(\d{1,2}):(\d{2})\s*([ap])\.?m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*$", re.I
)
# LongMemEval's haystack dates: "2023/05/20 (Sat) 02:21"
_SLASHED = re.compile(r"^\s*(\d{4})/(\d{1,2})/(\d{1,2})\s*(?:\([A-Za-z]{3}\))?\s*(\d{1,2}):(\d{2})\s*$")
# Only absolute forms: a message timestamp of "yesterday" would silently depend on the wall clock.
_DATEPARSER_SETTINGS = {
    "PARSERS": ["timestamp", "custom-formats", "absolute-time"],
    "RETURN_AS_TIMEZONE_AWARE": False,
    "PREFER_DAY_OF_MONTH": "first",
    "REQUIRE_PARTS": ["year", "month", "day"],
}
_MIN_YEAR, _MAX_YEAR = 1900, 2200
#: the longest timestamp string read: a written date is short, and dateparser's time grows with
#: the length of its input (a 480 kB string took 13 s of CPU before it was refused)
MAX_TIMESTAMP_CHARS = 100


def parse_timestamp(value: str | float | int | datetime) -> datetime:
    """A naive datetime (UTC if the input carried a zone) or ``InputError``."""
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, bool):
        raise InputError(f"invalid timestamp: {value!r}")
    elif isinstance(value, int | float):
        if not math.isfinite(value):
            raise InputError(f"invalid timestamp: {value!r}")
        try:
            dt = datetime.fromtimestamp(float(value), UTC)
        except (OverflowError, OSError, ValueError) as exc:
            raise InputError(f"invalid timestamp: {value!r}") from exc
    elif isinstance(value, str):
        dt = _parse_string(value)
    else:
        raise InputError(f"invalid timestamp type: {type(value).__name__}")
    if dt.tzinfo is not None:
        dt = dt.astimezone(UTC).replace(tzinfo=None)
    if not _MIN_YEAR <= dt.year <= _MAX_YEAR:
        raise InputError(f"timestamp out of range: {value!r}")
    return dt


def _parse_string(text: str) -> datetime:
    if len(text) > MAX_TIMESTAMP_CHARS:
        raise InputError(f"timestamp has {len(text)} characters; a date is at most {MAX_TIMESTAMP_CHARS}")
    s = text.strip()
    if not s:
        raise InputError("empty timestamp")
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        pass
    m = _LOCOMO.match(s)
    if m:
        hour, minute, ampm, day, month, year = m.groups()
        mon = MONTHS.get(month[:3].lower())
        if mon is not None:
            h = int(hour) % 12 + (12 if ampm.lower() == "p" else 0)
            try:
                return datetime(int(year), mon, int(day), h, int(minute))
            except ValueError as exc:
                raise InputError(f"invalid timestamp: {text!r}") from exc
    m = _SLASHED.match(s)
    if m:
        try:
            yy, mo, dd, hh, mi = (int(g) for g in m.groups())
            return datetime(yy, mo, dd, hh, mi)
        except ValueError as exc:
            raise InputError(f"invalid timestamp: {text!r}") from exc
    parsed = dateparser.parse(s, languages=["en"], settings=_DATEPARSER_SETTINGS)
    if parsed is None:
        raise InputError(f"invalid timestamp: {text!r}")
    return parsed


def to_fields(dt: datetime) -> tuple[str, float, str]:
    """(ISO time_stamp, float_time_stamp, weekday) for a naive datetime."""
    return (
        dt.isoformat(timespec="milliseconds"),
        dt.replace(tzinfo=UTC).timestamp(),
        WEEKDAY_ABBREVIATIONS[dt.weekday()],
    )
