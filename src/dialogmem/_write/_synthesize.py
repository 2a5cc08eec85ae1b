"""Online semantic synthesis (seed 003 §2.2): related fragments of one session merged at write time.

A new memory (``Fragment``: text, entities, scope, vector, sources) is compared with the memories of
its session; when it says the same thing as some of them, or more about the same entity, the group is
merged into one memory. The decision (``Synthesis``) names the memory that **survives** (the oldest of
the group, so ids already handed out stay valid) and those **absorbed** into it; the facade writes the
survivor, deletes or skips the absorbed ones, and stores a ``SynthesisHistory`` so the merge can be
undone (``undo_synthesis``). Nothing here does I/O.

LLM-free rule (``decide_synthesis``), for a candidate to join the group:

- same ``user_id`` (always) and same ``session_id`` (unless ``cross_session=True``; an unknown
  session, ``None``, matches nothing unless ``cross_session``);
- cosine(new, candidate) ≥ ``min_cosine``;
- and either **near-duplicate** content words (Jaccard ≥ ``min_overlap``) or a **shared entity**
  (case-insensitive; ``ignore_entities`` — the session's speakers, named in every line — and their
  short forms, "Mel" for "Melanie", left out);
- at most ``max_group - 1`` candidates, best cosine first, and the merged text at most ``max_words``.

The merged text (``merge_text``) loses no content word: the inputs' lines are taken oldest first; a
line is left out only when it *repeats* a line already kept: its information words (content words
plus negations, so "not" is never dropped) are a subset of that line's and at least half of them
(an exact or clipped repeat, as when two rule memories share a context turn, or "X" against "X
yesterday"); a later line that a kept line repeats replaces it in place. Lines without information
words ("ok thanks!") are dropped only as exact repeats. Hence ``set(content_tokens(merged))`` is
the union of the inputs' content tokens.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from pydantic import BaseModel

from .._text._measures import cosine, jaccard, ordered_union
from .._text._words import content_tokens
from .._types import MemoryRecord

SAME_LINE = 0.5  # share of a kept line's information words that a repeat must have
MAX_MERGED_WORDS = 150  # MiniLM reads ~256 word pieces; a longer memory is embedded truncated
_NEGATION = re.compile(r"\b(?:not|no|never|none|nobody|nothing|neither|nor|without|\w+n[’']t)\b", re.I)

Reason = Literal["near_duplicate", "shared_entity", "llm"]


@dataclass(frozen=True)
class Fragment:
    """What synthesis needs to know of one memory (a new fact, or a stored memory of the session)."""

    id: str
    user_id: str
    session_id: str | None
    text: str
    vector: np.ndarray
    source_turn_ids: tuple[str, ...]
    entities: tuple[str, ...] = ()
    time: float = 0.0  # float_time_stamp: orders the lines of a merge and picks the survivor
    time_stamp: str = ""  # as shown to an LLM

    @classmethod
    def of(cls, record: MemoryRecord, vector: np.ndarray) -> Fragment:
        return cls(record.id, record.user_id, record.session_id, record.memory, vector,
                   tuple(record.source_turn_ids), tuple(record.entities), record.float_time_stamp,
                   record.time_stamp)


class Synthesis(BaseModel):
    """Merge ``absorbed_ids`` into ``survivor_id``; ``text`` is the survivor's new memory."""

    survivor_id: str
    absorbed_ids: list[str]
    text: str
    source_turn_ids: list[str]
    entities: list[str]
    reason: Reason
    method: Literal["rule", "llm"] = "rule"
    cosines: dict[str, float]  # of each absorbed / survivor id against the new fragment


@dataclass(frozen=True)
class RuleConfig:
    min_cosine: float = 0.8
    min_overlap: float = 0.6
    max_group: int = 3
    max_words: int = MAX_MERGED_WORDS
    cross_session: bool = False
    ignore_entities: Collection[str] = field(default_factory=tuple)
    shared_entity: bool = True  # False: near-duplicates only (write.synthesis = "duplicates")


# ---------------------------------------------------------------- the rule decision


