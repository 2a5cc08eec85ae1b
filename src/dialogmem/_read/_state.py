"""Stage 1½ for a present- or past-state question: every candidate learns how close its own turn is to the
asked attribute (``AttributeSpace``), for ``_validity`` to read.

The question's attribute kinds are its words' (``_text._facts.question_kinds``), else its vector's clear
best (``AttributeSpace.query_kinds``). Each candidate's own turn — when it is a statement (``_validity.is_statement``)
— is embedded (one call for all, ≤ 2K short lines) and read against the prototypes:
a memory's stored vector is its window's (its turn after the turns before it), and the cosines of
windows to the prototypes were flat. On the first changes probe set, reading own turns instead of
windows found one more past-state answer in the top 3 (82 → 86 %) with present rank 1 unchanged.

A second hybrid pass restricted to the asked speaker's memories (the question's vector blended with the
attribute's prototype centroid) was tried to widen the pool: on both changes probe sets it added no
evidence that the 2K candidates lacked, so it is not run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .._models._embed_base import Embedder
from .._store._base import VectorIndex
from .._text._calendar import MONTHS, WEEKDAYS
from .._text._facts import State, change_words, question_holders, question_kinds, question_tense, says_season
from .._types import ScoredRecord
from ._attributes import AttributeSpace
from ._plan import QueryPlan
from ._retrieve import Candidate
from ._validity import is_statement, line_text


def asked_kinds(query: str, vector: np.ndarray, space: AttributeSpace) -> frozenset[str]:
    """The attribute kinds a question asks about: its words', else its vector's clear best."""
    return question_kinds(query) or space.query_kinds(vector)


def implied_state(plan: QueryPlan, vector: np.ndarray, space: AttributeSpace) -> QueryPlan:
    """``plan`` as a present- or past-state question when it says so by its grammar, not by a cue word
    ("What does Ana drive?", "Which phone did Lee have in the summer?"): it names a person (a known speaker,
    else a capitalised name that is no month or weekday), asks about a mutable attribute (its words', else
    its vector's clear best, ``asked_kinds``), and is

    * in the present tense (``question_tense``): present;
    * in the past tense with a time (a date window, or a season) and not a "when" question (that one asks
      when something happened, not what was true): past.

    A plan that says its state in words, or neither of these, is returned as it is."""
    if plan.state is not None:
        return plan
    tense = question_tense(plan.query)
    state: State | None = None
    if tense == "present":
        state = "present"
    elif tense == "past" and (plan.time_phrases or says_season(plan.query)) \
            and not plan.query.lstrip().lower().startswith("when"):
        state = "past"
    named = plan.speakers or [n for n in question_holders(plan.query) if n not in MONTHS and n not in WEEKDAYS]
    if state is None or not named:
        return plan
    if not asked_kinds(plan.query, vector, space):
        return plan
    return plan.model_copy(update={"state": state, "expansions": change_words(plan.query, state)})


def shows_change(plan: QueryPlan, candidates: Sequence[ScoredRecord]) -> bool:
    """Whether a memory among ``candidates`` of the person the question names was superseded at sleep time
    (a change of theirs was found): what makes a question a state question by its grammar alone."""
    named = {n.lower() for n in plan.speakers} or set(question_holders(plan.query))
    return any(not c.record.is_current and c.record.speaker_name.lower() in named for c in candidates)


def with_affinity(index: VectorIndex, user_id: str, plan: QueryPlan, query_vector: np.ndarray,
                  candidates: list[Candidate], space: AttributeSpace, embedder: Embedder | None = None
                  ) -> list[Candidate]:
    """``candidates``, each with its ``affinity`` to the asked kinds (none when the question names no
    attribute kind) and, with ``embedder``, the person's own statements with their ``topicality`` (their
    turn's cosine to the question, read by ``_choose``; for any state question, attribute named or not).

    With ``embedder``, the affinity is its own turn's: each candidate's own line (a statement,
    ``_validity.is_statement``, by the person the question names) is embedded, in one call, and
    only that line is read against the prototypes — a stored vector is its window's, three turns whose
    cosines to the prototypes are flat. Without one, the stored vectors are read from the index (one ``retrieve``)."""
    kinds = asked_kinds(plan.query, query_vector, space)
    if not candidates or (not kinds and embedder is None):
        return candidates
    if embedder is not None:
        texts = {c.record.id: line_text(c.record) for c in candidates}
        # only the person asked about states their attribute (``_validity`` reads no one else's turn so)
        holders = question_holders(plan.query, {c.record.speaker_name for c in candidates})
        todo = [c for c in candidates if is_statement(texts[c.record.id])
                and (not holders or c.record.speaker_name.lower() in holders)]
        if todo:
            lines = list(dict.fromkeys(texts[c.record.id] for c in todo))
            vectors = np.asarray(embedder.embed(lines), dtype=np.float32)
            query = np.asarray(query_vector, dtype=np.float32)
            units = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
            cosine = dict(zip(lines, units @ (query / max(float(np.linalg.norm(query)), 1e-12)), strict=True))
            table = dict(zip(lines, space.affinity(vectors, kinds), strict=True)) if kinds else {}
            for c in todo:
                c.topicality = float(cosine[texts[c.record.id]])
                if kinds:
                    c.affinity, c.line_affinity = float(table[texts[c.record.id]]), True
        return candidates
    got = index.retrieve([c.record.id for c in candidates], user_id, with_vectors=True)
    by_id = {rec.id: vec for rec, vec in got if vec is not None}
    have = [c for c in candidates if c.record.id in by_id]
    if have:
        scores = space.affinity(np.asarray([by_id[c.record.id] for c in have]), kinds)
        for c, a in zip(have, scores, strict=True):
            c.affinity = float(a)
    return candidates

