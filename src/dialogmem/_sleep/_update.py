"""Sleep-time update decisions (seed 001 §3.3 offline parallel update, seed 002's decision rules).

Every target in the update queues gets one ``UpdateDecision``; targets are independent, so
``plan_sleep`` decides them in parallel. Decisions are pure data: the caller re-embeds, writes the
index and history. ``apply_decision`` computes the record a decision leads to.

Backends:

- ``LLMUpdater``: update (refine the target with newer detail), delete (newer info contradicts it)
  or ignore, as the model decides; unusable output falls back to the rule backend for that target.
  A "delete" is carried out as a supersession: the target is kept, with ``invalid_at`` and
  ``superseded_by`` naming the contradicting entry (the oldest one the model named), the same fields
  the LLM-free detector (``_supersede``) fills.
- ``RuleUpdater`` (LLM-free): merges near-duplicates only and never deletes a distinct fact. A newer
  entry is a near-duplicate of the target when the cosine is at least ``min_cosine`` (0.95), the
  content words overlap (Jaccard ≥ ``min_overlap``, 0.8), both say "not" alike, and the content words
  of one are a subset of the other's, so keeping the richer text loses no word of content. The
  target *absorbs* such duplicates: it takes the richer text and the union of source turns, and the
  decision lists them in ``absorbed_ids`` so that the caller deletes them with a history row
  "merged into <target>". Keeping both would leave identical hits competing for the same
  retrieval slots; absorbing loses nothing, since the text and the provenance survive in the target
  and the old text in the history.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field, field_validator

from .._backends import with_fallback
from .._errors import LLMOutputError
from .._models._llm_base import LLMClient
from .._prompts.update import render_update_messages
from .._text._measures import jaccard, ordered_union
from .._text._words import content_tokens
from .._types import MemoryRecord, ScoredRecord
from ._queue import UpdateQueues, age_key

logger = logging.getLogger(__name__)

STAGE = "update"
Action = Literal["update", "delete", "ignore"]
#: what a decision does; "supersede" closes the target's validity (the model's "delete")
DecisionAction = Literal["update", "delete", "ignore", "supersede"]
_NEGATION = re.compile(r"\b(?:not|no|never|none|nobody|nothing|neither|nor|without|\w+n[’']t)\b", re.I)


class UpdateDecision(BaseModel):
    """What to do with one target. ``source_ids``: the entries the decision draws on;
    ``absorbed_ids``: duplicates merged into the target, to be deleted by the caller."""

    target_id: str
    action: DecisionAction
    new_memory: str | None = None
    source_ids: list[str] = Field(default_factory=list)
    absorbed_ids: list[str] = Field(default_factory=list)
    method: Literal["llm", "rule"] = "rule"


@runtime_checkable
class Updater(Protocol):
    def decide(self, target: MemoryRecord, sources: Sequence[ScoredRecord]) -> UpdateDecision:
        """The decision for ``target`` given its queue (newer candidates with cosine scores)."""


# ---------------------------------------------------------------- LLM-free backend


class RuleUpdater:
    """Merge exact and near-duplicate entries; never delete a distinct fact."""

    def __init__(self, *, min_cosine: float = 0.95, min_overlap: float = 0.8) -> None:
        self.min_cosine = min_cosine
        self.min_overlap = min_overlap

    def decide(self, target: MemoryRecord, sources: Sequence[ScoredRecord]) -> UpdateDecision:
        kept_text = target.memory
        kept_words = set(content_tokens(kept_text))
        kept_neg = _negations(kept_text)
        absorbed: list[str] = []
        for cand in sorted(sources, key=lambda s: (-s.score, s.record.id)):
            text = cand.record.memory
            words = set(content_tokens(text))
            if cand.score < self.min_cosine or _negations(text) != kept_neg:
                continue
            if not words and not kept_words:
                same = " ".join(text.lower().split()) == " ".join(kept_text.lower().split())
                if same:
                    absorbed.append(cand.record.id)
                continue
            if jaccard(words, kept_words) < self.min_overlap:
                continue
            if words <= kept_words:
                if words == kept_words and len(text) > len(kept_text):
                    kept_text = text
                absorbed.append(cand.record.id)
            elif kept_words <= words:
                kept_text, kept_words = text, words
                absorbed.append(cand.record.id)
        if not absorbed:
            return UpdateDecision(target_id=target.id, action="ignore", method="rule")
        return UpdateDecision(target_id=target.id, action="update", new_memory=kept_text,
                              source_ids=absorbed, absorbed_ids=absorbed, method="rule")


def _negations(text: str) -> set[str]:
    return {m.lower().replace("’", "'") for m in _NEGATION.findall(text)}


# ---------------------------------------------------------------- LLM backend


class UpdateAnswer(BaseModel):
    """The JSON the update prompt asks for."""

    action: Action
    new_memory: str | None = None
    sources: list[int] = Field(default_factory=list)

    @field_validator("action", mode="before")
    @classmethod
    def _plain(cls, v: object) -> object:
        return v.strip().lower() if isinstance(v, str) else v

    @field_validator("sources", mode="before")
    @classmethod
    def _list(cls, v: object) -> object:
        if v is None:
            return []
        return [v] if isinstance(v, int | str) else v


class LLMUpdater:
    """Seed 002's update / delete / ignore decision by an LLM, rule fallback per target."""

    def __init__(self, llm: LLMClient, fallback: Updater | None = None, *,
                 max_tokens: int | None = None) -> None:
        self._llm = llm
        self._fallback = fallback if fallback is not None else RuleUpdater()
        self._max_tokens = max_tokens

    def decide(self, target: MemoryRecord, sources: Sequence[ScoredRecord]) -> UpdateDecision:
        if not sources:
            return UpdateDecision(target_id=target.id, action="ignore", method="llm")
        ordered = sorted(sources, key=lambda s: age_key(s.record))  # oldest first reads as a story
        messages = render_update_messages(
            (target.time_stamp, target.memory), [(s.record.time_stamp, s.record.memory) for s in ordered])

        def attempt() -> UpdateDecision:
            answer = self._llm.complete_json(messages, UpdateAnswer, stage=STAGE, max_tokens=self._max_tokens)
            return _decision(target, answer, ordered)

        return with_fallback(self._llm, STAGE, attempt, lambda: self._fallback.decide(target, sources),
                             what=f"update of {target.id}")


