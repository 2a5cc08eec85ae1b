"""Request limits: a body-size cap enforced before parsing, and batch-size checks (pure)."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._errors import InputError
from ._auth import send_error


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` gets 413 and is never parsed.

    A declared ``Content-Length`` is checked first; a chunked body is read up to the limit, then
    replayed to the app (bodies are small: the limit is a few MiB)."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
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
