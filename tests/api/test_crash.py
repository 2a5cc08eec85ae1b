"""Crash safety: SIGKILL a writer at random points; every acknowledged turn must survive."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dialogmem import Memory
from seams import integrity_check, journal

WRITER = r"""
import sys
from dialogmem import Memory
data_dir, start = sys.argv[1], int(sys.argv[2])
mem = Memory(data_dir=data_dir, write={"sensory_tokens": 64, "segmenter": "similarity"})
print("READY", flush=True)
i = start
while True:
    tid = f"turn-{i}"
    mem.add([{"content": f"Entry {i}: the parcel {i} was delivered to dock {i % 7}.", "id": tid,
              "name": "Courier" if i % 2 else "Clerk"}], "crash-user", timestamp=1700000000 + i * 60)
    sys.stdout.write(f"ACK {tid}\n")  # one write: a kill never leaves half an acknowledgement
    sys.stdout.flush()
    i += 1
"""

RUNS = 20


@pytest.mark.slow
def test_sigkill_at_random_points_loses_no_acknowledged_turn(tmp_path: Path) -> None:
    rng = random.Random(20261121)
    data_dir = tmp_path / "store"
    acked: list[str] = []
    next_start = 0
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for run in range(RUNS):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(data_dir), str(next_start)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "READY", proc.stderr.read() if proc.stderr else line
        target = rng.randint(0, 12)
        got = 0
        while got < target:
            line = proc.stdout.readline()
            assert line.startswith("ACK"), line
            acked.append(line.split()[1])
            got += 1
        time.sleep(rng.random() * 0.05)  # land somewhere inside the next add
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        # only whole lines are acknowledgements: the kill may cut the last one short (it then
        # acknowledged nothing, whatever the store holds)
        acked += [ln.split()[1] for ln in out.split("\n")[:-1] if ln.startswith("ACK ")]
        next_start += 1000  # ids of the next run never collide with a half-written one
        assert proc.returncode == -signal.SIGKILL, f"run {run}: writer exited on its own"

    with Memory(data_dir=data_dir, write={"sensory_tokens": 64, "segmenter": "similarity"}) as mem:
        journaled = {t.id for t in journal(mem).turns("crash-user")}
        missing = [t for t in acked if t not in journaled]
        assert not missing, f"acknowledged turns lost: {missing[:5]}"
        mem.flush("crash-user")
        # every journaled turn became a memory once replayed and flushed; nothing is stuck or doubled
        records = mem.get_all("crash-user", limit=10000)
        # one memory per turn, citing the turn last (an LLM-free memory may cite its context before it)
        own = [r.source_turn_ids[-1] for r in records]
        assert set(own) == journaled
        assert len(own) == len(set(own))
        assert mem.stats("crash-user")["counts"]["pending_turns"] == 0
        assert mem.search("parcel delivered to dock 3", "crash-user").hits
        integrity = integrity_check(mem)
        assert integrity == "ok"
