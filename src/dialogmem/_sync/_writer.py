"""The one writer of changes: embed, commit to the journal, apply to the vector index.

Every change of the store goes through :meth:`ChangeWriter.apply` with a ``ChangeSet``:

1. vectors missing from the writes are computed (outside any lock, so a slow embedding endpoint
   holds up nobody else);
2. the whole set is committed to the journal in one transaction — turns, memory rows with their
   vectors, history rows, the sleep queue, turn status, pending access counts. From here the
   change is durable, and the touched rows sit in the journal's index outbox;
3. the set is applied to the vector index. The outbox rows are marked synced only after the index
   has flushed (:meth:`checkpoint`), so a crash anywhere leaves them marked and
   :meth:`replay_outbox` applies them again when the store opens (upserts and deletes are
   idempotent). A record the index refuses is marked failed with the reason, never retried in a
   loop, and never blocks the store from opening; ``rebuild`` retries it.

A full disk is not a refused record: the index's room is checked before step 2, so a change it
cannot hold raises ``DiskFullError`` with nothing written. Should the disk fill between the check
and step 3, the rows stay in the outbox (not failed), and the next change that finds room — or the
next checkpoint, or the next open — applies them first.

Steps 2 and 3 run under one lock, so the index sees changes in the order the journal committed
them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .._changes import ChangeSet, GraphCommit
from .._errors import ConfigError, DiskFullError, StoreError
from .._journal import IndexSource, IndexState, MemoryRows, stored_precision, stored_precision_all
from .._models._embed_base import Embedder
from .._store import IndexPoint, VectorIndex
from .._store._base import JournalBoundIndex
from .._types import MemoryRecord
from .._usage import PendingUsage
from ._access import AccessLog
from ._ltmindex import sync_graph_index

log = logging.getLogger(__name__)


#: points per index request when many are written at once
_INDEX_BATCH = 500


class ChangeWriter:
    def __init__(self, journal: IndexSource, index: VectorIndex, embedder: Embedder, access: AccessLog,
                 usage: PendingUsage, *, sync_every: int = 2000) -> None:
        self.journal = journal
        self.index = index
        self.embedder = embedder
        self.access = access
        self.usage = usage
        self.sync_every = sync_every
        self._lock = threading.Lock()
        self._unsynced: list[str] = []
        self._behind = False  # a full disk left rows in the outbox that the index has not seen
        self._counters_lock = threading.Lock()
        self._counters: threading.Thread | None = None  # a flush_counters_soon still running
        self._counters_failed = False  # the last background write of the counts failed
        # an index in the journal's database (store.backend = "postgres"): changes reach it inside the
        # journal's commit, so nothing waits in the outbox
        self._joined = isinstance(index, JournalBoundIndex) and index.joins_journal
        if self._joined:
            join = getattr(journal, "join_index", None)
            if join is None:
                raise ConfigError("this vector index lives in PostgreSQL beside the journal: set journal.url to "
                                  "the same PostgreSQL database")
            join(self._commit_in_tx, self._forget_in_tx)

    def apply(self, cs: ChangeSet) -> list[MemoryRecord]:
        """Perform ``cs``; returns the records it wrote. ``DiskFullError`` (nothing written) when the
        change reaches the index and the disk has no room for it."""
        if cs.is_empty():
            return []
        vectors = self._vectors(cs)
        with self._lock:
            points = _index_points(cs)
            if points is not None:
                self.index.check_room(points)
                if self._behind:
                    self._catch_up()
            access, usage = self.access.drain(), self.usage.drain()
            try:
                self.journal.commit(cs, vectors, access=access, usage=usage)
            except BaseException:
                self.access.restore(access)
                self.usage.restore(usage)
                raise
            if not self._joined:
                upserts = [(w.record, vectors[w.record.id]) for w in cs.writes]
                self._to_index(upserts, [(r.record.user_id, r.record.id) for r in cs.removals])
            if cs.graph is not None and not cs.graph.delta.is_empty():
                self._graph_to_index(cs.graph)
        return [w.record for w in cs.writes]

    def _commit_in_tx(self, conn: Any, cs: ChangeSet, vectors: Mapping[str, np.ndarray]) -> list[str]:
        """The index side of a journal commit, on the journal's connection inside its transaction: a
        record the index refuses fails the whole commit (nothing written), never a half-done change."""
        index = self.index
        assert isinstance(index, JournalBoundIndex)
        done: list[str] = []
        with index.bound(conn):
            if cs.writes:
                self.index.upsert([IndexPoint(record=w.record, vector=vectors[w.record.id]) for w in cs.writes])
                done += [w.record.id for w in cs.writes]
            by_user: dict[str, list[str]] = {}
            for r in cs.removals:
                by_user.setdefault(r.record.user_id, []).append(r.record.id)
            for user_id, ids in by_user.items():
                self.index.delete(ids, user_id)
                done += ids
        return done

    def _forget_in_tx(self, conn: Any, user_id: str) -> None:
        index = self.index
        assert isinstance(index, JournalBoundIndex)
        with index.bound(conn):
            self.index.delete_user(user_id)

    def _graph_to_index(self, graph: GraphCommit) -> None:
        d = graph.delta
        touched = sorted({n.id for n in [*d.insert_nodes, *d.update_nodes, *d.drop_nodes]})
        try:
            sync_graph_index(self.journal, self.index, touched)
        except StoreError as exc:  # the journal holds the graph; the next open syncs the index again
            log.error("the vector index refused the LTM graph's nodes (%s); they are synced when the store "
                      "next opens", exc)

    def _vectors(self, cs: ChangeSet) -> dict[str, np.ndarray]:
        """The writes' vectors at the journal's precision: the index gets exactly what a rebuild from
        the journal would give it."""
        vectors = {w.record.id: w.vector for w in cs.writes if w.vector is not None}
        missing = [w.record for w in cs.writes if w.vector is None and w.record.id not in vectors]
        if missing:
            for record, vector in zip(missing, self.embedder.embed([r.memory for r in missing]), strict=True):
                vectors[record.id] = vector
        return dict(zip(vectors, stored_precision_all(list(vectors.values())), strict=True))

    # -- the index ------------------------------------------------------------------------
    def _catch_up(self) -> None:
        """Apply what a full disk left in the outbox, before anything newer reaches the index;
        ``DiskFullError`` when the disk filled again meanwhile."""
        self._behind = False
        n = self._apply_rows(self.journal.index_rows(states=(IndexState.UPSERT, IndexState.REMOVE)))
        if self._behind:
            raise DiskFullError("no room on disk for the vector index: it is still catching up with the journal")
        sync_graph_index(self.journal, self.index)  # a no-op unless a graph commit was left behind too
        log.warning("the vector index caught up with the journal after a full disk: %d changes applied", n)

    def _to_index(self, upserts: Sequence[tuple[MemoryRecord, np.ndarray]],
                  removals: Sequence[tuple[str, str]]) -> None:
        """Apply to the index; what it refuses is marked failed, one record at a time. When the disk
        is full, everything stays in the outbox for :meth:`_catch_up`."""
        try:
            done = self._index_changes(upserts, removals)
        except DiskFullError as exc:
            self._behind = True
            log.error("the vector index has no room on disk (%s): %d changes wait in the journal's outbox",
                      exc, len(upserts) + len(removals))
            return
        self._unsynced += done
        if len(self._unsynced) >= self.sync_every:
            self._checkpoint()

    def _index_changes(self, upserts: Sequence[tuple[MemoryRecord, np.ndarray]],
                       removals: Sequence[tuple[str, str]]) -> list[str]:
        done: list[str] = []
        if upserts:
            try:
                self.index.upsert([IndexPoint(record=r, vector=v) for r, v in upserts])
                done += [r.id for r, _ in upserts]
            except DiskFullError:
                raise
            except StoreError as exc:
                log.warning("index upsert of %d records failed (%s); trying them one by one", len(upserts), exc)
                done += self._one_by_one(upserts)
        by_user: dict[str, list[str]] = {}
        for user_id, memory_id in removals:
            by_user.setdefault(user_id, []).append(memory_id)
        for user_id, ids in by_user.items():
            try:
                self.index.delete(ids, user_id)
                done += ids
            except DiskFullError:
                raise
            except StoreError as exc:
                self._failed(ids, exc)
        return done

    def _one_by_one(self, upserts: Sequence[tuple[MemoryRecord, np.ndarray]]) -> list[str]:
        done = []
        for record, vector in upserts:
            try:
                self.index.upsert([IndexPoint(record=record, vector=vector)])
                done.append(record.id)
            except DiskFullError:
                raise
            except StoreError as exc:
                self._failed([record.id], exc)
        return done

    def _failed(self, ids: list[str], exc: Exception) -> None:
        log.error("the vector index refused %d memories (%s); they stay in the journal, marked failed: "
                  "`dialogmem repair` rebuilds the index", len(ids), exc)
        self.journal.mark_index(ids, IndexState.FAILED, str(exc)[:2000])

    def checkpoint(self) -> None:
        """Flush the index, then mark the rows it now holds as synced (first applying what a full
        disk left behind, when there is room again)."""
        with self._lock:
            if self._behind:
                try:
                    self._catch_up()
                except DiskFullError as exc:
                    log.warning("the vector index is still behind the journal: %s", exc)
            self._checkpoint()

    def _checkpoint(self) -> None:
        if not self._unsynced:
            return
        try:
            self.index.flush()
        except DiskFullError as exc:  # the rows stay unsynced: the index's WAL holds them, a replay is idempotent
            log.warning("the vector index was not flushed: %s", exc)
            return
        self.journal.mark_index(self._unsynced, IndexState.SYNCED)
        self._unsynced = []

    def build_index(self, min_points: int) -> int:
        """The index's search graph over the points it still scans, when at least ``min_points``
        wait (``store.index_min_points``) and one user holds at least as many: a search reads one
        user's points, and a smaller slice is searched by its payload index, never the graph (a
        store of many short histories would pay for a graph no search uses). No change is
        applied meanwhile."""
        if min_points <= 0 or self.journal.largest_user() < min_points:
            return 0
        with self._lock:
            return self.index.build_index(min_points)

    def flush_counters(self) -> None:
        """Write the pending access counts and usage counters now (in their own small transaction)."""
        with self._lock:
            access, usage = self.access.drain(), self.usage.drain()
            if not access and not usage:
                return
            try:
                self.journal.commit(ChangeSet(""), {}, access=access, usage=usage)
            except BaseException:
                self.access.restore(access)
                self.usage.restore(usage)
                raise

    def flush_counters_soon(self) -> None:
        """:meth:`flush_counters` on a background thread, so the search that filled the access log
        does not wait for the write (512 scattered row updates: ~30 ms at 10^5 memories, every ~50th
        search). One such thread at a time; counts that arrive meanwhile go with a later flush. After a
        background write failed (its counts are kept), or where no thread can start, the write runs
        here, so its error reaches a caller."""
        with self._counters_lock:
            if self._counters is not None and self._counters.is_alive():
                return
            if not self._counters_failed:
                thread = threading.Thread(target=self._flush_counters_logged, name="dialogmem-counters",
                                          daemon=True)
                try:
                    thread.start()
                except RuntimeError:  # no thread can start (thread limit, interpreter shutting down)
                    pass
                else:
                    self._counters = thread
                    return
            self._counters_failed = False
        self.flush_counters()

    def _flush_counters_logged(self) -> None:
        try:
            self.flush_counters()
        except Exception:  # nobody waits for this thread: the counts are kept, the next write raises
            self._counters_failed = True
            log.warning("writing access counts failed; they are kept for the next write", exc_info=True)

    def wait_counters(self) -> None:
        """Wait for a :meth:`flush_counters_soon` still running (before a close, or a read of counts)."""
        with self._counters_lock:
            running = self._counters
        if running is not None:
            running.join()

    def replay_outbox(self, user_id: str | None = None) -> int:
        """Apply every row the journal still marks for the index (after a crash), of one user or of
        all. Never raises for a record the index refuses: it is marked failed. Returns how many rows
        were applied."""
        with self._lock:
            n = self._apply_rows(self.journal.index_rows(states=(IndexState.UPSERT, IndexState.REMOVE),
                                                         user_id=user_id))
            self._checkpoint()
        return n

    def index_imported(self, rows: Sequence[tuple[MemoryRecord, np.ndarray]]) -> None:
        """Put into the index rows the journal has just taken in bulk (``import_rows`` leaves them in
        the outbox). They are marked synced at a checkpoint (every ``sync_every`` rows, and
        :meth:`checkpoint`); a crash before it replays them from the outbox."""
        # as the journal took them, rounded together
        rows = list(zip([r for r, _ in rows], stored_precision_all([v for _, v in rows]), strict=True))
        with self._lock:
            for lo in range(0, len(rows), _INDEX_BATCH):
                self._to_index(rows[lo:lo + _INDEX_BATCH], ())

    def _apply_rows(self, rows: Iterable[tuple[MemoryRecord, np.ndarray | None, IndexState]]) -> int:
        n = 0
        batch: list[tuple[MemoryRecord, np.ndarray]] = []
        removals: list[tuple[str, str]] = []
        for record, vector, state in rows:
            n += 1
            if state == IndexState.REMOVE:
                removals.append((record.user_id, record.id))
                continue
            if vector is None:
                vector = stored_precision(self.embedder.embed([record.memory])[0])
            batch.append((record, vector))
            if len(batch) >= _INDEX_BATCH:
                self._to_index(batch, ())
                batch = []
        self._to_index(batch, removals)
        return n


class FillOutcomes:
    """What a fill's index took and refused, for the journal's outbox, kept to be marked later: a
    rebuild inside an index lock must not wait on journal rows that writers waiting for that lock hold."""

    def __init__(self) -> None:
        self.synced: list[str] = []
        self.failed: list[tuple[str, str]] = []

    def mark(self, journal: MemoryRows) -> None:
        """Record the outcomes in the journal's outbox (and forget them)."""
        if self.synced:
            journal.mark_index(self.synced, IndexState.SYNCED)
        for memory_id, reason in self.failed:
            journal.mark_index([memory_id], IndexState.FAILED, reason)
        self.synced, self.failed = [], []


