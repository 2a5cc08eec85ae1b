"""The REST app: ``create_app(memory, settings)`` wires the routes, the key check, the limits and
the error mapping around one open ``Memory``."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio.to_thread
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.routing import Route

from .. import __version__
from .._apikeys import ApiKey
from .._facade._memory import Memory
from .._settings import ServerSettings
from ._auth import KeyAuth
from ._errors import error_responses, install_handlers
from ._jobs import SleepJobs
from ._limits import BodyLimit, BodyTimeout, RateLimit
from ._models import Health
from ._origin import KeylessGuard
from ._routes_data import STREAMED_PATHS
from ._routes_data import router as data_router
from ._routes_memories import router as memories_router
from ._routes_read import router as read_router

log = logging.getLogger(__name__)


def create_app(memory: Memory, settings: ServerSettings | None = None, *, auth: bool = True,
               mcp: bool = True, host: str = "127.0.0.1", ui: bool = True) -> FastAPI:
    """The app over an open store. ``auth=False`` lets every request act as an admin (``--no-auth``).
    ``mcp``: also serve the MCP tools (streamable HTTP) at ``/mcp`` behind the same keys; ``host``
    is the listen address (a loopback one turns on the MCP transport's DNS-rebinding check); ``ui``:
    also serve the memory inspector at ``/ui`` (signed in with the same keys, in a session cookie).

    The caller owns ``memory`` (opens and closes it); the app waits for its sleep jobs at shutdown.
    """
    settings = settings or memory.config.server
    verify = memory.verify_key if auth else None
    mcp_app = _mcp_app(memory, settings, verify, host) if mcp else None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.threads
        try:
            if mcp_app is None:
                yield
            else:
                async with mcp_app.router.lifespan_context(mcp_app):  # the MCP session manager
                    yield
        finally:
            await anyio.to_thread.run_sync(app.state.sleep_jobs.close)

    app = FastAPI(title="dialogmem", version=__version__, lifespan=lifespan,
                  description="Long-term memory for LLM agents. Send `Authorization: Bearer KEY` "
                              "(or `X-API-Key: KEY`) on every /v1 route; keys come from `dialogmem keys create`.")
    app.state.memory = memory
    app.state.settings = settings
    app.state.sleep_jobs = SleepJobs(memory.sleep, kept=settings.sleep_jobs_kept)
    install_handlers(app)

    @app.get("/health", response_model=Health, tags=["service"], responses=error_responses(500))
    async def health() -> Health:
        """Liveness; needs no key."""
        return Health(version=__version__, auth=auth)

    app.include_router(memories_router)
    app.include_router(read_router)
    app.include_router(data_router)
    if mcp_app is not None:
        app.router.routes.append(Route("/mcp", endpoint=mcp_app, include_in_schema=False))
    # the outermost middleware runs first: the key is checked, then its rate, before the body is read
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes, streamed=STREAMED_PATHS)
    app.add_middleware(BodyTimeout, seconds=settings.body_timeout_s, streamed=STREAMED_PATHS)
    app.add_middleware(RateLimit, per_second=settings.requests_per_second, burst=settings.request_burst,
                       llm_calls=settings.llm_calls_per_key)
    if ui:  # between the key check and the rate limit: a signed-in browser counts under its key
        from ._ui import UIGuard, install_ui

        app.add_middleware(UIGuard, sessions=install_ui(app, verify, settings), verify=verify)
    app.add_middleware(KeyAuth, verify=verify, protected=("/v1", "/mcp"))
    if verify is None:  # without keys: this machine's programs only, never another site's page
        app.add_middleware(KeylessGuard, routes=app.router.routes, prefixes=("/v1", "/mcp"))
    return app


def _mcp_app(memory: Memory, settings: ServerSettings, verify: Callable[[str], ApiKey | None] | None,
             host: str) -> Starlette:
    from ._mcp import mcp_starlette  # the mcp package only when MCP is served

    return mcp_starlette(memory, settings, verify=verify, default_user=settings.mcp_user, host=host)