def decide_synthesis(new: Fragment, candidates: Sequence[Fragment], *, min_cosine: float = 0.8,
                     min_overlap: float = 0.6, max_group: int = 3, max_words: int = MAX_MERGED_WORDS,
                     cross_session: bool = False, ignore_entities: Collection[str] = (),
                     shared_entity: bool = True) -> Synthesis | None:
    """The merge of ``new`` with the candidates that qualify (module docstring), or None;
    ``shared_entity=False`` admits near-duplicates only."""
    matched = sorted(_qualifying(new, candidates, min_cosine, min_overlap, cross_session,
                                 {e.lower() for e in ignore_entities}, shared_entity),
                     key=lambda m: (-m[1], m[0].id))[:max(0, max_group - 1)]
    while matched:
        group = [c for c, _, _ in matched]
        text = merge_text([f.text for f in _by_time([*group, new])])
        if len(text.split()) <= max_words:
            reason: Reason = "near_duplicate" if all(r == "near_duplicate" for _, _, r in matched) \
                else "shared_entity"
            return decision_for(new, group, text, reason, {c.id: s for c, s, _ in matched})
        matched = matched[:-1]  # too long: leave out the least similar and try again
    return None


def _qualifying(new: Fragment, candidates: Sequence[Fragment], min_cosine: float, min_overlap: float,
                cross_session: bool, ignore: set[str], shared_entity: bool = True
                ) -> list[tuple[Fragment, float, Reason]]:
    words = _info_words(new.text)
    entities = _entity_keys(new.entities, ignore)
    out: list[tuple[Fragment, float, Reason]] = []
    for c in candidates:
        if c.id == new.id or not in_scope(new, c, cross_session=cross_session):
            continue
        score = cosine(new.vector, c.vector)
        if score < min_cosine:
            continue
        if jaccard(words, _info_words(c.text)) >= min_overlap:
            out.append((c, score, "near_duplicate"))
        elif shared_entity and entities & _entity_keys(c.entities, ignore):
            out.append((c, score, "shared_entity"))
    return out


def _entity_keys(entities: Collection[str], ignore: set[str]) -> set[str]:
    """Lower-cased entities, without the ignored names and their short forms ("Mel")."""
    keys = {e.lower() for e in entities}
    return {k for k in keys if not any(k == i or (len(k) >= 3 and i.startswith(k)) for i in ignore)}


def in_scope(a: Fragment, b: Fragment, *, cross_session: bool = False) -> bool:
    """Never across users; across sessions (or with an unknown session) only when allowed."""
    if a.user_id != b.user_id:
        return False
    return cross_session or (a.session_id is not None and a.session_id == b.session_id)


def decision_for(new: Fragment, group: Sequence[Fragment], text: str, reason: Reason,
              cosines: dict[str, float], method: Literal["rule", "llm"] = "rule") -> Synthesis:
    """The decision merging ``new`` into ``group`` (existing memories) with ``text``."""
    members = _by_time([*group, new])
    survivor = min(group, key=lambda f: (f.time, f.id))  # an existing memory always survives
    return Synthesis(
        survivor_id=survivor.id,
        absorbed_ids=[f.id for f in members if f.id != survivor.id],
        text=text,
        source_turn_ids=ordered_union([f.source_turn_ids for f in members]),
        entities=ordered_union([f.entities for f in members]),
        reason=reason, method=method, cosines=cosines,
    )


def _by_time(fragments: Sequence[Fragment]) -> list[Fragment]:
    return sorted(fragments, key=lambda f: (f.time, f.id))


# ---------------------------------------------------------------- the merged text


def merge_text(texts: Sequence[str]) -> str:
    """Lines of ``texts`` (oldest first), each kept unless it repeats a kept line (see the module
    docstring); lossless for content words."""
    kept: list[tuple[str, frozenset[str]]] = []
    for text in texts:
        for line in (ln.strip() for ln in text.splitlines()):
            if not line:
                continue
            words = _info_words(line)
            if any(_repeats(line, words, k_line, k_words) for k_line, k_words in kept):
                continue
            wider = [i for i, (k_line, k_words) in enumerate(kept) if _repeats(k_line, k_words, line, words)]
            if wider:  # a fuller version of kept lines takes the place of the first of them
                kept[wider[0]] = (line, words)
                kept = [k for i, k in enumerate(kept) if i not in wider[1:]]
            else:
                kept.append((line, words))
    return "\n".join(line for line, _ in kept)


def _repeats(line: str, words: frozenset[str], other: str, other_words: frozenset[str]) -> bool:
    """``line`` says nothing ``other`` does not: its information words are a subset of other's
    making up at least ``SAME_LINE`` of them (a repeat or clipped repeat, not a short line that
    happens to share a word); a line without information words only repeats its exact text."""
    if not words:
        return " ".join(line.lower().split()) == " ".join(other.lower().split())
    return words <= other_words and len(words) >= SAME_LINE * len(other_words)


def _info_words(text: str) -> frozenset[str]:
    negations = {m.lower().replace("’", "'") for m in _NEGATION.findall(text)}
    return frozenset(content_tokens(text)) | negations


