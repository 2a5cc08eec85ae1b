"""The PostgreSQL journal against the SQLite journal, in the same run: add throughput and search latency.

    python benchmarks/bench_journal.py --start-server [--turns 300] [--users 4] [--queries 200] [--rounds 3]
        [--json out.json]
    python benchmarks/bench_journal.py --pg-url postgresql://user:pw@host:5432/db ...

Both stores use the same Edge index, MiniLM embedder and LLM-free write path; only the journal
differs. Two measures per backend:

* ``facade``: ``Memory.add`` one message at a time (journal commit + embedding + index upsert), then
  ``Memory.search`` (served by the index; its access counters reach the journal with the next commit);
* ``journal``: raw ``commit`` of one turn per transaction, no embedding: the journal's own cost.

``--start-server`` runs a throwaway local PostgreSQL (tests/pg_server.py: Debian's initdb/pg_ctl)
with PostgreSQL's default durability (fsync on, synchronous commit), as SQLite runs with
``synchronous=FULL``: both pay an fsync per commit, on the same disk, over loopback for PostgreSQL.
Turns are generated here, so the run needs no data set. The backends alternate over ``--rounds``
and each figure is the median over its rounds.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from dialogmem import Memory
from dialogmem._changes import ChangeSet
from dialogmem._config import JournalConfig
from dialogmem._journal import open_journal
from dialogmem._types import Turn

_PEOPLE = ["Ana", "Ben", "Caroline", "Melanie", "Joanna", "Nate", "Priya", "Omar"]
_THINGS = ["the pottery class", "a beagle puppy", "the marathon in October", "her grandmother's recipe",
           "a trip to Lisbon", "the support group", "a new sci-fi novel", "the school fundraiser",
           "the camping weekend", "a violin concert", "their first apartment", "the job interview"]


def _sentence(rng: random.Random, i: int) -> str:
    return (f"{rng.choice(_PEOPLE)} told me about {rng.choice(_THINGS)} on day {i} and "
            f"{rng.choice(_PEOPLE)} wants to join {rng.choice(_THINGS)}.")


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def bench_facade(journal: dict[str, Any], root: Path, args: argparse.Namespace) -> dict[str, float]:
    rng = random.Random(7)
    users = [f"user{u}" for u in range(args.users)]
    with Memory(data_dir=root, journal=journal) as mem:
        mem.add([{"role": "user", "content": "warm-up"}], "warmup")
        mem.search("warm-up", "warmup")
        started = time.perf_counter()
        for i in range(args.turns):
            mem.add([{"role": "user", "content": _sentence(rng, i)}], users[i % len(users)])
        add_s = time.perf_counter() - started
        latencies = []
        for q in range(args.queries):
            t0 = time.perf_counter()
            mem.search(f"What did {rng.choice(_PEOPLE)} say about {rng.choice(_THINGS)}?", users[q % len(users)])
            latencies.append((time.perf_counter() - t0) * 1000)
    return {"adds_per_s": args.turns / add_s, "search_p50_ms": statistics.median(latencies),
            "search_p95_ms": _pct(latencies, 0.95)}


def bench_journal(config: JournalConfig, path: Path, args: argparse.Namespace) -> dict[str, float]:
    j = open_journal(config, path)
    try:
        started = time.perf_counter()
        for i in range(args.turns):
            t = Turn(id=f"t{i}", user_id=f"user{i % args.users}", speaker="A", content=f"turn {i}",
                     time_stamp="2024-01-01T00:00:00.000", float_time_stamp=1704067200.0 + i, weekday="Mon")
            j.commit(ChangeSet(t.user_id, turns=[t]), {})
        commit_s = time.perf_counter() - started
        started = time.perf_counter()
        for i in range(args.queries):
            j.pending_turns(f"user{i % args.users}")
        read_s = time.perf_counter() - started
    finally:
        j.close()
    return {"commits_per_s": args.turns / commit_s, "pending_read_ms": read_s / args.queries * 1000}


def _one_run(name: str, root: Path, args: argparse.Namespace) -> dict[str, float]:
    schema = "bench_" + uuid.uuid4().hex[:12]
    journal: dict[str, Any] = {} if name == "sqlite" else {"url": args.pg_url, "schema_name": schema}
    facade = bench_facade(journal, root / "facade", args)
    raw_dir = root / "raw"
    raw_dir.mkdir(parents=True)
    if name == "postgres":
        journal["schema_name"] = schema + "_raw"
    raw = bench_journal(JournalConfig(**journal), raw_dir / "j.sqlite3", args)
    if name == "postgres":
        _drop(args.pg_url, [schema, schema + "_raw"])
    return {**facade, **raw}


def _drop(url: str, schemas: list[str]) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for name in schemas:
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pg-url")
    ap.add_argument("--start-server", action="store_true", help="start a throwaway local PostgreSQL")
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--users", type=int, default=4)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3, help="alternating runs per backend; medians reported")
    ap.add_argument("--json")
    args = ap.parse_args()
    if not args.pg_url and not args.start_server:
        ap.error("give --pg-url or --start-server")
    server = None
    if args.start_server:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
        from pg_server import PostgresServer

        server = PostgresServer(durable=True).start()
        args.pg_url = server.url
    try:
        results: dict[str, Any] = {"turns": args.turns, "users": args.users, "queries": args.queries,
                                   "rounds": args.rounds,
                                   "server": "throwaway local, fsync on" if server else "given URL"}
        runs: dict[str, list[dict[str, float]]] = {"sqlite": [], "postgres": []}
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(args.rounds):  # alternate the backends: a load change on the machine hits both
                for name in ("sqlite", "postgres"):
                    runs[name].append(_one_run(name, Path(tmp) / f"{name}-{r}", args))
                    print(name, r, json.dumps(runs[name][-1]), flush=True)
        for name, got in runs.items():
            results[name] = {k: statistics.median(x[k] for x in got) for k in got[0]}
        for key in ("adds_per_s", "search_p50_ms", "commits_per_s"):
            results[f"ratio_{key}"] = results["postgres"][key] / results["sqlite"][key]
        print(json.dumps({k: v for k, v in results.items() if k.startswith("ratio")}, indent=1))
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
