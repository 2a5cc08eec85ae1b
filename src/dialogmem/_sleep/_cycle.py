"""One sleep cycle over a store: the order of sleep time's steps, each user's under that user's lock.

1. reconcile each user's entries added since their last sleep with older neighbours (``SleepRunner``);
2. bound each user's MTM to ``sleep.mtm_capacity`` (``Evictor``);
3. with ``sleep.ltm``, one consolidation cycle of the shared LTM graph (``LTMConsolidator``);
4. build the index's dense graph once enough points are in it, and checkpoint it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager

from .._journal import MemoryRows
from .._settings import SleepSettings
from .._sync._writer import ChangeWriter
from ..types import SleepReport
from ._consolidator import LTMConsolidator
from ._evictor import Evictor
from ._updater import SleepRunner


class SleepCycle:
    """Runs sleep time's steps in order; ``user_lock`` serialises each user's part with their writes."""

    def __init__(self, journal: MemoryRows, writer: ChangeWriter, sleeper: SleepRunner, evictor: Evictor,
                 consolidator: LTMConsolidator, user_lock: Callable[[str], AbstractContextManager[None]],
                 settings: SleepSettings, index_min_points: int) -> None:
        self.journal = journal
        self.writer = writer
        self.sleeper = sleeper
        self.evictor = evictor
        self.consolidator = consolidator
        self.user_lock = user_lock
        self.settings = settings
        self.index_min_points = index_min_points

    def run(self, scope: str | None) -> SleepReport:
        """One cycle for one user (``scope``) or all; the LTM step covers every user either way (the
        graph is shared)."""
        started = time.perf_counter()
        report = SleepReport()
        for uid in self.journal.sleep_pending(scope):
            with self.user_lock(uid):
                # read again under the lock: another process may have slept this user meanwhile
                ids = self.journal.sleep_pending(uid).get(uid, [])
                if ids:
                    report.add(self.sleeper.run_user(uid, ids))
        capacity = self.settings.mtm_capacity
        self.writer.flush_counters()  # eviction weighs access counts: the latest ones too
        for uid in self.journal.users_over_capacity(capacity, scope):
            with self.user_lock(uid):
                got = self.evictor.run_user(uid, capacity)
            report.evicted += got.evicted
            report.compressed += got.compressed
        if self.settings.ltm:
            report.ltm = self.consolidator.run()
        report.indexed = self.writer.build_index(self.index_min_points)
        self.writer.checkpoint()
        report.seconds = round(time.perf_counter() - started, 3)
        return report
