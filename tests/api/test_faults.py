"""Fault injection: a writer process dies (``os._exit``, no cleanup) at each write point of ``add``,
``flush`` and ``sleep``; the next open must have lost no acknowledged turn and doubled no memory.

Write points: before / after the journal commit, before / after the index upsert, after the index
flush of a checkpoint (before the journal marks the rows synced), before the mark. Extractors: the
LLM-free rules (immediate path), and ``ScriptedLLM`` (a scripted fake, NOT a model) answering
deterministically or with wording that changes on every call — a replayed batch must not leave a
second, differently worded set of memories.

``python tests/api/test_faults.py --runs 5`` prints the full matrix (points × extractors × runs).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).resolve().parents[1]
#: the children import the seams (tests/seams.py) too
CHILD_ENV = {**os.environ, "PYTHONUNBUFFERED": "1",
             "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}

CHILD = r"""
import json, os, random, re, sys
from dialogmem import Memory, ScriptedLLM
from seams import EdgeIndex, checkpoint_every
from seams import SQLiteJournal as Journal

data_dir, extractor, point, nth, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
phase, _, point = point.rpartition("/")  # "sleep/commit:before": count only the calls made by sleep()
armed = [phase != "sleep"]
target, when = point.split(":")
owner = {"commit": Journal, "mark_index": Journal, "upsert": EdgeIndex, "flush": EdgeIndex}[target]
original = getattr(owner, target)
calls = [0]

def wrapped(*args, **kwargs):
    if not armed[0]:
        return original(*args, **kwargs)
    calls[0] += 1
    if calls[0] == nth and when == "before":
        os._exit(137)
    out = original(*args, **kwargs)
    if calls[0] == nth and when == "after":
        os._exit(137)
    return out

setattr(owner, target, wrapped)
LINE = re.compile(r"^\[[^\]]+\] (\d+)\.([^:]+): (.*)$")
rng = random.Random()

def script(stage, messages):
    if stage != "add_memory":
        return '{"action": "ignore", "sources": []}'
    lines = [m for m in (LINE.match(x) for x in messages[-1]["content"].splitlines()) if m]
    tail = f" (take {rng.randrange(10**6)})" if extractor == "llm-random" else ""
    return json.dumps({"data": [{"source_id": int(m.group(1)), "fact": f"{m.group(2)} said {m.group(3)}{tail}"}
                                for m in lines]})

kwargs = {} if extractor == "rules" else {"llm_client": ScriptedLLM(script), "write": {
    "extractor": "llm", "segmenter": "none", "sensory_tokens": 40, "stm_threshold": 0}}
mem = Memory(data_dir=data_dir, **kwargs)
checkpoint_every(mem, 5)  # checkpoints happen inside the run, not only at close
print("READY", flush=True)
start = seed * 1000
for i in range(start, start + 24):
    text = f"Parcel {i % 6} was delivered to dock {i % 5} by the courier."  # repeats: sleep has merges to do
    mem.add([{"content": text, "id": f"t{i}", "name": "Ann" if i % 2 else "Bo"}], "u",
            session_id="s", timestamp=1_700_000_000 + i * 60)
    print("ACK", f"t{i}", flush=True)
mem.flush("u")
print("FLUSHED", flush=True)
armed[0] = True
mem.sleep("u")
print("SLEPT", flush=True)
mem.close()
print("CLOSED", flush=True)
"""

POINTS = ("commit:before", "commit:after", "upsert:before", "upsert:after", "flush:after", "mark_index:before",
          "sleep/commit:before", "sleep/commit:after")
EXTRACTORS = ("rules", "llm-deterministic", "llm-random")


def run_cell(tmp: Path, extractor: str, point: str, nth: int, seed: int) -> dict[str, Any]:
    """Run the child until it dies at the fault (or finishes), reopen, and count what was lost or doubled."""
    from dialogmem import Memory, ScriptedLLM
    from seams import index_point_count, journal

    data_dir = tmp / f"{extractor}-{point.replace(':', '-').replace('/', '-')}-{nth}-{seed}"
    proc = subprocess.run([sys.executable, "-c", CHILD, str(data_dir), extractor, point, str(nth), str(seed)],
                          capture_output=True, text=True, timeout=600, env=CHILD_ENV)
    out = proc.stdout.split()
    assert "READY" in out, proc.stderr[-3000:]
    acked = [out[i + 1] for i, w in enumerate(out) if w == "ACK"]
    stage = next((s for s in ("CLOSED", "SLEPT", "FLUSHED") if s in out), "adding")
    llm = ScriptedLLM(lambda stage, messages: '{"data": []}')  # the reopened store may re-extract: rules cover it
    kwargs = {} if extractor == "rules" else {"llm_client": llm, "write": {
        "extractor": "llm", "segmenter": "none", "sensory_tokens": 40, "stm_threshold": 0}}
    with Memory(data_dir=data_dir, **kwargs) as mem:
        mem.flush("u")
        journaled = {t.id for t in journal(mem).turns("u")}
        records = mem.get_all("u", limit=10_000)
        # a turn's own memory cites it last; a memory merged by sleep (version > 1) cites the union of
        # its members' turns in merge order, so only never-merged memories name an own turn
        own = [r.source_turn_ids[-1] for r in records if r.version == 1]
        cited = {t for r in records for t in r.source_turn_ids}
        return {
            "died": proc.returncode == 137, "stage": stage, "acked": len(acked),
            "lost": len([t for t in acked if t not in journaled]),
            "uncovered": len(journaled - cited),
            "duplicated": len(own) - len(set(own)),
            "index_mismatch": index_point_count(mem) - mem.stats()["counts"]["memories"],
            "quarantined": mem.stats("u")["counts"]["quarantined_turns"],
        }


CELLS = [(e, p, n) for e in EXTRACTORS for p, n in zip(POINTS, (3, 2, 4, 3, 2, 1, 1, 1), strict=True)]


@pytest.mark.slow
@pytest.mark.parametrize(("extractor", "point", "nth"), CELLS, ids=[f"{e}-{p}" for e, p, _ in CELLS])
def test_a_writer_killed_at_any_write_point_loses_and_doubles_nothing(tmp_path: Path, extractor: str, point: str,
                                                                      nth: int) -> None:
    got = run_cell(tmp_path, extractor, point, nth, seed=1)
    assert got["died"], got  # the fault fired: the child did not get to close normally
    assert got["lost"] == 0 and got["uncovered"] == 0 and got["duplicated"] == 0, got
    assert got["index_mismatch"] == 0 and got["quarantined"] == 0, got


LTM_CHILD = r"""
import os, sys
from dialogmem import Memory
from seams import SQLiteJournal as Journal

