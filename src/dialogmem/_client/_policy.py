"""The client's decisions, without I/O: where to connect, whether and when to retry, which error a
server's answer becomes, how an answer's body is read, and what an export stream held. ``Client`` and
``AsyncClient`` carry them out; neither decides anything of its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx
from pydantic import ValidationError

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
    ServerResponseError,
    ServerUnavailableError,
    StoreError,
)
from ..types import ExportReport
from ._calls import Call

T = TypeVar("T")

NDJSON = "application/x-ndjson"
URL_ENV = "DIALOGMEM_URL"
KEY_ENV = "DIALOGMEM_API_KEY"

#: the library's errors a server names in its error body, by name
_NAMED: dict[str, type[DialogmemError]] = {cls.__name__: cls for cls in (
    AuthError, ConfigError, DialogmemError, DiskFullError, InputError, LLMError, LLMOutputError, LLMTimeoutError,
    LLMUnavailableError, NotFoundError, SchemaVersionError, ServerResponseError, ServerUnavailableError, StoreError)}
#: the server's names of refusals that are not library errors
_NAMED.update({"Unauthorized": AuthError, "Forbidden": AuthError, "TooManyRequests": ServerUnavailableError,
               "RequestTimeout": ServerUnavailableError, "PayloadTooLarge": InputError})
#: the error of a status whose error body (the server's own: ``{"error": ..., "detail": ...}``) names no
#: known error. A body that is not the server's (a proxy's or gateway's page) never reaches this map:
#: a gateway's 502 or 504 says nothing about the LLM (see ``error_for``)
_BY_STATUS: dict[int, type[DialogmemError]] = {
    400: InputError, 401: AuthError, 403: AuthError, 404: NotFoundError, 408: ServerUnavailableError,
    413: InputError, 422: InputError, 429: ServerUnavailableError, 502: LLMError,
    503: ServerUnavailableError, 504: LLMTimeoutError,
}
#: statuses that mean "busy" whoever answers (the server or a proxy in front of it)
_BUSY = frozenset({429, 503})
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
    """(error name, message) of a server's error body (``{"error": ..., "detail": ...}``); the name is
    ``""`` when the body is not one (not JSON, or JSON without a text ``error``)."""
    try:
        data = json.loads(body)
    except ValueError:
        return "", _snippet(body)
    if not isinstance(data, dict) or not isinstance(data.get("error"), str) or not data["error"]:
        return "", _snippet(body)
    return data["error"], str(data.get("detail", ""))


def _snippet(body: bytes) -> str:
    """The start of a body that is not the server's JSON, on one line (for an error message)."""
    text = " ".join(body.decode("utf-8", "replace").split())
    return text[:200] + ("…" if len(text) > 200 else "")


def error_for(status: int, body: bytes) -> DialogmemError:
    """The library error an error status stands for. Only the server's own error body is read as a
    library error (its name, else its status); any other body (a proxy's HTML page, a gateway's 502
    or 504) is :class:`ServerResponseError`, or :class:`ServerUnavailableError` for a 429 / 503."""
    name, detail = _body(body)
    if not name:
        shown = f": {detail}" if detail else " (empty body)"
        if status in _BUSY:
            return ServerUnavailableError(f"the server answered HTTP {status}{shown}")
        return ServerResponseError(f"HTTP {status} without a dialogmem error body (a proxy or gateway in "
                                   f"front of the server?){shown}")
    if status == 409:
        return JobConflict(detail or "conflict")
    cls = _NAMED.get(name) or _BY_STATUS.get(status) or DialogmemError
    message = detail or f"the server answered HTTP {status}"
    if cls is LLMOutputError:
        return LLMOutputError(message)
    return cls(message)


def read_answer(call: Call[T], body: bytes, content_type: str | None) -> T:
    """A successful answer's body read into the call's result: a body that is not JSON (a proxy's
    page, an answer cut short) or not of the expected shape is :class:`ServerResponseError`, never
    a ``JSONDecodeError`` or a ``ValidationError``."""
    where = f"{call.method} {call.path}"
    try:
        data = json.loads(body)
    except ValueError:
        kind = (content_type or "no content type").split(";")[0].strip()
        return _bad(f"the answer to {where} is not JSON ({kind}, {len(body)} bytes: a proxy's page, or an "
                    f"answer cut short): {_snippet(body) or 'empty'}")
    try:
        return call.read(data)
    except DialogmemError:
        raise
    except (ValidationError, KeyError, IndexError, TypeError, ValueError) as exc:
        return _bad(f"the answer to {where} does not have the expected shape: {_problem(exc)}")


def _bad(message: str) -> Any:
    raise ServerResponseError(message)


def _problem(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        where = ".".join(map(str, err["loc"])) or "the body"
        return f"{where}: {err['msg']}"
    if isinstance(exc, KeyError):
        return f"no field {exc.args[0]!r}" if exc.args else "a field is missing"
    return f"{type(exc).__name__}: {exc}"


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


#: the ``kind`` of an export's last line: ``{"kind": "end", "records": N}``, N the lines between the
#: header and it. Without it a stream cut at a line boundary (an HTTP/1.0 answer, a dropped
#: connection) would read as a whole export.
END_KIND = "end"


class ExportTally:
    """Counts the lines of an export stream into the ``ExportReport`` that ``Memory.export`` gives, and
    checks that the stream is whole: a header first, a closing ``end`` line last whose count matches
    the lines between them, nothing after it."""

    def __init__(self, vectors: bool) -> None:
        self.report = ExportReport(users=[], vectors=vectors)
        self.lines = 0  # non-empty lines read, the header and the end line included
        self._records = 0  # lines after the header, before the end line
        self._header = False
        self._version = 0  # the header's format version: an end line is written from version 2 on
        self._end: int | None = None  # the end line's count, once read

    def add(self, line: str) -> None:
        if not line.strip():
            return
        self.lines += 1
        try:
            data = json.loads(line)
        except ValueError as exc:
            raise ServerResponseError(f"the export stream holds a line that is not JSON (line {self.lines}): "
                                      f"{_snippet(line.encode())}") from exc
        kind = data.get("kind") if isinstance(data, dict) else None
        if self._end is not None:
            raise ServerResponseError(f"the export stream goes on after its end line (line {self.lines})")
        if not self._header:
            if kind != "header":
                raise ServerResponseError("the export stream does not start with its header line")
            self._header = True
            self.report.users = list(data.get("users") or [])
            version = data.get("version")
            self._version = version if type(version) is int else 0
            return
        if kind == END_KIND:
            records = data.get("records")
            if type(records) is not int:
                raise ServerResponseError("the export stream's end line has no record count: "
                                          f"{_snippet(line.encode())}")
            self._end = records
            return
        self._records += 1
        if kind in ("turn", "quarantined", "memory", "history"):
            field = "turns" if kind == "turn" else "memories" if kind == "memory" else kind
            setattr(self.report, field, getattr(self.report, field) + 1)

    def finish(self) -> ExportReport:
        """The report of a whole stream; :class:`ServerResponseError` when it was cut short."""
        if not self._header:
            raise ServerResponseError("the export was cut short: the stream ended before its header line")
        if self._end is None and self._version == 1:  # an older server's export: it writes no end line
            return self.report
        if self._end is None:
            raise ServerResponseError(f"the export was cut short: the stream ended after {self._records} records "
                                      "without its end line")
        if self._end != self._records:
            raise ServerResponseError(f"the export was cut short: its end line counts {self._end} records, "
                                      f"the stream held {self._records}")
        return self.report
