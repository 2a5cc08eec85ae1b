"""The search playground, quarantine (list, retry, drop), sleep (start, follow the job), stats with
charts and the LTM graph explorer."""

from __future__ import annotations

import time
from collections import Counter
from functools import partial
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from ..._errors import DialogmemError, InputError
from ..._facade._memory import Memory
from .._errors import Conflict
from .._jobs import SleepJobs
from ._charts import circle_layout, hbars, vbars
from ._routes_memories import timed, user_url
from ._web import (
    PREFIX,
    PageError,
    PrincipalDep,
    UserDep,
    confirm_page,
    confirmed,
    form_of,
    memory_of,
    render,
    see_other,
    ui_state,
)

router = APIRouter(prefix=PREFIX, include_in_schema=False)
#: memories read at most to draw "memories over time"
HISTOGRAM_BUDGET = 200_000


@router.get("/users/{user_id}/search", response_class=HTMLResponse)
async def search(request: Request, user_id: UserDep, who: PrincipalDep) -> Response:
    started = time.perf_counter()
    params = request.query_params
    q, at = params.get("q", "").strip(), params.get("at", "").strip()
    limit_text = params.get("limit", "10")
    ctx: dict[str, Any] = {"user_id": user_id, "section": "search", "q": q, "at": at, "limit": limit_text,
                           "want_answer": params.get("answer") == "1", "result": None, "answer": None,
                           "error": "", "answer_error": "", "chart": None}
    if q:
        try:
            if not limit_text.isdigit():
                raise InputError("limit must be a whole number from 1 to 200")
            ctx.update(await anyio.to_thread.run_sync(
                partial(_run_search, memory_of(request), user_id, q, at or None, int(limit_text),
                        ctx["want_answer"])))
        except DialogmemError as exc:
            ctx["error"] = str(exc)
        if ctx["result"] is not None:
            for stage, ms in ctx["result"].timings_ms.items():
                ui_state(request).timings.add(f"search.{stage}", ms)
    response = render(request, "search.html", ctx, status=422 if ctx["error"] else 200, who=who)
    return timed(request, "page search", started, response)


def _run_search(mem: Memory, user_id: str, q: str, at: str | None, limit: int, want_answer: bool) -> dict[str, Any]:
    result = mem.search(q, user_id, limit=limit, reference_time=at, expand=True)
    out: dict[str, Any] = {"result": result, "context": result.context(),
                           "chart": hbars("Stage timings", sorted(result.timings_ms.items(), key=lambda kv: -kv[1]),
                                          unit=" ms", digits=2)}
    if want_answer:
        try:
            out["answer"] = mem.answer(q, user_id, limit=limit, reference_time=at)
        except DialogmemError as exc:  # no LLM configured, or it failed: the search still shows
            out["answer_error"] = f"{type(exc).__name__}: {exc}"
    return out


@router.get("/users/{user_id}/quarantine", response_class=HTMLResponse)
async def quarantine(request: Request, user_id: UserDep, who: PrincipalDep) -> Response:
    turns = await anyio.to_thread.run_sync(memory_of(request).quarantined, user_id)
    return render(request, "quarantine.html", {"user_id": user_id, "section": "quarantine", "turns": turns},
                  who=who)


@router.post("/users/{user_id}/quarantine/{action}", response_class=HTMLResponse)
async def quarantine_action(request: Request, user_id: UserDep, action: str, who: PrincipalDep) -> Response:
    if action not in ("retry", "drop"):
        raise PageError(404, "Not found.")
    fields = await form_of(request, who)
    ids = [t for t in fields.get("turn_id", []) if t]
    if not ids:
        raise PageError(422, "Pick at least one turn.")
    back = user_url(user_id, "/quarantine")
    if not confirmed(fields):
        question = (f"Put {len(ids)} turn(s) back in the write path and process them now?" if action == "retry"
                    else f"Give up on {len(ids)} turn(s)? They stay journaled, marked dropped.")
        return confirm_page(request, who, title=f"{action.title()} quarantined turns", question=question,
                            action=user_url(user_id, f"/quarantine/{action}"), fields=fields,
                            details={"ids": ids}, back=back)
    mem = memory_of(request)
    try:
        if action == "retry":
            got = await anyio.to_thread.run_sync(partial(mem.retry_quarantined, user_id, ids))
            message = f"Retried {len(ids)} turn(s): {len(got.memories)} memories stored, " \
                      f"{len(got.quarantined)} still quarantined."
        else:
            dropped = await anyio.to_thread.run_sync(partial(mem.drop_quarantined, user_id, ids))
            message = f"Dropped {dropped} turn(s)."
    except DialogmemError as exc:
        raise PageError(422, str(exc)) from exc
    return render(request, "done.html", {"title": "Quarantine", "message": message, "next_url": back,
                                         "user_id": user_id, "section": "quarantine"}, who=who)


def _jobs(request: Request) -> SleepJobs:
    jobs: SleepJobs = request.app.state.sleep_jobs
    return jobs


