"""Helpers of the server tests: a real uvicorn server on a free loopback port, in a thread."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn
from typer.testing import CliRunner

from dialogmem import Memory, ScriptedLLM, ServerSettings
from dialogmem.cli import app as cli_app
from seams import create_app, uvicorn_options

#: LLM-backed roles off, so the scripted fake answers the ``answer`` stage only
RULES_ONLY: dict[str, Any] = {"write": {"extractor": "rules", "segmenter": "none"}, "sleep": {"updater": "rules"}}


def answering_llm(delay_for: Callable[[str], float] = lambda text: 0.0) -> ScriptedLLM:
    """A scripted fake, not a model: answers every light ``answer`` call citing line 1, after
    ``delay_for(prompt text)`` seconds (to make one user's calls slow)."""
    def script(stage: str, messages: list[dict[str, Any]]) -> str:
        if stage != "answer.light":
            raise AssertionError(f"unexpected LLM stage {stage}")
        text = " ".join(str(m.get("content", "")) for m in messages)
        time.sleep(delay_for(text))
        return "scripted answer [1]"
    return ScriptedLLM(script)


def cli_key(data_dir: Path, *args: str) -> str:
    """``dialogmem keys create ARGS --data-dir DATA_DIR``: the new key (the last line it prints)."""
    result = CliRunner().invoke(cli_app, ["keys", "create", *args, "--data-dir", str(data_dir)])
    assert result.exit_code == 0, result.output
    return result.stdout.strip().splitlines()[-1]


def revoke_key(data_dir: Path, key_id: str) -> None:
    """``dialogmem keys revoke KEY_ID --data-dir DATA_DIR``."""
    result = CliRunner().invoke(cli_app, ["keys", "revoke", key_id, "--data-dir", str(data_dir)])
    assert result.exit_code == 0, result.output


def make_keys(data_dir: Path, users: list[str]) -> dict[str, str]:
    """An admin key ("admin") and one key per user, made with ``dialogmem keys create``."""
    keys = {"admin": cli_key(data_dir, "--admin")}
    for user in users:
        keys[user] = cli_key(data_dir, "--user", user)
    return keys


@contextmanager
def serve(app: Any, **options: Any) -> Iterator[str]:
    """Run ``app`` with uvicorn (``options``: more ``uvicorn.Config`` arguments) on
    127.0.0.1:<free port>; yields the base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # as uvicorn's own sockets: without it every answer waits for the client's delayed ACK (~40 ms)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", **options))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@contextmanager
def rest_server(data_dir: Path, users: list[str], *, llm: ScriptedLLM | None = None,
                settings: ServerSettings | None = None,
                auth: bool = True, **overrides: Any) -> Iterator[tuple[str, dict[str, str], Memory]]:
    """A store (rules for every role but ``answer``, unless ``overrides`` say otherwise) served over HTTP."""
    keys = make_keys(data_dir, users)
    config = {**RULES_ONLY, **overrides}
    with Memory(data_dir=data_dir, llm_client=llm or answering_llm(), **config) as mem, \
            serve(create_app(mem, settings, auth=auth), **uvicorn_options(settings or mem.config.server)) as url:
        yield url, keys, mem


def bearer(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


class RawListener:
    """A bare TCP server on a free loopback port, for tests that must answer what no real server would
    (a cut stream, a lost answer): each connection goes to ``handle`` in its own thread."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def handle(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.sock.close()