def fill_index(journal: MemoryRows, embedder: Embedder, index: VectorIndex, *, user_id: str | None = None,
               mark: bool = True, outcomes: FillOutcomes | None = None) -> int:
    """Insert every active journal row (of one user, or all) into ``index``, which is not the
    writer's own: a rebuild, or the per-user copy a read-only store searches. With ``mark``, the
    journal's outbox records the outcome (synced, or failed with the reason) as each batch lands;
    with ``outcomes``, they are collected there for the caller to mark. Returns how many the index took."""
    taken = 0
    batch: list[IndexPoint] = []
    sink = outcomes if outcomes is not None else FillOutcomes()
    for record, vector, _ in journal.index_rows(states=None, user_id=user_id):
        if vector is None:
            vector = embedder.embed([record.memory])[0]
        batch.append(IndexPoint(record=record, vector=vector))
        if len(batch) >= 500:
            taken += _fill_batch(index, batch, sink)
            batch = []
            if mark and outcomes is None:
                sink.mark(journal)
    taken += _fill_batch(index, batch, sink)
    if mark and outcomes is None:
        sink.mark(journal)
    index.flush()
    return taken


def _fill_batch(index: VectorIndex, batch: list[IndexPoint], outcomes: FillOutcomes) -> int:
    if not batch:
        return 0
    ok: list[str] = []
    try:
        index.upsert(batch)
        ok = [p.record.id for p in batch]
    except DiskFullError:  # not the records' fault: the rest stays unmarked, for the next fill
        raise
    except StoreError:
        for point in batch:
            try:
                index.upsert([point])
                ok.append(point.record.id)
            except DiskFullError:
                raise
            except StoreError as exc:
                log.error("the vector index refused memory %s: %s", point.record.id, exc)
                outcomes.failed.append((point.record.id, str(exc)[:2000]))
    outcomes.synced += ok
    return len(ok)


def _index_points(cs: ChangeSet) -> int | None:
    """How many points ``cs`` writes to or removes from the index; None when it does not reach the
    index (turns only, quarantine, counters)."""
    graph = cs.graph is not None and not cs.graph.delta.is_empty()
    nodes = 0
    if cs.graph is not None and graph:
        d = cs.graph.delta
        nodes = len(d.insert_nodes) + len(d.update_nodes) + len(d.drop_nodes)
    n = len(cs.writes) + len(cs.removals) + nodes
    return n if n or graph else None

