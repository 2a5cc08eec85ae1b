"""Reading with time: validity terms for the rule selector's relevance (pure, no I/O).

A question about the present ("Where does Tom live now?", "What car does she drive these days?",
present tense about a mutable attribute) should get the newest valid statement first; one about the
past ("Where did he live before?", "What was her first job?") should still reach the statements that
were replaced. ``validity_terms`` gives each candidate an addition to its relevance.

Any present-state question, said in words or by its tense: a memory that a later statement superseded
(``invalid_at`` / ``superseded_by``, set at sleep time) loses ``W_SUPERSEDED``.

A question that says which time it asks about ("now", "currently", "still", "before", "used to", ...)
and names an attribute kind is read closer. An LLM-free memory is its turn after the turns said just
before it, so a memory can carry a stale statement as context; every line of every candidate is read
for claims (``_text._facts``; only lines naming an asked kind, a regex or two each), and a line is
*stale* when its memory was superseded or a later line among the candidates replaces it (the same test
as sleep's, so a change said since the last sleep counts too; for a present-state question also a
later claim of the same holder and kind with another value). Then:

* present: a candidate whose claims about the asked attribute of the asked holder are all stale
  loses ``W_REPLACED``; the newest candidate whose own line makes a current such claim gains
  ``W_NEWEST``;
* past: a candidate whose own line is a stale claim about the asked attribute gains ``W_PAST``, one
  carrying such a claim as context half of it;
* both: a candidate whose claims of the asked attribute are all someone else's than the person asked
  about ("Maya: I live in a tiny flat" for "Where does Tom live now?") loses ``W_OTHER``.

Any other question gets zeros, so questions that are not about changing facts rank as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .._text._facts import (
    Claim,
    any_supersedes,
    claims,
    mentions_kind,
    question_holders,
    question_kinds,
    question_state,
)
from .._types import MemoryRecord, ScoredRecord

W_SUPERSEDED = 0.3
W_REPLACED = 0.3
W_NEWEST = 0.45
W_PAST = 0.5
W_OTHER = 0.3
#: the step between a memory's lines in the order of lines (its context was said just before it)
_LINE_STEP = 1e-3


@dataclass
class _Line:
    text: str
    order: tuple[float, float]  # (time, within the time)
    claims: list[Claim]
    own_of: set[int]  # candidates whose own line it is
    superseded: bool = False  # its memory was superseded at sleep time
    stale: bool = False


def _about(claims: Sequence[Claim], kinds: frozenset[str], holders: frozenset[str]) -> bool:
    return any(c.kinds & kinds and (not holders or c.holder in holders) for c in claims)


def _replaces(newer: Sequence[Claim], older: Sequence[Claim], state: str) -> bool:
    """Sleep's test; for a present-state question also a later claim of the same holder and kind with
    another value (what the question asks for is the newest value: ranking, unlike superseding,
    hides nothing)."""
    if any_supersedes(newer, older):
        return True
    return state == "present" and any(
        n.holder == o.holder and n.kinds & o.kinds and n.values and not n.values & o.values
        for n in newer for o in older)


def _eligible(r: MemoryRecord) -> bool:
    return r.memory_class == "fact" and r.tier == "mtm"


def validity_terms(query: str, candidates: Sequence[ScoredRecord], explicit: str | None = None) -> list[float]:
    """The addition to each candidate's relevance (see the module docstring); ``explicit``: the plan's
    ``state`` (``question_state(query, explicit=True)``, computed once by the planner)."""
    out = [0.0] * len(candidates)
    state = explicit or question_state(query)
    if state is None or not candidates:
        return out
    records = [c.record for c in candidates]
    if state == "present":
        out = [-W_SUPERSEDED if not r.is_current else 0.0 for r in records]
    kinds = question_kinds(query)
    if explicit is None or not kinds:
        return out
    holders = question_holders(query, {r.speaker_name for r in records})
    lines: dict[str, _Line] = {}
    per_candidate: list[list[_Line]] = []
    for i, r in enumerate(records):
        mine: list[_Line] = []
        if _eligible(r):
            texts = [t for t in r.memory.splitlines() if t.strip()]
            for pos, text in enumerate(texts):
                own = pos == len(texts) - 1
                line = lines.get(text)
                order = (r.float_time_stamp, r.created_at - (len(texts) - 1 - pos) * _LINE_STEP)
                if line is None:
                    found = claims(text, r.speaker_name if own else "") if mentions_kind(text, kinds) else []
                    line = lines[text] = _Line(text, order, found, set())
                if own:
                    line.own_of.add(i)
                    line.order = order
                    line.superseded = line.superseded or not r.is_current
                mine.append(line)
        per_candidate.append(mine)
    about = [ln for ln in lines.values() if ln.claims and _about(ln.claims, kinds, holders)]
    for old in about:
        old.stale = old.superseded or any(
            new.order > old.order and _replaces(new.claims, old.claims, state) for new in about if new is not old)
    newest: tuple[tuple[float, float], int] | None = None
    for i, mine in enumerate(per_candidate):
        asked = [ln for ln in mine if ln.claims and _about(ln.claims, kinds, holders)]
        if holders and not asked and any(ln.claims and _about(ln.claims, kinds, frozenset()) for ln in mine):
            out[i] -= W_OTHER
        if not asked:
            continue
        if state == "past":  # the stale statement itself first, then the memories carrying it as context
            if mine[-1] in asked and mine[-1].stale:
                out[i] += W_PAST
            elif any(ln.stale for ln in asked):
                out[i] += W_PAST / 2
            continue
        if all(ln.stale for ln in asked):
            out[i] -= 0.0 if not records[i].is_current else W_REPLACED  # the superseded lost theirs above
        last = mine[-1]
        if last in asked and not last.stale and (newest is None or last.order > newest[0]):
            newest = (last.order, i)
    if newest is not None:
        out[newest[1]] += W_NEWEST
    return out
