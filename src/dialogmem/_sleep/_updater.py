"""Carries out sleep-time update for one user: queues, decisions (in ``_sleep/``), one change set.

A user's new entries come from the journal (records with their stored vectors); their update
queues from one batched dense query; the decisions from the updater (in parallel); and the whole
outcome — rewritten targets, deleted or absorbed entries, the emptied sleep queue — is one
``ChangeSet`` for the change writer, so it commits in one transaction.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from .._backends import use_llm
from .._changes import ChangeSet, MemoryRemoval, MemoryWrite
from .._journal import MemoryRows
from .._models import LlamaCppLLM
from .._models._llm_base import LLMClient
from .._settings import SleepSettings
from .._store import VectorIndex
from .._sync._writer import ChangeWriter
from .._types import Event, MemoryRecord
from .._write._records import edited
from ..types import SleepReport
from . import LLMUpdater, RuleUpdater, UpdateDecision, Updater, apply_decision, build_update_queues, plan_sleep
from ._queue import UpdateQueues
from ._supersede import Supersession, find_supersessions, superseded_record

log = logging.getLogger(__name__)

#: how many of a user's newest current memories the LLM-free change detector compares new entries with
SUPERSEDE_POOL = 20_000


def make_updater(settings: SleepSettings, llm: LLMClient) -> Updater:
    rules = RuleUpdater()
    if use_llm("sleep.updater", settings.updater, llm):
        return LLMUpdater(llm, fallback=rules)
    return rules


@dataclass
class SleepRunner:
    index: VectorIndex
    journal: MemoryRows
    writer: ChangeWriter
    llm: LLMClient
    settings: SleepSettings

    def __post_init__(self) -> None:
        self.updater = make_updater(self.settings, self.llm)

    def run_user(self, user_id: str, ids: list[str]) -> SleepReport:
        """Reconcile ``ids`` (this user's entries added or changed since the last sleep)."""
        started = time.perf_counter()
        calls_before = self.llm.usage.get("llm", "update").calls
        report = SleepReport(users=1)
        records = self.journal.memories(user_id, ids=ids, limit=len(ids) or 1)
        vectors = self.journal.vectors(user_id, [r.id for r in records])
        new_entries = [(r, vectors[r.id]) for r in records if r.id in vectors]
        report.new_entries = len(new_entries)
        queues = build_update_queues(self.index, user_id, new_entries, top_k=self.settings.top_k,
                                     keep_top_n=self.settings.keep_top_n, threshold=self.settings.score_threshold)
        report.targets = len(queues)
        # an in-process llama.cpp model serves one call at a time: more workers would only queue
        workers = 1 if isinstance(self.llm, LlamaCppLLM) else self.settings.max_workers
        decisions = plan_sleep(queues, self.updater, max_workers=workers)
        changes = self._changes(user_id, queues, decisions, report)
        if isinstance(self.updater, RuleUpdater) and self.settings.supersede_rules:  # an LLM updater decides itself
            self._supersede(user_id, records, changes, report)
        # A changed entry does not re-enter the queue: otherwise every sleep would revisit it.
        changes.sleep_done = list(ids)
        self.writer.apply(changes)
        report.llm_calls = self.llm.usage.get("llm", "update").calls - calls_before
        report.seconds = round(time.perf_counter() - started, 3)
        log.info("sleep %s: %d new, %d targets, %d updated, %d deleted, %d merged", user_id,
                 report.new_entries, report.targets, report.updated, report.deleted, report.merged)
        return report

    def _supersede(self, user_id: str, new: list[MemoryRecord], changes: ChangeSet, report: SleepReport) -> None:
        """The LLM-free change detector (``_supersede``): the user's current memories (the newest
        ``supersede_pool`` of them) that the new entries replace, rewritten with their validity
        closed. A memory this sleep already rewrites or removes is left to the next sleep."""
        if not new:
            return
        pool = self.journal.memories(user_id, limit=SUPERSEDE_POOL)
        touched = {w.record.id for w in changes.writes} | {r.record.id for r in changes.removals}
        found: list[Supersession] = [s for s in find_supersessions(new, pool) if s.target_id not in touched]
        if not found:
            return
        by_id = {r.id: r for r in [*pool, *new]}
        vectors = self.journal.vectors(user_id, [s.target_id for s in found])
        now = time.time()
        for s in found:
            target = by_id[s.target_id]
            changes.writes.append(MemoryWrite(
                record=superseded_record(target, s, now=now), event=Event.UPDATE,
                actor=f"sleep:rule:superseded-by:{s.successor_id}", old=target, sleep_pending=False,
                vector=vectors.get(target.id)))
            report.superseded += 1

    @staticmethod
    def _changes(user_id: str, queues: UpdateQueues, decisions: list[UpdateDecision],
                 report: SleepReport) -> ChangeSet:
        records = queues.records()
        payloads = queues.payloads()
        now = time.time()
        changes = ChangeSet(user_id)
        for d in decisions:
            target = records[d.target_id]
            new = apply_decision(target, d, records, now=now)
            if new is None:
                changes.removals.append(MemoryRemoval(
                    record=target, actor=f"sleep:{d.method}:superseded-by:{','.join(d.source_ids)}"))
                report.deleted += 1
                continue
            if new is target:
                report.ignored += 1
                continue
            if d.action == "supersede":
                if not target.is_current:  # already replaced: its link stays as it is
                    report.ignored += 1
                    continue
                changes.writes.append(MemoryWrite(
                    record=new, event=Event.UPDATE, actor=f"sleep:{d.method}:superseded-by:{new.superseded_by}",
                    old=target, sleep_pending=False))
                report.superseded += 1
                continue
            changes.writes.append(MemoryWrite(
                record=_refreshed(new, target, payloads.get(target.id, []), now), event=Event.UPDATE,
                actor=f"sleep:{d.method}", old=target, sleep_pending=False))
            report.updated += 1
            for absorbed in d.absorbed_ids:
                changes.removals.append(MemoryRemoval(record=records[absorbed],
                                                      actor=f"sleep:{d.method}:merged-into:{target.id}"))
                report.merged += 1
        return changes


def _refreshed(new: MemoryRecord, target: MemoryRecord, queue: list[dict[str, float | str]],
               now: float) -> MemoryRecord:
    """The decided record with keywords and entities that follow its new text, and its queue."""
    merged = edited(target, new.memory, now=now)
    return new.model_copy(update={
        "keywords": list(dict.fromkeys([*merged.keywords, *new.keywords])),
        "entities": list(dict.fromkeys([*merged.entities, *new.entities])),
        "update_queue": queue})
