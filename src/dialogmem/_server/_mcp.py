"""The MCP server: memory tools for an agent, over stdio or streamable HTTP.

The user is never a tool argument: over stdio it is fixed by the server's configuration
(``server.mcp_user`` or ``dialogmem mcp --user``); over HTTP a user key names it, and an admin key
acts for the server's configured user (and is refused when none is configured). ``dialogmem serve``
serves the same tools at ``/mcp`` beside the REST routes (one process holds a store). Tools run in worker
threads (they call the blocking ``Memory``), so a slow call never stalls the server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from starlette.applications import Starlette
from starlette.types import ASGIApp

from .._apikeys import ApiKey
from .._errors import DialogmemError, InputError
from .._facade._memory import Memory
from .._settings import ServerSettings
from ._auth import FORBIDDEN, INVALID, NO_AUTH, KeyAuth, key_from_headers
from ._limits import BodyLimit, BodyTimeout, RateLimit

INSTRUCTIONS = ("Long-term memory of past conversations with this user. Call search_memory before "
                "answering questions about the user's past; call add_memory with facts worth keeping.")
Resolve = Callable[[Context], str]


def fixed_user(user_id: str | None) -> Resolve:
    """The stdio rule: one user for the whole session."""
    def resolve(_: Context) -> str:
        if not user_id:
            raise InputError("no user configured: start the server with `dialogmem mcp --user ID` "
                             "(or set server.mcp_user)")
        return user_id
    return resolve


def user_from_key(verify: Callable[[str], ApiKey | None] | None, default_user: str | None) -> Resolve:
    """The HTTP rule: a user key's own user; an admin key (or a ``--no-auth`` server, ``verify``
    None) acts for ``default_user``."""
    def resolve(ctx: Context) -> str:
        key: ApiKey | None = NO_AUTH
        if verify is not None:
            headers = ctx.headers or {}
            text = key_from_headers((k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items())
            key = verify(text) if text else None
        if key is None:
            raise InputError(INVALID)
        if key.user_id is not None:
            return key.user_id
        if default_user is None:
            raise InputError(f"{FORBIDDEN}: an admin key needs a configured user (server.mcp_user, or --user)")
        return default_user
    return resolve


@contextmanager
def _reported() -> Iterator[None]:
    """A library error reaches the agent as the tool's error text (anything else stays a crash)."""
    try:
        yield
    except DialogmemError as exc:
        raise ToolError(f"{type(exc).__name__}: {exc}") from exc


def build_mcp(memory: Memory, resolve: Resolve) -> MCPServer:
    server: MCPServer = MCPServer("dialogmem", instructions=INSTRUCTIONS)

    @server.tool()
    def add_memory(content: str, ctx: Context, speaker: str | None = None, role: str = "user",
                   session_id: str | None = None, timestamp: str | None = None,
                   flush: bool = True) -> dict[str, Any]:
        """Remember one message (what the user or the assistant said). ``timestamp``: ISO date-time."""
        with _reported():
            message = {"content": content, "role": role, **({"name": speaker} if speaker else {})}
            result = memory.add([message], resolve(ctx), session_id=session_id, timestamp=timestamp, flush=flush)
            return result.model_dump(mode="json")

    @server.tool()
    def search_memory(query: str, ctx: Context, limit: int = 10) -> dict[str, Any]:
        """Memories relevant to ``query``, each with its time and the turns it came from."""
        with _reported():
            result = memory.search(query, resolve(ctx), limit=limit)
            return {"query": query, "hits": [h.model_dump(mode="json") for h in result.hits],
                    "context": result.context()}

    @server.tool()
    def answer(question: str, ctx: Context, limit: int | None = None, mode: str | None = None) -> dict[str, Any]:
        """An answer from the memories, citing the memory and turn ids it rests on (needs the server's
        LLM); mode: auto (default), light or deep."""
        with _reported():
            return memory.answer(question, resolve(ctx), limit=limit, mode=mode).model_dump(mode="json")  # type: ignore[arg-type]

    @server.tool()
    def memory_sources(memory_id: str, ctx: Context) -> dict[str, Any]:
        """The raw conversation turns one memory was made from."""
        with _reported():
            return {"memory_id": memory_id,
                    "turns": [t.model_dump(mode="json") for t in memory.sources(memory_id, resolve(ctx))]}

    @server.tool()
    def list_memories(ctx: Context, limit: int = 50, offset: str | None = None) -> dict[str, Any]:
        """A page of memories ordered by id; pass ``next_offset`` back as ``offset`` for the next page."""
        with _reported():
            records = memory.get_all(resolve(ctx), limit=limit, offset=offset or None)
            return {"memories": [r.model_dump(mode="json") for r in records],
                    "next_offset": records[-1].id if len(records) == limit else None}

    @server.tool()
    def get_memory(memory_id: str, ctx: Context) -> dict[str, Any]:
        """One memory with all its fields."""
        with _reported():
            return memory.get(memory_id, resolve(ctx)).model_dump(mode="json")

    @server.tool()
    def delete_memory(memory_id: str, ctx: Context) -> dict[str, Any]:
        """Remove one memory from search (its history stays)."""
        with _reported():
            memory.delete(memory_id, resolve(ctx), actor="mcp")
            return {"id": memory_id, "deleted": True}

    return server


def mcp_starlette(memory: Memory, settings: ServerSettings, *, verify: Callable[[str], ApiKey | None] | None,
                  default_user: str | None, host: str) -> Starlette:
    """The MCP tools as a Starlette app serving streamable HTTP at ``/mcp`` (keys not checked here:
    put it behind :class:`KeyAuth`). Its lifespan runs the MCP session manager."""
    server = build_mcp(memory, user_from_key(verify, default_user))
    return server.streamable_http_app(streamable_http_path="/mcp", json_response=True, stateless_http=True,
                                      max_request_body_size=settings.max_body_bytes, host=host)


def mcp_http_app(memory: Memory, settings: ServerSettings, *, default_user: str | None, host: str) -> ASGIApp:
    """``dialogmem mcp --http``: MCP only, at ``/mcp``, behind the same API keys as the REST server."""
    inner = mcp_starlette(memory, settings, verify=memory.verify_key, default_user=default_user, host=host)
    bounded = BodyTimeout(BodyLimit(inner, max_bytes=settings.max_body_bytes), seconds=settings.body_timeout_s)
    limited = RateLimit(bounded, per_second=settings.requests_per_second, burst=settings.request_burst,
                        llm_calls=settings.llm_calls_per_key)
    return KeyAuth(limited, verify=memory.verify_key, protected=("/mcp",))
