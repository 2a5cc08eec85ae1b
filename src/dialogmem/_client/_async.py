"""``AsyncClient``: the verbs of ``AsyncMemory`` over a dialogmem server's REST API (httpx, asyncio).

This file is the one written by hand: ``_sync.py`` (``Client``) is generated from it by
``scripts/gen_sync_client.py`` (``async``/``await`` taken out, the asyncio names swapped for their
blocking twins), and a test checks that the two agree, so a verb cannot be changed in one client and
not the other. The decisions (``_calls``, ``_policy``) and the files (``_files``) are shared; only the
I/O is here."""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx

from .._api import AsyncMemoryAPI, Conversation, Destination, Messages, When
from .._errors import ServerUnavailableError, StoreError
from .._files import writing
from ..types import (
    AddResult,
    Answer,
    AnswerMode,
    ExportReport,
    GraphAudit,
    HistoryEntry,
    ImportReport,
    IndexFilter,
    LTMGraph,
    MemoryRecord,
    QuarantinedTurn,
    SearchHit,
    SearchResult,
    SleepReport,
    SourceTurn,
)
from . import _calls as calls
from ._calls import Call
from ._files import Resendable, left_after_break, load_conversation
from ._policy import (
    ExportTally,
    JobConflict,
    RetryPolicy,
    error_for,
    job_error,
    payload,
    poll_wait,
    read_answer,
    target,
    unreachable,
)

T = TypeVar("T")


