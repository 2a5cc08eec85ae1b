"""A full disk is an error, never a crash (issue 27): the embedded index refuses a change it has no
room for with ``DiskFullError`` before anything is written, keeps serving reads, and takes writes
(and opens) again once space is freed.

The scenarios run in a child process, because what they guard against — a memory-mapped page that
the file system cannot back — kills a process with SIGBUS, and would kill pytest with it. As root
(CI) the disk is a real tmpfs mounted for the test; elsewhere an "emulated" disk stands in for it:
a directory with a fixed capacity, whose free space the child computes from what its files occupy
(the one thing injected; SQLite, Qdrant Edge and the embedder are real in both).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dialogmem import ConfigError, DiskFullError, Memory
from seams import (
    GROWTH_STEP,
    MIB,
    NEW_SHARD,
    DiskRoom,
    fake_free_space,
    hole_bytes,
    indexed_memories,
    journal,
    real_free_bytes,
)
from serverkit import bearer, rest_server

MODES = ["tmpfs", "emulated"]

SETUP = r"""
import json, os, sys
from pathlib import Path
import pytest
from dialogmem import DiskFullError, Memory, StoreError
from seams import MIB, DiskRoom, fake_free_space, free_bytes, indexed_memories, journal, real_free_bytes

root, mode, capacity = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
if mode == "emulated":  # root is a disk of `capacity` bytes, of which what its files occupy is used
    def _free(path):
        if not Path(path).is_relative_to(root):  # elsewhere (a read-only store's copies): the real disk
            return real_free_bytes(path)
        return capacity - sum(f.stat().st_blocks * 512 for f in root.rglob("*") if f.is_file())
    fake_free_space(pytest.MonkeyPatch(), _free)
store, filler = root / "store", root / "filler"
report = {}

def fill_to(free_left):
    # grow the filler file until the disk has `free_left` bytes free
    size = filler.stat().st_size if filler.exists() else 0
    grow = free_bytes(store) - free_left
    if grow > 0:
        with open(filler, "ab") as f:
            os.posix_fallocate(f.fileno(), size, grow)

def turn(i):
    return {"content": f"Note {i}: parcel code{i:05d} reached dock {i % 7}.", "id": f"t{i}", "name": "Clerk"}
"""

FILL = SETUP + r"""
mem = Memory(data_dir=store)
acked = []
for i in range(20):
    mem.add([turn(i)], "u", timestamp=1700000000 + i * 60)
    acked.append(f"t{i}")
room = DiskRoom(store / "index", reserve=mem.config.store.min_free_mb * MIB)
fill_to(room.need(0).total + 2 * MIB)  # 2 MiB above what the index needs: the journal eats it
refused, i = None, 20
while refused is None and i < 20000:
    try:
        mem.add([turn(i)], "u", timestamp=1700000000 + i * 60)
        acked.append(f"t{i}")
    except DiskFullError as exc:
        refused = exc
    i += 1
report["refused_after"] = len(acked)
report["refusal"] = str(refused)
report["refused_turn_journaled"] = f"t{i - 1}" in {t.id for t in journal(mem).turns("u")}
try:  # still full: refused again, and a delete is refused before the journal forgets anything
    mem.add([turn(i)], "u", timestamp=1700000000 + i * 60)
    report["second_refusal"] = None
except DiskFullError as exc:
    report["second_refusal"] = type(exc).__name__
