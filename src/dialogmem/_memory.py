"""``Memory``: the facade that wires journal, models, index and the write/read/sleep stages.

Decisions (what to extract, merge, select) live in the stage modules; this class performs the I/O:
it journals turns before anything else, stores what the stages produce, and keeps every change in
the history.
"""

from __future__ import annotations

import fcntl
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from pydantic import ValidationError

from ._config import Config
from ._errors import ConfigError, InputError, NotFoundError, StoreError
from ._input import check_id, check_text, to_turns
from ._journal import Journal
from ._models import LLMClient, make_embedder, make_llm
from ._read import Answer, Answerer, ReadPipeline, make_planner, make_selector
from ._settings import ReadSettings, SleepSettings, WriteSettings
from ._sleeptime import SleepReport, SleepRunner
from ._store import IndexFilter, IndexPoint, open_index
from ._timeparse import parse_timestamp, to_fields
from ._types import (
    AddResult,
    Event,
    HistoryEntry,
    MemoryRecord,
    Message,
    SearchHit,
    SearchResult,
    Turn,
)
from ._usage import StageUsage, UsageTracker
from ._write import RECENT_TURNS, BufferedTurn, ExtractedFact, WriteBuffer, make_write_stages

log = logging.getLogger(__name__)

_MEMORY_NS = uuid.UUID("5b0c1f8e-3d7a-4c55-9a63-d1a1e0c0ffee")
def memory_id(user_id: str, source_turn_ids: Sequence[str], fact: str) -> str:
    """Deterministic, so replaying turns after a crash rewrites the same memories instead of copies."""
    return str(uuid.uuid5(_MEMORY_NS, "\x1f".join([user_id, *source_turn_ids, fact])))


