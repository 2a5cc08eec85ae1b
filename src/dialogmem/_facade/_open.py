"""Opening a store: the journal, the models, the index (checked against the journal), the stages.

Everything a ``Memory`` wires together is built here, in the order the checks need: the journal
first (the source of truth), then the index, which is verified, brought up to date from the
journal's outbox, or rebuilt (see ``_sync._maintenance``).
"""

from __future__ import annotations

import logging
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from .._config import Config
from .._errors import DiskFullError, StoreError
from .._journal import IndexState, Journal, open_journal
from .._models import LLMClient, make_embedder, make_llm
from .._models._embed_base import Embedder
from .._read import ReadPipeline, make_planner, make_selector
from .._read._hymem import HyMemAnswerer
from .._read._ltm import GraphSearcher
from .._read._search import Searcher
from .._sleep._consolidator import LTMConsolidator
from .._sleep._evictor import Evictor
from .._sleep._updater import SleepRunner
from .._store import LTM_SCOPE, EdgeIndex, PgIndex, VectorIndex, open_index
from .._store._readonly import LiveIndex, SnapshotIndex
from .._store._remote import RemoteIndex
from .._store._room import MIB, DiskRoom
from .._sync._access import AccessLog
from .._sync._embedder_check import check_embedder, resolve_embedder
from .._sync._ltmindex import fill_graph, indexed_memories, sync_graph_index
from .._sync._maintenance import IndexMarker, StorePaths, check_marker, damaged_index, refuse_missing_journal
from .._sync._records import journal_records
from .._sync._repair import import_from_index, recover_journal
from .._sync._writer import ChangeWriter, FillOutcomes, fill_index
from .._usage import PendingUsage, UsageTracker
from .._write import WriteStages, make_write_stages
from .._write._ingest import Ingest
from ..types import RepairReport
from ._lifecycle import StoreLock

log = logging.getLogger(__name__)


@dataclass
class Parts:
    """Everything one open store holds."""

    config: Config
    paths: StorePaths
    journal: Journal
    usage: UsageTracker
    embedder: Embedder
    llm: LLMClient
    index: VectorIndex
    access: AccessLog
    writer: ChangeWriter
    stages: WriteStages
    ingest: Ingest
    search: Searcher
    answerer: HyMemAnswerer
    sleeper: SleepRunner
    evictor: Evictor
    consolidator: LTMConsolidator

    def close(self) -> None:
        try:
            self.writer.wait_counters()
            if not self.config.read_only:
                self.writer.flush_counters()
                self.writer.checkpoint()
        finally:
            try:
                self.index.close()
            finally:
                self.journal.close()


def open_parts(config: Config, data_dir: Path, llm_client: LLMClient | None) -> Parts:
    paths = StorePaths(data_dir)
    read_only = config.read_only
    in_file = config.journal.url is None
    if read_only and in_file and not paths.journal.exists():
        raise StoreError(f"no store at {data_dir} (no journal {paths.journal}) to open read-only")
    if config.store.backend == "edge" and in_file:
        refuse_missing_journal(paths)
    journal = open_journal(config.journal, paths.journal, read_only=read_only)
    index: VectorIndex | None = None
    try:
        usage = UsageTracker()
        usage.load(journal.usage())
        config = config.model_copy(update={"embedder": resolve_embedder(journal, config.embedder)})
        embedder = make_embedder(config.embedder, usage)
        check_embedder(journal, config.embedder, read_only=read_only)  # after the config is known valid
        if llm_client is not None:
            llm_client.usage = usage  # one tracker: the client's calls land in stats()
        llm = llm_client if llm_client is not None else make_llm(config.llm, usage)
        if read_only and config.store.backend == "edge":  # the shard is the writer's: copies of the journal
            index = SnapshotIndex(config.embedder.dim, lambda shard, user: _fill_copy(journal, embedder, shard, user))
        elif read_only:  # a server index is shared by design: read it as the writers leave it
            index = LiveIndex(open_index(config.store, paths.root, config.embedder.dim,
                                         pool=getattr(journal, "pool", None), read_only=True))
        else:
            index = _open_index(config, paths, journal)
        parts = _assemble(config, paths, journal, usage, embedder, llm, index)
        if not read_only:
            _reconcile(parts)
        return parts
    except BaseException:
        if index is not None:
            index.close()
        journal.close()
        raise