# reads go on while the disk is full
report["journaled"] = sorted(t.id for t in journal(mem).turns("u"))
probe = [acked[k] for k in range(0, len(acked), max(1, len(acked) // 10))]
report["found"] = [any(tid in h.source_turn_ids for h in mem.search(f"parcel code{tid[1:].zfill(5)}", "u").hits)
                   for tid in probe]
report["indexed_while_full"] = indexed_memories(mem)
report["memories_while_full"] = mem.stats()["counts"]["memories"]
mem.close()
fill_to(4 * MIB)  # fuller still: a restart must be refused, not crash
try:
    Memory(data_dir=store).close()
    report["reopen_full"] = "opened"
except StoreError as exc:
    report["reopen_full"] = f"{type(exc).__name__}: {exc}"
with Memory(data_dir=store, read_only=True) as ro:  # read-only: searches from a copy off this disk
    report["read_only_found"] = any("t3" in h.source_turn_ids for h in ro.search("parcel code00003", "u").hits)
filler.unlink()  # space returns
with Memory(data_dir=store) as mem:
    for j in range(i + 1, i + 21):
        mem.add([turn(j)], "u", timestamp=1700000000 + j * 60)
        acked.append(f"t{j}")
    report["after_free_journaled"] = sorted(t.id for t in journal(mem).turns("u"))
    report["after_free_indexed"] = indexed_memories(mem)
    report["after_free_memories"] = mem.stats()["counts"]["memories"]
    report["after_free_found"] = any(f"t{i + 5}" in h.source_turn_ids
                                     for h in mem.search(f"parcel code{i + 5:05d}", "u").hits)
report["acked"] = acked
print("REPORT " + json.dumps(report))
"""

NEW = SETUP + r"""
try:
    Memory(data_dir=store).close()
    report["opened"] = True
except StoreError as exc:
    report["opened"] = False
    report["error"] = type(exc).__name__
    report["message"] = str(exc)
print("REPORT " + json.dumps(report))
"""


@pytest.fixture
def small_disk(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Path, str]]:
    """A file system of ``request.param = (mode, MiB)``: a tmpfs (root only) or an emulated one."""
    mode, size_mb = request.param
    root = tmp_path / "disk"
    root.mkdir()
    if mode == "emulated":
        yield root, mode
        return
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("CI runs as root: the tmpfs full-disk test must run there", pytrace=False)
        pytest.skip("mounting a tmpfs needs root; the emulated variant covers this run")
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(root)], check=True)
    try:
        yield root, mode
    finally:
        subprocess.run(["umount", str(root)], check=False)
        if os.path.ismount(root):
            subprocess.run(["umount", "-l", str(root)], check=True)


def _run(script: str, root: Path, mode: str, size_mb: int) -> dict:
    tests = str(Path(__file__).resolve().parents[1])  # the child imports the seams too
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", script, str(root), mode, str(size_mb * MIB)],
                          capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, f"child exited with {proc.returncode} (-7 is SIGBUS)\n{proc.stderr[-3000:]}"
    line = next(x for x in proc.stdout.splitlines() if x.startswith("REPORT "))
    return json.loads(line.removeprefix("REPORT "))


@pytest.mark.parametrize("small_disk", [(m, 320) for m in MODES], indirect=True, ids=MODES)
def test_a_full_disk_refuses_writes_keeps_reads_and_recovers(small_disk: tuple[Path, str]) -> None:
    root, mode = small_disk
    r = _run(FILL, root, mode, 320)
    acked = r["acked"]
    assert 20 < r["refused_after"] < 20000, r["refused_after"]  # it filled, and it was refused
    assert "no room on disk" in r["refusal"]
    assert r["refused_turn_journaled"] is False  # refused before anything was written
    assert r["second_refusal"] == "DiskFullError"
    assert set(acked[:r["refused_after"]]) == set(r["journaled"])  # every acknowledged turn, nothing else
    assert all(r["found"]), r["found"]  # searchable while the disk is full
    assert r["indexed_while_full"] == r["memories_while_full"]
    assert r["reopen_full"].startswith("DiskFullError"), r["reopen_full"]
    assert r["read_only_found"] is True
    assert set(acked) == set(r["after_free_journaled"])  # writes work again once space is freed
    assert r["after_free_indexed"] == r["after_free_memories"]  # and the index holds every memory
    assert r["after_free_found"] is True


@pytest.mark.parametrize("small_disk", [(m, 40) for m in MODES], indirect=True, ids=MODES)
def test_a_new_store_on_a_too_small_disk_is_refused_not_killed(small_disk: tuple[Path, str]) -> None:
    root, mode = small_disk
    r = _run(NEW, root, mode, 40)
    assert r["opened"] is False
    assert r["error"] == "DiskFullError"
    assert "a new index's files" in r["message"]


# -- in-process: the room check's arithmetic, and a disk that fills between the check and the write ----

def test_the_room_needed_counts_the_holes_of_the_index_files(tmp_path: Path) -> None:
    with Memory(data_dir=tmp_path / "s") as mem:
        mem.add([{"content": "The parcel reached dock four.", "name": "Clerk"}], "u")
        index_dir = tmp_path / "s" / "index"
        holes = hole_bytes(index_dir)
        assert holes > GROWTH_STEP  # Edge sizes its files ahead (WAL segments, vector chunk, pages)
        need = DiskRoom(index_dir, reserve=16 * MIB).need(1000)
        assert need.total == holes + GROWTH_STEP + 1000 + 16 * MIB
        assert DiskRoom(tmp_path / "new", reserve=0).need(0, opening_new=True).total == NEW_SHARD + GROWTH_STEP


def test_store_min_free_mb_is_the_reserve_the_index_keeps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_free_space(monkeypatch, lambda path: NEW_SHARD + GROWTH_STEP + 100 * MIB)
    Memory(data_dir=tmp_path / "a", store={"min_free_mb": 100}).close()  # exactly enough
    with pytest.raises(DiskFullError, match="reserve 101 MiB"):
        Memory(data_dir=tmp_path / "b", store={"min_free_mb": 101})
    with pytest.raises(ConfigError, match="min_free_mb"):
        Memory(data_dir=tmp_path / "c", store={"min_free_mb": -1})


def test_a_disk_that_fills_after_the_check_leaves_the_change_in_the_outbox(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check before the journal commit passes, the index's own check after it fails: the change
    is kept (journaled, in the outbox, not failed) and reaches the index with the next change."""
    with Memory(data_dir=tmp_path / "s") as mem:
        mem.add([{"content": "First: the parcel reached dock one.", "id": "a", "name": "Clerk"}], "u")
        real = real_free_bytes
        calls = {"n": 0}

        def fills_after_first_call(path: Path) -> int:
            calls["n"] += 1
            return real(path) if calls["n"] == 1 else 0

        fake_free_space(monkeypatch, fills_after_first_call)
        mem.add([{"content": "Second: a crate of lemons went to dock two.", "id": "b", "name": "Clerk"}], "u")
        assert {t.id for t in journal(mem).turns("u")} == {"a", "b"}  # acknowledged: it is in the journal
        assert mem.stats()["counts"]["index_failed"] == 0  # not a refused record
        assert indexed_memories(mem) == mem.stats()["counts"]["memories"] - 1  # the index is one behind
        with pytest.raises(DiskFullError):  # still full: the next change is refused before the journal
            mem.add([{"content": "Third: nothing.", "id": "c", "name": "Clerk"}], "u")
        assert "c" not in {t.id for t in journal(mem).turns("u")}
        fake_free_space(monkeypatch, real)  # space returns
        mem.add([{"content": "Fourth: the van left dock three.", "id": "d", "name": "Clerk"}], "u")
        assert indexed_memories(mem) == mem.stats()["counts"]["memories"]  # caught up
        hits = mem.search("crate of lemons", "u").hits
        assert any("b" in h.source_turn_ids for h in hits)


def test_the_server_answers_503_for_a_write_and_keeps_serving_reads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with rest_server(tmp_path / "store", ["alice"]) as (url, keys, _), \
            httpx.Client(base_url=url, timeout=60, headers=bearer(keys["alice"])) as client:
        first = {"messages": [{"content": "The parcel reached dock four.", "name": "Clerk"}]}
        assert client.post("/v1/memories", json=first).status_code == 200
        fake_free_space(monkeypatch, lambda path: 0)  # the disk is full
        r = client.post("/v1/memories", json={"messages": [{"content": "A crate of lemons.", "name": "Clerk"}]})
        assert r.status_code == 503 and r.json()["error"] == "DiskFullError", r.text
        hits = client.post("/v1/search", json={"query": "parcel dock"}).json()["hits"]
        assert any("dock four" in h["memory"] for h in hits)
        monkeypatch.undo()  # space returns
        r = client.post("/v1/memories", json={"messages": [{"content": "A crate of lemons.", "name": "Clerk"}]})
        assert r.status_code == 200, r.text
        assert any("lemons" in h["memory"] for h in client.post("/v1/search", json={"query": "lemons"}).json()["hits"])
