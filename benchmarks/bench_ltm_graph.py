"""LLM-free LTM graph over one LoCoMo conversation: node growth per turn and a de-identification leak
check, plus the MTM eviction plan over the same memories.

Memories are built with ``dialogmem.Memory`` (rules only, no LLM) in a temporary directory, then
consolidated in chronological cycles of ``--cycle`` memories (seed 000 consolidates every 10-15
turns). ``similar`` is brute-force MiniLM cosine over the live node texts, standing in for the
index's ``tier="ltm"`` points. Leaks: any whole-word, case-insensitive occurrence of a speaker
name (or a part of it) or the user id in any node or edge text, live or dropped; and, separately,
capitalised nicknames that are prefixes of a speaker name ("Mel" for "Melanie").

With ``--wired`` the same conversation goes through the library as it runs for a user: turns are
added live, ``Memory.sleep()`` runs every ``--cycle`` turns (MTM bound ``--capacity``, then one LTM
consolidation cycle committed by the change writer), and the graph is read back from the journal.

Usage::

    python benchmarks/bench_ltm_graph.py [--data locomo10_dev.json] [--conv 0] [--cycle 15] [--capacity 200]
        [--single-word-concepts] [--wired]
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dialogmem import Memory
from dialogmem._graph import GraphView
from dialogmem._models import LocalEmbedder
from dialogmem._sleep._consolidate import consolidate
from dialogmem._sleep._deid import Deidentifier
from dialogmem._sleep._mtm import plan_eviction
from dialogmem._sleep._units import RuleUnitExtractor
from dialogmem._transfer._conversation import parse_conversation
from dialogmem._types import MemoryRecord

USER = "locomo-user"


def build_memories(conv: dict, data_dir: Path) -> tuple[list[MemoryRecord], int]:
    turns = 0
    with Memory(data_dir=data_dir) as mem:
        for batch in parse_conversation(conv):
            for msg in batch.messages:
                mem.add([msg], USER, session_id=batch.session_id, timestamp=batch.timestamp)
                turns += 1
        mem.flush(USER)
        records: list[MemoryRecord] = []
        offset = None
        while True:
            page = mem.get_all(USER, limit=1000, offset=offset)
            if not page:
                break
            records += page
            offset = page[-1].id
    records.sort(key=lambda r: (r.float_time_stamp, r.id))
    return records, turns


class NodeSimilarity:
    """``similar(text)`` over the live nodes of the current view (brute force)."""

    def __init__(self, embedder: LocalEmbedder) -> None:
        self.embedder = embedder
        self.cache: dict[str, np.ndarray] = {}
        self.ids: list[str] = []
        self.matrix = np.zeros((0, 384), dtype=np.float32)

    def refresh(self, view: GraphView) -> None:
        live = view.live_nodes()
        missing = [n.text for n in live if n.text not in self.cache]
        if missing:
            for text, vec in zip(missing, self.embedder.embed(missing), strict=True):
                self.cache[text] = np.asarray(vec, dtype=np.float32)
        self.ids = [n.id for n in live]
        self.matrix = np.stack([self.cache[n.text] for n in live]) if live else np.zeros((0, 384), np.float32)

    def __call__(self, text: str) -> Sequence[tuple[str, float]]:
        if not self.ids:
            return []
        q = self.cache.get(text)
        if q is None:
            q = self.cache[text] = np.asarray(self.embedder.embed([text])[0], dtype=np.float32)
        sims = self.matrix @ q
        top = np.argsort(-sims)[:5]
        return [(self.ids[i], float(sims[i])) for i in top]


def leaks(view: GraphView, words: set[str]) -> list[tuple[str, str]]:
    texts = [n.text for n in view.nodes.values()]
    texts += [f"{view.nodes[e.source].text} {e.type} {view.nodes[e.target].text}" for e in view.edges.values()]
    return [(t, w) for t in texts for w in words if re.search(rf"(?<!\w){re.escape(w)}(?!\w)", t, re.IGNORECASE)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/work/shared/data/locomo/locomo10_dev.json")
    ap.add_argument("--conv", type=int, default=0)
    ap.add_argument("--cycle", type=int, default=15)
    ap.add_argument("--capacity", type=int, default=200)
    ap.add_argument("--single-word-concepts", action="store_true")
    ap.add_argument("--wired", action="store_true", help="through Memory.add / Memory.sleep")
    args = ap.parse_args()
    conv = json.loads(Path(args.data).read_text(encoding="utf-8"))[args.conv]
    speakers = [conv["conversation"]["speaker_a"], conv["conversation"]["speaker_b"]]
    if args.wired:
        wired(conv, speakers, args.cycle, args.capacity)
        return
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        records, turns = build_memories(conv, Path(tmp) / "store")
    print(f"conversation {conv.get('sample_id')} speakers {speakers}: {turns} turns, {len(records)} memories "
          f"(built in {time.perf_counter() - started:.1f}s)")

    deid = Deidentifier(speakers, [USER])
    extractor = RuleUnitExtractor(deid, single_word_concepts=args.single_word_concepts)
    embedder = LocalEmbedder()
    similar = NodeSimilarity(embedder)
    view = GraphView()
    inserted = merged = 0
    started = time.perf_counter()
    for start in range(0, len(records), args.cycle):
        units = extractor.units(records[start:start + args.cycle], lambda _u: "subject-key")
        similar.refresh(view)
        delta = consolidate(units, view, similar=similar, now=float(start))
        inserted += len(delta.insert_nodes)
        merged += delta.merged
        view = view.with_delta(delta)
    elapsed = time.perf_counter() - started
    live = view.live_nodes()
    live_edges = [e for e in view.edges.values() if e.live]
    cycles = -(-len(records) // args.cycle)
    print(f"consolidation: {cycles} cycles of {args.cycle} memories in {elapsed:.1f}s; "
          f"nodes inserted {inserted}, merged by similarity {merged}, live {len(live)}, "
          f"dropped {len(view.nodes) - len(live)}")
    print(f"nodes per turn: inserted {inserted / turns:.3f}, live at the end {len(live) / turns:.3f}")
    print(f"node types (live): {dict(Counter(n.type for n in live))}")
    print(f"edges live {len(live_edges)} by type: {dict(Counter(e.type for e in live_edges))}; "
          f"dropped {len(view.edges) - len(live_edges)}")
    top = sorted(live, key=lambda n: (-n.evidence, n.text))[:12]
    print("top nodes by evidence: " + ", ".join(f"{n.text} ({n.evidence})" for n in top))
    words = {w for s in speakers for w in re.findall(r"\w+", s) if len(w) >= 2} | {USER}
    found = leaks(view, words)
    texts = len(view.nodes) + len(view.edges)
    print(f"leak check over {texts} node/edge texts (live and dropped) for {sorted(words)}: {len(found)} leaks")
    for t, w in found[:10]:
        print(f"  LEAK {w!r} in {t!r}")
    nick = {w[:i] for s in speakers for w in re.findall(r"\w+", s) for i in range(3, len(w))}
    nick_found = [(t, w) for t, w in leaks(view, nick) if re.search(rf"(?<!\w){re.escape(w)}(?!\w)", t)]
    print(f"nickname check (capitalised prefixes of 3+ letters, e.g. 'Mel'): {len(nick_found)} leaks")

    vecs = np.asarray(embedder.embed([r.memory for r in records]), dtype=np.float32)
    started = time.perf_counter()
    plan = plan_eviction(records, vecs, capacity=args.capacity, now=time.time())
    print(f"eviction plan for capacity {args.capacity}: {plan.before} -> {plan.after} "
          f"({len(plan.evict)} evicted, {sum(len(g.absorbed_ids) for g in plan.compress)} compressed "
          f"in {len(plan.compress)} groups) in {1000 * (time.perf_counter() - started):.1f} ms")


def wired(conv: dict, speakers: list[str], cycle: int, capacity: int) -> None:
    turns = 0
    seconds: list[float] = []
    evicted = 0
    with tempfile.TemporaryDirectory() as tmp, \
            Memory(data_dir=Path(tmp) / "store", sleep={"mtm_capacity": capacity}) as mem:
        for batch in parse_conversation(conv):
            for msg in batch.messages:
                mem.add([msg], USER, session_id=batch.session_id, timestamp=batch.timestamp)
                turns += 1
                if turns % cycle == 0:
                    mem.flush(USER)
                    report = mem.sleep()
                    evicted += report.evicted + report.compressed
                    if report.ltm is not None and report.ltm.memories:
                        seconds.append(report.ltm.seconds)
        mem.flush(USER)
        evicted += mem.sleep().evicted
        counts = mem.stats(USER)["counts"]
        view = mem._parts.journal.graph_view()
    live = view.live_nodes()
    live_edges = [e for e in view.edges.values() if e.live]
    print(f"wired: {turns} turns, sleep every {cycle} turns, mtm_capacity {capacity}: active {counts['memories']}, "
          f"evicted {counts['evicted']}; ltm nodes {counts['ltm_nodes']} ({counts['ltm_nodes'] / turns:.3f}/turn), "
          f"edges {counts['ltm_edges']} ({counts['ltm_edges'] / turns:.3f}/turn), links {counts['ltm_links']}")
    print(f"node types (live): {dict(Counter(n.type for n in live))}; edges by type: "
          f"{dict(Counter(e.type for e in live_edges))}; dropped nodes {len(view.nodes) - len(live)}")
    if seconds:
        print(f"consolidation: {len(seconds)} cycles, median {sorted(seconds)[len(seconds) // 2]:.3f}s, "
              f"max {max(seconds):.3f}s per cycle")
    words = {w for s in speakers for w in re.findall(r"\w+", s) if len(w) >= 2} | {USER}
    found = leaks(view, words)
    print(f"leak check over {len(view.nodes) + len(view.edges)} node/edge texts for {sorted(words)}: "
          f"{len(found)} leaks")
    for t, w in found[:10]:
        print(f"  LEAK {w!r} in {t!r}")


if __name__ == "__main__":
    main()