def _decision(target: MemoryRecord, answer: UpdateAnswer, ordered: Sequence[ScoredRecord]) -> UpdateDecision:
    """The decision an answer stands for; an update or delete must name the queue entries it rests
    on, every one of them valid, or the answer is unusable (it is never applied to entries it did
    not name)."""
    if answer.action == "ignore":
        return UpdateDecision(target_id=target.id, action="ignore", method="llm")
    numbers = list(dict.fromkeys(answer.sources))
    if not numbers or any(not 1 <= n <= len(ordered) for n in numbers):
        raise LLMOutputError(f"'{answer.action}' must name sources among 1..{len(ordered)}, got {answer.sources}",
                             stage=STAGE)
    used = [ordered[n - 1].record.id for n in numbers]
    if answer.action == "delete":  # contradicted: kept, and superseded by the oldest contradiction named
        first = min(numbers)
        used = [ordered[first - 1].record.id, *(u for u in used if u != ordered[first - 1].record.id)]
        return UpdateDecision(target_id=target.id, action="supersede", source_ids=used, method="llm")
    text = " ".join((answer.new_memory or "").split())
    if not text or text.lower() in {"null", "none"}:
        raise LLMOutputError("'update' without new_memory", stage=STAGE)
    if text == target.memory:
        return UpdateDecision(target_id=target.id, action="ignore", method="llm")
    return UpdateDecision(target_id=target.id, action="update", new_memory=text, source_ids=used, method="llm")


# ---------------------------------------------------------------- planning and applying


