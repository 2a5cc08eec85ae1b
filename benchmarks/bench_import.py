"""Bulk import throughput (issue 31, item 4): ``Memory.import_`` of a generated export file.

The file holds ``--n`` memories dealt to ``--users`` users, each with a random unit vector written by
the store's own embedder (so nothing is embedded on import) and one history row. Reported: the
file's size, the import's memories/s (validation, journal transactions, index upserts and the final
flush included), the index build it ends with (``store.index_min_points``), RSS and the store on disk.

Usage::

    python benchmarks/bench_import.py [--n 100000] [--users 1] [--no-build]
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

from dialogmem import Memory


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def write_file(path: Path, embedder: str, n: int, users: list[str]) -> None:
    rng = np.random.default_rng(0)
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps({"kind": "header", "format": "dialogmem-export", "version": 1,
                              "embedder": embedder, "users": users}) + "\n")
        for lo in range(0, n, 10_000):
            vectors = rng.normal(size=(min(10_000, n - lo), 384)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            for k, v in enumerate(vectors):
                i = lo + k
                t = 1_500_000_000.0 + 600.0 * i
                mid = str(uuid.UUID(int=i + 1))
                user = users[i % len(users)]
                out.write(json.dumps({"kind": "memory", "status": "active",
                                      "vector": base64.b64encode(v.astype("<f4").tobytes()).decode(),
                                      "record": {"id": mid, "user_id": user, "memory": f"note {i}: we talked about "
                                                 f"topic {i % 977} and the plan for week {i % 52}",
                                                 "time_stamp": "", "float_time_stamp": t, "weekday": "Mon",
                                                 "created_at": t, "updated_at": t}}) + "\n")
                out.write(json.dumps({"kind": "history", "user_id": user, "entry": {
                    "memory_id": mid, "event": "ADD", "old_memory": None, "new_memory": "x", "timestamp": t,
                    "actor": "bench"}}) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--users", type=int, default=1)
    ap.add_argument("--no-build", action="store_true", help="store.index_min_points = 0")
    args = ap.parse_args()
    users = [f"user-{k}" for k in range(args.users)]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        store = {"index_min_points": 0} if args.no_build else {}
        with Memory(data_dir=root / "store", store=store) as mem:
            mem.add("warm-up", user_id="warm-up", flush=True)
            header = io.StringIO()
            mem.export(header, user_id="warm-up")
            embedder = json.loads(header.getvalue().splitlines()[0])["embedder"]
            path = root / "file.jsonl"
            write_file(path, embedder, args.n, users)
            t0 = time.perf_counter()
            report = mem.import_(path)
            wall = time.perf_counter() - t0
            rss = rss_mb()
        disk = sum(f.stat().st_blocks * 512 for f in (root / "store").rglob("*") if f.is_file()) / 2**20
        size = path.stat().st_size / 2**20
    print(f"import of {report.memories} memories ({args.users} users, file {size:.0f} MB): {wall:.1f} s = "
          f"{report.memories / wall:.0f} memories/s; embedded {report.embedded}; graph built over "
          f"{report.indexed} points; RSS {rss:.0f} MB; store on disk {disk:.0f} MB")


if __name__ == "__main__":
    main()
