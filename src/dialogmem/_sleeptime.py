"""Carries out sleep-time update for one store: queues, decisions (in ``sleep/``), then the I/O.

Applying a decision re-embeds the new text, rewrites the index point and writes a history row;
duplicates absorbed by the rule updater are deleted with a history row that names their survivor.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from pydantic import BaseModel

from ._backends import use_llm
from ._journal import Journal
from ._models import LlamaCppLLM
from ._models._embed_base import Embedder
from ._models._llm_base import LLMClient
from ._settings import SleepSettings
from ._sleep import LLMUpdater, RuleUpdater, Updater, apply_decision, build_update_queues, plan_sleep
from ._store import IndexPoint, VectorIndex
from ._types import Event, HistoryEntry, MemoryRecord

log = logging.getLogger(__name__)


class SleepReport(BaseModel):
    """What one ``Memory.sleep`` call examined and changed."""

    users: int = 0
    new_entries: int = 0
    targets: int = 0
    updated: int = 0
    deleted: int = 0
    merged: int = 0
    ignored: int = 0
    llm_calls: int = 0
    seconds: float = 0.0


def make_updater(settings: SleepSettings, llm: LLMClient) -> Updater:
    rules = RuleUpdater()
    if use_llm("sleep.updater", settings.updater, llm):
        return LLMUpdater(llm, fallback=rules)
    return rules


@dataclass
class SleepRunner:
    index: VectorIndex
    journal: Journal
    embedder: Embedder
    llm: LLMClient
    settings: SleepSettings

    def run(self, pending: dict[str, list[str]]) -> SleepReport:
        """``pending``: user -> ids added or changed since that user's last sleep."""
        started = time.perf_counter()
        calls_before = self.llm.usage.get("llm", "update").calls
        updater = make_updater(self.settings, self.llm)
        report = SleepReport()
        for user_id, ids in pending.items():
            report.users += 1
            self._run_user(user_id, ids, updater, report)
        report.llm_calls = self.llm.usage.get("llm", "update").calls - calls_before
        report.seconds = round(time.perf_counter() - started, 3)
        return report

    def _run_user(self, user_id: str, ids: list[str], updater: Updater, report: SleepReport) -> None:
        new_entries = [(rec, vec) for rec, vec in self.index.retrieve(ids, user_id, with_vectors=True)
                       if vec is not None]
        report.new_entries += len(new_entries)
        queues = build_update_queues(
            self.index, user_id, new_entries, top_k=self.settings.top_k,
            keep_top_n=self.settings.keep_top_n, threshold=self.settings.score_threshold,
        )
        report.targets += len(queues)
        # an in-process llama.cpp model serves one call at a time: more workers would only queue
        workers = 1 if isinstance(self.llm, LlamaCppLLM) else self.settings.max_workers
        decisions = plan_sleep(queues, updater, max_workers=workers)
        records = queues.records()
        now = time.time()
        history: list[tuple[str, HistoryEntry]] = []
        upserts: list[MemoryRecord] = []
        deletes: list[str] = []
        payloads = queues.payloads()
        for d in decisions:
            target = records[d.target_id]
            new = apply_decision(target, d, records, now=now)
            if new is None:
                deletes.append(target.id)
                history.append((user_id, HistoryEntry(
                    memory_id=target.id, event=Event.DELETE, old_memory=target.memory, new_memory=None,
                    timestamp=now, actor=f"sleep:{d.method}:superseded-by:{','.join(d.source_ids)}")))
                report.deleted += 1
                continue
            if new is target:
                report.ignored += 1
                continue
            upserts.append(new.model_copy(update={"update_queue": payloads.get(target.id, [])}))
            history.append((user_id, HistoryEntry(
                memory_id=target.id, event=Event.UPDATE, old_memory=target.memory, new_memory=new.memory,
                timestamp=now, actor=f"sleep:{d.method}")))
            report.updated += 1
            for absorbed in d.absorbed_ids:
                gone = records[absorbed]
                deletes.append(absorbed)
                history.append((user_id, HistoryEntry(
                    memory_id=absorbed, event=Event.DELETE, old_memory=gone.memory, new_memory=None,
                    timestamp=now, actor=f"sleep:{d.method}:merged-into:{target.id}")))
                report.merged += 1
        if upserts:
            vectors = self.embedder.embed([r.memory for r in upserts])
            self.index.upsert([IndexPoint(record=r, vector=v) for r, v in zip(upserts, vectors, strict=True)])
        if deletes:
            self.index.delete(deletes, user_id)
        self.journal.add_history(history)
        # A changed entry does not re-enter the queue: otherwise every sleep would revisit it.
        self.journal.clear_sleep_pending(user_id, ids)
        log.info("sleep %s: %d new, %d targets, %d updated, %d deleted, %d merged", user_id,
                 len(new_entries), len(queues), report.updated, report.deleted, report.merged)
