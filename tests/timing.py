"""Linear-time checks that a slow or loaded machine cannot fail.

A wall-clock limit ("under 2 s") fails when CI shares its cores with something else (it did: 2.001 s on a
check that takes 0.2 s on a quiet machine). These checks compare the work at a quarter and at the full
size instead: linear work costs about 4x, quadratic about 16x. They count CPU time of the whole process
(``time.process_time``: every thread, so an embedding pool's work counts too; time spent waiting for the
cores does not), the least of a few runs.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: 4x the input may cost at most this many times the work; linear ~4, quadratic ~16. Not 8: on CI's
#: 2-core machine a linear function (``is_filler`` over "Bank of of of ...") read 8.3x-9.3x late in a full
#: run with the collector off (a 100k-character input and its 33k tokens leave the caches a 25k one fits
#: in), while quadratic work stays far above 11.
LIMIT = 11.0


def cpu_seconds(run: Callable[[], object], *, repeats: int = 3) -> float:
    """The least CPU time (seconds, all threads of this process) of ``repeats`` calls of ``run``.

    The cyclic garbage collector is off while a call runs (as ``timeit`` does): in a long test session
    a full collection walks every object the session still holds, and one that happens to fall inside
    the full-size call and not the quarter-size one reads as quadratic work (CI saw 8.3x and 8.9x on
    functions that measure 4.0x alone)."""
    best = float("inf")
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            started = time.process_time()
            run()
            best = min(best, time.process_time() - started)
    finally:
        if enabled:
            gc.enable()
    return best


#: a ratio over the limit is measured again with the quarter-size work repeated until it takes at
#: least this long (CPU seconds): a call of a few milliseconds is at the mercy of one cache flush or
#: scheduler tick (CI once saw 8.1x on a linear 3 ms call)
RECHECK_BASE = 0.1


def _calls(run: Callable[[], object], times: int) -> Callable[[], None]:
    def repeated() -> None:
        for _ in range(times):
            run()
    return repeated


def _ratio(run: Callable[[], object], run_full: Callable[[], object], times: int, repeats: int) -> float:
    base = max(cpu_seconds(_calls(run, times), repeats=repeats), 1e-3)  # below a millisecond: noise
    return cpu_seconds(_calls(run_full, times), repeats=repeats) / base


def assert_linear(run: Callable[[T], object], make: Callable[[int], T], n: int, *, repeats: int = 3) -> None:
    """``run(make(n))`` costs less than ``LIMIT`` times ``run(make(n // 4))``; a ratio over the limit
    is measured once more, each size repeated the same number of times (``RECHECK_BASE``), before it
    fails."""
    small, full = make(n // 4), make(n)
    ratio = _ratio(lambda: run(small), lambda: run(full), 1, repeats)
    if ratio >= LIMIT:
        once = max(cpu_seconds(lambda: run(small), repeats=2), 1e-4)  # the least of two: one warm
        times = max(1, min(1000, round(RECHECK_BASE / once)))
        ratio = _ratio(lambda: run(small), lambda: run(full), times, repeats + 2)
    assert ratio < LIMIT, f"4x the input took {ratio:.1f}x the work (n={n})"
