"""The memories table and one memory: its text, times, metadata, its raw turns in their
conversation, its history with differences, edit and delete (each change confirmed)."""

from __future__ import annotations

import time
from functools import partial
from typing import Any
from urllib.parse import urlencode

import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from ..._errors import DialogmemError, InputError, NotFoundError
from ..._types import MemoryRecord
from ._diff import word_diff
from ._listing import MODES, SIZES, SORTS, ListQuery, list_page, parse_query
from ._web import (
    PREFIX,
    PageError,
    PrincipalDep,
    UserDep,
    confirm_page,
    confirmed,
    form_of,
    memory_of,
    one,
    render,
    see_other,
    segment,
    ui_state,
)

router = APIRouter(prefix=PREFIX, include_in_schema=False)
#: turns shown before and after each source turn
AROUND = 2


def user_url(user_id: str, rest: str = "") -> str:
    return f"{PREFIX}/users/{segment(user_id)}{rest}"


def memory_url(user_id: str, memory_id: str, rest: str = "") -> str:
    return user_url(user_id, f"/memories/{segment(memory_id)}{rest}")


def timed(request: Request, name: str, started: float, response: Response) -> Response:
    """Record the page's server time and send it as ``Server-Timing`` (the browser shows it)."""
    ms = (time.perf_counter() - started) * 1000.0
    ui_state(request).timings.add(name, ms)
    response.headers["server-timing"] = f"app;dur={ms:.1f}"
    return response


@router.get("/users/{user_id}/memories", response_class=HTMLResponse)
async def memories(request: Request, user_id: UserDep, who: PrincipalDep) -> Response:
    started = time.perf_counter()
    try:
        query = parse_query(request.query_params)
    except InputError as exc:
        return render(request, "memories.html", _table_context(user_id, ListQuery(), None, str(exc)),
                      status=422, who=who)
    try:
        page = await anyio.to_thread.run_sync(list_page, memory_of(request), user_id, query)
    except InputError as exc:
        return render(request, "memories.html", _table_context(user_id, query, None, str(exc)), status=422,
                      who=who)
    response = render(request, "memories.html", _table_context(user_id, query, page, ""), who=who)
    return timed(request, "page memories" if not query.q else f"page memories ({query.mode})", started, response)


def _table_context(user_id: str, query: ListQuery, page: Any, error: str) -> dict[str, Any]:
    base = user_url(user_id, "/memories")
    next_url = f"{base}?{urlencode(query.params(after=page.next_after))}" if page and page.next_after else ""
    first_url = f"{base}?{urlencode(query.params(after=None))}" if query.after else ""
    return {"user_id": user_id, "query": query, "page": page, "error": error, "next_url": next_url,
            "first_url": first_url, "modes": MODES, "sorts": SORTS, "sizes": SIZES, "base": base,
            "section": "memories"}


def _memory_view(request: Request, user_id: str, memory_id: str) -> dict[str, Any]:
    mem = memory_of(request)
    record = mem.get(memory_id, user_id, include_evicted=True)
    try:
        mem.get(memory_id, user_id, include_evicted=False)
        status = "active"
    except NotFoundError:
        status = "evicted"
    turns = mem.sources(memory_id, user_id, around=AROUND)
    sources = set(record.source_turn_ids)
    history = []
    for entry in mem.history(memory_id, user_id):
        history.append({"entry": entry, "diff": word_diff(entry.old_memory or "", entry.new_memory or "")})
    return {"record": record, "status": status, "turns": turns, "source_ids": sources, "history": history,
            "missing_sources": sorted(sources - {t.id for t in turns})}


async def _record(request: Request, user_id: str, memory_id: str) -> MemoryRecord:
    try:
        return await anyio.to_thread.run_sync(partial(memory_of(request).get, memory_id, user_id,
                                                      include_evicted=True))
    except (NotFoundError, InputError):
        raise PageError(404, "Not found.") from None


@router.get("/users/{user_id}/memories/{memory_id}", response_class=HTMLResponse)
async def memory(request: Request, user_id: UserDep, memory_id: str, who: PrincipalDep) -> Response:
    started = time.perf_counter()
    try:
        view = await anyio.to_thread.run_sync(_memory_view, request, user_id, memory_id)
    except (NotFoundError, InputError):
        raise PageError(404, "Not found.") from None
    response = render(request, "memory.html", {**view, "user_id": user_id, "section": "memories",
                                               "notice": request.query_params.get("notice", "")[:100]}, who=who)
    return timed(request, "page memory", started, response)


@router.get("/users/{user_id}/memories/{memory_id}/edit", response_class=HTMLResponse)
async def edit_form(request: Request, user_id: UserDep, memory_id: str, who: PrincipalDep) -> Response:
    record = await _record(request, user_id, memory_id)
    return render(request, "edit.html", {"record": record, "user_id": user_id, "section": "memories",
                                         "error": ""}, who=who)


@router.post("/users/{user_id}/memories/{memory_id}/edit", response_class=HTMLResponse)
async def edit(request: Request, user_id: UserDep, memory_id: str, who: PrincipalDep) -> Response:
    fields = await form_of(request, who)
    record = await _record(request, user_id, memory_id)
    text = one(fields, "text").replace("\r\n", "\n").strip()
    if not text:
        return render(request, "edit.html", {"record": record, "user_id": user_id, "section": "memories",
                                             "error": "The new text is empty."}, status=422, who=who)
    if not confirmed(fields):
        return confirm_page(request, who, title="Edit this memory", question="Replace the memory's text?",
                            action=memory_url(user_id, memory_id, "/edit"), fields=fields,
                            details={"diff": word_diff(record.memory, text)}, back=memory_url(user_id, memory_id))
    try:
        await anyio.to_thread.run_sync(partial(memory_of(request).update, memory_id, text, user_id,
                                               actor=f"ui:{who.key.key_id}"))
    except NotFoundError:
        raise PageError(404, "Not found.") from None
    except DialogmemError as exc:
        return render(request, "edit.html", {"record": record, "user_id": user_id, "section": "memories",
                                             "error": str(exc)}, status=422, who=who)
    return see_other(memory_url(user_id, memory_id) + "?notice=updated")


@router.post("/users/{user_id}/memories/{memory_id}/delete", response_class=HTMLResponse)
async def delete(request: Request, user_id: UserDep, memory_id: str, who: PrincipalDep) -> Response:
    fields = await form_of(request, who)
    record = await _record(request, user_id, memory_id)
    if not confirmed(fields):
        return confirm_page(request, who, title="Delete this memory",
                            question="Remove this memory from search and from the LTM graph's evidence? "
                                     "Its history stays in the journal.",
                            action=memory_url(user_id, memory_id, "/delete"), fields=fields,
                            details={"text": record.memory}, back=memory_url(user_id, memory_id))
    try:
        await anyio.to_thread.run_sync(partial(memory_of(request).delete, memory_id, user_id,
                                               actor=f"ui:{who.key.key_id}"))
    except NotFoundError:
        raise PageError(404, "Not found.") from None
    return render(request, "done.html", {"title": "Memory deleted", "message": "The memory was deleted.",
                                         "next_url": user_url(user_id, "/memories"), "user_id": user_id,
                                         "section": "memories"}, who=who)
