"""The per-request cost of ``Client`` over REST against in-process ``Memory``: search latency of
both on the same store in the same run (a local uvicorn server in a thread, loopback, no TLS).

The store gets ``--memories`` short memories of ``--users`` users (LLM-free write path); then each
of ``--queries`` queries runs once through ``Memory.search`` and once through ``Client.search``,
alternating, after a warm-up. The server is started without keys (``--no-auth``), so the numbers
are HTTP + JSON + the server's middleware, not the key check (one SHA-256 and one journal read).

Usage::

    python benchmarks/bench_client.py [--memories 2000] [--queries 200] [--users 4]

Output: a markdown table of p50 / p95 / mean milliseconds per implementation, and the overhead.
"""

from __future__ import annotations

import argparse
import random
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import uvicorn

from dialogmem import Client, Memory
from dialogmem._server import create_app

SUBJECTS = ("Maya", "Tom", "Ines", "Farid", "Carmen", "Hugo", "Elif", "Dario")
VERBS = ("adopted", "painted", "repaired", "sold", "bought", "visited", "photographed", "lost")
THINGS = ("a beagle", "the red bicycle", "a cello", "the old clock", "a kayak", "the blue door", "a violin",
          "the garden shed", "a vintage camera", "the sailing boat")
PLACES = ("in Lyon", "in Porto", "near Seville", "in Geneva", "at the market", "on the roof", "by the lake")


def sentence(rng: random.Random) -> str:
    return f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(THINGS)} {rng.choice(PLACES)}."


@contextmanager
def served(mem: Memory) -> Iterator[str]:
    """The app served as ``dialogmem serve`` serves it: uvicorn binds host and port itself (asyncio
    then sets TCP_NODELAY; a socket handed to uvicorn without the TCP protocol number does not get
    it, and every answer waits ~40 ms for a delayed ACK)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(mem, auth=False, mcp=False), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def fill(mem: Memory, memories: int, users: int, rng: random.Random) -> None:
    per_user = memories // users
    for u in range(users):
        for start in range(0, per_user, 100):
            batch = [sentence(rng) for _ in range(min(100, per_user - start))]
            mem.add(batch, f"user-{u}", timestamp="2023-05-08T13:56:00", flush=True)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    rng = random.Random(0)
    config = {"write": {"extractor": "rules", "segmenter": "none"}, "sleep": {"updater": "rules"}}
    with tempfile.TemporaryDirectory() as tmp, Memory(data_dir=Path(tmp) / "store", **config) as mem:
        started = time.perf_counter()
        fill(mem, args.memories, args.users, rng)
        stored = mem.stats()["counts"]["memories"]
        print(f"store: {stored} memories of {args.users} users, filled in {time.perf_counter() - started:.1f} s")
        queries = [(f"what did {rng.choice(SUBJECTS)} {rng.choice(VERBS)}?", f"user-{rng.randrange(args.users)}")
                   for _ in range(args.warmup + args.queries)]
        local: list[float] = []
        remote: list[float] = []
        with served(mem) as url, Client(url) as client:
            for n, (q, user) in enumerate(queries):
                a = timed(lambda q=q, user=user: mem.search(q, user, limit=10))  # type: ignore[misc]
                b = timed(lambda q=q, user=user: client.search(q, user, limit=10))  # type: ignore[misc]
                if n >= args.warmup:
                    local.append(a)
                    remote.append(b)
    print(f"\nsearch, limit 10, {args.queries} queries (after {args.warmup} warm-up), same store, same run\n")
    print("| implementation | p50 ms | p95 ms | mean ms |")
    print("|---|---|---|---|")
    for name, values in (("Memory (in-process)", local), ("Client (REST, loopback)", remote)):
        print(f"| {name} | {percentile(values, 0.5):.2f} | {percentile(values, 0.95):.2f} | "
              f"{statistics.fmean(values):.2f} |")
    print(f"\nClient overhead: p50 +{percentile(remote, 0.5) - percentile(local, 0.5):.2f} ms, "
          f"p95 +{percentile(remote, 0.95) - percentile(local, 0.95):.2f} ms")


if __name__ == "__main__":
    main()
