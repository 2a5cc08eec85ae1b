"""Sleep runs as background jobs: at most one at a time per user (and one store-wide run)."""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from .._errors import DialogmemError
from ..types import SleepReport
from ._errors import Conflict
from ._models import SleepJob

log = logging.getLogger(__name__)

ALL = "*"  # the scope key of an admin's store-wide job


class SleepJobs:
    """Starts, tracks and remembers sleep jobs. ``run(user_id)`` does the work (``Memory.sleep``)."""

    def __init__(self, run: Callable[[str | None], SleepReport], *, kept: int, workers: int = 2) -> None:
        self._run = run
        self._kept = kept
        self._lock = threading.Lock()
        self._jobs: OrderedDict[str, SleepJob] = OrderedDict()
        self._busy: dict[str, str] = {}  # scope key -> job id queued or running
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dialogmem-sleep")

    def start(self, user_id: str | None) -> SleepJob:
        scope = user_id if user_id is not None else ALL
        with self._lock:
            if scope in self._busy:
                raise Conflict(f"a sleep job for this user is already running: {self._busy[scope]}")
            job = SleepJob(job_id=secrets.token_hex(8), user_id=user_id, status="queued", created_at=time.time())
            self._jobs[job.job_id] = job
            self._busy[scope] = job.job_id
            self._forget_old()
        self._pool.submit(self._work, job.job_id, scope)
        return job.model_copy()

    def get(self, job_id: str) -> SleepJob | None:
        with self._lock:
            job = self._jobs.get(job_id)
            return job.model_copy() if job is not None else None

    def close(self) -> None:
        """Wait for queued and running jobs."""
        self._pool.shutdown(wait=True)

    def _work(self, job_id: str, scope: str) -> None:
        self._set(job_id, status="running")
        try:
            report = self._run(None if scope == ALL else scope)
        except DialogmemError as exc:
            log.warning("sleep job %s failed: %s", job_id, exc)
            self._set(job_id, status="failed", error=f"{type(exc).__name__}: {exc}", finished_at=time.time())
        except Exception as exc:  # a bug must still end the job, visibly
            log.exception("sleep job %s crashed", job_id)
            self._set(job_id, status="failed", error=f"{type(exc).__name__}: {exc}", finished_at=time.time())
        else:
            self._set(job_id, status="done", report=report, finished_at=time.time())
        finally:
            with self._lock:
                self._busy.pop(scope, None)

    def _set(self, job_id: str, **changes: object) -> None:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is not None:
                self._jobs[job_id] = job.model_copy(update=changes)

    def _forget_old(self) -> None:
        busy = set(self._busy.values())
        while len(self._jobs) > self._kept + len(busy):
            oldest = next((j for j in self._jobs if j not in busy), None)
            if oldest is None:
                return
            del self._jobs[oldest]
