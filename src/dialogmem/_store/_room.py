"""Disk room for the embedded index: a change the disk cannot hold is refused, never a crash.

Qdrant Edge keeps a shard in memory-mapped files that are sized ahead of what they hold, in steps
of 32 MiB: WAL segments (two at a time), payload pages, BM25 pages, dense vector chunks. A new file
gets its full size at once but stays sparse; a page takes space on the file system when it is first
written — on tmpfs already when it is first touched, and loading a shard touches every page of its
payload and vector files. When the file system has no block left for such a page, the kernel has no
write call to fail: it kills the process with SIGBUS.

So before the index opens, and before each change is journaled, :class:`DiskRoom` checks that the
space free on the file system covers everything the index may still claim: the holes of its files
(bytes they are sized to but do not occupy yet), one growth step (a new file, filled at once),
the change itself, and a reserve for the journal's own share of the change and whatever else
shares the disk. When it does not, the change is refused with :class:`DiskFullError` before
anything is written. The index checks again right before it writes, without the reserve (the
journal may have used some of it meanwhile): that check is the one that keeps SIGBUS away.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .._errors import DiskFullError

log = logging.getLogger(__name__)

MIB = 2**20
#: the size Edge gives each new WAL segment, payload/BM25 page and vector chunk
GROWTH_STEP = 32 * MIB
#: what a new shard's files are sized to, all of which it claims as it fills: two WAL segments,
#: payload, BM25 and vector files of 32 MiB each, eight payload index maps of 2-4 MiB, id tracker
#: and flags (218 MiB measured for a new store's index)
NEW_SHARD = 7 * GROWTH_STEP
#: bytes one point may add besides ``point_bytes``' share per dimension (its dense vector twice,
#: WAL record and vector chunk, and its int8 copy): its payload, BM25 vector, payload index entries
#: and id tracker entries, rounded up generously
POINT_BASE = 8 * 1024
#: walking the index's files costs about 1 ms (a hundred files); with at least this much room to
#: spare beyond the last walk's figure, a check reuses that figure for up to RECHECK_S seconds or
#: RECHECK_BYTES of changes (a file Edge creates meanwhile adds at most one growth step of holes)
SPARE = 3 * GROWTH_STEP
RECHECK_S = 1.0
RECHECK_BYTES = 8 * MIB


@dataclass(frozen=True)
class Need:
    """What a change needs free on the file system, in bytes, and why."""

    holes: int
    growth: int
    change: int
    reserve: int

    @property
    def total(self) -> int:
        return self.holes + self.growth + self.change + self.reserve


def point_bytes(dim: int) -> int:
    """An upper bound on the disk bytes one point of ``dim`` dimensions adds to a shard."""
    return POINT_BASE + 9 * dim


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on the file system holding ``path`` (or the
    nearest directory above it that exists)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    st = os.statvfs(probe)
    return st.f_bavail * st.f_frsize


def hole_bytes(path: Path) -> int:
    """Bytes the files under ``path`` are sized to but do not occupy yet (0 when it is missing)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                st = os.stat(os.path.join(root, name))
            except FileNotFoundError:  # a WAL segment renamed or removed meanwhile
                continue
            total += max(0, st.st_size - st.st_blocks * 512)
    return total


class DiskRoom:
    """Checks the room on disk for the index stored at ``path``.

    ``reserve`` bytes are left free beyond anything the index may claim, for the journal and
    whatever else shares the file system.
    """

    def __init__(self, path: Path, *, reserve: int, label: str = "edge index") -> None:
        self.path = path
        self.reserve = reserve
        self.label = label
        self._lock = threading.Lock()
        self._holes: int | None = None  # the last walk's figure, reused while there is room to spare
        self._walked_at = 0.0
        self._since = 0  # change bytes checked since that walk

    def _holes_for(self, change: int, free: int) -> int:
        """The holes of the index's files: walked again unless the last figure is recent and the
        disk has room to spare beyond it."""
        with self._lock:
            holes = self._holes
            if (holes is None or time.monotonic() - self._walked_at >= RECHECK_S or self._since >= RECHECK_BYTES
                    or free < holes + SPARE + change + self.reserve):
                holes = hole_bytes(self.path)
                self._holes, self._walked_at, self._since = holes, time.monotonic(), 0
            self._since += change
            return holes

    def need(self, change: int, *, opening_new: bool = False, keep_reserve: bool = True) -> Need:
        """What ``change`` bytes need free now (the index's files walked afresh)."""
        return self._need(0 if opening_new else hole_bytes(self.path), change, opening_new, keep_reserve)

    def _need(self, holes: int, change: int, opening_new: bool, keep_reserve: bool) -> Need:
        return Need(holes=holes, growth=GROWTH_STEP, change=change + (NEW_SHARD if opening_new else 0),
                    reserve=self.reserve if keep_reserve else 0)

    def check(self, operation: str, change: int = 0, *, opening_new: bool = False,
              keep_reserve: bool = True) -> None:
        """Raise :class:`DiskFullError` when the file system cannot hold ``operation`` (and, with
        ``keep_reserve``, still keep the reserve free)."""
        free = free_bytes(self.path)
        need = self._need(0 if opening_new else self._holes_for(change, free), change, opening_new, keep_reserve)
        if free >= need.total:
            return
        log.error("refusing %s.%s: %.1f MiB free at %s, %.1f MiB needed", self.label, operation,
                  free / MIB, self.path, need.total / MIB)
        advice = ("Free some space and open it again; meanwhile the store can be opened read-only to search it."
                  if operation == "open" else
                  "Free some space: the journal keeps every acknowledged change and the index catches up with it "
                  "then; reads go on meanwhile.")
        raise DiskFullError(
            f"no room on disk for {self.label}.{operation}: {free / MIB:.1f} MiB free on the file system of "
            f"{self.path}, {need.total / MIB:.1f} MiB needed ({label_of(need, opening_new)}). {advice}")


def label_of(need: Need, opening_new: bool) -> str:
    """How ``need`` is made up, in words."""
    change = "a new index's files" if opening_new else "the change"
    return (f"the index files may still claim {need.holes / MIB:.1f} MiB, one growth step "
            f"{need.growth / MIB:.0f} MiB, {change} {need.change / MIB:.2f} MiB, reserve {need.reserve / MIB:.0f} MiB")
