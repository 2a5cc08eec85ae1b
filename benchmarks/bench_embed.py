"""Measure the local embedder engines: batch throughput, one-query latency, load time, agreement.

    python benchmarks/bench_embed.py [--n 500] [--queries 200] [--json out.json]
    python benchmarks/bench_embed.py --graphs [--rounds 15]   # fused vs plain ONNX graph

``--graphs`` compares the cached graph (fused onnxruntime kernels) with the plain standard-op
graph it replaced: vector parity, and CPU milliseconds per text on one intra-op thread (CPU time
of the calling thread, so a busy shared machine disturbs it far less than wall time).

Sentences are generated here (dialogue-like, 5-40 words) so the run needs no data set.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from dialogmem._models import LocalEmbedder

_PEOPLE = ["Ana", "Ben", "Caroline", "Melanie", "Joanna", "Nate", "Priya", "Omar"]
_VERBS = ["went to", "talked about", "is planning", "remembered", "painted", "cooked", "visited",
          "read about"]
_THINGS = ["the pottery class", "a beagle puppy", "the marathon in October", "her grandmother's recipe",
           "a trip to Lisbon", "the LGBTQ support group", "a new sci-fi novel", "the school fundraiser",
           "the camping weekend", "a violin concert", "their first apartment", "the job interview"]
_TAILS = ["", "last week", "yesterday afternoon", "because it reminded them of home",
          "and it went better than expected", "with a few friends from work",
          "although the weather was terrible and everyone was tired by the end of the day"]


def sentences(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = [rng.choice(_PEOPLE), rng.choice(_VERBS), rng.choice(_THINGS), rng.choice(_TAILS)]
        s = " ".join(p for p in parts if p) + "."
        if rng.random() < 0.3:
            s += " " + rng.choice(_PEOPLE) + " said it sounded " + rng.choice(["great", "odd", "fun"]) + "."
        out.append(s)
    return out


def bench(engine: str, texts: list[str], queries: list[str], cache: Path, batch_size: int,
          threads: int | None) -> dict[str, Any]:
    started = time.perf_counter()
    emb = LocalEmbedder(engine=engine, batch_size=batch_size, cache_dir=cache,  # type: ignore[arg-type]
                        threads=threads).load()
    load_s = time.perf_counter() - started
    emb.embed(texts[:64])  # warm-up
    for q in queries[:10]:
        emb.embed_query(q)
    runs = []
    for _ in range(3):
        t = time.perf_counter()
        vecs = emb.embed(texts)
        runs.append(time.perf_counter() - t)
    lat = []
    for q in queries:
        t = time.perf_counter()
        emb.embed_query(q)
        lat.append((time.perf_counter() - t) * 1000.0)
    lat.sort()
    return {
        "engine": engine, "threads": emb.threads if engine == "onnx" else _torch_threads(),
        "load_s": round(load_s, 3),
        "batch_sentences_per_s": round(len(texts) / statistics.median(runs), 1),
        "query_p50_ms": round(statistics.median(lat), 2),
        "query_p95_ms": round(lat[int(0.95 * (len(lat) - 1))], 2),
        "_vectors": vecs,
    }


def _torch_threads() -> int:
    import torch

    return int(torch.get_num_threads())


def compare_graphs(texts: list[str], rounds: int) -> dict[str, Any]:
    import onnxruntime as ort

    from dialogmem._models._bert_fused import build_fused_model
    from dialogmem._models._bert_onnx import build_model, read_safetensors
    from dialogmem._models._embed import minilm_dir

    tok = LocalEmbedder(engine="onnx").load()._tokenizer
    model_dir = minilm_dir()
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    weights = read_safetensors(model_dir / "model.safetensors")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sessions = {name: ort.InferenceSession(build(weights, config).SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
                for name, build in (("plain", build_model), ("fused", build_fused_model))}

    def feed(batch: list[str]) -> dict[str, np.ndarray]:
        enc = tok.encode_batch(batch)
        return {"input_ids": np.array([e.ids for e in enc], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64)}

    singles = [feed([t]) for t in texts]
    vecs = {n: np.concatenate([s.run(None, f)[0] for f in singles]) for n, s in sessions.items()}
    by_len = sorted(texts, key=len)
    feeds = {"query": feed(["what did Ana do about the pottery class?"]),
             "memory": feed([" ".join(by_len[-4:])]), "batch16": feed(by_len[-16:])}
    cpu: dict[str, dict[str, list[float]]] = {n: {f: [] for f in feeds} for n in sessions}
    for _ in range(rounds):
        for name, session in sessions.items():
            for label, f in feeds.items():
                started = time.thread_time()
                session.run(None, f)
                cpu[name][label].append((time.thread_time() - started) * 1000 / len(f["input_ids"]))
    return {"texts": len(texts), "max_abs_diff": float(np.abs(vecs["plain"] - vecs["fused"]).max()),
            "min_cosine": float((vecs["plain"] * vecs["fused"]).sum(axis=1).min()),
            "tokens": {label: int(f["input_ids"].shape[1]) for label, f in feeds.items()},
            "cpu_ms_per_text_median": {n: {label: round(statistics.median(v), 2) for label, v in r.items()}
                                       for n, r in cpu.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, help="onnxruntime intra-op threads (default: cores, max 4)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--graphs", action="store_true", help="compare the fused and the plain ONNX graph")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    texts = sentences(args.n)
    if args.graphs:
        print(json.dumps(compare_graphs(texts[:300], args.rounds), indent=2))
        return
    queries = [f"what did {p} do about {t}?" for p, t in zip(sentences(args.queries, 11), _THINGS * 50,
                                                             strict=False)]
    engines = ["onnx"]
    if importlib.util.find_spec("torch") and importlib.util.find_spec("sentence_transformers"):
        engines.append("torch")
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp)
        LocalEmbedder(engine="onnx", cache_dir=cache).load()  # build the graph outside the timings
        results = [bench(e, texts, queries, cache, args.batch_size, args.threads) for e in engines]
    report: dict[str, Any] = {"sentences": len(texts), "queries": len(queries),
                              "load_average_1m": round(os.getloadavg()[0], 2), "cpus": os.cpu_count(),
                              "results": [{k: v for k, v in r.items() if k != "_vectors"} for r in results]}
    if len(results) == 2:
        a, b = results[0]["_vectors"], results[1]["_vectors"]
        report["agreement"] = {"max_abs_diff": float(np.abs(a - b).max()),
                               "min_cosine": float((a * b).sum(axis=1).min())}
        report["speedup_onnx_over_torch"] = {
            "batch": round(results[0]["batch_sentences_per_s"] / results[1]["batch_sentences_per_s"], 2),
            "query_p50": round(results[1]["query_p50_ms"] / results[0]["query_p50_ms"], 2),
        }
    text = json.dumps(report, indent=2)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    print(text)  # a benchmark script, not library code: its output is the point


if __name__ == "__main__":
    main()
