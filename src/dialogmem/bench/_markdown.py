"""Markdown table helpers shared by the report sections."""

from __future__ import annotations

from typing import Any


def fmt(value: Any, nd: int = 3) -> str:
    """A cell: floats to ``nd`` decimals, None as an en dash."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{nd}f}"
    return str(value)


def table(header: list[str], rows: list[list[Any]]) -> list[str]:
    """A Markdown table and the blank line after it."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return [*lines, ""]
