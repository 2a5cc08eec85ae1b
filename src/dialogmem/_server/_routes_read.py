"""Routes of the read path and of the store: search, answer, stats, sleep jobs, forget-user."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from .._errors import NotFoundError
from .._types import SearchResult
from ..types import Answer
from ._auth import scope_user, scope_user_or_all
from ._deps import KeyDep, MemoryDep
from ._errors import BODY_ERRORS, COMMON_ERRORS, LLM_ERRORS, error_responses
from ._jobs import SleepJobs
from ._models import AnswerRequest, Forgotten, SearchRequest, SleepJob, UserRequest

router = APIRouter(prefix="/v1", tags=["read and store"], responses=error_responses(*COMMON_ERRORS))
UserQuery = Annotated[str | None, Query(description="the user (implied by a user key)")]


@router.post("/search", response_model=SearchResult, responses=error_responses(*BODY_ERRORS, *LLM_ERRORS))
def search(body: SearchRequest, mem: MemoryDep, key: KeyDep) -> SearchResult:
    """``Memory.search``: hits with their sources, the plan, timings."""
    return mem.search(body.query, scope_user(key, body.user_id), limit=body.limit, filters=body.filters,
                      reference_time=body.reference_time, recent_context=body.recent_context,
                      expand=body.expand)


@router.post("/answer", response_model=Answer, responses=error_responses(*BODY_ERRORS, *LLM_ERRORS))
def answer(body: AnswerRequest, mem: MemoryDep, key: KeyDep) -> Answer:
    """``Memory.answer``: an answer from this user's memories (needs an LLM: 503 without one)."""
    return mem.answer(body.query, scope_user(key, body.user_id), limit=body.limit, mode=body.mode,
                      max_rounds=body.max_rounds, reference_time=body.reference_time)


@router.get("/stats")
def stats(mem: MemoryDep, key: KeyDep, user_id: UserQuery = None) -> dict[str, Any]:
    """``Memory.stats``: one user's counts (a user key), or the whole store's (an admin key without user_id)."""
    return mem.stats(scope_user_or_all(key, user_id))


def _jobs(request: Request) -> SleepJobs:
    jobs: SleepJobs = request.app.state.sleep_jobs
    return jobs


@router.post("/sleep", response_model=SleepJob, status_code=202, responses=error_responses(409, *BODY_ERRORS))
def sleep(body: UserRequest, request: Request, key: KeyDep) -> SleepJob:
    """Start ``Memory.sleep`` as a background job (409 while one of the same user runs)."""
    return _jobs(request).start(scope_user_or_all(key, body.user_id))


@router.get("/sleep/{job_id}", response_model=SleepJob, responses=error_responses(404))
def sleep_status(job_id: str, request: Request, key: KeyDep, user_id: UserQuery = None) -> SleepJob:
    """A sleep job's state, and its report once done."""
    scope = scope_user_or_all(key, user_id)
    job = _jobs(request).get(job_id)
    if job is None or (scope is not None and job.user_id != scope):
        raise NotFoundError(f"sleep job {job_id} not found")
    return job


@router.delete("/users/{user_id}", response_model=Forgotten)
def forget_user(user_id: str, mem: MemoryDep, key: KeyDep) -> Forgotten:
    """``Memory.forget_user``: remove every record, vector and journal row of this user."""
    counts = mem.forget_user(scope_user(key, user_id))
    return Forgotten(user_id=user_id, turns=counts["turns"], memories=counts["memories"])
