"""Library errors and framework errors as HTTP statuses with a one-line JSON body."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

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

log = logging.getLogger(__name__)

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


def error_response(status: int, error: str, detail: object) -> JSONResponse:
    return JSONResponse({"error": error, "detail": one_line(detail)}, status_code=status)


def validation_detail(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    more = len(exc.errors()) - 3
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def install_handlers(app: FastAPI) -> None:
    async def on_dialogmem(_: Request, exc: Exception) -> JSONResponse:
        status = status_for(exc)
        if status >= 500:
            log.error("request failed: %s: %s", type(exc).__name__, exc)
        return error_response(status, type(exc).__name__, exc)

    async def on_validation(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return error_response(422, "InputError", validation_detail(exc))

    async def on_http(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPException)
        return error_response(exc.status_code, "HTTPError", exc.detail)

    app.add_exception_handler(DialogmemError, on_dialogmem)
    app.add_exception_handler(Forbidden, on_dialogmem)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_http)
