"""Who may talk to a server that checks no keys (``dialogmem ui``, ``serve --no-auth``): this machine's
programs, never a web page of another site.

Without keys every request acts as an admin, so the only thing that keeps a page the user happens to
visit from reading or changing their memories is the browser's same-origin rule. Two holes in it are
closed here:

* **DNS rebinding**: a page of ``evil.example`` whose name is made to resolve to 127.0.0.1 talks to
  the server as a same-origin page of ``evil.example``; its requests carry that name in ``Host``.
  Only loopback names are answered.
* **Simple requests**: a page may send a cross-origin POST without asking first (no CORS preflight)
  when its body is ``text/plain``, a form or ``multipart/form-data``, or when it has no body; it
  cannot read the answer, but the change is made. Requests that a browser marks as coming from
  another site (``Origin``, ``Sec-Fetch-Site``) are refused, and so is a POST whose body is not of the
  type the route declares (``application/json``; an import also takes ``application/x-ndjson`` and
  ``application/octet-stream``): a page can only send those after a preflight, which this server
  never grants. Other methods (PUT, PATCH, DELETE, ...) are never simple: a page must ask first, so
  they go on to the router, which answers a method a route does not declare with 405.

Pure decisions (:func:`refusal`) and a thin ASGI middleware (:class:`KeylessGuard`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

from ._auth import send_error

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]"})
JSON = "application/json"
#: body types a route may declare besides JSON (the import's JSON Lines, or raw bytes of them)
BODY_TYPES: dict[str, frozenset[str]] = {"/v1/import": frozenset({"application/x-ndjson", "application/octet-stream"})}
#: the one method with a body that a page may send to another origin without a preflight (GET and
#: HEAD change nothing here)
_SIMPLE_WITH_BODY = "POST"
_FETCH_SITES_OK = frozenset({"same-origin", "none"})


def header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    """The first value of header ``name`` (lower case), as text."""
    for k, v in headers:
        if k.lower() == name:
            return v.decode("latin-1").strip()
    return None


def host_name(host: str) -> str:
    """``Host`` without its port (an IPv6 literal keeps its brackets), lower case."""
    host = host.strip().lower()
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def loopback_host(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """Whether the request's ``Host`` names this machine's loopback (any port)."""
    return host_name(header(headers, b"host") or "") in LOOPBACK_NAMES


def media_type(content_type: str | None) -> str | None:
    """``Content-Type`` without its parameters, lower case (None when absent)."""
    if content_type is None:
        return None
    return content_type.split(";", 1)[0].strip().lower() or None


def cross_site(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """Why a browser says this request comes from another site, or None.

    ``Origin`` must name this server (scheme-less comparison of host and port against ``Host``);
    ``"null"`` (a sandboxed frame, a file) is another site. ``Sec-Fetch-Site`` must be
    ``same-origin`` or ``none`` (typed in the address bar)."""
    headers = list(headers)
    origin = header(headers, b"origin")
    if origin is not None:
        if origin == "null":
            return "Origin: null"
        if urlsplit(origin).netloc.lower() != (header(headers, b"host") or "").lower():
            return f"Origin {origin[:100]!r} is not this server"
    site = header(headers, b"sec-fetch-site")
    if site is not None and site.lower() not in _FETCH_SITES_OK:
        return f"Sec-Fetch-Site: {site[:40]}"
    return None


def refusal(method: str, path: str, headers: Iterable[tuple[bytes, bytes]], *, routed: bool = True) -> str | None:
    """Why a keyless server refuses this request, or None to let it through. ``routed``: whether a
    route takes this method on this path (a POST that none takes is answered 405 and changes nothing)."""
    headers = list(headers)
    if not loopback_host(headers):
        return "a server without keys answers to 127.0.0.1, localhost and [::1] only (Host)"
    why = cross_site(headers)
    if why is not None:
        return f"a server without keys refuses requests from web pages of another site ({why})"
    if method.upper() != _SIMPLE_WITH_BODY or not routed:
        return None
    kind = media_type(header(headers, b"content-type"))
    allowed = {JSON} | BODY_TYPES.get(path.rstrip("/"), frozenset())
    if kind not in allowed:
        return (f"a server without keys takes a POST body of type {' or '.join(sorted(allowed))} only "
                f"(got {kind or 'none'}): a web page cannot send those without asking first")
    return None


class KeylessGuard:
    """ASGI middleware of a server without keys: requests under ``prefixes`` that :func:`refusal`
    refuses get 403 before anything reads their body."""

    def __init__(self, app: ASGIApp, *, routes: Sequence[BaseRoute] = (),
                 prefixes: tuple[str, ...] = ("/v1", "/mcp")) -> None:
        self.app = app
        self.routes = routes
        self.prefixes = prefixes

    def _routed(self, scope: Scope) -> bool:
        return any(route.matches(scope)[0] is Match.FULL for route in self.routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(self.prefixes):
            why = refusal(scope["method"], scope["path"], scope.get("headers", []), routed=self._routed(scope))
            if why is not None:
                await send_error(send, 403, "Forbidden", why)
                return
        await self.app(scope, receive, send)
