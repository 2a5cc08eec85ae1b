"""Who is calling: the API-key check (an ASGI middleware in front of every protected path) and the
rule that decides which user a request may act for.

A request to a protected path without a valid key never reaches a route (401). A user key reaches
its own user only: a route's ``user_id`` must be that user or be left out (then it is implied);
any other user id is refused with 403 and the same message whether or not that user exists. An
admin key reaches every user.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable

import anyio.to_thread
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._apikeys import ApiKey
from .._errors import InputError, StoreError

log = logging.getLogger(__name__)

#: the principal of a server started with ``--no-auth`` (loopback only)
NO_AUTH = ApiKey(key_id="no-auth", role="admin", label="--no-auth", created_at=0.0)
MISSING = "missing API key: send 'Authorization: Bearer KEY' or 'X-API-Key: KEY'"
INVALID = "invalid or revoked API key"
FORBIDDEN = "this key does not reach that user"


class Forbidden(Exception):
    """The key is valid but does not reach the user the request names."""


def key_from_headers(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The key of ``Authorization: Bearer KEY`` or ``X-API-Key: KEY`` (the first one given)."""
    for name, value in headers:
        lname = name.lower()
        text = value.decode("latin-1").strip()
        if lname == b"authorization":
            scheme, _, rest = text.partition(" ")
            if scheme.lower() == "bearer" and rest.strip():
                return rest.strip()
        elif lname == b"x-api-key" and text:
            return text
    return None


def scope_user(key: ApiKey, user_id: str | None) -> str:
    """The one user this request acts for."""
    if user_id is None:
        if key.user_id is None:
            raise InputError("user_id is required with an admin key")
        return key.user_id
    if not key.reaches(user_id):
        raise Forbidden(FORBIDDEN)
    return user_id


def scope_user_or_all(key: ApiKey, user_id: str | None) -> str | None:
    """Like :func:`scope_user`, but an admin key without a user id means every user (None)."""
    if user_id is None and key.role == "admin":
        return None
    return scope_user(key, user_id)


class KeyAuth:
    """ASGI middleware: paths under ``protected`` need a valid key; the key lands in ``request.state.key``.

    ``verify`` is ``None`` for a ``--no-auth`` server: every request then acts as an admin.
    """

    def __init__(self, app: ASGIApp, *, verify: Callable[[str], ApiKey | None] | None,
                 protected: tuple[str, ...] = ("/v1",)) -> None:
        self.app = app
        self.verify = verify
        self.protected = protected

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(self.protected):
            await self.app(scope, receive, send)
            return
        if self.verify is None:
            key: ApiKey | None = NO_AUTH
        else:
            text = key_from_headers(scope.get("headers", []))
            if text is None:
                await send_error(send, 401, "Unauthorized", MISSING)
                return
            try:
                key = await anyio.to_thread.run_sync(self.verify, text)
            except StoreError as exc:  # the journal is down: the same 503 as on any route
                log.error("key check failed: %s: %s", type(exc).__name__, exc)
                await send_error(send, 503, type(exc).__name__, str(exc))
                return
            if key is None:
                await send_error(send, 401, "Unauthorized", INVALID)
                return
        scope.setdefault("state", {})["key"] = key
        await self.app(scope, receive, send)


async def send_error(send: Send, status: int, error: str, detail: str,
                     extra_headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    """A one-line JSON error body, written straight to the ASGI channel."""
    body = json.dumps({"error": error, "detail": " ".join(detail.split())[:2000]}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               *extra_headers]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    start: Message = {"type": "http.response.start", "status": status, "headers": headers}
    await send(start)
    await send({"type": "http.response.body", "body": body})