@router.get("/users/{user_id}/sleep", response_class=HTMLResponse)
async def sleep_page(request: Request, user_id: UserDep, who: PrincipalDep) -> Response:
    return render(request, "sleep.html", {"user_id": user_id, "section": "sleep", "job": None, "error": ""},
                  who=who)


@router.post("/users/{user_id}/sleep", response_class=HTMLResponse)
async def sleep_start(request: Request, user_id: UserDep, who: PrincipalDep) -> Response:
    fields = await form_of(request, who)
    if not confirmed(fields):
        return confirm_page(request, who, title="Run sleep", question="Run sleep time for this user now "
                            "(update queues, MTM eviction, and LTM consolidation if configured)?",
                            action=user_url(user_id, "/sleep"), fields=fields, back=user_url(user_id, "/sleep"))
    try:
        job = _jobs(request).start(user_id)
    except Conflict as exc:
        return render(request, "sleep.html", {"user_id": user_id, "section": "sleep", "job": None,
                                              "error": str(exc)}, status=409, who=who)
    return see_other(user_url(user_id, f"/sleep/{job.job_id}"))


@router.get("/users/{user_id}/sleep/{job_id}", response_class=HTMLResponse)
async def sleep_job(request: Request, user_id: UserDep, job_id: str, who: PrincipalDep) -> Response:
    job = _jobs(request).get(job_id)
    if job is None or job.user_id != user_id:
        raise PageError(404, "Not found.")
    return render(request, "sleep.html", {"user_id": user_id, "section": "sleep", "job": job, "error": ""},
                  who=who)


@router.get("/users/{user_id}/stats", response_class=HTMLResponse)
async def stats(request: Request, user_id: UserDep, who: PrincipalDep) -> Response:
    started = time.perf_counter()
    mem = memory_of(request)
    data = await anyio.to_thread.run_sync(mem.stats, user_id)
    months, partial_scan = await anyio.to_thread.run_sync(_months, request, mem, user_id, data["counts"])
    llm = data.get("llm", {})
    latency = data.get("latency", {})
    charts = [
        hbars("LLM tokens per stage", [(s, float(u["total_tokens"])) for s, u in sorted(llm.items())]),
        hbars("LLM calls per stage", [(s, float(u["calls"])) for s, u in sorted(llm.items())]),
        hbars("Embedding calls per stage",
              [(s, float(u["calls"])) for s, u in sorted(data.get("embedding", {}).items())]),
        hbars("Mean latency per search stage (store-wide)",
              [(s, u["latency_ms"] / u["calls"]) for s, u in sorted(latency.items()) if u["calls"]],
              unit=" ms", digits=2),
    ]
    percentiles = ui_state(request).timings.summary()
    response = render(request, "stats.html", {
        "user_id": user_id, "section": "stats", "counts": data["counts"], "summary": data.get("summary", {}),
        "charts": [c for c in charts if c.bars], "months": vbars("Memories per month", months) if months else None,
        "month_labels": months, "partial_scan": partial_scan, "percentiles": percentiles}, who=who)
    return timed(request, "page stats", started, response)


def _months(request: Request, mem: Memory, user_id: str,
            counts: dict[str, int]) -> tuple[list[tuple[str, float]], bool]:
    """Memories (active and evicted) per month of their time, cached until the user's counts change."""
    state = ui_state(request)
    key = (user_id, counts.get("memories", 0), counts.get("evicted", 0))
    with state.month_lock:
        if key in state.month_cache:
            return state.month_cache[key]
    per: Counter[str] = Counter()
    cursor = None
    read = 0
    while read < HISTOGRAM_BUDGET:
        chunk = mem.get_all(user_id, limit=5000, offset=cursor, include_evicted=True)
        per.update(r.time_stamp[:7] for r in chunk)
        read += len(chunk)
        if len(chunk) < 5000:
            break
        cursor = chunk[-1].id
    got = ([(m, float(n)) for m, n in sorted(per.items())], read >= HISTOGRAM_BUDGET)
    with state.month_lock:
        if len(state.month_cache) >= 100:
            state.month_cache.pop(next(iter(state.month_cache)))
        state.month_cache[key] = got
    return got


@router.get("/users/{user_id}/graph", response_class=HTMLResponse)
async def graph(request: Request, user_id: UserDep, who: PrincipalDep) -> Response:
    q = request.query_params.get("q", "").strip()
    error = ""
    try:
        g = await anyio.to_thread.run_sync(partial(memory_of(request).graph, user_id, query=q or None, limit=60))
    except InputError as exc:
        g, error = None, str(exc)
    points, lines = [], []
    if g is not None:
        points = circle_layout([(n.id, n.text, n.type) for n in g.nodes])
        at = {p.id: p for p in points}
        lines = [(at[e.source], at[e.target], e) for e in g.edges if e.source in at and e.target in at]
    text = {n.id: n.text for n in g.nodes} if g is not None else {}
    return render(request, "graph.html", {"user_id": user_id, "section": "graph", "q": q, "graph": g,
                                          "points": points, "lines": lines, "text": text, "error": error},
                  status=422 if error else 200, who=who)
