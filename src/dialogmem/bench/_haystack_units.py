"""One haystack unit (a system, a needle conversation, a size H), in two fresh processes.

``build_unit`` fills the unit's store: the H distractor turns, then the needle conversation turn by
turn as ``bench locomo`` feeds it. ``query_unit`` opens the filled store in a new process and asks
the needle's questions. Separate processes keep each measure honest: the RSS after open and the
peak RSS are those of a process that only opened the store and searched it, never of one that
built it, and each build's peak is its own.

dialogmem's haystack goes through the LLM-free write path (``Memory.add`` with one session's
messages per call) the first time and is exported with its vectors into the cache; later runs
``Memory.import_`` that export (the same memories and vectors, nothing embedded again). The naive
baseline's turn vectors are cached as a float32 ``.npy`` beside the turns.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from .._config import Config
from .._models import make_embedder
from .._models._factory import embedder_identity
from .._store import EdgeIndex, IndexPoint
from ._baselines import NaiveRAG, _record
from ._distractors import DistractorTurn
from ._loaders import BenchConversation, BenchQuestion, BenchTurn
from ._retrieval import has_target, search_question
from ._systems import DialogmemSystem

EMBED_BATCH = 256
#: searches made and not timed before the measured ones, so one-off costs (first pages of the index
#: read from disk, the ONNX session's first run) do not land in a question's latency
WARMUP_QUERIES = ("What did we talk about last week?", "Any plans for the weekend?",
                  "How is work going lately?", "What was that recipe again?", "Where did you travel last year?")


class UnitJob(BaseModel):
    """Everything a unit's process needs (it is sent to a fresh interpreter)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    system: str  # "dialogmem" or "naive-hybrid"
    scratch: Path
    config: Config
    needle: BenchConversation
    h: int
    turns_file: Path | None  # the distractors (JSON Lines of DistractorTurn); None when h is 0
    cache: Path | None  # where this needle and H's cached vectors and exports live
    write_key: str  # what dialogmem's cached export depends on besides its embedder
    rebuild: bool = False  # write the haystack through the write path even when an export is cached
    sleep: bool = False
    ks: list[int]
    budgets: list[int]
    fetch_k: int


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


def rss_mb() -> tuple[float, float]:
    """(current RSS, peak RSS since the last ``reset_peak``) of this process, in MB."""
    status = _status()
    if "VmRSS" in status:
        return status["VmRSS"] / 1024, status.get("VmHWM", status["VmRSS"]) / 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # no /proc: peak of the process
    return peak, peak


def reset_peak() -> bool:
    """Start a new peak-RSS window (Linux ``clear_refs``); False where the peak cannot be reset."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _status() -> dict[str, float]:
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = float(value.split()[0])  # kB
    return out


def disk_mb(path: Path) -> float:
    """Space the files under ``path`` take on disk (allocated blocks, so sparse files count what they use)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
    return round(total / 2**20, 2)


def read_turns(path: Path) -> Iterator[DistractorTurn]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield DistractorTurn.model_validate_json(line)


def sessions(path: Path) -> Iterator[list[DistractorTurn]]:
    """The distractor turns grouped by session, in file order."""
    batch: list[DistractorTurn] = []
    for turn in read_turns(path):
        if batch and turn.session_id != batch[0].session_id:
            yield batch
            batch = []
        batch.append(turn)
    if batch:
        yield batch


# -- build --------------------------------------------------------------------------------------------
def build_unit(job: UnitJob) -> dict[str, Any]:
    """Fill the unit's store; returns how the haystack got in and what it cost."""
    reset_peak()
    out = _build_dialogmem(job) if job.system == "dialogmem" else _build_naive(job)
    out["rss_peak_build_mb"] = round(rss_mb()[1], 1)
    out["disk_mb"] = disk_mb(job.scratch)
    return out


