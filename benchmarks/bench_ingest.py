"""Ingest throughput beside the encoder's own rate, LLM-free, in one run (issue 45, item 1).

On the same LoCoMo turns (``--conversations``, one user each, the sessions' dates), one process:

* **encoder**: the store's embedder alone (same configuration, same call shape as a session's
  ``add``: one ``embed`` call per session), first over the turns' ``"Speaker: text"`` lines, then over
  the texts the write path itself embedded (a memory carries its context turns, so those are longer);
* **write paths**, each in a fresh store: ``add`` one turn a call (a live chat), ``add`` with a
  session's list, ``add_conversation`` (LoCoMo dict), and ``import_chats`` (one JSON Lines file,
  one conversation a session). The clock covers the calls and a final ``flush``; every call returns
  only once its turns are journaled (SQLite WAL, synchronous=FULL).

Per path it prints turns/s, the ratio to the encoder's rate on the turn lines (the issue's target)
and on the texts the path embedded, and, counted by wrapping the store's own objects (not
estimated): texts embedded and encoder calls per turn, journal write transactions per turn, index
write requests (and points) per turn. Numbers here are noisy (shared cores): compare ratios within
one run.

Usage::

    python benchmarks/bench_ingest.py [--data ../shared/data/locomo/locomo10_dev.json]
                                      [--conversations conv-26,conv-30|all] [--modes turn,session,...]
                                      [--sessions N] [--no-bare]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dialogmem import Memory

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo10_dev.json"
MODES = ("turn", "session", "conversation", "chats")


def sessions(sample: dict) -> list[tuple[str, str, list[dict]]]:
    conv = sample["conversation"]
    out = []
    n = 1
    while f"session_{n}" in conv:
        msgs = [{"content": t["text"], "name": t["speaker"], "id": t["dia_id"]} for t in conv[f"session_{n}"]]
        out.append((f"session_{n}", conv[f"session_{n}_date_time"], msgs))
        n += 1
    return out


@dataclass
class Counts:
    """What one store did, counted at its embedder, journal and index."""

    embed_calls: int = 0
    texts: list[str] = field(default_factory=list)
    transactions: int = 0
    index_writes: int = 0
    index_points: int = 0

    def install(self, mem: Memory) -> None:
        parts = mem._parts
        embedder, journal, index = parts.embedder, parts.journal, parts.index
        inner_embed = embedder._embed  # every text any path embeds passes here

        def embed(texts: Any, **kw: Any) -> Any:
            self.embed_calls += 1
            self.texts += list(texts)
            return inner_embed(texts, **kw)

        embedder._embed = embed  # type: ignore[method-assign]
        inner_tx = journal._tx

        @contextmanager
        def tx() -> Iterator[Any]:
            self.transactions += 1
            with inner_tx() as db:
                yield db

        journal._tx = tx  # type: ignore[method-assign]
        inner_upsert = index.upsert

        def upsert(points: Any) -> None:
            self.index_writes += 1
            self.index_points += len(points)
            inner_upsert(points)

        index.upsert = upsert  # type: ignore[method-assign]

    def reset(self) -> None:
        self.embed_calls = self.transactions = self.index_writes = self.index_points = 0
        self.texts = []


def add_turns(mem: Memory, samples: list[dict], mode: str, chats: Path) -> int:
    turns = 0
    if mode == "chats":
        for sample in samples:
            got = mem.import_chats(chats / f"{sample['sample_id']}.jsonl", sample["sample_id"])
            turns += len(got.turn_ids)
        return turns
    for sample in samples:
        user = sample["sample_id"]
        if mode == "conversation":
            turns += len(mem.add_conversation(sample, user, flush=False).turn_ids)
        else:
            for sid, when, msgs in sessions(sample):
                for batch in ([msgs] if mode == "session" else [[m] for m in msgs]):
                    mem.add(batch, user, session_id=sid, timestamp=when)
                    turns += len(batch)
        mem.flush(user)
    return turns


@dataclass
class PathRun:
    mode: str
    vectors: str
    turns: int
    wall: float
    counts: Counts
    embedded_texts: list[str]


def run_path(samples: list[dict], mode: str, chats: Path, vectors: str | None = None) -> PathRun:
    root = Path(tempfile.mkdtemp(prefix="dm-ingest-"))
    try:
        settings: dict[str, Any] = {"write": {"vectors": vectors}} if vectors else {}
        with Memory(data_dir=root / "store", **settings) as mem:
            mem.add("warm-up", user_id="warmup", flush=True)  # model load is not ingest
            counts = Counts()
            counts.install(mem)
            started = time.perf_counter()
            turns = add_turns(mem, samples, mode, chats)
            wall = time.perf_counter() - started
            counted = Counts(counts.embed_calls, list(counts.texts), counts.transactions, counts.index_writes,
                             counts.index_points)  # before the searches below embed their queries
            # searchable right after: every sample's first turn is found by its own words
            for sample in samples:
                first = sessions(sample)[0][2][0]["content"]
                assert mem.search(first, sample["sample_id"], limit=10).hits, "nothing searchable"
            shipped = mem.config.write.vectors
        return PathRun(mode, shipped, turns, wall, counted, list(counted.texts))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def encoder_rate(texts_per_call: list[list[str]]) -> tuple[float, int]:
    """Texts/s of the store's embedder alone, one ``embed`` call per list (a fresh store's
    embedder, loaded and warmed first); and the texts."""
    root = Path(tempfile.mkdtemp(prefix="dm-encoder-"))
    try:
        with Memory(data_dir=root / "store") as mem:
            embedder: Callable[[list[str]], Any] = mem._parts.embedder.embed
            embedder(["warm-up"])
            n = sum(len(t) for t in texts_per_call)
            started = time.perf_counter()
            for texts in texts_per_call:
                embedder(texts)
            return n / (time.perf_counter() - started), n
    finally:
        shutil.rmtree(root, ignore_errors=True)


def bare_onnx(texts: list[str]) -> None:
    """Tokens/s of the store's embedder against bare onnxruntime sessions of the same graph, run the
    same way (one text a run, one one-thread session per lane, lanes side by side), on the same
    texts tokenized beforehand; and the store's embedder one text a call (what ``add`` of a single
    turn can do)."""
    import onnxruntime as ort

    from dialogmem._models._bert_onnx import cached_onnx
    from dialogmem._models._quantize import quantized_onnx

    root = Path(tempfile.mkdtemp(prefix="dm-bare-"))
    try:
        with Memory(data_dir=root / "store") as mem:
            emb = mem._parts.embedder
            emb.embed(texts[:8])  # loaded, lanes made
            path = cached_onnx(emb._model_dir, emb.cache_dir)
            if emb.quantize == "int8":
                path = quantized_onnx(path)
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = opts.inter_op_num_threads = 1
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            lanes = [ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
                     for _ in range(emb.threads)]
            feeds = []
            for e in emb._tokenizer.encode_batch(texts):  # padded to the longest: cut each back
                n = sum(e.attention_mask)
                feeds.append({"input_ids": np.array([e.ids[:n]], np.int64),
                              "attention_mask": np.array([e.attention_mask[:n]], np.int64)})
            tokens = sum(int(f["attention_mask"].sum()) for f in feeds)
            order = sorted(range(len(feeds)), key=lambda i: feeds[i]["input_ids"].shape[1])
            shares = [order[i::len(lanes)] for i in range(len(lanes))]

            def lane(session: Any, idx: list[int]) -> None:
                for i in idx:
                    session.run(None, feeds[i])

            bare_s, ours_s = [], []
            for _ in range(2):  # alternated: the load of a shared machine moves between them
                started = time.perf_counter()
                with ThreadPoolExecutor(len(lanes)) as pool:
                    list(pool.map(lane, lanes, shares))
                bare_s.append(time.perf_counter() - started)
                started = time.perf_counter()
                emb.embed(texts)
                ours_s.append(time.perf_counter() - started)
            bare, ours = tokens / min(bare_s), tokens / min(ours_s)
            started = time.perf_counter()
            for t in texts[:200]:
                emb.embed([t])
            single = len(texts[:200]) / (time.perf_counter() - started)
        print(f"encoder vs bare onnxruntime ({emb.identity}, {len(lanes)} one-thread lanes, {len(texts)} memory "
              f"texts, {tokens} tokens): bare {bare:.0f} tokens/s, dialogmem's embedder {ours:.0f} tokens/s "
              f"(x{ours / bare:.2f}, best of 2 alternated rounds); one text a call: {single:.1f} texts/s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def write_chats(samples: list[dict], folder: Path) -> None:
    for sample in samples:
        with (folder / f"{sample['sample_id']}.jsonl").open("w", encoding="utf-8") as f:
            for _, _, msgs in sessions(sample):
                f.write(json.dumps({"messages": [{"role": "user", "name": m["name"], "content": m["content"]}
                                                 for m in msgs]}) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--conversations", default="conv-26,conv-30", help="comma-separated ids, or 'all'")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--sessions", type=int, default=None, help="only the first N sessions of each conversation")
    ap.add_argument("--no-bare", action="store_true", help="skip the bare onnxruntime comparison")
    ap.add_argument("--vectors", default="", help="comma-separated write.vectors settings to run each path "
                    "with, alternating (e.g. text,auto); default: the shipped setting")
    args = ap.parse_args()
    data = json.loads(args.data.read_text())
    wanted = set(args.conversations.split(","))
    samples = [s for s in data if args.conversations == "all" or s["sample_id"] in wanted]
    if args.sessions is not None:
        samples = [_first_sessions(s, args.sessions) for s in samples]
    modes = args.modes.split(",")
    chats = Path(tempfile.mkdtemp(prefix="dm-chats-"))
    try:
        write_chats(samples, chats)
        lines = [[f"{m['name']}: {m['content']}" for m in msgs] for s in samples for _, _, msgs in sessions(s)]
        enc_lines, n_lines = encoder_rate(lines)
        print(f"data: {', '.join(s['sample_id'] for s in samples)} ({n_lines} turns, {len(lines)} sessions)")
        print(f"encoder alone, turn lines ('Speaker: text', one call per session): {enc_lines:.1f} texts/s")
        settings: list[str | None] = [v for v in args.vectors.split(",") if v] or [None]
        runs = [run_path(samples, mode, chats, vectors) for mode in modes for vectors in settings]
        # the texts the session path embedded, through the encoder alone in the same call shape
        by_call = _texts_by_session(runs, lines)
        enc_texts, _ = encoder_rate(by_call)
        print(f"encoder alone, the memory texts a session's add embeds (same call shape): {enc_texts:.1f} texts/s")
        if not args.no_bare:
            bare_onnx([t for call in by_call for t in call])
        print()
        print(f"{'path':<14}{'vectors':>8}{'turns/s':>9}{'x lines':>9}{'x texts':>9}{'embeds/turn':>13}"
              f"{'enc calls/turn':>16}{'tx/turn':>9}{'idx writes/turn':>17}{'points/turn':>13}")
        for r in runs:
            rate = r.turns / r.wall
            c = r.counts
            print(f"{r.mode:<14}{r.vectors:>8}{rate:>9.1f}{rate / enc_lines:>9.2f}{rate / enc_texts:>9.2f}"
                  f"{len(c.texts) / r.turns:>13.2f}{c.embed_calls / r.turns:>16.3f}{c.transactions / r.turns:>9.3f}"
                  f"{c.index_writes / r.turns:>17.3f}{c.index_points / r.turns:>13.2f}")
    finally:
        shutil.rmtree(chats, ignore_errors=True)


def _first_sessions(sample: dict, n: int) -> dict:
    conv = {k: v for k, v in sample["conversation"].items()
            if not k.startswith("session_") or int(k.split("_")[1]) <= n}
    return {**sample, "conversation": conv}


def _texts_by_session(runs: list[PathRun], lines: list[list[str]]) -> list[list[str]]:
    """The embedded texts of the first run, cut into lists the size of the sessions."""
    texts = runs[0].embedded_texts if runs else [t for s in lines for t in s]
    out, at = [], 0
    for session in lines:
        out.append(texts[at:at + len(session)])
        at += len(session)
    if at < len(texts):
        out.append(texts[at:])
    return [t for t in out if t]


if __name__ == "__main__":
    main()
