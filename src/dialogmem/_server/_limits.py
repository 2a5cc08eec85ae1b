"""Request limits: a body-size cap enforced before parsing, a deadline for the body to arrive,
per-key rate limits, and batch-size checks (pure)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._errors import InputError
from .._settings import ServerSettings
from ._auth import send_error

log = logging.getLogger(__name__)
#: POST routes that may call the LLM (extraction, planning, answering, MCP tools)
LLM_ROUTES = frozenset({"/v1/answer", "/v1/search", "/v1/memories", "/v1/conversations", "/v1/quarantine/retry",
                        "/mcp"})


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` gets 413 and is never parsed.

    A declared ``Content-Length`` is checked first; a chunked body is read up to the limit, then
    replayed to the app (bodies are small: the limit is a few MiB)."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, streamed: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.streamed = streamed  # paths whose route reads the body as a stream under its own limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS") or scope["path"] in self.streamed:
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and (len(declared) > 18 or int(declared) > self.max_bytes):
            await self._refuse(send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        await send_error(send, 413, "PayloadTooLarge",
                         f"request body over {self.max_bytes} bytes (server.max_body_bytes); send less per request")


def check_batch(what: str, count: int, limit: int, setting: str) -> None:
    if count > limit:
        raise InputError(f"too many {what} in one request: {count} > {limit} (server.{setting}); "
                         "split them over several requests")


#: the largest request line plus headers uvicorn (h11) reads; its default, 16 KiB, is below what the
#: routes' own query limits allow (``filters`` 4,096 characters, each up to 12 bytes percent-encoded),
#: and past it uvicorn answers a plain-text 400 that no route declares
MAX_REQUEST_HEAD = 128 * 1024


def uvicorn_options(settings: ServerSettings) -> dict[str, Any]:
    """The settings uvicorn itself enforces (``dialogmem serve`` and ``dialogmem mcp --http``)."""
    return {"timeout_keep_alive": settings.keep_alive_s, "h11_max_incomplete_event_size": MAX_REQUEST_HEAD}


class _BodyTimedOut(Exception):
    """The client did not send the whole request body before the deadline."""


class BodyTimeout:
    """ASGI middleware: the request body must arrive in full within ``seconds`` of the request's
    start, else 408 and the connection is closed (uvicorn itself only times out idle keep-alive
    connections, so a client announcing 100 bytes and sending 10 would hold a connection forever).

    Reads after the last body chunk (a streaming response waiting for the disconnect) are not timed.
    On ``streamed`` paths (an import of up to ``server.max_import_bytes``, which no link sends in 15 s)
    the limit is an idle one: each part of the body must arrive within ``seconds`` of the previous."""

    def __init__(self, app: ASGIApp, *, seconds: float, streamed: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.seconds = seconds
        self.streamed = streamed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        deadline = anyio.current_time() + self.seconds
        idle = scope["path"] in self.streamed
        body_done = False
        started = False

        async def timed_receive() -> Message:
            nonlocal body_done, deadline
            if body_done:
                return await receive()
            try:
                with anyio.fail_after(max(deadline - anyio.current_time(), 0.0)):
                    message = await receive()
            except TimeoutError:
                raise _BodyTimedOut from None
            body_done = message["type"] != "http.request" or not message.get("more_body", False)
            if idle:
                deadline = anyio.current_time() + self.seconds
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, timed_receive, tracked_send)
        except _BodyTimedOut:
            log.warning("request body of %s %s not received within %.1f s", scope["method"], scope["path"],
                        self.seconds)
            if not started:
                what = "no part of the request body arrived for" if idle else "the request body did not arrive within"
                await send_error(send, 408, "RequestTimeout", f"{what} {self.seconds:g} s (server.body_timeout_s)",
                                 [(b"connection", b"close")])


@dataclass
class TokenBucket:
    """``rate`` tokens a second, at most ``capacity`` saved up; each request takes one (pure: the
    caller passes the clock)."""

    rate: float
    capacity: float
    tokens: float
    stamp: float

    def take(self, now: float) -> float:
        """0.0 when a token was taken, else the seconds until the next one."""
        self.tokens = min(self.capacity, self.tokens + max(now - self.stamp, 0.0) * self.rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.rate


class RateLimit:
    """ASGI middleware behind the key check: per API key, at most ``per_second`` requests a second
    on average (``burst`` at once), and at most ``llm_calls`` requests running at once on
    :data:`LLM_ROUTES`; past either, 429 with ``Retry-After`` (whole seconds). 0 turns a limit off.

    Requests without a key (``/health``, ``/docs``) are not counted. The counters live on this
    object, one entry per key seen, and are only touched from the event loop."""

    def __init__(self, app: ASGIApp, *, per_second: float, burst: int, llm_calls: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self.per_second = per_second
        self.burst = burst
        self.llm_calls = llm_calls
        self.clock = clock
        self._buckets: dict[str, TokenBucket] = {}
        self._running: dict[str, int] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = scope.get("state", {}).get("key") if scope["type"] == "http" else None
        if key is None:
            await self.app(scope, receive, send)
            return
        wait = self._take(key.key_id)
        if wait > 0:
            await _too_many(send, wait, f"key {key.key_id} is over server.requests_per_second = "
                                        f"{self.per_second:g} (burst {self.burst})")
            return
        if not self.llm_calls or scope["method"] != "POST" or scope["path"].rstrip("/") not in LLM_ROUTES:
            await self.app(scope, receive, send)
            return
        running = self._running.get(key.key_id, 0)
        if running >= self.llm_calls:
            await _too_many(send, 1.0, f"key {key.key_id} already has {running} requests that may call the LLM "
                                       f"running (server.llm_calls_per_key = {self.llm_calls})")
            return
        self._running[key.key_id] = running + 1
        try:
            await self.app(scope, receive, send)
        finally:
            left = self._running[key.key_id] - 1
            if left:
                self._running[key.key_id] = left
            else:
                del self._running[key.key_id]

    def _take(self, key_id: str) -> float:
        if not self.per_second:
            return 0.0
        now = self.clock()
        bucket = self._buckets.get(key_id)
        if bucket is None:
            bucket = self._buckets[key_id] = TokenBucket(self.per_second, float(self.burst), float(self.burst), now)
        return bucket.take(now)


async def _too_many(send: Send, wait: float, detail: str) -> None:
    seconds = max(1, math.ceil(wait))
    await send_error(send, 429, "TooManyRequests", f"{detail}; retry in {seconds} s",
                     [(b"retry-after", str(seconds).encode())])
