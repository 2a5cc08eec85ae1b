"""Spine floor, measured through the public ``Memory.search`` (plan + embed + hybrid query + select +
access statistics): 100,000 memories over 1,000 users, imported in bulk with precomputed vectors
through ``Memory.import_records`` (the journal and the index, as any write).

Every query text is distinct (generated from templates, seeded), so the embedder's query cache never
answers and each search pays its query embedding: "embedding included". ``--repeat-queries`` gives the
old behaviour (10 texts over and over, served from the cache after the first round).

Targets (issue 15): search p50 <= 6 ms and p95 <= 12 ms at 100k memories / 1k users, embedding
included; floors of the spine issue: bulk insert >= 500 memories/s with precomputed vectors, RSS <=
1.5 GB. The embedder comes from the configuration, e.g. ``DIALOGMEM_EMBEDDER__QUANTIZE=int8``.

Usage (old vs new: the same command with another ``PYTHONPATH``)::

    python benchmarks/bench_spine.py [--n 100000] [--users 1000] [--queries 300] [--path DIR]
    python benchmarks/bench_spine.py --backends edge,postgres --pg-url postgresql://…  # both, one run
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_store import SPEAKERS, THINGS, VERBS, WHEN, records, unit_vectors

from dialogmem import Memory

QUERIES = [
    "What did Caroline talk about last week?", "When did Melanie visit the beach house?",
    "Who went on the camping trip?", "What did Jon cook after work?", "Did Gina finish the pottery class?",
    "What happened at the book club in May?", "Where did Evan go on the road trip?",
    "What did Audrey paint yesterday?", "Tell me about the charity run", "Who bought a violin lesson?",
]


def distinct_queries(n: int, seed: int = 11) -> list[str]:
    """``n`` different questions in the style of QUERIES (up to a few thousand), in a seeded order."""
    forms = ["What did {s} say about {t} {w}?", "When did {s} mention {t}?", "Who {v} {t} {w}?",
             "Did {s} enjoy {t} {w}?", "Tell me what {s} {v} {w}"]
    pool = sorted({f.format(s=s, t=t, w=w, v=v) for f in forms for s in SPEAKERS for t in THINGS
                   for w in WHEN for v in VERBS})
    if n > len(pool):
        raise SystemExit(f"--queries {n}: at most {len(pool)} distinct queries")
    return random.Random(seed).sample(pool, n)


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def backend_overrides(backend: str, pg_url: str | None, schema: str = "bench_spine") -> dict:
    """The store settings of ``backend``: Edge in the data directory, or journal and index in a
    PostgreSQL schema (``schema``, emptied first)."""
    if backend == "edge":
        return {}
    if backend != "postgres" or not pg_url:
        raise SystemExit(f"--backends {backend}: 'edge' or 'postgres' (with --pg-url)")
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    return {"journal": {"url": pg_url, "schema_name": schema}, "store": {"backend": "postgres"}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--users", type=int, default=1_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--batch", type=int, default=1_000)
    ap.add_argument("--path", type=Path, default=None)
    ap.add_argument("--repeat-queries", action="store_true",
                    help="draw from 10 fixed texts (the query cache answers most searches)")
    ap.add_argument("--fusion", default="",
                    help="comma-separated read.fusion values (convex,rrf) measured in alternating rounds "
                         "of 50 queries on the same store (default: the configured one)")
    ap.add_argument("--backends", default="edge",
                    help="comma-separated store backends (edge,postgres), each its own store of the same "
                         "memories, searched in alternating rounds of 50 queries")
    ap.add_argument("--pg-url", default=None, help="PostgreSQL with pgvector for --backends postgres")
    ap.add_argument("--pg-schema", default="bench_spine", help="the schema the postgres store fills (emptied first)")
    args = ap.parse_args()
    root = args.path or Path(tempfile.mkdtemp(prefix="dialogmem-bench-"))
    rng = random.Random(7)
    backends = [b for b in args.backends.split(",") if b]
    store = {b: backend_overrides(b, args.pg_url, args.pg_schema) for b in backends}
    insert_s: dict[str, float] = {}
    try:
        vectors = unit_vectors(args.n, 384, seed=1)
        for backend in backends:
            with Memory(data_dir=root / backend, **store[backend]) as mem:
                t0 = time.perf_counter()
                batch: list = []
                for i, rec in enumerate(records(args.n, args.users, seed=1)):
                    batch.append(rec)
                    if len(batch) == args.batch:
                        mem.import_records(batch, vectors=vectors[i + 1 - len(batch):i + 1])
                        batch = []
                if batch:
                    mem.import_records(batch, vectors=vectors[args.n - len(batch):])
                insert_s[backend] = time.perf_counter() - t0
        del vectors
        texts = ([rng.choice(QUERIES) for _ in range(args.queries)] if args.repeat_queries
                 else distinct_queries(args.queries))
        users = [f"user{rng.randrange(args.users)}" for _ in texts]
        fusions = [f for f in args.fusion.split(",") if f] or [None]
        runs = [(b, f) for b in backends for f in fusions]
        lat: dict[tuple[str, str | None], list[float]] = {r: [] for r in runs}
        stages: dict[tuple[str, str | None], dict[str, list[float]]] = {r: {} for r in runs}  # stage: [calls, ms]
        for start in range(0, len(texts), 50):
            for backend, fusion in runs:
                overrides = {"read": {"fusion": fusion}} if fusion else {}
                with Memory(data_dir=root / backend, **store[backend] | overrides) as mem:
                    mem.search("warm up the embedder", "user0")
                    before = mem.stats()["latency"]
                    for q, user in zip(texts[start:start + 50], users[start:start + 50], strict=True):
                        t = time.perf_counter()
                        mem.search(q, user, limit=10)
                        lat[backend, fusion].append((time.perf_counter() - t) * 1000)
                    for stage, u in mem.stats()["latency"].items():
                        b = before.get(stage, {"calls": 0, "latency_ms": 0.0})
                        acc = stages[backend, fusion].setdefault(stage, [0, 0.0])
                        acc[0] += u["calls"] - b["calls"]
                        acc[1] += u["latency_ms"] - b["latency_ms"]
                    embedder = mem._parts.embedder
        print(f"embedder                 {getattr(embedder, 'identity', type(embedder).__name__)}"
              f"{' (repeated queries)' if args.repeat_queries else ' (distinct queries)'}")
        print(f"memories                 {args.n:,} over {args.users:,} users")
        for backend in backends:
            tag = f" [{backend}]" if len(backends) > 1 else ""
            print(f"{'bulk insert' + tag:<25}{args.n / insert_s[backend]:,.0f} memories/s "
                  f"({insert_s[backend]:.1f} s)")
        for backend, fusion in runs:
            name = "".join(f" [{x}]" for x in (backend if len(backends) > 1 else None, fusion) if x)
            ms = lat[backend, fusion]
            print(f"{'Memory.search p50' + name:<26}{statistics.median(ms):.2f} ms")
            print(f"{'Memory.search p95' + name:<26}{percentile(ms, 95):.2f} ms")
            print(f"{'Memory.search mean' + name:<26}{statistics.fmean(ms):.2f} ms ({len(ms)} queries)")
            for stage, (calls, total) in sorted(stages[backend, fusion].items()):
                if calls:
                    print(f"  {stage:<22} mean {total / calls:.2f} ms")
        if "postgres" in backends and args.pg_url:
            from bench_pg_index import server_settings

            print(server_settings(args.pg_url))
        print(f"RSS                      {rss_mb():.0f} MB")
    finally:
        if args.path is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
