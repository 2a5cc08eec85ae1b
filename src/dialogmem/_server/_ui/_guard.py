"""ASGI middleware in front of ``/ui``: security headers on every response, and the session behind
the cookie resolved to its API key (checked again on each request, so a revoked key signs out).

It sits between the REST key check and the rate limiter: a signed-in browser is counted under its
key like any other client of that key. Routes still decide: a page without a session goes to the
sign-in page (``_web.PrincipalDep``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from http.cookies import SimpleCookie

import anyio.to_thread
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..._apikeys import ApiKey
from ..._errors import StoreError
from .._auth import NO_AUTH, send_error
from .._origin import loopback_host
from ._session import COOKIE, Sessions

log = logging.getLogger(__name__)

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; "
       "base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
)


def session_token(scope: Scope) -> str | None:
    """The inspector's cookie value in this request, if any."""
    for name, value in scope.get("headers", []):
        if name == b"cookie":
            jar: SimpleCookie = SimpleCookie()
            try:
                jar.load(value.decode("latin-1"))
            except Exception:  # a malformed Cookie header is no session, not a fault
                continue
            if COOKIE in jar:
                return jar[COOKIE].value
    return None


class UIGuard:
    """``verify`` is the key check (``Memory.verify_key``), or None for a store served without keys."""

    def __init__(self, app: ASGIApp, *, sessions: Sessions, verify: Callable[[str], ApiKey | None] | None,
                 prefix: str = "/ui") -> None:
        self.app = app
        self.sessions = sessions
        self.verify = verify
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path != self.prefix and not path.startswith(self.prefix + "/"):
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *HEADERS]}
            await send(message)

        if self.verify is None and not loopback_host(scope.get("headers", [])):
            # without keys anyone who reaches a page is an admin: a page of another site that
            # rebinds its name to 127.0.0.1 arrives with that name as Host, and is refused
            await send_error(send_with_headers, 403, "Forbidden", "the keyless inspector answers to 127.0.0.1 "
                                                                  "and localhost only")
            return
        session = self.sessions.find(session_token(scope))
        if session is not None:
            if self.verify is None:
                key: ApiKey | None = NO_AUTH
            else:
                try:
                    key = await anyio.to_thread.run_sync(self.verify, session.key)
                except StoreError as exc:
                    log.error("key check failed: %s: %s", type(exc).__name__, exc)
                    await send_error(send_with_headers, 503, type(exc).__name__, str(exc))
                    return
            if key is None:  # revoked since sign-in
                self.sessions.close(session.token)
            else:
                state = scope.setdefault("state", {})
                state["ui_session"] = session
                state["key"] = key
        await self.app(scope, receive, send_with_headers)
