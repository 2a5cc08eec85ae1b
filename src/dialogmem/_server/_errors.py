"""Library errors and framework errors as HTTP statuses with a one-line JSON body."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute, Match
from starlette.types import Scope

from .._errors import (
    ConfigError,
    DialogmemError,
    InputError,
    LLMError,
    LLMTimeoutError,
    LLMUnavailableError,
    NotFoundError,
    SchemaVersionError,
    StoreError,
)
from ._auth import Forbidden
from ._models import ErrorBody

log = logging.getLogger(__name__)

#: what each error status means, as the OpenAPI document describes it
_MEANING: dict[int, str] = {
    400: "the request body could not be read",
    401: "missing, invalid or revoked API key",
    403: "this key does not reach that user",
    404: "no such record in this user's scope",
    408: "the request body did not arrive in full within server.body_timeout_s",
    409: "a sleep job of the same user is already queued or running",
    413: "the request body is over server.max_body_bytes",
    422: "a parameter or body field that cannot be accepted",
    429: "too many requests for this key; retry after Retry-After seconds",
    500: "a server fault",
    502: "the LLM answered with unusable output",
    503: "the journal or the LLM cannot be reached (or no LLM is configured)",
    504: "the LLM ran past its timeout",
}
#: the headers an error status carries besides the body
_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"description": "always `Bearer`", "schema": {"type": "string"}}},
    429: {"Retry-After": {"description": "seconds to wait before the next request", "required": True,
                          "schema": {"type": "integer", "minimum": 0}}},
}

#: most specific first
_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (Forbidden, 403),
    (InputError, 422),
    (NotFoundError, 404),
    (LLMUnavailableError, 503),
    (LLMTimeoutError, 504),
    (LLMError, 502),
    (SchemaVersionError, 500),
    (StoreError, 503),
    (ConfigError, 500),
    (DialogmemError, 500),
)


class Conflict(DialogmemError):
    """The request collides with work in progress (a sleep job of the same user)."""


def status_for(exc: Exception) -> int:
    if isinstance(exc, Conflict):
        return 409
    for kind, status in _STATUS:
        if isinstance(exc, kind):
            return status
    return 500


def one_line(text: object) -> str:
    return " ".join(str(text).split())[:2000]


def error_response(status: int, error: str, detail: object,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": error, "detail": one_line(detail)}, status_code=status, headers=headers)


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of these error statuses: each one the :class:`ErrorBody` sent."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        out[status] = {"model": ErrorBody, "description": _MEANING[status]}
        if status in _HEADERS:
            out[status]["headers"] = _HEADERS[status]
    return out


def validation_detail(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    more = len(exc.errors()) - 3
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


#: what any /v1 route can answer: key refused, user not reached, bad input, rate limit, faults
COMMON_ERRORS: tuple[int, ...] = (401, 403, 422, 429, 500, 503)
#: what a route with a JSON body can answer besides: an unreadable, a late or an oversized body
BODY_ERRORS: tuple[int, ...] = (400, 408, 413)
#: what a route that may call the LLM can answer besides (503 is common already)
LLM_ERRORS: tuple[int, ...] = (502, 504)


def allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this request's path."""
    return sorted(_methods_at(request.app.router.routes, request.scope))


def _methods_at(routes: Iterable[BaseRoute], scope: Scope) -> set[str]:
    methods: set[str] = set()
    for route in routes:
        included = getattr(route, "original_router", None)  # FastAPI >= 0.165 keeps included routers whole
        if included is not None:
            methods |= _methods_at(included.routes, scope)
        elif route.matches(scope)[0] is not Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return methods


def install_handlers(app: FastAPI) -> None:
    async def on_dialogmem(_: Request, exc: Exception) -> JSONResponse:
        status = status_for(exc)
        if status >= 500:
            log.error("request failed: %s: %s", type(exc).__name__, exc)
        return error_response(status, type(exc).__name__, exc)

    async def on_validation(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return error_response(422, "InputError", validation_detail(exc))

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # Starlette names the methods of the first route of the path only
            headers["Allow"] = ", ".join(allowed_methods(request))
        return error_response(exc.status_code, "HTTPError", exc.detail, headers)

    async def on_crash(_: Request, exc: Exception) -> JSONResponse:
        # a bug: the client gets the same JSON shape; Starlette logs the traceback and re-raises
        return error_response(500, "InternalError", "the server failed on this request; see its log")

    app.add_exception_handler(DialogmemError, on_dialogmem)
    app.add_exception_handler(Forbidden, on_dialogmem)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(Exception, on_crash)