class AsyncClient(AsyncMemoryAPI):
    """The verbs, arguments and return types of :class:`AsyncMemory`, served by a dialogmem server
    (``dialogmem serve``). ``url`` and ``api_key`` default to ``DIALOGMEM_URL`` and
    ``DIALOGMEM_API_KEY`` (no key: a server started with ``--no-auth``).

    The server's errors come back as the same :class:`DialogmemError` subclasses with its message
    (a refused key is :class:`AuthError`); an answer that is not the server's own (a proxy's page, a
    body cut short or of the wrong shape) is :class:`ServerResponseError`. A connection that cannot be
    made, a 503 and a 429 (after its ``Retry-After``) are tried again up to ``retries`` times with
    growing waits; a request whose answer was lost is sent again only when that is harmless (every
    message of ``add`` carries an id, given here when the caller gave none, so a retried add journals
    nothing twice and answers as the first try would have). What a server cannot do for a caller:
    choose the ``actor`` of ``update`` / ``delete`` (the API key is the actor), and ``flush()`` of every
    user (an admin key must name the user)."""

    def __init__(self, url: str | None = None, api_key: str | None = None, *, timeout: float = 120.0,
                 retries: int = 4, backoff: float = 0.2) -> None:
        self._target = target(url, api_key, os.environ)
        self._policy = RetryPolicy(retries=retries, backoff=backoff)
        key = self._target.api_key
        self._http = httpx.AsyncClient(base_url=self._target.url, timeout=timeout,
                                  headers={"Authorization": f"Bearer {key}"} if key else {})
        self._closed = False

    @property
    def url(self) -> str:
        return self._target.url

    # -- lifecycle ----------------------------------------------------------------------------
    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connections (idempotent)."""
        self._closed = True
        await self._http.aclose()

    # -- the one place requests are sent ------------------------------------------------------
    async def _send(self, call: Call[Any], content: Callable[[], Iterator[bytes]] | None = None, *,
                    stream: bool = False) -> httpx.Response:
        if self._closed:
            raise StoreError(f"this {type(self).__name__} is closed")
        attempt = 0
        while True:
            try:
                request = self._http.build_request(call.method, call.path, params=call.query(),
                                                   **payload(call, _aiter(content) if content is not None else None))
                response = await self._http.send(request, stream=stream)
            except httpx.TransportError as exc:
                wait = self._policy.after_failure(attempt, exc, safe=call.safe, jitter=random.random())
                if wait is None:
                    raise unreachable(self.url, exc, tries=attempt + 1) from exc
            else:
                if response.is_success:
                    return response
                body = await response.aread()
                await response.aclose()
                wait = self._policy.after_status(attempt, response.status_code, body,
                                                 response.headers.get("retry-after"), jitter=random.random())
                if wait is None:
                    raise error_for(response.status_code, body)
            await asyncio.sleep(wait)
            attempt += 1

    async def _do(self, call: Call[T], content: Callable[[], Iterator[bytes]] | None = None) -> T:
        response = await self._send(call, content)
        return read_answer(call, response.content, response.headers.get("content-type"))

    # -- write path ---------------------------------------------------------------------------
    async def add(self, messages: Messages, user_id: str, *, session_id: str | None = None,
            timestamp: When | None = None, metadata: dict[str, Any] | None = None,
            agent_id: str | None = None, flush: bool = False) -> AddResult:
        """``Memory.add`` (messages without an id get one first: a retry journals nothing twice)."""
        return await self._do(calls.add(messages, user_id, session_id=session_id, timestamp=timestamp,
                                  metadata=metadata, agent_id=agent_id, flush=flush))

    async def add_conversation(self, conversation: Conversation, user_id: str, *, flush: bool = True,
                         progress: Callable[[int, int], None] | None = None) -> AddResult:
        """``Memory.add_conversation`` in one request (a file is read here); ``progress`` is called
        once, when the server has added every turn."""
        result = await self._do(calls.add_conversation(load_conversation(conversation), user_id, flush=flush))
        if progress is not None:
            progress(len(result.turn_ids), len(result.turn_ids))
        return result

    async def flush(self, user_id: str | None = None) -> list[SearchHit]:
        """``Memory.flush`` of one user (with a user key, ``None`` is that key's user)."""
        return await self._do(calls.flush(user_id))

    async def update(self, memory_id: str, text: str, user_id: str, *, actor: str = "user",
                     metadata: dict[str, Any] | None = None) -> MemoryRecord:
        """``Memory.update`` (the actor of the change is the API key: ``actor`` cannot be chosen)."""
        return await self._do(calls.update(memory_id, text, user_id, actor=actor, metadata=metadata))

    async def delete(self, memory_id: str, user_id: str, *, actor: str = "user") -> None:
        await self._do(calls.delete(memory_id, user_id, actor=actor))

    async def forget_user(self, user_id: str) -> dict[str, int]:
        return await self._do(calls.forget_user(user_id))

    # -- read path ----------------------------------------------------------------------------
    async def search(self, query: str, user_id: str, *, limit: int | None = None,
               filters: IndexFilter | dict[str, Any] | None = None, reference_time: When | None = None,
               recent_context: list[str] | None = None, expand: bool = False) -> SearchResult:
        return await self._do(calls.search(query, user_id, limit=limit, filters=filters, reference_time=reference_time,
                                     recent_context=recent_context, expand=expand))

    async def sources(self, memory_id: str, user_id: str, *, around: int = 0) -> list[SourceTurn]:
        return await self._do(calls.sources(memory_id, user_id, around=around))

    async def answer(self, query: str, user_id: str, *, mode: AnswerMode | None = None, max_rounds: int | None = None,
               limit: int | None = None, reference_time: When | None = None) -> Answer:
        return await self._do(calls.answer(query, user_id, mode=mode, max_rounds=max_rounds, limit=limit,
                                     reference_time=reference_time))

    async def get(self, memory_id: str, user_id: str, *, include_evicted: bool = True) -> MemoryRecord:
        return await self._do(calls.get(memory_id, user_id, include_evicted=include_evicted))

    async def get_all(self, user_id: str, *, limit: int = 100, offset: str | None = None,
                filters: IndexFilter | dict[str, Any] | None = None,
                include_evicted: bool = False, contains: str | None = None) -> list[MemoryRecord]:
        return await self._do(calls.get_all(user_id, limit=limit, offset=offset, filters=filters,
                                      include_evicted=include_evicted, contains=contains))

    async def history(self, memory_id: str, user_id: str) -> list[HistoryEntry]:
        return await self._do(calls.history(memory_id, user_id))

    async def stats(self, user_id: str | None = None) -> dict[str, Any]:
        return await self._do(calls.stats(user_id))

    # -- sleep, quarantine, graph -------------------------------------------------------------
    async def sleep(self, user_id: str | None = None) -> SleepReport:
        """``Memory.sleep`` as a server job: started, then watched until it ends (a job of the same
        user already running is waited for first)."""
        polls = 0
        while True:
            try:
                job_id, _ = await self._do(calls.start_sleep(user_id))
                break
            except JobConflict:
                await asyncio.sleep(poll_wait(polls))
                polls += 1
        polls = 0
        while True:
            status, report, error = await self._do(calls.sleep_job(job_id, user_id))
            if status == "done" and report is not None:
                return report
            if status == "failed":
                raise job_error(error)
            await asyncio.sleep(poll_wait(polls))
            polls += 1

    async def quarantined(self, user_id: str | None = None) -> list[QuarantinedTurn]:
        return await self._do(calls.quarantined(user_id))

    async def retry_quarantined(self, user_id: str, turn_ids: Sequence[str] | None = None) -> AddResult:
        return await self._do(calls.retry_quarantined(user_id, turn_ids))

    async def drop_quarantined(self, user_id: str, turn_ids: Sequence[str]) -> int:
        return await self._do(calls.drop_quarantined(user_id, turn_ids))

    async def graph(self, user_id: str | None = None, *, query: str | None = None, limit: int = 100) -> LTMGraph:
        return await self._do(calls.graph(user_id, query=query, limit=limit))

    async def graph_audit(self) -> GraphAudit:
        """``Memory.graph_audit`` (an admin key; a user key gets :class:`AuthError`)."""
        return await self._do(calls.graph_audit())

    # -- export and import --------------------------------------------------------------------
    async def export(self, destination: Destination, user_id: str | None = None, *, all_users: bool = False,
               vectors: bool = True) -> ExportReport:
        """``Memory.export`` from the server's stream (a path is written whole or not at all)."""
        call = calls.export(user_id, all_users=all_users, vectors=vectors)
        started = time.perf_counter()
        response = await self._send(call, stream=True)
        tally = ExportTally(vectors)
        try:
            with writing(destination) as out:
                async for line in response.aiter_lines():
                    tally.add(line)
                    out.write(line + "\n")
                report = tally.finish()  # a stream cut short leaves no file at a path
        except httpx.TransportError as exc:
            raise ServerUnavailableError(f"the export stream broke off after {tally.lines} lines: "
                                         f"{left_after_break(destination)}") from exc
        finally:
            await response.aclose()
        report.seconds = round(time.perf_counter() - started, 3)
        return report

    async def import_(self, source: Destination) -> ImportReport:
        """``Memory.import_`` of a file streamed to the server (sent again from its start on a retry:
        importing the same lines twice adds nothing)."""
        resendable = Resendable(source)
        try:
            return await self._do(calls.import_(), resendable.chunks)
        finally:
            resendable.close()


# async-only: begin (the blocking client sends ``content()`` itself)
async def _aiter(chunks: Callable[[], Iterator[bytes]]) -> AsyncIterator[bytes]:
    for chunk in chunks():
        yield chunk
# async-only: end