def _build_dialogmem(job: UnitJob) -> dict[str, Any]:
    from .._facade._memory import Memory

    cfg = job.config.model_copy(update={"data_dir": job.scratch / "store"})
    out: dict[str, Any] = {"haystack_path": "none", "haystack_s": 0.0, "haystack_turns": 0, "embedded_on_import": 0}
    with Memory(cfg) as mem:
        identity = embedder_identity(mem.config.embedder)  # as this store resolved it ("auto": int8)
        out["embedder"] = identity
        if job.h and job.turns_file is not None and job.cache is not None:
            export = job.cache / f"dialogmem-{slug(identity)}-{job.write_key}.jsonl"
            if job.rebuild or not export.exists():
                out.update(_write_haystack(job, export))
            # Always imported, so a first run and a cached one measure the same store (the import
            # also builds the search graph a long history gets from ``sleep``).
            started = time.perf_counter()
            report = mem.import_(export)
            out.update(haystack_path="import", haystack_turns=report.turns, embedded_on_import=report.embedded,
                       indexed=report.indexed, haystack_s=time.perf_counter() - started)
    system = DialogmemSystem(cfg, job.scratch, run_sleep=job.sleep)
    try:
        cost = system.ingest(job.needle)
    finally:
        system.close()
    out.update(needle_turns=cost.turns, needle_s=round(cost.wall_s, 3), memories=cost.memories)
    out["haystack_s"] = round(out["haystack_s"], 3)
    return out


def _write_haystack(job: UnitJob, export: Path) -> dict[str, Any]:
    """The distractors through the LLM-free write path (``Memory.add``, one session's messages per
    call), as a user's history is written, in a store of their own; exported with vectors to ``export``."""
    from .._facade._memory import Memory

    fill = job.scratch / "fill"
    started = time.perf_counter()
    n = 0
    with Memory(job.config.model_copy(update={"data_dir": fill})) as mem:
        for batch in sessions(job.turns_file) if job.turns_file is not None else ():
            messages = [{"content": t.text, "name": t.speaker, "id": t.id} for t in batch]
            mem.add(messages, job.needle.scope, session_id=batch[0].session_id, timestamp=batch[0].time.isoformat())
            n += len(batch)
        mem.flush(job.needle.scope)
        write_s = time.perf_counter() - started
        partial = export.with_suffix(".partial")
        mem.export(partial, job.needle.scope, vectors=True)
    os.replace(partial, export)
    shutil.rmtree(fill, ignore_errors=True)
    return {"write_turns": n, "write_s": round(write_s, 3),
            "export_s": round(time.perf_counter() - started - write_s, 3)}


def _build_naive(job: UnitJob) -> dict[str, Any]:
    embedder = make_embedder(job.config.embedder)
    identity = getattr(embedder, "identity", type(embedder).__name__)
    out: dict[str, Any] = {"haystack_path": "none", "haystack_s": 0.0, "haystack_turns": 0, "embedder": identity}
    if job.h and job.turns_file is not None and job.cache is not None:
        vectors_file = job.cache / f"naive-{slug(identity)}.npy"
        cached = vectors_file.exists() and not job.rebuild
        started = time.perf_counter()
        index = EdgeIndex(job.scratch / "index", dim=embedder.dim)
        try:
            if cached:
                vectors: np.ndarray = np.load(vectors_file, mmap_mode="r")
            else:
                partial = vectors_file.with_suffix(".partial.npy")
                vectors = np.lib.format.open_memmap(partial, mode="w+", dtype=np.float32, shape=(job.h, embedder.dim))
            n = _fill_naive(index, job, vectors, embed=None if cached else embedder.embed)
            index.flush()
            # the search graph a vector database builds for a large collection (as dialogmem's import does)
            out["indexed"] = index.build_index(job.config.store.index_min_points)
        finally:
            index.close()
        if not cached:
            assert isinstance(vectors, np.memmap)
            vectors.flush()
            del vectors
            os.replace(partial, vectors_file)
        out.update(haystack_path="cached vectors" if cached else "embedded", haystack_turns=n,
                   haystack_s=round(time.perf_counter() - started, 3))
    naive = NaiveRAG("hybrid", job.scratch, embedder, reference_time=job.needle.last_time())
    try:
        cost = naive.ingest(job.needle)
    finally:
        naive.close()
    out.update(needle_turns=cost.turns, needle_s=round(cost.wall_s, 3), memories=cost.memories)  # the index's count
    return out


