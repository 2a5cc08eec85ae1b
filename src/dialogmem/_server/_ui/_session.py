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
#: at most this many sessions are kept; the least recently used one goes first
MAX_SESSIONS = 1000


@dataclass(frozen=True)
class Session:
    """One signed-in browser: ``key`` is the API key text it signed in with ("" without keys)."""

    token: str
    key: str
    csrf: str


class Sessions:
    """The session table of one app. Thread-safe; entries expire after ``idle_s`` without use."""

    def __init__(self, *, idle_s: float = IDLE_S, max_sessions: int = MAX_SESSIONS) -> None:
        self._secret = secrets.token_bytes(32)
        self._idle_s = idle_s
        self._max = max_sessions
        self._lock = threading.Lock()
        self._rows: OrderedDict[str, tuple[str, float]] = OrderedDict()  # token digest -> (key, last use)

    def open(self, key: str) -> Session:
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._rows[self._digest(token)] = (key, time.monotonic())
            while len(self._rows) > self._max:
                self._rows.popitem(last=False)
        return Session(token=token, key=key, csrf=self.csrf_for(token))

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
                del self._rows[digest]
                return None
            self._rows[digest] = (row[0], now)
            self._rows.move_to_end(digest)
        return Session(token=token, key=row[0], csrf=self.csrf_for(token))

    def close(self, token: str | None) -> None:
        if token:
            with self._lock:
                self._rows.pop(self._digest(token), None)

    def csrf_for(self, token: str) -> str:
        return hmac.new(self._secret, b"csrf:" + token.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, session: Session, sent: str | None) -> bool:
        return bool(sent) and hmac.compare_digest(session.csrf, sent or "")

    def _digest(self, token: str) -> str:
        # the table holds digests: a dump of this process's memory shows no usable cookie
        return hmac.new(self._secret, b"session:" + token.encode(), hashlib.sha256).hexdigest()
