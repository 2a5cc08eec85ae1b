"""The client's decisions, without I/O: where to connect, whether and when to retry, which error a
server's answer becomes, and what an export stream held. ``Client`` and ``AsyncClient`` carry them
out; neither decides anything of its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from .._errors import (
    AuthError,
    ConfigError,
    DialogmemError,
    DiskFullError,
    InputError,
    LLMError,
    LLMOutputError,
    LLMTimeoutError,
    LLMUnavailableError,
    NotFoundError,
    SchemaVersionError,
    ServerUnavailableError,
    StoreError,
)
from .._types import ExportReport
from ._calls import Call

NDJSON = "application/x-ndjson"
URL_ENV = "DIALOGMEM_URL"
KEY_ENV = "DIALOGMEM_API_KEY"

#: the library's errors a server names in its error body, by name
_NAMED: dict[str, type[DialogmemError]] = {cls.__name__: cls for cls in (
    AuthError, ConfigError, DialogmemError, DiskFullError, InputError, LLMError, LLMOutputError, LLMTimeoutError,
    LLMUnavailableError, NotFoundError, SchemaVersionError, ServerUnavailableError, StoreError)}
#: the server's names of refusals that are not library errors
_NAMED.update({"Unauthorized": AuthError, "Forbidden": AuthError, "TooManyRequests": ServerUnavailableError,
               "RequestTimeout": ServerUnavailableError, "PayloadTooLarge": InputError})
#: the error of a status whose body names no known error
_BY_STATUS: dict[int, type[DialogmemError]] = {
    400: InputError, 401: AuthError, 403: AuthError, 404: NotFoundError, 408: ServerUnavailableError,
    413: InputError, 422: InputError, 429: ServerUnavailableError, 502: LLMOutputError,
    503: ServerUnavailableError, 504: LLMTimeoutError,
}
#: 503s that another try will not cure: no LLM configured, a full disk
_LASTING = frozenset({"LLMUnavailableError", "DiskFullError"})


class JobConflict(DialogmemError):
    """409: a sleep job of the same user is already queued or running on the server."""


@dataclass(frozen=True)
class Target:
    """Where the client connects, and with which key (``None``: a server started with ``--no-auth``)."""

    url: str
    api_key: str | None


def target(url: str | None, api_key: str | None, env: Mapping[str, str]) -> Target:
    """The server URL and key: the arguments, else ``DIALOGMEM_URL`` / ``DIALOGMEM_API_KEY``."""
    url = url or env.get(URL_ENV) or None
    if url is None:
        raise ConfigError(f"no dialogmem server given: pass Client(url=...) or set {URL_ENV} "
                          "(e.g. http://127.0.0.1:8420)")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"the server URL must be http(s)://host[:port], got {url!r}")
    return Target(url=url.rstrip("/"), api_key=api_key or env.get(KEY_ENV) or None)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to wait: ``retries`` more tries after the first, waits growing from
    ``backoff`` seconds (doubling, at most ``max_wait``), or the server's ``Retry-After``."""

    retries: int = 4
    backoff: float = 0.2
    max_wait: float = 10.0
    max_retry_after: float = 60.0

    def __post_init__(self) -> None:
        if self.retries < 0 or self.backoff < 0 or self.max_wait < 0:
            raise ConfigError("retries, backoff and max_wait cannot be negative")

    def wait(self, attempt: int, jitter: float) -> float:
        """The pause before try ``attempt + 1`` (``jitter`` in [0, 1) spreads clients apart)."""
        return min(self.max_wait, self.backoff * 2 ** attempt) * (0.5 + jitter / 2)

    def after_failure(self, attempt: int, failure: httpx.TransportError, *, safe: bool, jitter: float) -> float | None:
        """Seconds to wait before sending again after a transport failure, or None to give up. A
        request that never reached the server is always sent again; one whose answer was lost only
        when sending it twice changes nothing (``safe``)."""
        if attempt >= self.retries:
            return None
        if not safe and not never_sent(failure):
            return None
        return self.wait(attempt, jitter)

    def after_status(self, attempt: int, status: int, body: bytes, retry_after: str | None, *,
                     jitter: float) -> float | None:
        """Seconds to wait before sending again after an error status, or None to give up: 429
        (after ``Retry-After``) and 503 (unless it names a lasting cause) are sent again."""
        if attempt >= self.retries or status not in (429, 503):
            return None
        if status == 503 and _body(body)[0] in _LASTING:
            return None
        waited = self.wait(attempt, jitter)
        if retry_after is not None:
            try:
                asked = float(retry_after)
            except ValueError:
                asked = waited
            if asked > self.max_retry_after:
                return None
            waited = max(waited, asked)
        return waited