def _assemble(config: Config, paths: StorePaths, journal: Journal, usage: UsageTracker, embedder: Embedder,
              llm: LLMClient, index: VectorIndex) -> Parts:
    """The stages and runners of an open store, around its journal, index, embedder and LLM."""
    access = AccessLog()
    # Usage counters ride along with the next commit: a transaction per search would cost its latency.
    pending_usage = PendingUsage()
    usage.sink = pending_usage.add
    writer = ChangeWriter(journal, index, embedder, access, pending_usage)
    stages = make_write_stages(config.write, llm, embedder)
    consolidator = LTMConsolidator(journal, writer, embedder, llm, config.sleep)
    pipeline = ReadPipeline(index, embedder, make_planner(config.read.planner, llm),
                            make_selector(config.read.selector, llm), usage,
                            dense_weight=config.read.fusion_weight())
    graph = GraphSearcher(journal, index, embedder, min_users=config.sleep.ltm_min_users)
    return Parts(
        config=config, paths=paths, journal=journal, usage=usage, embedder=embedder, llm=llm, index=index,
        access=access, writer=writer, stages=stages, ingest=Ingest(journal, writer, index, stages),
        answerer=HyMemAnswerer(llm, config.answer),
        sleeper=SleepRunner(index, journal, writer, llm, config.sleep),
        evictor=Evictor(journal, writer),
        consolidator=consolidator,
        search=Searcher(pipeline, graph, journal, access, writer, usage, read=config.read, sleep=config.sleep,
                        subject_key=consolidator.subject_key, read_only=config.read_only),
    )


def _fill_copy(journal: Journal, embedder: Embedder, shard: VectorIndex, user_id: str) -> int:
    """A read-only store's private copy of one scope: a user's memories, or the graph's nodes."""
    if user_id == LTM_SCOPE:
        return fill_graph(journal, shard)[0]
    return fill_index(journal, embedder, shard, user_id=user_id, mark=False)


def _open_index(config: Config, paths: StorePaths, journal: Journal) -> VectorIndex:
    if config.store.backend != "edge":
        return open_index(config.store, paths.root, config.embedder.dim, pool=getattr(journal, "pool", None))
    store_id = journal.meta("store_id") or ""
    check_marker(paths, store_id)
    try:
        return EdgeIndex.from_config(paths.index, config.embedder.dim, config.store, journal_records(journal))
    except DiskFullError:  # nothing is damaged: the store opens once space is freed
        raise
    except StoreError as exc:
        raise damaged_index(paths, exc) from exc
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # the Rust binding panics on damaged files (PanicException)
        raise damaged_index(paths, exc) from exc


def _reconcile(parts: Parts) -> None:
    """Bring the index up to date with the journal, rebuilding it when it cannot be trusted."""
    journal, writer = parts.journal, parts.writer
    if journal.meta("import_index") == "1":
        import_from_index(journal, parts.index)  # a store written by dialogmem before schema 2
        journal.set_meta("import_index", None)
    if parts.config.stateless:  # other nodes write meanwhile: a user's rows are replayed under that user's lock
        for user_id in journal.outbox_users():
            with journal.user_lock(user_id):
                writer.replay_outbox(user_id)
    else:
        writer.replay_outbox()
    expected = journal.count_memories() - journal.count_index_state(IndexState.FAILED)
    held = indexed_memories(parts.index)
    marker = parts.paths.read_marker() if parts.config.store.backend == "edge" else None
    generation = int(journal.meta("index_generation") or 1)
    stale = marker is not None and marker.generation < generation
    if held == 0 and expected > 0:  # a missing (or moved-aside) index: fill a fresh one
        log.warning("the vector index is empty, the journal holds %d active memories: filling the index",
                    expected)
        fill_index(journal, parts.embedder, parts.index)
    elif parts.config.stateless and held != expected:
        # other nodes write this index and journal at this moment: counts differ while they do, and a
        # rebuild here would wipe a shared collection under them. `dialogmem repair` rebuilds it.
        log.info("the shared vector index holds %d memories, the journal %d active ones (other nodes may be "
                 "writing); not rebuilding", held, expected)
    elif held != expected or stale:
        log.warning("the vector index holds %d memories, the journal %d active ones%s: rebuilding the index",
                    held, expected, " (an older copy)" if stale else "")
        rebuild_index(parts)
        return
    if parts.config.store.backend == "edge" and (marker is None or stale or held != expected):
        parts.paths.write_marker(IndexMarker(store_id=journal.meta("store_id") or "", generation=generation))
    # the graph's nodes: behind the journal after a crash, or missing from a refilled index
    sync_graph_index(journal, parts.index,
                     force=parts.index.count(LTM_SCOPE) != journal.graph_counts()["ltm_nodes"])


