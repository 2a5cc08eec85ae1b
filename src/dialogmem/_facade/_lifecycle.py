"""The lifecycle of an open store: the process lock on its directory, and the gate that lets calls
in while it is open and lets ``close`` wait for the calls in flight."""

from __future__ import annotations

import fcntl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .._errors import StoreError


class StoreLock:
    """An exclusive advisory lock on the data directory: one process writes a store at a time."""

    def __init__(self, path: Path) -> None:
        try:
            self._fh = open(path, "a+")  # noqa: SIM115 - held for the life of the store
        except OSError as exc:
            raise StoreError(f"cannot create the lock file {path}: {exc.strerror}") from exc
        try:
            fcntl.flock(self._fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            self._fh.close()
            raise StoreError(f"store {path.parent} is open in another process (open it with read_only=True to "
                             "read beside it)") from exc

    def release(self) -> None:
        if not self._fh.closed:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()


class CallGate:
    """Counts the calls in flight; once closed, new calls get ``StoreError`` and ``close`` waits
    for the running ones (so a call racing ``close`` never meets a half-closed journal)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active = 0
        self.closed = False

    @contextmanager
    def call(self) -> Iterator[None]:
        with self._cond:
            if self.closed:
                raise StoreError("this Memory is closed")
            self._active += 1
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    def close(self) -> bool:
        """Stop letting calls in and wait for the running ones; False if it was closed already."""
        with self._cond:
            if self.closed:
                return False
            self.closed = True
            while self._active:
                self._cond.wait()
            return True
