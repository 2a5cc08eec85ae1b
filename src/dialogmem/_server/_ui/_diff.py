"""Word-level differences between two versions of a memory's text (the history timeline)."""

from __future__ import annotations

import difflib
import re
from typing import Literal

Op = Literal["same", "added", "removed"]
_TOKENS = re.compile(r"\s+|[^\s]+")


def word_diff(old: str, new: str) -> list[tuple[Op, str]]:
    """Runs of text that stayed, were removed from ``old`` or added in ``new``, in reading order
    (whitespace is kept with the words, so joining the "same" and "added" runs gives ``new``)."""
    a, b = _TOKENS.findall(old), _TOKENS.findall(new)
    out: list[tuple[Op, str]] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag == "equal":
            _push(out, "same", "".join(a[i1:i2]))
            continue
        if tag in ("delete", "replace"):
            _push(out, "removed", "".join(a[i1:i2]))
        if tag in ("insert", "replace"):
            _push(out, "added", "".join(b[j1:j2]))
    return out


def _push(out: list[tuple[Op, str]], op: Op, text: str) -> None:
    if not text:
        return
    if out and out[-1][0] == op:
        out[-1] = (op, out[-1][1] + text)
    else:
        out.append((op, text))
