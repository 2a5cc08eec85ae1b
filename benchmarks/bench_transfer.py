"""Export / import round trip (issue 29): export a store, import the file into an empty store, export
that store again, and check that the second file holds the same records as the first.

Two stores:

* ``locomo`` — one LoCoMo conversation (the first of ``--locomo``) added turn by turn through
  ``Memory.add_conversation`` (LLM-free write path), so the file holds raw turns, memories with
  their sources, and history;
* ``bulk`` — ``--n`` memories (default 10^5) over ``--users`` users, written in bulk with precomputed
  vectors through ``Memory.import_records``, as ``bench_spine.py`` builds its store.

For each: the file's size (with vectors, and without them for comparison), the export time, the
import time, and whether the second export equals the first. Two comparisons: ``lines`` (the record
lines are byte for byte the same, in the same order; the header line holds the export time and is
left out) and ``records`` (the same multiset of records, whatever their order). For ``locomo`` the
search results of the conversation's first questions are compared as well (hit ids and texts).

Usage::

    python benchmarks/bench_transfer.py [--n 100000] [--users 1000] [--only locomo|bulk] [--path DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from itertools import zip_longest
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from bench_spine import QUERIES
from bench_store import records, unit_vectors

from dialogmem import Memory

LOCOMO = Path("/work/shared/data/locomo/locomo10_dev.json")


def body(path: Path) -> Iterator[str]:
    """The record lines of an export (everything after the header)."""
    with path.open(encoding="utf-8") as f:
        next(f)
        yield from (line.rstrip("\n") for line in f)


def same_lines(a: Path, b: Path) -> bool:
    return all(x == y for x, y in zip_longest(body(a), body(b)))


def same_records(a: Path, b: Path) -> bool:
    """Equal as multisets of records (each line parsed and written again with sorted keys)."""
    def digests(path: Path) -> list[bytes]:
        return sorted(hashlib.sha256(json.dumps(json.loads(line), sort_keys=True).encode()).digest()
                      for line in body(path))
    return digests(a) == digests(b)


def line_kinds(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in body(path):
        kind = json.loads(line)["kind"]
        out[kind] = out.get(kind, 0) + 1
    return out


def mb(path: Path) -> str:
    return f"{path.stat().st_size / 1e6:,.1f} MB"


def round_trip(name: str, source_dir: Path, work: Path, questions: list[tuple[str, str]], *,
               rebuild: bool) -> dict[str, Any]:
    """Export the store at ``source_dir``, import into an empty store, export again, compare. With
    ``rebuild``, the source's index is rebuilt from its journal before the searches are compared
    (BM25's IDF still counts replaced and deleted points until then; ``Memory.repair`` on the closed
    store, since ``rebuild_index`` on a store with unflushed writes fails, see the report)."""
    first, second, bare = work / f"{name}-1.jsonl", work / f"{name}-2.jsonl", work / f"{name}-novec.jsonl"
    with Memory(data_dir=source_dir) as source:
        t = time.perf_counter()
        exported = source.export(first, all_users=True)
        export_s = time.perf_counter() - t
        source.export(bare, all_users=True, vectors=False)
    if rebuild:
        Memory.repair(data_dir=source_dir)
    with Memory(data_dir=work / f"{name}-target") as target, Memory(data_dir=source_dir) as source:
        t = time.perf_counter()
        imported = target.import_(first)
        import_s = time.perf_counter() - t
        t = time.perf_counter()
        target.export(second, all_users=True)
        export2_s = time.perf_counter() - t
        again = target.import_(first)  # the same file twice adds nothing
        searches_equal = all(
            [(h.id, h.memory) for h in target.search(q, user, limit=10).hits]
            == [(h.id, h.memory) for h in source.search(q, user, limit=10).hits] for user, q in questions)
    return {
        "store": name, "users": len(exported.users), "records": line_kinds(first),
        "file (with vectors)": mb(first), "file (without vectors)": mb(bare),
        "export s": round(export_s, 2), "import s": round(import_s, 2), "second export s": round(export2_s, 2),
        "memories/s imported": round(imported.memories / import_s) if import_s else None,
        "embedded on import": imported.embedded,
        "second export: same lines": same_lines(first, second), "same records": same_records(first, second),
        "same search results": f"{searches_equal} ({len(questions)} queries)" if questions else "not compared",
        "second import adds": again.memories + again.turns + again.history,
    }


def locomo(work: Path, path: Path) -> dict[str, Any]:
    sample = json.loads(path.read_text(encoding="utf-8"))[0]
    user = str(sample["sample_id"])
    questions = [(user, str(qa["question"])) for qa in sample.get("qa", [])[:20]]
    with Memory(data_dir=work / "locomo-source") as mem:
        t = time.perf_counter()
        added = mem.add_conversation(sample, user)
        add_s = time.perf_counter() - t
    out = round_trip("locomo", work / "locomo-source", work, questions, rebuild=True)
    out["built by"] = (f"add_conversation: {len(added.turn_ids)} turns -> {len(added.memories)} memories "
                       f"in {add_s:.1f} s")
    return out


def bulk(work: Path, n: int, users: int, batch: int = 1_000) -> dict[str, Any]:
    with Memory(data_dir=work / "bulk-source") as mem:
        vectors = unit_vectors(n, 384, seed=1)
        t = time.perf_counter()
        chunk: list[Any] = []
        for i, rec in enumerate(records(n, users, seed=1)):
            chunk.append(rec)
            if len(chunk) == batch:
                mem.import_records(chunk, vectors=vectors[i + 1 - len(chunk):i + 1])
                chunk = []
        if chunk:
            mem.import_records(chunk, vectors=vectors[n - len(chunk):])
        build_s = time.perf_counter() - t
        del vectors
    # written once, nothing replaced or deleted: the source's BM25 statistics need no rebuild
    questions = [(f"user{u}", q) for u, q in zip(range(0, users, max(1, users // 10)), QUERIES, strict=False)]
    out = round_trip("bulk", work / "bulk-source", work, questions, rebuild=False)
    out["built by"] = f"import_records: {n:,} memories over {users:,} users in {build_s:.1f} s"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--users", type=int, default=1_000)
    ap.add_argument("--locomo", type=Path, default=LOCOMO)
    ap.add_argument("--only", choices=["locomo", "bulk"], default=None)
    ap.add_argument("--path", type=Path, default=None, help="work directory (default: a temporary one, removed)")
    args = ap.parse_args()
    work = args.path or Path(tempfile.mkdtemp(prefix="dialogmem-transfer-"))
    try:
        results = []
        if args.only in (None, "locomo"):
            results.append(locomo(work, args.locomo))
        if args.only in (None, "bulk"):
            results.append(bulk(work, args.n, args.users))
        for result in results:
            print()
            for key, value in result.items():
                print(f"{key:<28}{value}")
    finally:
        if args.path is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