def rebuild_index(parts: Parts) -> RepairReport:
    """A fresh index filled from the journal; an Edge shard's old directory is moved aside, not deleted."""
    started = time.perf_counter()
    report = RepairReport()
    generation = int(parts.journal.meta("index_generation") or 1) + 1
    # what the old index holds is flushed and marked synced first (the new one is filled from the
    # journal anyway); checkpointing after the close below would flush a closed shard
    parts.writer.checkpoint()
    if isinstance(parts.index, EdgeIndex):
        min_free_mb = parts.config.store.min_free_mb
        # the old directory stays on disk: refuse before closing it when a new one would not fit
        DiskRoom(parts.paths.index, reserve=min_free_mb * MIB).check("rebuild", opening_new=True)
        parts.index.close()
        moved = parts.paths.move_index_aside("replaced")
        report.index_moved_to = str(moved) if moved else None
        new: VectorIndex = EdgeIndex.from_config(parts.paths.index, parts.config.embedder.dim, parts.config.store,
                                                 journal_records(parts.journal))
    elif isinstance(parts.index, RemoteIndex | PgIndex):
        new = parts.index
    else:
        raise StoreError("this store's index cannot be rebuilt in place")
    # PostgreSQL: one transaction that other nodes' changes wait for (a refill beside them could write
    # back a memory one of them deleted meanwhile); the outbox is marked after it commits, since marking
    # inside could wait on a journal row held by a writer that waits for the index
    outcomes = FillOutcomes() if isinstance(new, PgIndex) else None
    with new.rebuilding() if isinstance(new, PgIndex) else nullcontext():
        if isinstance(new, RemoteIndex | PgIndex):
            new.reset()
        report.memories_indexed = fill_index(parts.journal, parts.embedder, new, outcomes=outcomes)
        sync_graph_index(parts.journal, new, force=True)
    if outcomes is not None:
        outcomes.mark(parts.journal)
    parts.journal.set_meta("index_generation", str(generation))
    if isinstance(new, EdgeIndex):
        parts.paths.write_marker(IndexMarker(store_id=parts.journal.meta("store_id") or "", generation=generation))
    parts.index = parts.writer.index = parts.ingest.index = parts.sleeper.index = new
    parts.search.pipeline.index = parts.search.graph.index = new
    report.seconds = round(time.perf_counter() - started, 3)
    log.warning("rebuilt the vector index from the journal: %d memories", report.memories_indexed)
    return report


def prepare_repair(config: Config, *, from_index: bool) -> RepairReport:
    """The part of ``Memory.repair`` before the store is opened: with ``from_index``, rebuild a missing
    journal's memory rows from the surviving index; otherwise move an Edge index aside (never
    deleted), so that opening builds it again from the journal."""
    data_dir = Path(config.data_dir).expanduser()
    report = recover_journal(config, data_dir) if from_index else RepairReport()
    if not from_index and config.store.backend == "edge":
        lock = StoreLock(data_dir / ".lock")
        try:
            moved = StorePaths(data_dir).move_index_aside("repaired")
        finally:
            lock.release()
        report.index_moved_to = str(moved) if moved is not None else None
    return report


def finish_repair(parts: Parts, config: Config, report: RepairReport) -> RepairReport:
    """The part of ``Memory.repair`` on the opened store: a server index is rebuilt in place."""
    if config.store.backend != "edge":
        rebuild_index(parts)
    report.memories_indexed = indexed_memories(parts.index)
    return report
