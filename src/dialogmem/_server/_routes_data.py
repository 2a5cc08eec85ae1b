"""Routes of quarantined turns, the LTM graph, and the streaming export and import.

The graph keeps ``Memory.graph``'s visibility rule: without a user, what at least
``sleep.ltm_min_users`` users support (any key may read it); with a user, what that user's memories
support (their own key or an admin's). The audit, which lists knowledge visible to its supporters
only, is an admin's. Export streams ``application/x-ndjson`` as ``Memory.export`` writes it; import
streams the body to a temporary file (a user key's lines are checked to be its own user's as they
arrive), then ``Memory.import_`` validates the whole file before writing any of it.
"""

from __future__ import annotations

import io
import tempfile
from typing import Annotated, Any

import anyio.to_thread
from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from starlette.exceptions import HTTPException

from .._graph import LTMGraph
from .._sleep._visibility import GraphAudit
from .._types import AddResult, ImportReport, QuarantinedTurn
from ._auth import FORBIDDEN, Forbidden, scope_user, scope_user_or_all
from ._deps import KeyDep, MemoryDep, SettingsDep
from ._errors import BODY_ERRORS, COMMON_ERRORS, LLM_ERRORS, error_responses
from ._models import Dropped, DropRequest, QuarantineRequest
from ._stream import ExportPipe, LineScope

router = APIRouter(prefix="/v1", tags=["data"], responses=error_responses(*COMMON_ERRORS))
UserQuery = Annotated[str | None, Query(description="the user (implied by a user key)")]
NDJSON = "application/x-ndjson"
#: the paths whose request body is streamed by the route itself (not buffered by ``BodyLimit``)
STREAMED_PATHS = frozenset({"/v1/import"})


@router.get("/quarantine", response_model=list[QuarantinedTurn])
def quarantined(mem: MemoryDep, key: KeyDep, user_id: UserQuery = None) -> list[QuarantinedTurn]:
    """``Memory.quarantined``: accepted turns whose processing failed, with the reason (an admin key
    without ``user_id``: every user's)."""
    return mem.quarantined(scope_user_or_all(key, user_id))


@router.post("/quarantine/retry", response_model=AddResult, responses=error_responses(*BODY_ERRORS, *LLM_ERRORS))
def retry_quarantined(body: QuarantineRequest, mem: MemoryDep, key: KeyDep) -> AddResult:
    """``Memory.retry_quarantined``: put quarantined turns back in the write path and flush them."""
    return mem.retry_quarantined(scope_user(key, body.user_id), body.turn_ids)


@router.post("/quarantine/drop", response_model=Dropped, responses=error_responses(*BODY_ERRORS))
def drop_quarantined(body: DropRequest, mem: MemoryDep, key: KeyDep) -> Dropped:
    """``Memory.drop_quarantined``: give up on quarantined turns (their raw text stays journaled)."""
    return Dropped(dropped=mem.drop_quarantined(scope_user(key, body.user_id), body.turn_ids))


@router.get("/graph", response_model=LTMGraph)
def graph(mem: MemoryDep, key: KeyDep, user_id: UserQuery = None,
          query: Annotated[str | None, Query(description="the matching nodes and their neighbours")] = None,
          limit: Annotated[int, Query(ge=1, le=10_000)] = 100) -> LTMGraph:
    """``Memory.graph``: without ``user_id`` the public view (what at least ``sleep.ltm_min_users``
    users support), with it what that user's memories support."""
    return mem.graph(scope_user(key, user_id) if user_id is not None else None, query=query, limit=limit)


@router.get("/graph/audit", response_model=GraphAudit)
def graph_audit(mem: MemoryDep, key: KeyDep) -> GraphAudit:
    """``Memory.graph_audit``: every live node and edge with its supporters (an admin key only)."""
    if key.role != "admin":
        raise Forbidden(FORBIDDEN)
    return mem.graph_audit()


@router.get("/export", response_class=StreamingResponse,
            responses={200: {"description": "dialogmem's JSON Lines export format (docs/export-schema.json), "
                                            "streamed", "content": {NDJSON: {"schema": {"type": "string"}}}}})
def export(mem: MemoryDep, key: KeyDep, user_id: UserQuery = None,
           all_users: Annotated[bool, Query(description="every user (an admin key)")] = False,
           vectors: Annotated[bool, Query(description="carry the vectors")] = True) -> StreamingResponse:
    """``Memory.export``: a user's records (an admin key with ``all_users``: every user's), streamed."""
    if all_users and key.role != "admin":
        raise Forbidden(FORBIDDEN)
    user = None if all_users and user_id is None else scope_user(key, user_id)
    pipe = ExportPipe()
    pipe.start(lambda out: mem.export(out, user, all_users=all_users, vectors=vectors))  # type: ignore[arg-type]
    first = pipe.first()  # a refused export raises here: an error status, not a broken stream
    return StreamingResponse(pipe.chunks(first), media_type=NDJSON)


@router.post("/import", response_model=ImportReport, responses=error_responses(*BODY_ERRORS, 413),
             openapi_extra={"requestBody": {"required": True, "description": "a dialogmem export (JSON Lines; "
                                            "the body is read as such whatever its content type)",
                                            "content": {NDJSON: {"schema": {"type": "string"}},
                                                        "application/octet-stream": {
                                                            "schema": {"type": "string", "format": "binary"}}}}})
async def import_(request: Request, mem: MemoryDep, key: KeyDep, settings: SettingsDep) -> ImportReport:
    """``Memory.import_`` of the body: every line is checked before any is written (422 names the
    first bad line); a user key may only send its own user's lines (403 names the line)."""
    scope = LineScope(key.user_id) if key.role != "admin" and key.user_id is not None else None
    with tempfile.TemporaryFile("w+b") as raw:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > settings.max_import_bytes:
                raise HTTPException(413, f"the import body is over {settings.max_import_bytes} bytes "
                                         "(server.max_import_bytes); split it into several files")
            if scope is not None:
                scope.feed(chunk)
            await anyio.to_thread.run_sync(raw.write, chunk)
        if scope is not None:
            scope.end()
        raw.seek(0)
        text = io.TextIOWrapper(raw, encoding="utf-8", newline="\n")
        try:
            report: Any = await anyio.to_thread.run_sync(mem.import_, text)
        finally:
            text.detach()
    assert isinstance(report, ImportReport)
    return report
