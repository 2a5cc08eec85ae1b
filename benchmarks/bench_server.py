"""Load test of the REST server: a ``dialogmem serve`` subprocess on loopback, driven by this
process (a second process) with ``--clients`` threads, each its own user and API key, each sending
a mix of adds (one message) and searches for ``--seconds``. Reports requests/s, p50/p95/p99 per
operation and errors; then stops the server and checks, in the journal, that every turn the
server acknowledged is present; last, the same verbs called serially in-process on the same store
(``--baseline`` calls each), the cost of one request alone on the same machine in the same run.

The store is LLM-free (rule extraction: each added turn becomes a memory at once; rule planning).

Usage::

    python benchmarks/bench_server.py [--seconds 120] [--clients 8] [--add-ratio 0.5]
        [--data-dir DIR] [--json out.json] [--baseline 40]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from dialogmem._journal import SQLiteJournal as Journal
from dialogmem._sync._maintenance import StorePaths

THINGS = ["a pottery class", "the camping trip", "her new job", "a charity run", "the book club",
          "a road trip to Ohio", "the adoption agency", "a violin lesson", "the family dinner",
          "a hiking trail", "his sourdough starter", "the beach house", "a support group meeting"]
VERBS = ["talked about", "planned", "remembered", "finished", "bought", "visited", "painted", "cooked"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(data_dir: Path, port: int, log: Path) -> subprocess.Popen[str]:
    """``dialogmem serve`` in a subprocess; its output (an access-log line per request) goes to ``log``."""
    env = {**os.environ, "DIALOGMEM_WRITE__EXTRACTOR": "rules", "DIALOGMEM_READ__PLANNER": "rules",
           "DIALOGMEM_READ__SELECTOR": "rules"}
    with log.open("w") as out:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen([sys.executable, "-c", "from dialogmem.cli import main; main()", "serve",
                                 "--port", str(port), "--data-dir", str(data_dir)], env=env,
                                stdout=out, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("server did not start in 180 s")


class Client(threading.Thread):
    def __init__(self, url: str, user: str, key: str, until: float, add_ratio: float, seed: int) -> None:
        super().__init__(daemon=True)
        self.url, self.user, self.key, self.until, self.add_ratio = url, user, key, until, add_ratio
        self.rng = random.Random(seed)
        self.lat: dict[str, list[float]] = {"add": [], "search": []}
        self.errors: list[str] = []
        self.acked: list[str] = []

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60, headers={"Authorization": f"Bearer {self.key}"}) as c:
            i = 0
            while time.monotonic() < self.until:
                i += 1
                op = "add" if self.rng.random() < self.add_ratio else "search"
                thing = self.rng.choice(THINGS)
                if op == "add":
                    body = {"messages": {"content": f"I {self.rng.choice(VERBS)} {thing} (note {i})",
                                         "name": self.user, "id": f"{self.user}-{i}"}}
                    path = "/v1/memories"
                else:
                    body, path = {"query": f"When did I talk about {thing}?", "limit": 10}, "/v1/search"
                t0 = time.perf_counter()
                try:
                    r = c.post(path, json=body)
                except httpx.HTTPError as exc:
                    self.errors.append(f"{op}: {type(exc).__name__}: {exc}")
                    continue
                self.lat[op].append((time.perf_counter() - t0) * 1000)
                if r.status_code != 200:
                    self.errors.append(f"{op}: {r.status_code} {r.text[:200]}")
                elif op == "add":
                    self.acked += r.json()["turn_ids"]


def pct(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    a = np.asarray(values)
    return {"n": len(values), "p50_ms": round(float(np.percentile(a, 50)), 1),
            "p95_ms": round(float(np.percentile(a, 95)), 1), "p99_ms": round(float(np.percentile(a, 99)), 1),
            "max_ms": round(float(a.max()), 1)}


def verify(data_dir: Path, clients: list[Client]) -> dict[str, Any]:
    """Every acknowledged turn in the journal (read after the server stopped)."""
    missing = 0
    with closing(Journal(StorePaths(data_dir).journal, read_only=True)) as journal:
        for cl in clients:
            held = {t.id for t in journal.turns(cl.user)}
            missing += len(set(cl.acked) - held)
        memories = journal.count_memories()
    return {"acknowledged_turns": sum(len(c.acked) for c in clients), "missing_turns": missing,
            "memories": memories}


def in_process_baseline(data_dir: Path, n: int) -> dict[str, Any]:
    """The same verbs called serially in this process on the same store (no HTTP, no concurrency):
    what one request costs by itself on this machine, measured in the same run."""
    from dialogmem import Memory

    rng = random.Random(99)
    lat: dict[str, list[float]] = {"add": [], "search": []}
    with Memory(data_dir=data_dir, write={"extractor": "rules"}) as mem:
        for i in range(n):
            thing = rng.choice(THINGS)
            t0 = time.perf_counter()
            mem.add({"content": f"I {rng.choice(VERBS)} {thing} (baseline {i})", "name": "base"}, "baseline-user")
            lat["add"].append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            mem.search(f"When did I talk about {thing}?", "load-user-0", limit=10)
            lat["search"].append((time.perf_counter() - t0) * 1000)
    return {op: pct(v) for op, v in lat.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--add-ratio", type=float, default=0.5)
    ap.add_argument("--data-dir", type=Path, default=None, help="default: a fresh temporary store")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--baseline", type=int, default=40, help="serial in-process calls per verb afterwards (0: none)")
    args = ap.parse_args()
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="dialogmem-bench-server-")) / "store"
    data_dir.mkdir(parents=True, exist_ok=True)
    users = [f"load-user-{i}" for i in range(args.clients)]
    with closing(Journal(StorePaths(data_dir).journal)) as journal:
        keys = {u: journal.create_key("user", u, label="bench_server")[1] for u in users}
    port = _free_port()
    t_start = time.perf_counter()
    log = data_dir.parent / "bench_server.log"
    server = start_server(data_dir, port, log)
    print(f"server up in {time.perf_counter() - t_start:.1f} s on 127.0.0.1:{port}; "
          f"{args.clients} clients for {args.seconds:.0f} s", file=sys.stderr)
    until = time.monotonic() + args.seconds
    clients = [Client(f"http://127.0.0.1:{port}", u, keys[u], until, args.add_ratio, seed=i)
               for i, u in enumerate(users)]
    t0 = time.perf_counter()
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    wall = time.perf_counter() - t0
    server.send_signal(signal.SIGINT)
    server.wait(timeout=120)
    adds = [x for c in clients for x in c.lat["add"]]
    searches = [x for c in clients for x in c.lat["search"]]
    errors = [e for c in clients for e in c.errors]
    report = {
        "seconds": round(wall, 1), "clients": args.clients, "requests": len(adds) + len(searches),
        "requests_per_s": round((len(adds) + len(searches)) / wall, 1),
        "add": pct(adds), "search": pct(searches), "all": pct(adds + searches),
        "errors": len(errors), "error_samples": errors[:5], "server_exit": server.returncode,
        **verify(data_dir, clients), "cpu_count": os.cpu_count(),
    }
    if args.baseline:
        report["in_process_serial"] = in_process_baseline(data_dir, args.baseline)
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    if report["errors"] or report["missing_turns"] or server.returncode != 0:
        print(log.read_text()[-3000:], file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
