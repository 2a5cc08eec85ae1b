"""The MCP server with the ``mcp`` SDK's own client: stdio against a real ``dialogmem mcp``
subprocess, and streamable HTTP (in a uvicorn thread) behind API keys."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from dialogmem import Memory
from serverkit import RULES_ONLY, bearer, make_keys, serve

TOOLS = {"add_memory", "search_memory", "answer", "memory_sources", "list_memories", "get_memory",
         "delete_memory"}
SRC = str(Path(__file__).resolve().parents[2] / "src")


def _data(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        data = result.structured_content
        return data.get("result", data) if isinstance(data, dict) else data  # type: ignore[no-any-return]
    return json.loads(result.content[0].text)  # type: ignore[no-any-return]


async def _exercise(session: ClientSession, *, user: str) -> None:
    await session.initialize()
    names = {t.name for t in (await session.list_tools()).tools}
    assert names >= TOOLS
    added = _data(await session.call_tool("add_memory", {"content": "My sister Ana lives in Porto",
                                                          "speaker": "Maya", "timestamp": "2024-05-01T10:00:00"}))
    assert added["memories"], added
    mid = added["memories"][0]["id"]
    found = _data(await session.call_tool("search_memory", {"query": "Where does Ana live?", "limit": 3}))
    assert mid in [h["id"] for h in found["hits"]] and "Porto" in found["context"]
    page = _data(await session.call_tool("list_memories", {"limit": 50}))
    assert all(m["user_id"] == user for m in page["memories"])
    assert _data(await session.call_tool("get_memory", {"memory_id": mid}))["user_id"] == user
    assert _data(await session.call_tool("delete_memory", {"memory_id": mid}))["deleted"] is True
    gone = await session.call_tool("get_memory", {"memory_id": mid})
    assert gone.is_error and "not found" in gone.content[0].text
    no_llm = await session.call_tool("answer", {"question": "Where does Ana live?"})
    assert no_llm.is_error and "needs an LLM" in no_llm.content[0].text


def test_stdio_server(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with Memory(data_dir=store, **RULES_ONLY) as mem:  # another user's memory the tools must never show
        mem.add("Bob's secret: the blue door", "bob", flush=True)
    env = {"PYTHONPATH": SRC, "HOME": os.environ.get("HOME", str(tmp_path)),
           "DIALOGMEM_WRITE__EXTRACTOR": "rules", "DIALOGMEM_WRITE__SEGMENTER": "none"}
    params = StdioServerParameters(command=sys.executable, env=env, args=[
        "-c", "from dialogmem.cli import main; main()", "mcp", "--user", "alice", "--data-dir", str(store)])

    async def main() -> None:
        with anyio.fail_after(120):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                await _exercise(session, user="alice")
                found = _data(await session.call_tool("search_memory", {"query": "blue door secret"}))
                assert all("blue door" not in h["memory"] for h in found["hits"])

    anyio.run(main)


@pytest.fixture(params=["dialogmem mcp --http", "dialogmem serve"])
def mcp_http(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """MCP alone, or at /mcp beside the REST routes of ``dialogmem serve``."""
    from seams import create_app, mcp_http_app

    keys = make_keys(tmp_path / "store", ["alice", "bob"])
    with Memory(data_dir=tmp_path / "store", **RULES_ONLY) as mem:
        app = (mcp_http_app(mem, mem.config.server, default_user=None, host="127.0.0.1")
               if request.param == "dialogmem mcp --http" else create_app(mem))
        with serve(app) as url:
            yield url, keys


def test_streamable_http_behind_keys(mcp_http: Any) -> None:
    url, keys = mcp_http
    hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    assert httpx.post(f"{url}/mcp", json=hello).status_code == 401
    assert httpx.post(f"{url}/mcp", json=hello, headers={"X-API-Key": "dm_bad"}).status_code == 401

    async def main() -> None:
        with anyio.fail_after(120):
            for user in ("alice", "bob"):
                async with httpx2.AsyncClient(headers=bearer(keys[user]), timeout=60) as client, \
                        streamable_http_client(f"{url}/mcp", http_client=client) as (read, write), \
                        ClientSession(read, write) as session:
                    await _exercise(session, user=user)
            # an admin key on a server started without --user has no user to act for
            async with httpx2.AsyncClient(headers=bearer(keys["admin"]), timeout=60) as client, \
                    streamable_http_client(f"{url}/mcp", http_client=client) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                refused = await session.call_tool("list_memories", {})
                assert refused.is_error and "does not reach" in refused.content[0].text

    anyio.run(main)