def payload(call: Call[Any], content: Any) -> dict[str, Any]:
    """The body arguments of a request: the call's JSON, or ``content`` streamed as JSON Lines."""
    if content is not None:
        return {"content": content, "headers": {"Content-Type": NDJSON}}
    return {"json": call.body} if call.body is not None else {}


def never_sent(failure: httpx.TransportError) -> bool:
    """Whether the request surely never reached the server (no connection was made)."""
    return isinstance(failure, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)


def _body(body: bytes) -> tuple[str, str]:
    """(error name, message) of a server's error body (``{"error": ..., "detail": ...}``)."""
    try:
        data = json.loads(body)
    except ValueError:
        return "", body.decode("utf-8", "replace").strip()[:500]
    if not isinstance(data, dict):
        return "", str(data)[:500]
    return str(data.get("error", "")), str(data.get("detail", ""))


def error_for(status: int, body: bytes) -> DialogmemError:
    """The library error a server's answer stands for, with the server's message."""
    name, detail = _body(body)
    if status == 409:
        return JobConflict(detail or "conflict")
    cls = _NAMED.get(name) or _BY_STATUS.get(status) or DialogmemError
    message = detail or f"the server answered HTTP {status}"
    if cls is LLMOutputError:
        return LLMOutputError(message)
    return cls(message)


def job_error(text: str | None) -> DialogmemError:
    """The error of a failed sleep job (``"<ErrorName>: <message>"``)."""
    name, _, message = (text or "").partition(": ")
    cls = _NAMED.get(name, DialogmemError)
    if cls is LLMOutputError:
        return LLMOutputError(message or name)
    return cls(message or name or "the sleep job failed")


def unreachable(url: str, failure: httpx.TransportError, *, tries: int) -> ServerUnavailableError:
    what = "could not be reached" if never_sent(failure) else "broke off before answering"
    return ServerUnavailableError(f"the dialogmem server at {url} {what} ({type(failure).__name__}: "
                                  f"{failure or 'no detail'}) after {tries} tries")


def poll_wait(polls: int) -> float:
    """Seconds between two looks at a running sleep job: quick at first, then once a second."""
    return min(1.0, 0.05 * 2 ** polls)


class ExportTally:
    """Counts the lines of an export stream into the ``ExportReport`` that ``Memory.export`` gives."""

    def __init__(self, vectors: bool) -> None:
        self.report = ExportReport(users=[], vectors=vectors)
        self.lines = 0

    def add(self, line: str) -> None:
        if not line.strip():
            return
        self.lines += 1
        try:
            data = json.loads(line)
        except ValueError as exc:
            raise ServerUnavailableError(f"the export stream holds a line that is not JSON (line {self.lines})"
                                         ) from exc
        kind = data.get("kind") if isinstance(data, dict) else None
        if kind == "header":
            self.report.users = list(data.get("users") or [])
        elif kind in ("turn", "quarantined", "memory", "history"):
            field = "turns" if kind == "turn" else "memories" if kind == "memory" else kind
            setattr(self.report, field, getattr(self.report, field) + 1)
