"""Linear-time checks that a slow or loaded machine cannot fail.

A wall-clock limit ("under 2 s") fails when CI shares its cores with something else (it did: 2.001 s on a
check that takes 0.2 s on a quiet machine). These checks compare the work at a quarter and at the full
size instead: linear work costs about 4x, quadratic about 16x. They count CPU time of the whole process
(``time.process_time``: every thread, so an embedding pool's work counts too; time spent waiting for the
cores does not), the least of a few runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: 4x the input may cost at most this many times the work; linear ~4, quadratic ~16.
LIMIT = 8.0


def cpu_seconds(run: Callable[[], object], *, repeats: int = 3) -> float:
    """The least CPU time (seconds, all threads of this process) of ``repeats`` calls of ``run``."""
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        run()
        best = min(best, time.process_time() - started)
    return best


def assert_linear(run: Callable[[T], object], make: Callable[[int], T], n: int, *, repeats: int = 3) -> None:
    """``run(make(n))`` costs less than ``LIMIT`` times ``run(make(n // 4))``."""
    small, full = make(n // 4), make(n)
    base = max(cpu_seconds(lambda: run(small), repeats=repeats), 1e-3)  # below a millisecond: noise
    ratio = cpu_seconds(lambda: run(full), repeats=repeats) / base
    assert ratio < LIMIT, f"4x the input took {ratio:.1f}x the work (n={n})"
