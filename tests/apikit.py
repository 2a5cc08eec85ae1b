"""Helpers of the public-API suite: the four implementations of the verbs behind one sync face.

``Memory`` is used as it is; ``AsyncMemory`` and ``AsyncClient`` are driven on one event loop by
:class:`Synced`; ``Client`` and ``AsyncClient`` talk to a real uvicorn server over the same kind of
store (rules for every role, the scripted fake for ``answer`` only) with an admin key.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from dialogmem import AsyncClient, AsyncMemory, Client, Memory, Turn
from portable import header, write_export
from serverkit import RULES_ONLY, answering_llm, rest_server

IMPLEMENTATIONS = ("Memory", "AsyncMemory", "Client", "AsyncClient")


class Synced:
    """An async implementation's verbs as plain calls, each run to its end on ``loop``."""

    def __init__(self, impl: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._impl = impl
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._impl, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._loop.run_until_complete(attr(*args, **kwargs))
        return call


@contextmanager
def implementation(kind: str, data_dir: Path) -> Iterator[Any]:
    """One of the four, over a fresh store in ``data_dir``, with a sync face."""
    with ExitStack() as stack:
        if kind == "Memory":
            yield stack.enter_context(Memory(data_dir=data_dir, llm_client=answering_llm(), **RULES_ONLY))
            return
        if kind == "AsyncMemory":
            loop = asyncio.new_event_loop()
            stack.callback(loop.close)
            amem = AsyncMemory(data_dir=data_dir, llm_client=answering_llm(), **RULES_ONLY)
            stack.callback(lambda: loop.run_until_complete(amem.close()))
            yield Synced(amem, loop)
            return
        url, keys, _ = stack.enter_context(rest_server(data_dir, []))
        if kind == "Client":
            yield stack.enter_context(Client(url, keys["admin"], retries=1))
            return
        loop = asyncio.new_event_loop()
        stack.callback(loop.close)
        client = AsyncClient(url, keys["admin"], retries=1)
        stack.callback(lambda: loop.run_until_complete(client.close()))
        yield Synced(client, loop)


def quarantined_file(path: Path, user: str, turn_ids: list[str]) -> Path:
    """An export holding quarantined turns of ``user`` (what a crashed extraction leaves)."""
    lines = [header(users=(user,))]
    for i, tid in enumerate(turn_ids):
        turn = Turn(id=tid, user_id=user, speaker="user", content=f"Quentin repaired the {i}th violin in Lyon.",
                    time_stamp="2023-05-08T13:56:00", float_time_stamp=1683554160.0, weekday="Mon")
        lines.append({"kind": "quarantined", "error": "extractor bug", "turn": turn.model_dump()})
    return write_export(path, lines)