data_dir, when = sys.argv[1], sys.argv[2]
original = Journal.commit

def commit(self, cs, *args, **kwargs):  # dies at the consolidation cycle's commit, after the eviction's
    cycle = cs.graph is not None and cs.graph.since is not None
    if cycle and when == "before":
        os._exit(137)
    original(self, cs, *args, **kwargs)
    if cycle and when == "after":
        os._exit(137)

Journal.commit = commit
facts = ["The Louvre is a museum in Paris.", "Mercy Hospital is a hospital in Boston.",
         "The Nile is a river in Egypt.", "Kyoto is a city in Japan.", "The violin is a string instrument.",
         "Everest is a mountain in Nepal."]
mem = Memory(data_dir=data_dir, write={"context_turns": 0}, sleep={"mtm_capacity": 2})
for i, text in enumerate(facts):
    mem.add([{"content": text, "name": "Ann"}], "u", session_id="s", timestamp=1_700_000_000 + i * 86_400)
mem.flush("u")
print("FLUSHED", flush=True)
mem.sleep("u")
print("SLEPT", flush=True)
"""


@pytest.mark.parametrize("when", ["before", "after"])
def test_evicted_items_reach_consolidation_exactly_once_across_a_crash(tmp_path: Path, when: str) -> None:
    """The process dies between eviction and the consolidation of the evicted items (``before`` the
    cycle's commit) or right after that commit: no evicted item is lost or handed over twice."""
    from dialogmem import Memory
    from seams import graph_links, ltm_queued

    data_dir = tmp_path / "store"
    proc = subprocess.run([sys.executable, "-c", LTM_CHILD, str(data_dir), when], capture_output=True, text=True,
                          timeout=600, env=CHILD_ENV)
    assert proc.returncode == 137 and "FLUSHED" in proc.stdout and "SLEPT" not in proc.stdout, proc.stderr[-3000:]
    with Memory(data_dir=data_dir, write={"context_turns": 0}, sleep={"mtm_capacity": 2}) as mem:
        active = {r.id for r in mem.get_all("u")}
        evicted = {r.id for r in mem.get_all("u", include_evicted=True)} - active
        assert len(active) == 2 and len(evicted) == 4  # the eviction committed before the death
        if when == "before":  # marked for hand-over, not consolidated yet
            assert {m for _, m in ltm_queued(mem)} == evicted
            assert not {link.memory_id for link in graph_links(mem, "u")} & evicted
            report = mem.sleep()
            assert report.ltm is not None and report.ltm.evicted_in_batch == 4
        assert ltm_queued(mem) == []
        linked = {link.memory_id for link in graph_links(mem, "u")}
        assert evicted <= linked  # every evicted item reached the graph
        again = mem.sleep()
        assert again.ltm is not None and again.ltm.memories == 0  # and is not handed over a second time


def main() -> None:
    """The full matrix: every point × extractor, ``--runs`` runs each at random call numbers."""
    import tempfile

    sys.path.insert(0, str(TESTS))  # run as a script: the seams module beside conftest
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    rng = random.Random(20261123)
    print("| extractor | point | runs | died at (stage) | acked | lost | uncovered | duplicated | index mismatch |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for extractor in EXTRACTORS:
            for point in POINTS:
                top = 2 if point.startswith("sleep/") else 12  # sleep() makes few commits
                rows = [run_cell(Path(tmp), extractor, point, rng.randint(1, top), seed=run)
                        for run in range(args.runs)]
                stages = ",".join(sorted({r["stage"] for r in rows}))
                print(f"| {extractor} | {point} | {len(rows)} | {sum(r['died'] for r in rows)} ({stages}) | "
                      f"{sum(r['acked'] for r in rows)} | {sum(r['lost'] for r in rows)} | "
                      f"{sum(r['uncovered'] for r in rows)} | {sum(r['duplicated'] for r in rows)} | "
                      f"{sum(abs(r['index_mismatch']) for r in rows)} |", flush=True)


if __name__ == "__main__":
    main()