def _fill_naive(index: EdgeIndex, job: UnitJob, vectors: np.ndarray, *, embed: Any) -> int:
    """Every distractor turn as one raw-turn record (as ``NaiveRAG`` stores a turn), in batches;
    ``embed`` given: the vectors are computed and written into ``vectors`` on the way."""
    assert job.turns_file is not None
    now = time.time()
    n = 0
    batch: list[BenchTurn] = []

    def put(turns: list[BenchTurn], start: int) -> None:
        records = [_record(job.needle, t, now) for t in turns]
        if embed is not None:
            vectors[start:start + len(turns)] = embed([r.memory for r in records])
        index.upsert([IndexPoint(record=r, vector=np.asarray(vectors[start + i], dtype=np.float32))
                      for i, r in enumerate(records)])

    for t in read_turns(job.turns_file):
        batch.append(BenchTurn(id=t.id, session_id=t.session_id, speaker=t.speaker, text=t.text, time=t.time,
                               raw_time=t.time.isoformat()))
        if len(batch) == EMBED_BATCH:
            put(batch, n)
            n += len(batch)
            batch = []
    if batch:
        put(batch, n)
        n += len(batch)
    return n


# -- query --------------------------------------------------------------------------------------------
class _StoredDialogmem(DialogmemSystem):
    """``DialogmemSystem`` over a store already holding the needle (nothing is ingested again)."""

    def __init__(self, config: Config, scratch: Path, needle: BenchConversation) -> None:
        super().__init__(config, scratch, run_sleep=False)
        self._conv = needle


class _StoredNaive(NaiveRAG):
    """``NaiveRAG`` (hybrid) over an index already holding the haystack and the needle."""

    def __init__(self, scratch: Path, embedder: Any, needle: BenchConversation) -> None:
        super().__init__("hybrid", scratch, embedder, reference_time=needle.last_time())
        self._conv = needle


def query_unit(job: UnitJob) -> dict[str, Any]:
    """Open the filled store in this (fresh) process and search every scored question of the needle."""
    rss_before, _ = rss_mb()
    started = time.perf_counter()
    system: _StoredDialogmem | _StoredNaive
    if job.system == "dialogmem":
        system = _StoredDialogmem(job.config.model_copy(update={"data_dir": job.scratch / "store"}), job.scratch,
                                  job.needle)
    else:
        system = _StoredNaive(job.scratch, make_embedder(job.config.embedder), job.needle)
    try:
        open_s = time.perf_counter() - started
        rss_open, _ = rss_mb()
        peak_window = reset_peak()
        reference = job.needle.last_time() or datetime(2023, 1, 1)
        for text in WARMUP_QUERIES:
            system.search(BenchQuestion(id="warmup", question=text, answer="", category="warmup",
                                        question_time=reference), max(job.ks))
        records = []
        for q in job.needle.questions:
            if not has_target(q):
                continue
            rec: dict[str, Any] = {"qid": q.id, "category": q.category, "adversarial": q.adversarial,
                                   "abstention": q.abstention}
            rec.update(search_question(system, "locomo", q, job.ks, job.budgets, job.fetch_k))
            records.append(rec)
        _, peak = rss_mb()
    finally:
        system.close()
    return {"records": records, "open_s": round(open_s, 3), "rss_before_open_mb": round(rss_before, 1),
            "rss_after_open_mb": round(rss_open, 1), "rss_peak_search_mb": round(peak, 1),
            "peak_is_search_only": peak_window, "query_cache": job.config.embedder.query_cache}
