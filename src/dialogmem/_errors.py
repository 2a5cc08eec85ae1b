"""Errors raised by dialogmem.

Every error derives from one root::

    DialogmemError
    ├── ConfigError            bad or inconsistent configuration, missing optional package
    ├── InputError             a message, timestamp or argument that cannot be accepted
    ├── NotFoundError          an id that does not exist in the caller's scope
    ├── AuthError              a server refused the API key, or the key does not reach that user
    ├── StoreError             the vector index or the journal failed
    │   ├── SchemaVersionError the store was written by a newer dialogmem
    │   ├── DiskFullError      no room on disk for the index's next change (nothing was written)
    │   └── ServerUnavailableError  a dialogmem server could not be reached, or broke off its answer
    └── LLMError               the configured LLM could not be used
        ├── LLMUnavailableError  no LLM configured, or the backend cannot be reached
        ├── LLMTimeoutError      a call ran past its timeout after all retries
        └── LLMOutputError       the model answered, but never with usable output

Backend exceptions (sqlite3, qdrant, openai, llama.cpp) are mapped to these at the boundary,
with the original kept as ``__cause__``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class DialogmemError(Exception):
    """Root of every error dialogmem raises."""


class ConfigError(DialogmemError):
    """The configuration is invalid, or names a backend whose package is not installed."""


class InputError(DialogmemError, ValueError):
    """Input that cannot be accepted (empty message, bad timestamp, bad id...)."""


class NotFoundError(DialogmemError, KeyError):
    """No record with this id in the caller's scope (another user's id reads the same)."""

    def __str__(self) -> str:  # KeyError quotes its argument; we want the plain message
        return str(self.args[0]) if self.args else "not found"


class AuthError(DialogmemError):
    """A dialogmem server refused the API key (missing, invalid, revoked: HTTP 401), or the key does
    not reach the user the call names (403)."""


class StoreError(DialogmemError):
    """The vector index or the journal failed."""


class SchemaVersionError(StoreError):
    """The store on disk was written by a newer, incompatible version."""


class DiskFullError(StoreError):
    """The file system holding the embedded index has no room for a change: it was refused before
    anything was written, and is accepted again once space is freed."""


class ServerUnavailableError(StoreError):
    """A dialogmem server (``Client``) could not be reached, kept answering "busy" (503, 429) after
    every retry, or the connection broke before its answer arrived."""


class ServerResponseError(ServerUnavailableError):
    """A dialogmem server's answer (``Client``) could not be read as the call's answer: a body that is
    not JSON or not of the expected shape (a proxy's HTML page, an answer cut short), an error status
    without the server's own JSON error body (a gateway's 502 or 504 page), or an export stream that
    ended before its closing line."""


class LLMError(DialogmemError):
    """The configured LLM could not be used."""


class LLMUnavailableError(LLMError):
    """No LLM is configured, or its backend cannot be reached."""


class LLMTimeoutError(LLMError):
    """A call ran past its timeout on every attempt."""


class LLMOutputError(LLMError):
    """The model answered, but its output could not be parsed or validated after retries."""

    def __init__(self, message: str, *, raw: str | None = None, stage: str | None = None) -> None:
        super().__init__(message)
        self.raw = raw
        self.stage = stage


def first_problem(exc: ValidationError) -> tuple[str, str]:
    """Where (a dotted path, ``""`` at the top level) and what: the first problem pydantic reports."""
    err = exc.errors()[0]
    return ".".join(map(str, err["loc"])), err["msg"]
