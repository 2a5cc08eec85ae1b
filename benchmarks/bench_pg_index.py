"""The index alone, Edge beside PostgreSQL (pgvector), in one run: the same synthetic points (random
unit 384-d vectors, bench_store's sentences) upserted into each, then dense, BM25 and hybrid (RRF)
searches scoped to one user, in alternating rounds. No journal, no embedding: what each index costs.

Usage::

    python benchmarks/bench_pg_index.py --pg-url postgresql://… [--n 100000] [--users 1] [--queries 200]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from bench_spine import distinct_queries, percentile
from bench_store import records, unit_vectors

from dialogmem._store import EdgeIndex, IndexPoint, PgIndex


def server_settings(url: str) -> str:
    """The server's version and the memory settings a search's speed depends on (a graph and table
    larger than shared_buffers are read from the OS cache, and searches evict each other)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        names = ("server_version", "shared_buffers", "effective_cache_size", "work_mem")
        values = [conn.execute(f"SHOW {n}").fetchone()[0] for n in names]
    return "postgres " + ", ".join(f"{n} {v}" for n, v in zip(names, values, strict=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pg-url", required=True)
    ap.add_argument("--pg-schema", default="bench_pg_index", help="emptied first")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--users", type=int, default=1)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--batch", type=int, default=100_000, help="points per upsert")
    args = ap.parse_args()
    import psycopg

    with psycopg.connect(args.pg_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{args.pg_schema}" CASCADE')
    root = Path(tempfile.mkdtemp(prefix="dialogmem-ixbench-"))
    indexes = {"edge": EdgeIndex(root / "edge", dim=384),
               "postgres": PgIndex.connect(args.pg_url, schema_name=args.pg_schema, dim=384)}
    try:
        vectors = unit_vectors(args.n, 384, seed=1)
        recs = list(records(args.n, args.users, seed=1))
        for name, idx in indexes.items():
            t = time.perf_counter()
            for lo in range(0, args.n, args.batch):
                idx.upsert([IndexPoint(record=r, vector=v)
                            for r, v in zip(recs[lo:lo + args.batch], vectors[lo:lo + args.batch], strict=True)])
            idx.flush()
            took = time.perf_counter() - t
            print(f"upsert [{name}]{'':<12}{args.n / took:,.0f} points/s ({took:.1f} s)", flush=True)
        texts = distinct_queries(args.queries)
        qv = np.random.default_rng(3).standard_normal((args.queries, 384)).astype(np.float32)
        qv /= np.linalg.norm(qv, axis=1, keepdims=True)
        users = [f"user{i % args.users}" for i in range(args.queries)]
        kinds = ("dense", "bm25", "hybrid")
        lat: dict[tuple[str, str], list[float]] = {(b, k): [] for b in indexes for k in kinds}
        for start in range(0, args.queries, 50):
            for name, idx in indexes.items():
                for i in range(start, min(start + 50, args.queries)):
                    for kind in kinds:
                        t = time.perf_counter()
                        if kind == "dense":
                            idx.dense_search(users[i], qv[i], limit=50)
                        elif kind == "bm25":
                            idx.lexical_search(users[i], texts[i], limit=50)
                        else:
                            idx.hybrid_search(users[i], qv[i], texts[i], limit=10)
                        lat[name, kind].append((time.perf_counter() - t) * 1000)
        print(f"points {args.n:,} over {args.users:,} users; {args.queries} queries each (limit 50; hybrid 10)")
        print(server_settings(args.pg_url))
        for kind in kinds:
            row = [f"{kind:<7}"]
            for name in indexes:
                ms = lat[name, kind]
                row.append(f"{name} p50 {statistics.median(ms):6.2f} p95 {percentile(ms, 95):6.2f} ms")
            ratio = statistics.median(lat["postgres", kind]) / statistics.median(lat["edge", kind])
            print("  ".join(row) + f"  pg/edge p50 x{ratio:.2f}")
    finally:
        for idx in indexes.values():
            idx.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