# ---------------------------------------------------------------- applying, history, undo


class SynthesisHistory(BaseModel):
    """Everything a merge changed, kept with the survivor's history row so it can be undone:
    the survivor as it was and every absorbed memory in full (also one never stored on its own)."""

    version: Literal[1] = 1
    survivor_before: MemoryRecord
    absorbed: list[MemoryRecord]
    merged_text: str
    reason: Reason
    method: Literal["rule", "llm"]


def synthesis_history(decision: Synthesis, records: Mapping[str, MemoryRecord]) -> SynthesisHistory:
    """The undo payload; ``records`` holds the survivor and every absorbed memory as they are now."""
    return SynthesisHistory(
        survivor_before=records[decision.survivor_id],
        absorbed=[records[i] for i in decision.absorbed_ids],
        merged_text=decision.text, reason=decision.reason, method=decision.method,
    )


def apply_synthesis(decision: Synthesis, records: Mapping[str, MemoryRecord], *, now: float
                    ) -> MemoryRecord:
    """The survivor after the merge: new text, sources / entities / keywords unioned (oldest
    first), the time of its latest member, the highest salience, version + 1."""
    survivor = records[decision.survivor_id]
    members = sorted([survivor, *(records[i] for i in decision.absorbed_ids)],
                     key=lambda r: (r.float_time_stamp, r.id))
    latest = members[-1]
    return survivor.model_copy(update={
        "memory": decision.text,
        "original_memory": merge_text([r.original_memory for r in members]),
        "compressed_memory": merge_text([r.compressed_memory for r in members]),
        "source_turn_ids": ordered_union([r.source_turn_ids for r in members]),
        "entities": ordered_union([r.entities for r in members]),
        "keywords": ordered_union([r.keywords for r in members]),
        "salience": max(r.salience for r in members),
        "time_stamp": latest.time_stamp, "float_time_stamp": latest.float_time_stamp,
        "weekday": latest.weekday,
        "updated_at": now, "version": survivor.version + 1,
    })


def undo_synthesis(history: SynthesisHistory) -> list[MemoryRecord]:
    """The records to restore (survivor first, as before the merge; then each absorbed one)."""
    return [history.survivor_before, *history.absorbed]


# ---------------------------------------------------------------- one batch of a session

EmbedFn = Callable[[list[str]], np.ndarray]
Decide = Callable[[Fragment, Sequence[Fragment]], Synthesis | None]


@dataclass
class BatchPlan:
    """``merges`` in the order to apply them; ``stored``: new fragment ids written as themselves;
    ``deleted``: existing memory ids absorbed (to delete after their history row)."""

    merges: list[Synthesis] = field(default_factory=list)
    stored: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


def plan_batch(new: Sequence[Fragment], existing: Sequence[Fragment], decide: Decide,
               embed: EmbedFn) -> BatchPlan:
    """Decide the new fragments one by one (in order) against the session's memories, including
    the ones this batch has stored or merged so far; a merged memory is re-embedded with ``embed``
    before the next decision, as the index will hold it."""
    pool: dict[str, Fragment] = {f.id: f for f in existing}
    known = set(pool)
    plan = BatchPlan()
    for fragment in new:
        decision = decide(fragment, list(pool.values()))
        if decision is None:
            pool[fragment.id] = fragment
            plan.stored.append(fragment.id)
            continue
        plan.merges.append(decision)
        members = [pool.get(i, fragment) for i in (decision.survivor_id, *decision.absorbed_ids)]
        for i in decision.absorbed_ids:
            pool.pop(i, None)
            if i in known:
                plan.deleted.append(i)
            elif i in plan.stored:
                plan.stored.remove(i)  # stored earlier in this batch: never written on its own
        survivor, latest = members[0], max(members, key=lambda m: m.time)
        pool[survivor.id] = Fragment(
            survivor.id, survivor.user_id, survivor.session_id, decision.text,
            embed([decision.text])[0], tuple(decision.source_turn_ids), tuple(decision.entities),
            latest.time, latest.time_stamp)
    return plan


def rule_decider(config: RuleConfig) -> Decide:
    """``decide_synthesis`` with fixed settings, as a ``Decide`` callable."""

    def decide(new: Fragment, candidates: Sequence[Fragment]) -> Synthesis | None:
        return decide_synthesis(new, candidates, min_cosine=config.min_cosine,
                                min_overlap=config.min_overlap, max_group=config.max_group,
                                max_words=config.max_words, cross_session=config.cross_session,
                                ignore_entities=config.ignore_entities,
                                shared_entity=config.shared_entity)

    return decide
