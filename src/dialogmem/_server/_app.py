"""The REST app: ``create_app(memory, settings)`` wires the routes, the key check, the limits and
the error mapping around one open ``Memory``."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio.to_thread
from fastapi import FastAPI

from .. import __version__
from .._memory import Memory
from .._settings import ServerSettings
from ._auth import KeyAuth
from ._errors import install_handlers
from ._jobs import SleepJobs
from ._limits import BodyLimit
from ._models import Health
from ._routes_memories import router as memories_router
from ._routes_read import router as read_router

log = logging.getLogger(__name__)


def create_app(memory: Memory, settings: ServerSettings | None = None, *, auth: bool = True) -> FastAPI:
    """The app over an open store. ``auth=False`` lets every request act as an admin (``--no-auth``).

    The caller owns ``memory`` (opens and closes it); the app waits for its sleep jobs at shutdown.
    """
    settings = settings or memory.config.server

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.threads
        try:
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

    @app.get("/health", response_model=Health, tags=["service"])
    async def health() -> Health:
        """Liveness; needs no key."""
        return Health(version=__version__, auth=auth)

    app.include_router(memories_router)
    app.include_router(read_router)
    verify = memory.verify_key if auth else None
    # the outermost middleware runs first: the key is checked before the body is read
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(KeyAuth, verify=verify)
    return app
