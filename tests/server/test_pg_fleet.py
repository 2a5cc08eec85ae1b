"""A fleet on one PostgreSQL, really run: one PostgreSQL 18 with pgvector, three ``dialogmem serve``
processes on it (``store.backend = "postgres"``: journal and index in one schema; each node its own
data directory and port, no shared file), driven through the real ``Client``.

Each phase writes turns whose ids the test chooses, and counts: acknowledged (the add returned),
found (through another node than the writer's), lost (acknowledged, absent from the journal or from
any node's answer) and duplicated (a memory text twice: a batch extracted by two nodes). Faults: a
node SIGKILLed under load, PostgreSQL restarted under load. A scripted fake stands in for nothing:
no LLM runs (rules extractor), the embedder is the real MiniLM.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from dialogmem import Client, DialogmemError
from dialogmem._config import JournalConfig
from dialogmem._journal import TurnStatus, open_journal
from pg_server import PostgresServer, PostgresUnavailable, free_port

SCHEMA = "fleet"
NODES = 3


class Node:
    """One ``dialogmem serve`` process on the shared PostgreSQL."""

    def __init__(self, index: int, root: Path, url: str) -> None:
        self.index = index
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        data_dir = root / f"node{index}"
        data_dir.mkdir()
        env = {**os.environ, "DIALOGMEM_JOURNAL__URL": url, "DIALOGMEM_JOURNAL__SCHEMA_NAME": SCHEMA,
               "DIALOGMEM_JOURNAL__CONNECT_TIMEOUT_S": "3", "DIALOGMEM_STORE__BACKEND": "postgres",
               "DIALOGMEM_WRITE__EXTRACTOR": "rules", "DIALOGMEM_WRITE__SEGMENTER": "none",
               "DIALOGMEM_SLEEP__UPDATER": "rules", "DIALOGMEM_LLM__BACKEND": "none"}
        self.log = (root / f"node{index}.log").open("w")
        serve = [sys.executable, "-c", "from dialogmem.cli import main; main()", "serve", "--no-auth",
                 "--port", str(self.port), "--data-dir", str(data_dir)]
        self.proc = subprocess.Popen(serve, stdout=self.log, stderr=subprocess.STDOUT, env=env, cwd=root)
        self.client = Client(self.url, retries=0, timeout=60)

    def wait_ready(self, deadline: float) -> None:
        while True:
            assert self.proc.poll() is None, f"node {self.index} exited: {self.tail()}"
            try:
                self.client.stats()
                return
            except DialogmemError:
                assert time.monotonic() < deadline, f"node {self.index} did not start: {self.tail()}"
                time.sleep(0.3)

    def tail(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self.client.close()
        self.log.close()


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[PostgresServer, list[Node]]]:
    try:
        server = PostgresServer(vector=True).start()
    except PostgresUnavailable as exc:
        pytest.fail(f"the fleet test needs a PostgreSQL server with pgvector: {exc}", pytrace=False)
    nodes: list[Node] = []
    try:
        nodes = [Node(i, tmp_path, server.url) for i in range(NODES)]
        deadline = time.monotonic() + 240
        for node in nodes:
            node.wait_ready(deadline)
        yield server, nodes
    finally:
        for node in nodes:
            node.stop()
        server.stop()
        shutil.rmtree(tmp_path, ignore_errors=True)


def turn(tid: str, text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text, "id": tid}]


def add_until_acknowledged(client: Client, tid: str, text: str, user: str, *, until: float,
                           refused: Counter[str]) -> bool:
    """Add one turn, again with the same id after a refusal (a retry journals nothing twice), until it
    is acknowledged or ``until`` passes; ``refused`` counts refusals by error type."""
    while time.monotonic() < until:
        try:
            client.add(turn(tid, text), user)
            return True
        except DialogmemError as exc:
            refused[type(exc).__name__] += 1
            time.sleep(0.2)
    return False


class Tally:
    """What one phase acknowledged, per user (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.acked: dict[str, list[str]] = {}
        self.refused: Counter[str] = Counter()

    def ack(self, user: str, tid: str) -> None:
        with self._lock:
            self.acked.setdefault(user, []).append(tid)


def writer(client: Client, tally: Tally, user: str, prefix: str, n: int, *, retry_for: float = 0.0,
           stop: threading.Event | None = None) -> None:
    for j in range(n):
        if stop is not None and stop.is_set():
            return
        tid, text = f"{prefix}-{j}", f"On day {j} {prefix.replace('-', ' ')} planted a tree called {prefix}x{j}."
        if retry_for:
            if add_until_acknowledged(client, tid, text, user, until=time.monotonic() + retry_for,
                                      refused=tally.refused):
                tally.ack(user, tid)
            continue
        try:
            client.add(turn(tid, text), user)
        except DialogmemError as exc:
            tally.refused[type(exc).__name__] += 1
            continue
        tally.ack(user, tid)


def run_all(*threads: threading.Thread) -> None:
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
        assert not t.is_alive()


def all_memories(client: Client, user: str) -> list[Any]:
    out: list[Any] = []
    while True:
        page = client.get_all(user, limit=100, offset=out[-1].id if out else None)
        out += page
        if len(page) < 100:
            return out


def check(url: str, acked: dict[str, list[str]], readers: list[Client], phase: str) -> dict[str, Any]:
    """Every acknowledged turn is journaled, processed, in exactly one memory, and found through
    ``readers`` (nodes other than the writers); no memory text twice; the index holds exactly the
    journal's active memories. Returns the phase's counts."""
    journal = open_journal(JournalConfig(url=url, schema_name=SCHEMA), Path("unused"))
    counts = {"phase": phase, "acknowledged": 0, "found_through_another_node": 0, "lost": 0, "duplicated": 0}
    try:
        for user, ids in acked.items():
            counts["acknowledged"] += len(ids)
            journaled = {t.id for t in journal.turns(user)}
            counts["lost"] += len(set(ids) - journaled)
            assert journal.count_turns(user, TurnStatus.PENDING) == 0, (phase, user)
            memories = journal.memories(user, limit=100_000)
            # a turn extracted twice (two nodes processing one batch) writes its memories twice
            twice = {text: n for text, n in Counter(m.memory for m in memories).items() if n > 1}
            assert not twice, (phase, twice)
            counts["duplicated"] += sum(n - 1 for n in twice.values())
            seen = set(ids)  # what every reader finds
            for reader in readers:
                seen &= {t for m in all_memories(reader, user) for t in m.source_turn_ids}
            counts["found_through_another_node"] += len(seen)
            counts["lost"] += len(set(ids) - seen)
        with psycopg.connect(url, options=f"-c search_path={SCHEMA},public") as conn:
            index = dict(conn.execute("SELECT user_id, count(*) FROM ix_points WHERE user_id = ANY(%s) "
                                      "GROUP BY user_id", (list(acked),)).fetchall())
        assert index == {u: journal.count_memories(u) for u in acked if journal.count_memories(u)}, phase
    finally:
        journal.close()
    if phase != "PostgreSQL restarted":
        print(json.dumps(counts))  # the fleet's counts, for `pytest -s`
    return counts


@pytest.mark.timeout(900)
def test_three_nodes_on_one_postgres(fleet: tuple[PostgresServer, list[Node]]) -> None:
    server, nodes = fleet
    a, b, c = (n.client for n in nodes)

    # read-your-writes across nodes: written and flushed through one node, found through the others at once
    a.add(turn("ryw-0", "My daughter Lena starts violin lessons in Graz next week."), "ryw")
    a.flush("ryw")
    assert any("violin" in h.memory for h in b.search("What does Lena learn?", "ryw").hits)
    assert any("violin" in m.memory for m in c.get_all("ryw"))

    # concurrent writers on different nodes for the same users: nothing lost, nothing twice
    tally = Tally()
    run_all(*(threading.Thread(target=writer, args=(n.client, tally, user, f"w{n.index}{user}", 12))
              for n in nodes for user in ("u0", "u1")))
    assert not tally.refused, tally.refused
    for user in ("u0", "u1"):
        a.flush(user)
    counts = check(server.url, tally.acked, [b, c], "concurrent writers")
    assert counts["acknowledged"] == 72 and counts["lost"] == 0 and counts["duplicated"] == 0

    # forget_user through one node leaves nothing through any
    assert b.forget_user("u1")["memories"] > 0
    for client in (a, b, c):
        assert client.get_all("u1") == [] and client.search("tree", "u1").hits == []
    with psycopg.connect(server.url, options=f"-c search_path={SCHEMA},public") as conn:
        for table in ("ix_points", "ix_terms", "memories", "turns"):
            assert conn.execute(f"SELECT count(*) FROM {table} WHERE user_id = 'u1'").fetchone() == (0,), table

    # a sleep job on one node while the others write
    tally = Tally()
    sleeper = threading.Thread(target=lambda: [c.sleep("u0"), c.sleep()])
    run_all(sleeper, *(threading.Thread(target=writer, args=(n.client, tally, "u0", f"s{n.index}", 10))
                       for n in nodes[:2]))
    assert not tally.refused, tally.refused
    a.flush("u0")
    counts = check(server.url, tally.acked, [c], "sleep while writing")
    assert counts["lost"] == 0 and counts["duplicated"] == 0

    # one node SIGKILLed under load: every acknowledged turn survives, the others keep serving
    tally, survivors = Tally(), Tally()
    victim = threading.Thread(target=writer, args=(c, tally, "k", "kc", 40))
    others = [threading.Thread(target=writer, args=(n.client, survivors, "k", f"k{n.index}", 15)) for n in nodes[:2]]
    victim.start()
    for t in others:
        t.start()
    time.sleep(1.0)
    nodes[2].proc.kill()
    for t in (victim, *others):
        t.join(timeout=600)
    assert nodes[2].proc.wait(timeout=30) == -signal.SIGKILL
    assert not survivors.refused, survivors.refused  # the other nodes never failed a call
    a.flush("k")
    acked = {"k": tally.acked.get("k", []) + survivors.acked["k"]}
    counts = check(server.url, acked, [b], "node SIGKILLed")
    assert counts["lost"] == 0 and counts["duplicated"] == 0 and len(survivors.acked["k"]) == 30

    # PostgreSQL restarted under load: refusals (503) meanwhile, then recovery; nothing acknowledged is lost
    tally, stop = Tally(), threading.Event()
    writers = [threading.Thread(target=writer, args=(n.client, tally, "r", f"r{n.index}", 30),
                                kwargs={"retry_for": 120.0, "stop": stop}) for n in nodes[:2]]
    for t in writers:
        t.start()
    time.sleep(0.5)
    server.restart()
    for t in writers:
        t.join(timeout=600)
    a.flush("r")
    counts = check(server.url, tally.acked, [b], "PostgreSQL restarted")
    counts["refused_meanwhile"] = dict(tally.refused)  # 503s (the journal unreachable), each tried again
    print(json.dumps(counts))
    assert counts["acknowledged"] == 60 and counts["lost"] == 0 and counts["duplicated"] == 0
