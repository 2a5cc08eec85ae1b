"""Export files made by hand, for the tests of what an import takes and refuses: a header, record
lines of a turn or a memory with every field an import needs, and the end line that counts them.
``json.dumps`` writes NaN and Infinity as such, so a hostile number goes into a file as it would."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

USER = "alice"
NOW = 1_683_554_400.0


def header(version: int = 2, users: Sequence[str] = (USER,)) -> dict[str, Any]:
    return {"kind": "header", "format": "dialogmem-export", "version": version, "users": list(users)}


def turn_line(n: int | str, user: str = USER, *, content: str | None = None, status: str = "pending",
              **turn: Any) -> dict[str, Any]:
    """A turn line; ``n`` numbers the turn (id ``t<n>``) or is its id."""
    number = n if isinstance(n, int) else 0
    return {"kind": "turn", "status": status, "turn": {
        "id": f"t{n}" if isinstance(n, int) else n, "user_id": user, "speaker": "Alice",
        "content": content if content is not None else f"I planted {n} tulips in the garden.",
        "time_stamp": "2023-05-08T14:00:00", "float_time_stamp": NOW + number, "weekday": "Mon", **turn}}


def memory_line(n: int, user: str = USER, **record: Any) -> dict[str, Any]:
    """An active memory line; ``n`` numbers its UUID."""
    return {"kind": "memory", "status": "active", "record": {
        "id": f"00000000-0000-4000-8000-{n:012d}", "user_id": user, "memory": f"Alice owns {n} bicycles.",
        "time_stamp": "2023-05-08T14:00:00", "float_time_stamp": NOW, "weekday": "Mon", "created_at": NOW,
        "updated_at": NOW, **record}}


def export_text(lines: Sequence[dict[str, Any]], *, end: bool = True) -> str:
    """``lines`` (the header first) as a file's text; ``end``: with the end line counting the records."""
    records = [json.dumps(line) for line in lines]
    if end:
        records.append(json.dumps({"kind": "end", "records": len(lines) - 1}))
    return "\n".join(records) + "\n"


def write_export(path: Path, lines: Sequence[dict[str, Any]], *, end: bool = True) -> Path:
    path.write_text(export_text(lines, end=end), encoding="utf-8", errors="surrogatepass")
    return path
