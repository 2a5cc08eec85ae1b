"""The memory inspector: server-rendered pages at ``/ui`` over the app's open ``Memory``.

``install_ui(app, verify)`` adds the routes, the static files, the session table and the error
pages; ``UIGuard`` (the middleware ``create_app`` adds in front of the rate limiter) sets the
security headers and resolves the session cookie.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles

from ..._apikeys import ApiKey
from ..._settings import ServerSettings
from ._guard import UIGuard
from ._routes_auth import router as auth_router
from ._routes_memories import router as memories_router
from ._routes_tools import router as tools_router
from ._session import Sessions
from ._signin import SignInLimits
from ._web import HERE, PREFIX, PageError, Redirect, UIState, make_templates, render, see_other

__all__ = ["UIGuard", "install_ui"]


def install_ui(app: FastAPI, verify: Callable[[str], ApiKey | None] | None, settings: ServerSettings) -> Sessions:
    """Serve the inspector on ``app``; returns the session table for ``UIGuard``. ``verify`` None: a
    store served without keys, where opening the inspector signs in as an admin."""
    sessions = Sessions()
    app.state.ui = UIState(sessions=sessions, templates=make_templates(), keys=verify is not None,
                           signins=SignInLimits(burst=settings.ui_signin_burst,
                                                per_minute=settings.ui_signins_per_minute))
    app.mount(f"{PREFIX}/static", StaticFiles(directory=HERE / "static"), name="ui-static")
    for router in (auth_router, memories_router, tools_router):
        app.include_router(router)

    async def redirect(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Redirect)
        return see_other(exc.url)

    async def page_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, PageError)
        return render(request, "error.html", {"status": exc.status, "message": exc.message}, status=exc.status)

    app.add_exception_handler(Redirect, redirect)
    app.add_exception_handler(PageError, page_error)
    return sessions