def plan_sleep(queues: UpdateQueues, updater: Updater, *, fallback: Updater | None = None,
               max_workers: int = 4) -> list[UpdateDecision]:
    """One decision per target, decided in parallel, made consistent (see ``resolve_decisions``).

    An exception from ``updater`` for one target gives that target the ``fallback`` decision
    (``RuleUpdater`` by default); the other targets are unaffected.
    """
    rule = fallback if fallback is not None else RuleUpdater()
    items = list(queues.items())

    def decide(item: tuple[MemoryRecord, list[ScoredRecord]]) -> UpdateDecision:
        target, sources = item
        try:
            return updater.decide(target, sources)
        except Exception as exc:  # one target's failure must not cost the others their decision
            logger.warning("update decision for %s failed (%s: %s); using the fallback",
                           target.id, type(exc).__name__, exc, exc_info=True)
            return rule.decide(target, sources)

    workers = max(1, min(max_workers, len(items)))
    if workers == 1:
        decisions = [decide(item) for item in items]
    else:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dialogmem-sleep") as pool:
            decisions = list(pool.map(decide, items))
    return resolve_decisions(decisions, queues.records())


def resolve_decisions(decisions: Sequence[UpdateDecision], records: Mapping[str, MemoryRecord]
                      ) -> list[UpdateDecision]:
    """Make independent decisions safe to apply together.

    Oldest target first, an entry absorbed by one target is absorbed by no other, and its own
    decision is dropped (it is about to be deleted as a duplicate). A target that was absorbed
    keeps nothing of its own plan, so the duplicates it would have absorbed stay as they are —
    nothing is lost, the merge simply waits.
    """
    ordered = sorted(decisions, key=lambda d: age_key(records[d.target_id]))
    absorbed_into: dict[str, str] = {}
    out: list[UpdateDecision] = []
    for d in ordered:
        if d.target_id in absorbed_into:
            logger.debug("dropping the decision for %s: merged into %s",
                         d.target_id, absorbed_into[d.target_id])
            continue
        if d.absorbed_ids:
            keep = [a for a in d.absorbed_ids if a not in absorbed_into and a != d.target_id]
            if len(keep) < len(d.absorbed_ids):
                kept_texts = {records[a].memory for a in keep if a in records}
                text = d.new_memory if (d.new_memory in kept_texts
                                        or d.new_memory == records[d.target_id].memory) else None
                if not keep:
                    d = UpdateDecision(target_id=d.target_id, action="ignore", method=d.method)
                else:
                    d = d.model_copy(update={
                        "absorbed_ids": keep,
                        "source_ids": [s for s in d.source_ids if s in keep],
                        "new_memory": text or records[d.target_id].memory,
                    })
            for a in d.absorbed_ids:
                absorbed_into[a] = d.target_id
        out.append(d)
    return out


def apply_decision(target: MemoryRecord, decision: UpdateDecision, records: Mapping[str, MemoryRecord],
                   *, now: float) -> MemoryRecord | None:
    """The target after ``decision``: a new version for "update", ``None`` for "delete", a new
    version with its validity closed for "supersede" (``invalid_at``: the time of the first source,
    ``superseded_by``: its id), the target unchanged for "ignore". ``records`` must hold the
    decision's sources by id."""
    if decision.target_id != target.id:
        raise ValueError(f"decision for {decision.target_id} applied to {target.id}")
    if decision.action == "delete":
        return None
    if decision.action == "supersede":
        successor = records[decision.source_ids[0]]
        return target.model_copy(update={"invalid_at": successor.time_stamp, "superseded_by": successor.id,
                                         "updated_at": now, "version": target.version + 1})
    if decision.action == "ignore" or not decision.new_memory:
        return target
    sources = [records[s] for s in dict.fromkeys([*decision.source_ids, *decision.absorbed_ids])
               if s in records]
    return target.model_copy(update={
        "memory": decision.new_memory,
        "source_turn_ids": ordered_union([target.source_turn_ids, *(s.source_turn_ids for s in sources)]),
        "entities": ordered_union([target.entities, *(s.entities for s in sources)]),
        "keywords": ordered_union([target.keywords, *(s.keywords for s in sources)]),
        "salience": max([target.salience, *(s.salience for s in sources)]),
        "updated_at": now,
        "version": target.version + 1,
    })


