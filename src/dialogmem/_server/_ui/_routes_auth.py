"""Sign-in, sign-out, the start page (a user key goes to its user, an admin key picks one) and
forgetting a user."""

from __future__ import annotations

import math
import time
from typing import Annotated

import anyio.to_thread
from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, Response

from ..._errors import DialogmemError
from .._origin import cross_site
from ._session import COOKIE
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
    segment,
    ui_state,
)

router = APIRouter(prefix=PREFIX, include_in_schema=False)


def _set_cookie(response: Response, token: str) -> None:
    response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path=PREFIX,
                        secure=False)  # served over plain HTTP on loopback too; put TLS in front elsewhere


@router.get("/login", response_class=HTMLResponse)
async def login_form(request: Request) -> Response:
    state = ui_state(request)
    if not state.keys:  # a store served without keys (``dialogmem ui``): a session needs no key
        response = see_other(f"{PREFIX}/")
        _set_cookie(response, state.sessions.open("").token)
        return response
    return render(request, "login.html", {"error": ""})


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request, api_key: Annotated[str, Form(max_length=200)] = "") -> Response:
    state = ui_state(request)
    if cross_site(request.scope["headers"]) is not None:  # a form posted from another site (or origin)
        return render(request, "login.html", {"error": "This sign-in form did not come from this inspector."},
                      status=403)
    text = api_key.strip()
    client = request.client.host if request.client else ""
    wait = state.signins.wait(client, text, time.monotonic())
    if wait > 0:
        seconds = max(1, math.ceil(wait))
        refused = render(request, "login.html", {"error": f"Too many sign-in attempts: try again in {seconds} s."},
                         status=429)
        refused.headers["retry-after"] = str(seconds)
        return refused
    memory = memory_of(request)
    key = await anyio.to_thread.run_sync(memory.verify_key, text) if state.keys and text else None
    if state.keys and key is None:
        return render(request, "login.html", {"error": "Invalid or revoked API key."}, status=401)
    response = see_other(f"{PREFIX}/")
    _set_cookie(response, state.sessions.open(text if state.keys else "").token)
    return response


@router.post("/logout")
async def logout(request: Request, who: PrincipalDep) -> Response:
    await form_of(request, who)
    ui_state(request).sessions.close(who.session.token)
    response = see_other(f"{PREFIX}/login")
    response.delete_cookie(COOKIE, path=PREFIX, httponly=True, samesite="strict")
    return response


@router.get("/", response_class=HTMLResponse)
async def start(request: Request, who: PrincipalDep, user_id: str = "") -> Response:
    """A user key lands on its memories; an admin key picks a user by id."""
    if who.key.role == "user" and who.key.user_id:
        return see_other(f"{PREFIX}/users/{segment(who.key.user_id)}/memories")
    if user_id.strip():
        return see_other(f"{PREFIX}/users/{segment(user_id.strip())}/memories")
    return render(request, "start.html", {}, who=who)


@router.post("/users/{user_id}/forget", response_class=HTMLResponse)
async def forget(request: Request, user_id: UserDep, who: PrincipalDep) -> Response:
    fields = await form_of(request, who)
    if not confirmed(fields):
        return confirm_page(request, who, title="Forget this user",
                            question="Remove every memory, raw turn, vector and history row of this user? "
                                     "This cannot be undone.",
                            action=f"{PREFIX}/users/{segment(user_id)}/forget", fields=fields,
                            back=f"{PREFIX}/users/{segment(user_id)}/memories")
    try:
        counts = await anyio.to_thread.run_sync(memory_of(request).forget_user, user_id)
    except DialogmemError as exc:
        raise PageError(422, str(exc)) from exc
    return render(request, "done.html", {"title": "User forgotten",
                                         "message": f"Removed {counts.get('memories', 0)} memories and "
                                                    f"{counts.get('turns', 0)} turns.",
                                         "next_url": f"{PREFIX}/"}, who=who)
