"""``Memory``: the facade. It validates what callers pass, then hands the work to the part that does it.

Decisions live in the feature folders; writing lives in the change writer (``_sync._writer``); the write
path's orchestration in ``_write._ingest``; sleep time in ``_sleep``; files in and out in ``_transfer``;
opening, checking and repairing the store in ``_facade._open`` and ``_sync._repair``. This one class holds
every public verb: each checks what it is given (``_input``) and hands the work to the part that does it.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from .._apikeys import ApiKey
from .._changes import ChangeSet, MemoryRemoval, MemoryWrite
from .._config import Config
from .._errors import ConfigError, InputError, NotFoundError, StoreError
from .._files import Destination
from .._graph import LTMGraph
from .._input import (
    MAX_CONTAINS_CHARS,
    check_bounded_text,
    check_id,
    check_importable,
    check_int,
    check_metadata,
    check_text,
    to_turns,
)
from .._journal import IndexState, TurnStatus
from .._models import LLMClient
from .._models._factory import embedder_identity
from .._read._graphview import read_audit, read_graph
from .._sleep._cycle import SleepCycle
from .._text._timeparse import parse_timestamp
from .._transfer import (
    CONVERSATION_CHUNK,
    Conversation,
    Exporter,
    Importer,
    chat_logs,
    message_chunks,
    read_conversation_source,
    with_content_ids,
)
from .._types import (
    AddResult,
    Event,
    ExportReport,
    HistoryEntry,
    ImportReport,
    MemoryRecord,
    Message,
    QuarantinedTurn,
    SearchHit,
    SearchResult,
    SourceTurn,
    Turn,
)
from .._usage import answer_summary
from .._write._records import coerce_filter, edited, matches
from ..types import Answer, AnswerMode, GraphAudit, IndexFilter, RepairReport, SleepReport
from ._lifecycle import CallGate, StoreLock
from ._open import Parts, finish_repair, open_parts, prepare_repair, rebuild_index

log = logging.getLogger(__name__)

Messages = str | dict[str, Any] | Message | Sequence[str | dict[str, Any] | Message]
When = str | float | datetime


class Memory:
    """Long-term memory for one store (a data directory), shared by any number of users.

    Every id-based call takes ``user_id`` and only ever sees that user's records: another user's
    id behaves as "not found".
    """

    def __init__(self, config: Config | None = None, *, llm_client: LLMClient | None = None,
                 **overrides: Any) -> None:
        """``config`` (or keyword overrides of it, e.g. ``data_dir=...``, ``read_only=True``);
        ``llm_client`` replaces the client that ``config.llm`` would build (bring your own, or a
        ``ScriptedLLM`` in tests)."""
        if config is None:
            config = Config.load(**overrides)
        elif not isinstance(config, Config):
            raise ConfigError(f"config must be a dialogmem Config, got {type(config).__name__}")
        elif overrides:
            config = config.with_overrides(**overrides)
        self.config = config
        self.data_dir = Path(config.data_dir).expanduser()
        self._gate = CallGate()
        self._speakers: dict[str, list[str]] = {}
        self._speakers_lock = threading.Lock()
        self._store_lock: StoreLock | None = None
        if not config.read_only:
            try:
                self.data_dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the data directory {self.data_dir}: {exc.strerror}") from exc
            if not config.stateless:  # a shared journal and index: other processes serve this store too
                self._store_lock = StoreLock(self.data_dir / ".lock")
        try:
            self._parts: Parts = open_parts(config, self.data_dir, llm_client)
            self.config = self._parts.config  # as opened: embedder.quantize "auto" resolved for this store
            self._replay_pending()
        except BaseException:
            if hasattr(self, "_parts"):
                self._parts.close()
            if self._store_lock is not None:
                self._store_lock.release()
            raise

    @classmethod
    def repair(cls, config: Config | None = None, *, from_index: bool = False, **overrides: Any) -> RepairReport:
        """``dialogmem repair``: move a damaged or doubtful Edge index aside (never deleted) and build
        it again from the journal; with ``from_index``, first rebuild a missing journal's memory rows
        from the surviving index. The store must not be open elsewhere."""
        config = Config.load(**overrides) if config is None else config.with_overrides(**overrides)
        report = prepare_repair(config, from_index=from_index)
        with cls(config) as mem:  # opening fills a missing index from the journal
            return finish_repair(mem._parts, config, report)

    # -- lifecycle ----------------------------------------------------------------------------
    def __enter__(self) -> Memory:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Write pending counters, flush and close the index and the journal. Turns still waiting
        for their batch stay journaled and are processed later. Idempotent; waits for calls in flight."""
        if not self._gate.close():
            return
        try:
            self._parts.close()
        finally:
            if self._store_lock is not None:
                self._store_lock.release()

    def _call(self) -> AbstractContextManager[None]:
        return self._gate.call()

    def _writable(self) -> None:
        if self.config.read_only:
            raise StoreError(f"store {self.data_dir} is open read-only")

    def _replay_pending(self) -> None:
        """Turns journaled but not yet processed (a crash, or a batch still filling) get their due batch."""
        if self.config.read_only:
            return
        for user_id in self._parts.journal.pending_users():
            self._parts.ingest.process(user_id, force=False)

    # -- write path ---------------------------------------------------------------------------
    def add(self, messages: Messages, user_id: str, *, session_id: str | None = None,
            timestamp: When | None = None, metadata: dict[str, Any] | None = None,
            agent_id: str | None = None, flush: bool = False) -> AddResult:
        """Journal the messages, then run them through the write path.

        Returns once every message is durably journaled: from then on it survives a crash. A message
        whose ``id`` is already journaled (a retry) is accepted again and changes nothing. The
        memories of the call's messages are returned (for a retry, the live ones its messages made
        the first time: a retry answers as the first try did); turns still waiting for their batch
        are counted in ``pending_turns`` (``flush=True`` or :meth:`flush` processes them now).
        """
        with self._call():
            self._writable()
            check_id("user_id", user_id)
            for name, value in (("session_id", session_id), ("agent_id", agent_id)):
                if value is not None:
                    check_id(name, value)
            w = self.config.write
            turns = to_turns(messages, user_id, session_id=session_id, timestamp=timestamp, metadata=metadata,
                             agent_id=agent_id, max_chars=w.max_turn_chars, max_metadata_bytes=w.max_metadata_bytes)
            outcome = self._parts.ingest.add(user_id, turns, flush=bool(flush))
            self._remember_speakers(user_id, {t.speaker for t in turns})
            return AddResult(turn_ids=[t.id for t in turns],
                             memories=[SearchHit.from_record(r, 1.0) for r in outcome.stored],
                             pending_turns=self._parts.ingest.pending_count(user_id),
                             quarantined=outcome.quarantined)

    def add_conversation(self, conversation: Conversation, user_id: str, *, flush: bool = True,
                         progress: Callable[[int, int], None] | None = None) -> AddResult:
        """Add a whole conversation: a JSON file path, a list of messages, or a LoCoMo-format
        conversation (sessions keep their ids and dates). LLM-free with the plain rule extractor, up to
        ``CONVERSATION_CHUNK`` messages of a session go through one ``add`` (one embedding list, one
        journal transaction; the same memories as one message a call); otherwise message by message,
        as a live chat arrives. ``progress`` is called with (turns done, turns in all) after each call."""
        batches = read_conversation_source(conversation)
        total = sum(len(b.messages) for b in batches)
        out = AddResult(turn_ids=[])
        done = 0
        size = CONVERSATION_CHUNK if self._parts.stages.whole_lists else 1
        for batch in batches:
            for part in message_chunks(batch.messages, size):
                got = self.add(part, user_id, session_id=batch.session_id, timestamp=batch.timestamp)
                out.turn_ids += got.turn_ids
                out.memories += got.memories
                out.quarantined += got.quarantined
                done += len(part)
                if progress is not None:
                    progress(done, total)
        if flush:
            out.memories += self.flush(user_id)
        out.pending_turns = self.stats(user_id)["counts"]["pending_turns"]
        return out

    def flush(self, user_id: str | None = None) -> list[SearchHit]:
        """Process every pending turn now (of one user, or of all)."""
        with self._call():
            self._writable()
            users = [check_id("user_id", user_id)] if user_id is not None else self._parts.journal.pending_users()
            stored = []
            for uid in users:
                stored += self._parts.ingest.process(uid, force=True).stored
            return [SearchHit.from_record(r, 1.0) for r in stored]

    def update(self, memory_id: str, text: str, user_id: str, *, actor: str = "user",
               metadata: dict[str, Any] | None = None) -> MemoryRecord:
        """Replace a memory's text: re-embedded, keywords and entities follow it, version + 1, history row.
        ``metadata``, when given, replaces the memory's metadata in the same change."""
        with self._call():
            self._writable()
            check_bounded_text("text", text, self.config.write.max_turn_chars, "write.max_turn_chars")
            changes: dict[str, Any] = {}
            if metadata is not None:
                changes["metadata"] = check_metadata("metadata", metadata, self.config.write.max_metadata_bytes)
            with self._parts.ingest.user_lock(user_id):
                old = self._get(memory_id, user_id)
                new = edited(old, text, now=time.time(), **changes)
                self._parts.writer.apply(ChangeSet(user_id, writes=[MemoryWrite(
                    record=new, event=Event.UPDATE, actor=check_id("actor", actor), old=old)]))
            return new

    def delete(self, memory_id: str, user_id: str, *, actor: str = "user") -> None:
        """Remove a memory (active, or evicted from MTM) from search and from the evidence of the LTM
        graph (its row and history stay in the journal)."""
        with self._call():
            self._writable()
            check_id("actor", actor)
            with self._parts.ingest.user_lock(user_id):
                old = self._get(memory_id, user_id, include_evicted=True)
                # with its LTM evidence links: what rested only on this memory loses its support
                self._parts.consolidator.apply_removal(ChangeSet(user_id, removals=[MemoryRemoval(record=old,
                                                                                                  actor=actor)]))

    def forget_user(self, user_id: str) -> dict[str, int]:
        """Remove every record, vector and journal row of this user, and what this process's caches
        hold of them: their compressed turns and turn-part vectors, and every user's cached query
        vectors (those are kept by text, not by user). Other processes' caches are their own."""
        with self._call():
            self._writable()
            check_id("user_id", user_id)
            with self._parts.ingest.user_lock(user_id):
                self._parts.index.check_room()  # a full disk refuses before the journal forgets anything
                self._parts.access.forget(user_id)
                self._parts.consolidator.forget(user_id)  # first: no evidence outlives its user
                counts = self._parts.journal.forget_user(user_id)
                self._parts.index.delete_user(user_id)
                self._parts.index.flush()
                self._parts.stages.forget(user_id)
                # the query vectors are shared by text, not owned: all go (a later query embeds again)
                queries = getattr(self._parts.embedder, "query_cache", None)
                if queries is not None:
                    queries.clear()
            self._forget_speakers([user_id])
            return counts

    # -- read path ----------------------------------------------------------------------------
    def search(self, query: str, user_id: str, *, limit: int | None = None,
               filters: IndexFilter | dict[str, Any] | None = None, reference_time: When | None = None,
               recent_context: list[str] | None = None, expand: bool = False) -> SearchResult:
        """Plan, retrieve (one hybrid query per view), select; hits cite their turns. ``expand``: each
        hit also carries those turns' text (``SearchHit.sources``, HyMem's L2 under the L1 memory)."""
        with self._call():
            check_id("user_id", user_id)
            check_bounded_text("query", query, self.config.read.max_query_chars, "read.max_query_chars")
            if limit is not None:
                check_int("limit", limit, 1, 200)
            context = [check_bounded_text("recent_context line", line, self.config.read.max_query_chars,
                                          "read.max_query_chars") for line in (recent_context or [])][-6:]
            return self._parts.search.search(
                query, user_id, limit=limit, flt=coerce_filter(filters),
                reference_time=parse_timestamp(reference_time) if reference_time is not None else None,
                recent_context=context, speakers=self._known_speakers(user_id), expand=expand)

    def sources(self, memory_id: str, user_id: str, *, around: int = 0) -> list[SourceTurn]:
        """The raw turns (L2) a memory of this user was made from, oldest first (``NotFoundError`` for
        an unknown or another user's memory id; evicted memories keep their sources). ``around``
        (0-20): also this user's turns just before and after each source, in journal order (the
        sources in their conversation; tell them apart by the memory's ``source_turn_ids``)."""
        with self._call():
            check_int("around", around, 0, 20)
            record = self._get(memory_id, user_id, include_evicted=True)
            turns = self._parts.journal.turns(user_id, ids=record.source_turn_ids)
            if around:
                near = {t.id: t for t in turns}
                for t in turns:
                    near.update((n.id, n) for n in self._parts.journal.turns_before(user_id, t.seq, around))
                    near.update((n.id, n) for n, _, _ in self._parts.journal.turn_rows(
                        user_id, after_seq=t.seq, limit=around))
                turns = sorted(near.values(), key=lambda t: t.seq)
            return [SourceTurn.from_turn(t) for t in turns]

    def answer(self, query: str, user_id: str, *, mode: AnswerMode | None = None, max_rounds: int | None = None,
               limit: int | None = None, reference_time: When | None = None) -> Answer:
        """Answer from this user's memories with the configured LLM (seed 004 HyMem): a light round
        over the top ``limit`` memories; when it reports missing information (``mode="auto"``), or
        with ``mode="deep"``, deep rounds that trace the relevant memories back to their raw turns,
        with reflection between rounds (at most ``max_rounds``). Cites only memory and turn ids the
        model was shown. Defaults: ``config.answer``."""
        check_id("user_id", user_id)
        check_bounded_text("query", query, self.config.read.max_query_chars, "read.max_query_chars")
        chosen = mode if mode is not None else self.config.answer.mode
        if chosen not in ("auto", "light", "deep"):
            raise InputError(f"mode must be 'auto', 'light' or 'deep', got {chosen!r}")
        for name, value, hi in (("limit", limit, 200), ("max_rounds", max_rounds, 5)):
            if value is not None:
                check_int(name, value, 1, hi)
        ref = parse_timestamp(reference_time) if reference_time is not None else None

        def search(q: str, k: int) -> list[SearchHit]:
            return self.search(q, user_id, limit=k, reference_time=ref).hits

        with self._call():
            return self._parts.answerer.answer(query, search, lambda ids: self._turns(user_id, ids), mode=chosen,
                                               max_rounds=max_rounds, light_k=limit, reference_time=ref)

    def _turns(self, user_id: str, ids: list[str]) -> list[Turn]:
        return self._parts.journal.turns(user_id, ids=ids)

    def get(self, memory_id: str, user_id: str, *, include_evicted: bool = True) -> MemoryRecord:
        """One memory of this user (``NotFoundError`` for an unknown or another user's id)."""
        with self._call():
            return self._get(memory_id, user_id, include_evicted=include_evicted)

    def _get(self, memory_id: str, user_id: str, *, include_evicted: bool = False) -> MemoryRecord:
        check_id("user_id", user_id)
        check_id("memory_id", memory_id)
        statuses = ("active", "evicted") if include_evicted else ("active",)
        self._parts.writer.wait_counters()  # counts being written are in neither the log nor the journal
        record = self._parts.journal.memory(user_id, memory_id, statuses=statuses)
        if record is None:
            raise NotFoundError(f"memory {memory_id} not found")
        pending = self._parts.access.pending(user_id, memory_id)
        if pending is not None:
            record = record.model_copy(update={"access_count": record.access_count + pending[0],
                                               "last_accessed": max(record.last_accessed or 0.0, pending[1])})
        return record

    def get_all(self, user_id: str, *, limit: int = 100, offset: str | None = None,
                filters: IndexFilter | dict[str, Any] | None = None,
                include_evicted: bool = False, contains: str | None = None) -> list[MemoryRecord]:
        """This user's memories ordered by id, ``limit`` at a time (pass the last id as ``offset``);
        ``contains``: only those whose text holds it (case-insensitive for ASCII letters; the
        journal scans, no index needed)."""
        with self._call():
            check_id("user_id", user_id)
            check_int("limit", limit, 1, 10_000)
            if offset is not None:
                check_id("offset", offset)
            if contains is not None:
                check_bounded_text("contains", contains, MAX_CONTAINS_CHARS, "the search-text limit")
            flt = coerce_filter(filters)
            statuses = ("active", "evicted") if include_evicted else ("active",)
            out: list[MemoryRecord] = []
            after = offset
            while len(out) < limit:
                page = self._parts.journal.memories(user_id, statuses=statuses, after_id=after, limit=limit,
                                                    contains=contains)
                out += [r for r in page if matches(r, flt)]
                if len(page) < limit:
                    break
                after = page[-1].id
            return out[:limit]

    def history(self, memory_id: str, user_id: str) -> list[HistoryEntry]:
        with self._call():
            check_id("user_id", user_id)
            check_id("memory_id", memory_id)
            rows = self._parts.journal.history(memory_id, user_id)
            if not rows:
                raise NotFoundError(f"memory {memory_id} not found")
            return rows

    # -- sleep time ---------------------------------------------------------------------------
    def sleep(self, user_id: str | None = None) -> SleepReport:
        """Offline work: reconcile entries added since the last sleep with their older neighbours;
        bound each user's MTM to ``sleep.mtm_capacity`` (evicted items stay readable with ``get``);
        then, with ``sleep.ltm``, one consolidation cycle of the shared LTM graph (over every user's
        new and evicted items, whichever ``user_id`` is given: the graph is shared)."""
        with self._call():
            self._writable()
            scope = check_id("user_id", user_id) if user_id else None
            p = self._parts
            return SleepCycle(p.journal, p.writer, p.sleeper, p.evictor, p.consolidator, p.ingest.user_lock,
                              self.config.sleep, self.config.store.index_min_points).run(scope)

    def graph(self, user_id: str | None = None, *, query: str | None = None, limit: int = 100) -> LTMGraph:
        """The shared LTM graph: live nodes (strongest evidence first) and the live edges between
        them. Without ``user_id``: only what at least ``sleep.ltm_min_users`` distinct users' memories
        support (what every user may see); ``user_id``: only what this user's memories support
        (``evidence`` lists their ids); ``query``: the nodes matching it and their one-hop neighbours."""
        with self._call():
            check_int("limit", limit, 1, 10_000)
            key = self._parts.consolidator.subject_key(check_id("user_id", user_id)) if user_id is not None else None
            if query is not None:
                check_bounded_text("query", query, self.config.read.max_query_chars, "read.max_query_chars")
            return read_graph(self._parts.journal, self._parts.search.graph, subject_key=key, query=query,
                              limit=limit, min_score=self.config.sleep.ltm_min_score)

    def graph_audit(self) -> GraphAudit:
        """Admin view of the shared graph (``dialogmem graph --audit``): every live node and edge with
        its number of distinct supporting users and whether it is visible to everyone (at least
        ``sleep.ltm_min_users`` supporters, and for an edge both ends visible) or only to its
        supporters. Holds no user id or subject key."""
        with self._call():
            return read_audit(self._parts.journal, self.config.sleep.ltm_min_users)

    # -- statistics ---------------------------------------------------------------------------
    def stats(self, user_id: str | None = None) -> dict[str, Any]:
        """Token statistics per stage (seed 002's shape), latency per stage and counts.

        With ``user_id``, counts are that user's only; without, they cover the whole store.
        """
        with self._call():
            if user_id is not None:
                check_id("user_id", user_id)
            j = self._parts.journal
            out = self._parts.usage.snapshot()
            out["counts"] = {
                "memories": j.count_memories(user_id),
                "evicted": j.count_memories(user_id, status="evicted"),
                "turns": j.count_turns(user_id),
                "pending_turns": j.count_turns(user_id, TurnStatus.PENDING),
                "quarantined_turns": j.count_turns(user_id, TurnStatus.QUARANTINED),
            }
            out["counts"].update(self._graph_counts(user_id))
            out["answers"] = answer_summary(out.get("answer", {}))
            if user_id is None:
                out["counts"]["index_failed"] = j.count_index_state(IndexState.FAILED)
            return out

    # -- API keys (the REST and MCP servers) --------------------------------------------------
    def verify_key(self, key: str) -> ApiKey | None:
        """The active API key this text proves, or None (malformed, unknown, wrong secret, revoked).
        Keys are made with ``dialogmem keys create``; only their SHA-256 is stored."""
        with self._call():
            return self._parts.journal.verify_key(key)

    def _graph_counts(self, user_id: str | None) -> dict[str, int]:
        """Live LTM nodes and edges (store-wide: the graph is shared); with a user, also how many
        evidence links that user's memories hold."""
        counts = self._parts.journal.graph_counts()
        if user_id is None:
            return counts
        key = self._parts.consolidator.subject_key(user_id)
        return {"ltm_nodes": counts["ltm_nodes"], "ltm_edges": counts["ltm_edges"],
                "ltm_links": len(self._parts.journal.graph_links(key))}

    # -- operators and migrations -------------------------------------------------------------
    def import_records(self, records: Iterable[MemoryRecord | dict[str, Any]], *,
                       vectors: np.ndarray | None = None) -> int:
        """Store ready-made memory records (a migration, a benchmark's precomputed data) through the
        change writer; ``vectors`` (one row per record) skip the embedding. Returns how many."""
        with self._call():
            self._writable()
            items = [check_importable(r, self.config.write.max_metadata_bytes) for r in records]
            if vectors is not None and len(vectors) != len(items):
                raise InputError(f"{len(items)} records but {len(vectors)} vectors")
            by_user: dict[str, ChangeSet] = {}
            owners = self._parts.journal.memory_owners([r.id for r in items])
            for i, r in enumerate(items):
                owner = owners.get(r.id)
                if owner is not None and owner != r.user_id:
                    raise InputError(f"memory id {r.id} already belongs to another user")
                vector = None if vectors is None else np.asarray(vectors[i], dtype=np.float32)
                by_user.setdefault(r.user_id, ChangeSet(r.user_id)).writes.append(
                    MemoryWrite(record=r, event=Event.ADD, actor="import", vector=vector))
            for changes in by_user.values():
                self._parts.writer.apply(changes)
            return len(items)

    def derived_id(self, user_id: str, name: str) -> str:
        """A memory id for ``name`` in ``user_id``'s space (for ``import_records``: a LangGraph item's
        id is its namespace and key). The same store, user and name always give the same id; another
        user's name gives another id, and nobody without the store's secret (the journal's
        ``store_id``, never served) can compute one, so no user can occupy or probe the id that a
        name of another user will get."""
        with self._call():
            check_id("user_id", user_id)
            check_text("name", name)
            secret = (self._parts.journal.meta("store_id") or "").encode()
            message = b"derived-id\x00" + user_id.encode() + b"\x00" + name.encode()
            digest = hmac.new(secret, message, hashlib.sha256).digest()
            return str(uuid.UUID(bytes=digest[:16], version=5))

    def quarantined(self, user_id: str | None = None) -> list[QuarantinedTurn]:
        """Accepted turns whose processing failed (of one user, or all), with the reason."""
        with self._call():
            return [q for _, q in self._parts.journal.quarantined(check_id("user_id", user_id) if user_id else None)]

    def retry_quarantined(self, user_id: str, turn_ids: Sequence[str] | None = None) -> AddResult:
        """Put quarantined turns (all of this user's, or these) back in the write path and flush them."""
        with self._call():
            self._writable()
            check_id("user_id", user_id)
            ids = list(turn_ids) if turn_ids is not None else [
                q.turn.id for _, q in self._parts.journal.quarantined(user_id)]
            moved = self._parts.journal.set_turn_status(user_id, ids, TurnStatus.PENDING,
                                                        only_from=TurnStatus.QUARANTINED)
            outcome = self._parts.ingest.process(user_id, force=True)
            log.info("retried %d quarantined turns of %s", moved, user_id)
            return AddResult(turn_ids=ids, memories=[SearchHit.from_record(r, 1.0) for r in outcome.stored],
                             quarantined=outcome.quarantined)

    def drop_quarantined(self, user_id: str, turn_ids: Sequence[str]) -> int:
        """Give up on quarantined turns: they stay journaled (raw text kept), marked dropped."""
        with self._call():
            self._writable()
            check_id("user_id", user_id)
            return self._parts.journal.set_turn_status(user_id, list(turn_ids), TurnStatus.DROPPED,
                                                       only_from=TurnStatus.QUARANTINED)

    def rebuild_index(self) -> RepairReport:
        """Build the vector index again from the journal (the old Edge directory is moved aside)."""
        with self._call():
            self._writable()
            return rebuild_index(self._parts)

    # -- data in and out as files (``_transfer``) ----------------------------------------------
    def export(self, destination: Destination, user_id: str | None = None, *, all_users: bool = False,
               vectors: bool = True) -> ExportReport:
        """Write one user's records (or, with ``all_users``, every user's) to ``destination`` (a path,
        written to a temporary file and renamed when complete, or an open text file): raw turns,
        quarantined turns, memories of every status with their ids, sources, times, metadata and
        history, and with ``vectors`` their vectors and the embedder that wrote them."""
        with self._call():
            if (user_id is None) == (not all_users):
                raise InputError("export takes a user_id or all_users=True (not both)")
            users = [check_id("user_id", user_id)] if user_id is not None else sorted(
                self._parts.journal.store_identities()[1])
            if not self.config.read_only:
                self._parts.writer.flush_counters()  # access counts still in memory go out too
            return Exporter(self._parts.journal, self._embedder_id()).export(destination, users, vectors=vectors)

    def import_(self, source: Destination) -> ImportReport:
        """Add the records of an export file (``export``'s format, or one made by an importer of
        another layer's data). Every line is validated first, against the format and the store; a
        bad line is an ``InputError`` naming it, and nothing of the file is written. Rows the store
        holds already (same ids) are left as they are. Vectors are used when the file's embedder is
        the store's, and computed again otherwise."""
        with self._call():
            self._writable()
            report = self._importer().import_file(source)
            self._forget_speakers(report.users)  # imported turns may bring new speakers
            return report

    def import_mem0(self, memories: Mapping[str, Any] | Sequence[Mapping[str, Any]], user_id: str, *,
                    history: Mapping[str, Sequence[Mapping[str, Any]]] | None = None) -> ImportReport:
        """mem0's ``get_all`` output of one user (and ``history``: memory id -> mem0's ``history`` rows),
        imported as ``import_`` does. mem0 keeps no raw turns: these are memories without L2 sources
        (``without_sources`` lists them; ``metadata.imported_from`` is ``"mem0"``)."""
        check_id("user_id", user_id)
        with self._call():
            self._writable()
            return self._importer().import_mem0(memories, user_id, history=history)

    def import_chats(self, source: str | Path, user_id: str) -> AddResult:
        """Plain chat logs through the write path (their memories are made here, with L2 sources): a
        JSON file holding one OpenAI ``messages`` list (or ``{"messages": [...]}``), or JSON Lines
        holding one conversation per line. Each conversation is a session (``<file stem>-<n>``). Every
        conversation is read and checked (as ``add`` checks messages) before the first is added, so a
        bad one adds nothing. A message's id comes from its conversation's content and its place in
        it: importing a file again, or a corrected one, adds no conversation twice."""
        check_id("user_id", user_id)
        path = Path(source)
        conversations = [with_content_ids(messages) for messages in chat_logs(path)]
        w = self.config.write
        for n, messages in enumerate(conversations, 1):
            try:
                to_turns(messages, user_id, session_id=f"{path.stem}-{n}", timestamp=None, metadata=None,
                         agent_id=None, max_chars=w.max_turn_chars, max_metadata_bytes=w.max_metadata_bytes)
            except InputError as exc:
                raise InputError(f"{path.name}, conversation {n}: {exc}") from None
        out = AddResult(turn_ids=[])
        for n, messages in enumerate(conversations, 1):
            got = self.add(messages, user_id, session_id=f"{path.stem}-{n}", flush=True)
            out.turn_ids += got.turn_ids
            out.memories += got.memories
            out.quarantined += got.quarantined
        return out

    def _embedder_id(self) -> str:
        return self._parts.journal.meta("embedder") or embedder_identity(self.config.embedder)

    def _importer(self) -> Importer:
        p = self._parts
        return Importer(p.journal, p.writer, p.embedder, self._embedder_id(), self.config.write, p.ingest.user_lock,
                        self.config.store.index_min_points)

    def _known_speakers(self, user_id: str) -> list[str]:
        with self._speakers_lock:
            known = self._speakers.get(user_id)
            if known is None:
                known = self._speakers[user_id] = self._parts.journal.speakers(user_id)
            return list(known)

    def _remember_speakers(self, user_id: str, speakers: set[str]) -> None:
        with self._speakers_lock:
            known = self._speakers.get(user_id)
            if known is not None:
                known += sorted(s for s in speakers if s not in known)

    def _forget_speakers(self, users: Sequence[str]) -> None:
        with self._speakers_lock:
            for uid in users:
                self._speakers.pop(uid, None)
