"""Recover a JSON value from what a model actually wrote (pure, no I/O).

Small models wrap JSON in prose or code fences, leave trailing commas, use single quotes or
Python literals. ``extract_json`` tries the text as-is, then walks each ``{`` / ``[`` in order,
rewrites the value starting there into strict JSON (quoting, literals, commas, stray or mismatched
closers) and returns the first that parses.

Output that was cut off (a value still open when the text ends, e.g. a model that ran out of
tokens mid-string) is never completed: closing ``"Ivy has locker 4`` would store a wrong fact
where the model meant "418". Such text raises ``JSONRepairError`` saying it was cut off, so the
caller retries and then falls back.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Literal

_NOTHING = object()
_MAX_STARTS = 32  # bounds the work on long prose full of brackets
_LITERALS = {"true": "true", "false": "false", "null": "null",
             "True": "true", "False": "false", "None": "null"}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "/": "/", "\\": "\\",
            '"': '"', "'": "'"}
_JSON_NUMBER = re.compile(r"-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?")
_CLOSER = {"{": "}", "[": "]"}


class JSONRepairError(ValueError):
    """No JSON object or array could be recovered from the text."""


def extract_json(text: str, *, expect: Literal["object", "array"] | None = None) -> Any:
    """Return the first JSON object or array found in ``text``, repairing it if needed.

    With ``expect``, a value of that kind is preferred over one of the other kind that comes
    earlier (``"Based on [1], ..."`` must not hide the object after it); the other kind is
    still returned when it is all there is. Raises ``JSONRepairError`` when nothing is found.
    """
    stripped = text.strip()
    fallback: Any = _NOTHING
    if stripped[:1] in "{[":
        try:
            value = json.loads(stripped)
        except ValueError:
            pass
        else:
            if _kind_ok(value, expect):
                return value
            fallback = value
    starts = [i for i, c in enumerate(text) if c in "{["][:_MAX_STARTS]
    cut_off = False
    for start in starts:
        candidate = normalise(text, start)
        if candidate is None:
            continue
        if candidate is CUT_OFF:
            cut_off = True
            continue
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if _kind_ok(value, expect):
            return value
        if fallback is _NOTHING:
            fallback = value
    if fallback is not _NOTHING:
        return fallback
    preview = stripped[:80].replace("\n", " ")
    if cut_off:
        raise JSONRepairError(f"model output was cut off before its JSON value ended: {preview!r}")
    raise JSONRepairError(f"no JSON object or array found in model output: {preview!r}")


def _kind_ok(value: Any, expect: str | None) -> bool:
    if expect is None:
        return True
    return isinstance(value, dict) if expect == "object" else isinstance(value, list)


CUT_OFF = "<cut off>"  # what normalise returns for a value the text ends inside of


def normalise(text: str, start: int) -> str | None:
    """Rewrite the value opening at ``text[start]`` as strict JSON text (not yet parsed).

    Stops at the bracket that closes the opening one; a closer that matches nothing is dropped,
    and one that skips an inner opener closes that inner opener first. A value still open when
    the text ends gives ``CUT_OFF``.
    """
    out: list[str] = []
    stack: list[str] = []
    i, n = start, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            value, i = _read_string(text, i)
            out.append(json.dumps(value, ensure_ascii=False))
            continue
        if c in "{[":
            stack.append(c)
            out.append(c)
        elif c in "}]":
            if c not in (_CLOSER[o] for o in stack):
                i += 1  # a stray closer: nothing it could close
                continue
            while stack:
                opener = stack.pop()
                _drop_trailing_comma(out)
                out.append(_CLOSER[opener])
                if _CLOSER[opener] == c:
                    break
            if not stack:
                return "".join(out)
        elif c == "/" and text.startswith(("//", "/*"), i):
            i = _skip_comment(text, i)
            continue
        elif c.isalnum() or c in "-+._":
            token, i = _read_bare(text, i)
            out.append(_bare_to_json(token))
            continue
        else:
            out.append(c)
        i += 1
    return CUT_OFF if stack else None


def _read_string(text: str, i: int) -> tuple[str, int]:
    """Decode a single- or double-quoted string starting at ``i``; unterminated runs to the end."""
    quote = text[i]
    chars: list[str] = []
    i += 1
    n = len(text)
    while i < n:
        c = text[i]
        if c == quote:
            return "".join(chars), i + 1
        if c == "\\" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "u" and i + 6 <= n:
                try:
                    chars.append(chr(int(text[i + 2:i + 6], 16)))
                    i += 6
                    continue
                except ValueError:
                    pass
            chars.append(_ESCAPES.get(nxt, "\\" + nxt))
            i += 2
            continue
        chars.append(c)
        i += 1
    return "".join(chars), n


def _read_bare(text: str, i: int) -> tuple[str, int]:
    j = i
    while j < len(text) and (text[j].isalnum() or text[j] in "-+._"):
        j += 1
    return text[i:j], j


def _bare_to_json(token: str) -> str:
    """Numbers and literals pass through; any other bare word becomes a string (unquoted keys)."""
    if token in _LITERALS:
        return _LITERALS[token]
    if _JSON_NUMBER.fullmatch(token):
        return token
    try:
        number = float(token)  # "+1", ".5", "1." are numbers JSON spells differently
    except ValueError:
        return json.dumps(token)
    return repr(number) if math.isfinite(number) else "null"


def _skip_comment(text: str, i: int) -> int:
    if text.startswith("//", i):
        end = text.find("\n", i)
        return len(text) if end < 0 else end
    end = text.find("*/", i + 2)
    return len(text) if end < 0 else end + 2


def _drop_trailing_comma(out: list[str]) -> None:
    j = len(out) - 1
    while j >= 0 and out[j].isspace():
        j -= 1
    if j >= 0 and out[j] == ",":
        del out[j]