class _StoreLock:
    """An exclusive advisory lock on the data directory: one process writes a store at a time."""

    def __init__(self, path: Path) -> None:
        self._fh = open(path, "a+")  # noqa: SIM115 - held for the life of the store
        try:
            fcntl.flock(self._fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            self._fh.close()
            raise StoreError(f"store {path.parent} is open in another process") from exc

    def release(self) -> None:
        if not self._fh.closed:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()


class Memory:
    """Long-term memory for one store (a data directory), shared by any number of users.

    Every id-based call takes ``user_id`` and only ever sees that user's records: another user's
    id behaves as "not found".
    """

    def __init__(self, config: Config | None = None, *, llm_client: LLMClient | None = None,
                 **overrides: Any) -> None:
        """``config`` (or keyword overrides of it, e.g. ``data_dir=...``); ``llm_client`` replaces the
        client that ``config.llm`` would build (bring your own, or a ``ScriptedLLM`` in tests)."""
        if config is None:
            config = Config.load(**overrides)
        elif overrides:
            config = Config.model_validate({**config.model_dump(), **overrides})
        self.config = config
        try:
            self._write_cfg = WriteSettings.model_validate(config.write)
            self._read_cfg = ReadSettings.model_validate(config.read)
            self._sleep_cfg = SleepSettings.model_validate(config.sleep)
        except ValidationError as exc:
            raise ConfigError(f"invalid config: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}") from exc
        data_dir = Path(config.data_dir).expanduser()
        data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = data_dir
        self._llm_client = llm_client
        self._closed = False
        self._lock = threading.RLock()
        self._store_lock = _StoreLock(data_dir / ".lock")
        try:
            self._open(data_dir)
        except BaseException:
            # undo what was opened before the failure, so the store can be opened again at once
            for part in ("_index", "_journal"):
                if hasattr(self, part):
                    getattr(self, part).close()
            self._store_lock.release()
            raise

    def _open(self, data_dir: Path) -> None:
        self._journal = Journal(data_dir / "journal.sqlite3")
        self._usage_pending: dict[tuple[str, str], StageUsage] = {}
        self._usage_lock = threading.Lock()
        self.usage = UsageTracker(sink=self._collect_usage)
        self.usage.load(self._journal.usage())
        self._embedder = make_embedder(self.config.embedder, self.usage)
        self._index = open_index(self.config.store, data_dir, self.config.embedder.dim)
        if self._llm_client is not None:
            self._llm_client.usage = self.usage  # one tracker: the client's calls land in stats()
            self._llm = self._llm_client
        else:
            self._llm = make_llm(self.config.llm, self.usage)
        self._stages = make_write_stages(self._write_cfg, self._llm, self._embedder)
        self._buffers: dict[str, WriteBuffer] = {}
        self._inflight: dict[str, dict[str, Turn]] = {}
        self._speakers: dict[str, list[str]] = {}
        self._read = ReadPipeline(
            self._index,
            self._embedder,
            make_planner(self._read_cfg.planner, self._llm),
            make_selector(self._read_cfg.selector, self._llm),
            self.usage,
        )
        self._answerer = Answerer(self._llm)
        self._sleeper = SleepRunner(self._index, self._journal, self._embedder, self._llm, self._sleep_cfg)
        self._replay_pending()

    # -- context manager / lifecycle --------------------------------------------------------
    def __enter__(self) -> Memory:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Persist counters, close the index and the journal. Pending turns stay journaled and are
        picked up at the next open. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._persist_usage()
                self._index.close()
            finally:
                self._journal.close()
                self._store_lock.release()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("this Memory is closed")

    # -- usage ------------------------------------------------------------------------------
    def _collect_usage(self, kind: str, stage: str, delta: StageUsage) -> None:
        # Persisted in batches (add, sleep, close): an fsync per search would dominate its latency.
        with self._usage_lock:
            self._usage_pending.setdefault((kind, stage), StageUsage()).add(delta)

    def _persist_usage(self) -> None:
        with self._usage_lock:
            pending, self._usage_pending = self._usage_pending, {}
        self._journal.add_usage(pending)

    # -- write path -------------------------------------------------------------------------
    def add(
        self,
        messages: str | dict[str, Any] | Message | Sequence[str | dict[str, Any] | Message],
        user_id: str,
        *,
        session_id: str | None = None,
        timestamp: str | float | datetime | None = None,
        metadata: dict[str, Any] | None = None,
        agent_id: str | None = None,
        flush: bool = False,
    ) -> AddResult:
        """Journal the messages, then run them through the write path.

        Returns once every message is durably journaled: from then on it survives a crash. The
        memories created by this call are returned; turns still waiting in the buffers are counted
        in ``pending_turns`` (``flush=True`` or :meth:`flush` processes them now).
        """
        self._check_open()
        check_id("user_id", user_id)
        if session_id is not None:
            check_id("session_id", session_id)
        if agent_id is not None:
            check_id("agent_id", agent_id)
        turns = to_turns(messages, user_id, session_id=session_id, timestamp=timestamp,
                         metadata=metadata or {}, agent_id=agent_id,
                         max_chars=self._write_cfg.max_turn_chars)
        with self._lock:
            accepted = self._journal.append_turns(turns)
            self._remember_speakers(user_id, accepted)
            facts = self._buffer(user_id).push([self._buffered(t) for t in accepted])
            for t in accepted:
                self._inflight.setdefault(user_id, {})[t.id] = t
            if flush:
                facts += self._buffer(user_id).flush()
            stored = self._store_facts(user_id, facts)
            self._persist_usage()
            pending = len(self._buffer(user_id).pending_turn_ids())
        return AddResult(turn_ids=[t.id for t in accepted], memories=stored, pending_turns=pending)

    def flush(self, user_id: str | None = None) -> list[SearchHit]:
        """Process every buffered turn now (of one user, or of all)."""
        self._check_open()
        stored: list[SearchHit] = []
        with self._lock:
            users = [check_id("user_id", user_id)] if user_id is not None else list(self._buffers)
            for uid in users:
                if uid in self._buffers:
                    stored += self._store_facts(uid, self._buffers[uid].flush())
            self._persist_usage()
        return stored

    def _remember_speakers(self, user_id: str, turns: Iterable[Turn]) -> None:
        known = self._speakers.setdefault(user_id, self._journal.speakers(user_id))
        for t in turns:
            if t.speaker not in known:
                known.append(t.speaker)

    @staticmethod
    def _buffered(t: Turn) -> BufferedTurn:
        return BufferedTurn(
            turn_id=t.id, speaker=t.speaker, text=t.content, compressed=t.content,
            time_stamp=t.time_stamp, float_time_stamp=t.float_time_stamp, weekday=t.weekday,
            session_id=t.session_id, topic_id=0,
        )

    def _buffer(self, user_id: str) -> WriteBuffer:
        buf = self._buffers.get(user_id)
        if buf is None:
            buf = self._buffers[user_id] = self._stages.new_buffer()
        return buf

    def _replay_pending(self) -> None:
        """Turns journaled but not yet turned into memories go back into their buffers."""
        for user_id in self._journal.pending_users():
            turns = self._journal.turns(user_id, pending_only=True)
            log.info("replaying %d pending turns of user %s", len(turns), user_id)
            self._remember_speakers(user_id, turns)
            for t in turns:
                self._inflight.setdefault(user_id, {})[t.id] = t
            earlier = self._journal.turns_before(user_id, turns[0].seq, RECENT_TURNS)
            self._buffer(user_id).seed_context([self._buffered(t) for t in earlier])
            facts = self._buffer(user_id).push([self._buffered(t) for t in turns])
            self._store_facts(user_id, facts)

    def _store_facts(self, user_id: str, facts: list[ExtractedFact]) -> list[SearchHit]:
        """Embed, index and journal the facts, then mark their turns processed."""
        records: list[MemoryRecord] = []
        if facts:
            now = time.time()
            inflight = self._inflight.get(user_id, {})
            for f in facts:
                first = inflight.get(f.source_turn_ids[0])
                records.append(MemoryRecord(
                    id=memory_id(user_id, f.source_turn_ids, f.fact),
                    user_id=user_id, agent_id=first.agent_id if first else None,
                    session_id=f.session_id, memory=f.fact, original_memory=f.original,
                    compressed_memory=f.compressed, time_stamp=f.time_stamp,
                    float_time_stamp=f.float_time_stamp, weekday=f.weekday, topic_id=f.topic_id,
                    speaker_name=f.speaker_name, entities=f.entities, keywords=f.keywords,
                    source_turn_ids=list(f.source_turn_ids), salience=f.salience,
                    created_at=now, updated_at=now,
                    metadata=dict(first.metadata) if first else {},
                ))
            vectors = self._embedder.embed([r.memory for r in records])
            self._index.upsert([IndexPoint(record=r, vector=v) for r, v in zip(records, vectors, strict=True)])
            self._journal.add_history(
                [(user_id, HistoryEntry(memory_id=r.id, event=Event.ADD, old_memory=None,
                                        new_memory=r.memory, timestamp=now, actor="write"))
                 for r in records],
                sleep_pending=[(user_id, r.id) for r in records],
            )
        inflight = self._inflight.get(user_id, {})
        if inflight:
            still = set(self._buffer(user_id).pending_turn_ids())
            done = [tid for tid in inflight if tid not in still]
            self._journal.mark_processed(user_id, done)
            for tid in done:
                del inflight[tid]
        return [SearchHit.from_record(r, 1.0) for r in records]

    # -- read path --------------------------------------------------------------------------
    def search(
        self,
        query: str,
        user_id: str,
        *,
        limit: int | None = None,
        filters: IndexFilter | dict[str, Any] | None = None,
        reference_time: str | float | datetime | None = None,
        recent_context: list[str] | None = None,
    ) -> SearchResult:
        """Plan, retrieve (one hybrid query per hypothetical query), select; hits cite their turns."""
        self._check_open()
        check_id("user_id", user_id)
        if not isinstance(query, str) or not query.strip():
            raise InputError("query must be a non-empty string")
        check_text("query", query)
        if limit is not None and not 1 <= limit <= 200:
            raise InputError("limit must be between 1 and 200")
        flt = self._filter(filters)
        ref = parse_timestamp(reference_time) if reference_time is not None else None
        result = self._read.search(
            query, user_id, limit=limit, flt=flt, reference_time=ref,
            recent_context=recent_context, known_speakers=self._known_speakers(user_id),
        )
        hits = [SearchHit.from_record(s.record, s.score) for s in result.hits]
        if self._read_cfg.track_access and hits:
            now = time.time()
            for s in result.hits:
                self._index.set_payload(s.record.id, user_id, {
                    "access_count": s.record.access_count + 1, "last_accessed": now})
        return SearchResult(query=query, hits=hits)

    def answer(self, query: str, user_id: str, *, limit: int | None = None,
               reference_time: str | float | datetime | None = None) -> Answer:
        """Answer from this user's memories with the configured LLM; cites the memory ids it used."""
        ref = parse_timestamp(reference_time) if reference_time is not None else None
        result = self.search(query, user_id, limit=limit, reference_time=ref)
        return self._answerer.answer(query, result.hits, reference_time=ref)

    def _known_speakers(self, user_id: str) -> list[str]:
        known = self._speakers.get(user_id)
        if known is None:
            known = self._speakers[user_id] = self._journal.speakers(user_id)
        return known

    @staticmethod
    def _filter(filters: IndexFilter | dict[str, Any] | None) -> IndexFilter | None:
        if filters is None or isinstance(filters, IndexFilter):
            return filters
        data = dict(filters)
        for key in ("time_from", "time_to"):
            if isinstance(data.get(key), str | datetime):
                data[key] = to_fields(parse_timestamp(data[key]))[1]
        try:
            return IndexFilter.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise InputError(f"filters.{'.'.join(map(str, err['loc']))}: {err['msg']}") from exc

    # -- id-based verbs ---------------------------------------------------------------------
    def get(self, memory_id: str, user_id: str) -> MemoryRecord:
        self._check_open()
        check_id("user_id", user_id)
        check_id("memory_id", memory_id)
        got = self._index.retrieve([memory_id], user_id)
        if not got:
            raise NotFoundError(f"memory {memory_id} not found")
        return got[0][0]

    def get_all(self, user_id: str, *, limit: int = 100, offset: str | None = None,
                filters: IndexFilter | dict[str, Any] | None = None) -> list[MemoryRecord]:
        """This user's memories ordered by id, ``limit`` at a time (pass the last id as ``offset``)."""
        self._check_open()
        check_id("user_id", user_id)
        if not 1 <= limit <= 10_000:
            raise InputError("limit must be between 1 and 10000")
        if offset is None:
            records, _ = self._index.scroll(user_id, self._filter(filters), limit=limit)
            return records
        # the index's offset is inclusive; ours is the last id already seen
        records, _ = self._index.scroll(user_id, self._filter(filters), limit=limit + 1, offset=offset)
        if records and records[0].id == offset:
            records = records[1:]
        return records[:limit]

    def update(self, memory_id: str, text: str, user_id: str, *, actor: str = "user") -> MemoryRecord:
        """Replace a memory's text (re-embedded, version + 1, history row)."""
        self._check_open()
        if not isinstance(text, str) or not text.strip():
            raise InputError("text must be a non-empty string")
        check_text("text", text)
        with self._lock:
            old = self.get(memory_id, user_id)
            new = self._write_record(old, {"memory": text}, actor=actor)
            self._persist_usage()
        return new

    def _write_record(self, old: MemoryRecord, changes: dict[str, Any], *, actor: str) -> MemoryRecord:
        now = time.time()
        new = old.model_copy(update={**changes, "updated_at": now, "version": old.version + 1})
        vector = self._embedder.embed([new.memory])[0]
        self._index.upsert([IndexPoint(record=new, vector=vector)])
        self._journal.add_history(
            [(old.user_id, HistoryEntry(memory_id=old.id, event=Event.UPDATE, old_memory=old.memory,
                                        new_memory=new.memory, timestamp=now, actor=actor))],
            sleep_pending=[(old.user_id, old.id)] if actor != "sleep" else [],
        )
        return new

    def delete(self, memory_id: str, user_id: str, *, actor: str = "user") -> None:
        self._check_open()
        with self._lock:
            old = self.get(memory_id, user_id)
            self._delete_record(old, actor=actor)

    def _delete_record(self, old: MemoryRecord, *, actor: str) -> None:
        self._index.delete([old.id], old.user_id)
        self._journal.add_history([(old.user_id, HistoryEntry(
            memory_id=old.id, event=Event.DELETE, old_memory=old.memory, new_memory=None,
            timestamp=time.time(), actor=actor))])
        self._journal.clear_sleep_pending(old.user_id, [old.id])

    def history(self, memory_id: str, user_id: str) -> list[HistoryEntry]:
        self._check_open()
        check_id("user_id", user_id)
        check_id("memory_id", memory_id)
        rows = self._journal.history(memory_id, user_id)
        if not rows:
            raise NotFoundError(f"memory {memory_id} not found")
        return rows

    def forget_user(self, user_id: str) -> dict[str, int]:
        """Remove every record, vector and journal row of this user."""
        self._check_open()
        check_id("user_id", user_id)
        with self._lock:
            self._buffers.pop(user_id, None)
            self._inflight.pop(user_id, None)
            self._speakers.pop(user_id, None)
            memories = self._index.delete_user(user_id)
            self._index.flush()
            turns = self._journal.forget_user(user_id)
        return {"memories": memories, "turns": turns}

    # -- sleep time -------------------------------------------------------------------------
    def sleep(self, user_id: str | None = None) -> SleepReport:
        """Offline update: reconcile entries added since the last sleep with their older neighbours."""
        self._check_open()
        if user_id is not None:
            check_id("user_id", user_id)
        with self._lock:
            report = self._sleeper.run(self._journal.sleep_pending(user_id))
            self._persist_usage()
        return report

    # -- statistics -------------------------------------------------------------------------
    def stats(self, user_id: str | None = None) -> dict[str, Any]:
        """Token statistics per stage (seed 002's shape), latency per stage and counts.

        With ``user_id``, counts are that user's only; without, they cover the whole store.
        """
        self._check_open()
        out = self.usage.snapshot()
        if user_id is not None:
            check_id("user_id", user_id)
            pending = len(self._buffers[user_id].pending_turn_ids()) if user_id in self._buffers else 0
            out["counts"] = {
                "memories": self._index.count(user_id),
                "turns": self._journal.count_turns(user_id),
                "pending_turns": pending,
            }
        else:
            out["counts"] = {
                "turns": self._journal.count_turns(),
                "pending_turns": sum(len(b.pending_turn_ids()) for b in self._buffers.values()),
            }
        return out

