"""Charts as plain geometry for the templates to draw as inline SVG (no script, no chart library):
horizontal bars for values by name, vertical bars for counts over time, and a circle layout for a
small graph."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

ROW_H = 22
LABEL_W = 210
BAR_W = 360


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    text: str  # the value as shown
    x: float
    y: float
    w: float
    h: float


@dataclass(frozen=True)
class Chart:
    title: str
    bars: list[Bar]
    width: float
    height: float
    label_w: float = LABEL_W


def hbars(title: str, items: Sequence[tuple[str, float]], *, unit: str = "", digits: int = 0) -> Chart:
    """One horizontal bar per (label, value), scaled to the largest value."""
    top = max((v for _, v in items), default=0.0) or 1.0
    bars = [Bar(label=label, value=v, text=f"{v:,.{digits}f}{unit}", x=LABEL_W, y=i * ROW_H + 2,
                w=max(BAR_W * v / top, 1.0 if v else 0.0), h=ROW_H - 6) for i, (label, v) in enumerate(items)]
    return Chart(title=title, bars=bars, width=LABEL_W + BAR_W + 110, height=max(len(items), 1) * ROW_H + 4)


def vbars(title: str, items: Sequence[tuple[str, float]], *, height: float = 160.0) -> Chart:
    """One vertical bar per (label, value) in order (e.g. memories per month)."""
    top = max((v for _, v in items), default=0.0) or 1.0
    step = max(min(40.0, 720.0 / max(len(items), 1)), 4.0)
    bars = [Bar(label=label, value=v, text=f"{v:,.0f}", x=i * step + 2, y=height - height * v / top,
                w=step - 3, h=height * v / top) for i, (label, v) in enumerate(items)]
    return Chart(title=title, bars=bars, width=len(items) * step + 60, height=height + 2, label_w=0)


@dataclass(frozen=True)
class Point:
    id: str
    label: str
    kind: str
    x: float
    y: float


def circle_layout(nodes: Sequence[tuple[str, str, str]], *, size: float = 560.0) -> list[Point]:
    """(id, label, kind) nodes evenly on a circle inside a ``size`` square."""
    n = len(nodes)
    r = size / 2 - 70
    c = size / 2
    return [Point(id=i, label=label, kind=kind, x=round(c + r * math.cos(2 * math.pi * k / max(n, 1)), 1),
                  y=round(c + r * math.sin(2 * math.pi * k / max(n, 1)), 1))
            for k, (i, label, kind) in enumerate(nodes)]
