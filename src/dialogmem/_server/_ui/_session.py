"""Sign-in sessions of the inspector and their CSRF tokens.

The cookie holds a random session token, never the API key: the key stays in this process's
session table (one per app, lost at restart) and is checked again on every request, so a revoked
key ends its sessions at once. A session's CSRF token is an HMAC of its token under a secret drawn
at start, so a page can carry it and no other session's token matches.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

COOKIE = "dialogmem_ui"
#: a session ends after this many seconds without a request
IDLE_S = 8 * 3600.0
#: at most this many sessions are kept in all ...
MAX_SESSIONS = 1000
#: ... and at most this many of one key: a key's least recently used session makes room for its new one
MAX_PER_KEY = 20


@dataclass(frozen=True)
class Session:
    """One signed-in browser: ``key`` is the API key text it signed in with ("" without keys)."""

    token: str
    key: str
    csrf: str


class Sessions:
    """The session table of one app. Thread-safe; entries expire after ``idle_s`` without use.

    Signing in never signs another key out: a key holds at most ``max_per_key`` sessions (its own
    least recently used one goes), and when the whole table is full the room is made by the key that
    holds the most sessions (its least recently used one), so a key that signs in a thousand times
    evicts its own sessions, never another key's."""

    def __init__(self, *, idle_s: float = IDLE_S, max_sessions: int = MAX_SESSIONS,
                 max_per_key: int = MAX_PER_KEY) -> None:
        self._secret = secrets.token_bytes(32)
        self._idle_s = idle_s
        self._max = max_sessions
        self._max_per_key = max_per_key
        self._lock = threading.Lock()
        self._rows: OrderedDict[str, tuple[str, float]] = OrderedDict()  # token digest -> (key, last use)
        self._by_key: dict[str, OrderedDict[str, None]] = {}  # key -> its token digests, least recent first

    def open(self, key: str) -> Session:
        token = secrets.token_urlsafe(32)
        digest = self._digest(token)
        with self._lock:
            self._drop_expired(time.monotonic())
            mine = self._by_key.setdefault(key, OrderedDict())
            while len(mine) >= self._max_per_key:
                self._remove(next(iter(mine)))
            while len(self._rows) >= self._max:
                self._remove(self._victim())
            self._rows[digest] = (key, time.monotonic())
            self._by_key.setdefault(key, OrderedDict())[digest] = None
        return Session(token=token, key=key, csrf=self.csrf_for(token))

    def count(self, key: str | None = None) -> int:
        """Live sessions (of ``key``, or of every key)."""
        with self._lock:
            return len(self._rows) if key is None else len(self._by_key.get(key, ()))

    def _victim(self) -> str:
        """The session that makes room in a full table: the least recently used one of the keys
        holding the most sessions (only when every key holds one is it the table's oldest)."""
        most = max(map(len, self._by_key.values()))
        return next(d for d, (key, _) in self._rows.items() if len(self._by_key[key]) == most)

    def _remove(self, digest: str) -> None:
        row = self._rows.pop(digest, None)
        if row is None:
            return
        mine = self._by_key.get(row[0])
        if mine is not None:
            mine.pop(digest, None)
            if not mine:
                del self._by_key[row[0]]

    def _drop_expired(self, now: float) -> None:
        while self._rows:
            digest, (_, used) = next(iter(self._rows.items()))
            if now - used <= self._idle_s:
                return
            self._remove(digest)

    def find(self, token: str | None) -> Session | None:
        """The live session of this cookie value, or None (unknown, expired, signed out)."""
        if not token:
            return None
        digest = self._digest(token)
        now = time.monotonic()
        with self._lock:
            row = self._rows.get(digest)
            if row is None:
                return None
            if now - row[1] > self._idle_s:
                self._remove(digest)
                return None
            self._rows[digest] = (row[0], now)
            self._rows.move_to_end(digest)
            self._by_key[row[0]].move_to_end(digest)
        return Session(token=token, key=row[0], csrf=self.csrf_for(token))

    def close(self, token: str | None) -> None:
        if token:
            with self._lock:
                self._remove(self._digest(token))

    def csrf_for(self, token: str) -> str:
        return hmac.new(self._secret, b"csrf:" + token.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, session: Session, sent: str | None) -> bool:
        return bool(sent) and hmac.compare_digest(session.csrf, sent or "")

    def _digest(self, token: str) -> str:
        # the table holds digests: a dump of this process's memory shows no usable cookie
        return hmac.new(self._secret, b"session:" + token.encode(), hashlib.sha256).hexdigest()
