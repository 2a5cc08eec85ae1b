"""Reading with time: validity terms for the rule selector's relevance (pure, no I/O).

A question about the present ("Where does Tom live now?", "What car does she drive these days?",
present tense about a mutable attribute) should get the newest valid statement first; one about the
past ("Where did he live before?", "What was her first job?") should still reach the statements that
were replaced. ``validity_terms`` gives each candidate an addition to its relevance.

Any present-state question, said in words or by its tense: a memory that a later statement superseded
(``invalid_at`` / ``superseded_by``, set at sleep time) loses ``W_SUPERSEDED``.

A question that names an attribute kind of a person is read closer. An LLM-free memory is its turn
after the turns said just before it, so every line of every candidate is read: a line is *on topic*
when it is the asked person's (their own line, or one that names them) and speaks of an asked kind
(``_text._facts.topic_kinds``: loosely, "the keyboard is a dream" is about a device; reading only
reorders, it hides nothing). The on-topic lines, ordered by when they were said, are the history of
the attribute among the candidates. Then:

* present: the candidate whose own line is the newest on-topic line gains ``W_NEWEST``, one carrying
  it as context half of it; a candidate whose on-topic lines are all older loses ``W_REPLACED``;
* past: a candidate whose own line is an older on-topic line gains ``W_PAST`` (a memory carrying one
  as context half of it), and the newest loses ``W_REPLACED``: the question is about what it replaced;
* the newest line is chosen among the on-topic lines that name the attribute in its own words ("my
  laptop"), say that something changed ("now", "got", "back to", a correction: ``says_change``) or name
  a particular thing mid-sentence ("parking the Land Rover": ``names_something``); a line on topic only
  loosely ("I'm trying to drink more water" for a diet) is not the newest statement by itself;
* an own line the words missed is on topic when its stored vector leads the other kinds for the asked
  attribute's prototypes (``_attributes``; ``affinity``, set by ``_state``), or when it names a particular
  thing an on-topic line of the same speaker named ("Big Thief has taken Radiohead's crown"; a correction
  names what it fixes) (``_linked``);
* both: a candidate whose claims of the asked attribute are all someone else's than the person asked
  about ("Maya: I live in a tiny flat" for "Where does Tom live now?") loses ``W_OTHER``.

Any other question gets zeros, so questions that are not about changing facts rank as before.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .._text._facts import (
    ALL_KINDS,
    Claim,
    claims,
    is_hypothetical,
    mentions_kind,
    named_values,
    names_something,
    of_someone_else,
    question_holders,
    question_kinds,
    question_state,
    says_change,
    topic_kinds,
)
from .._types import MemoryRecord, ScoredRecord

W_SUPERSEDED = 0.3
W_REPLACED = 0.3
W_NEWEST = 0.75
W_PAST = 0.6
W_OTHER = 0.3
#: a candidate whose vector (its own turn's, ``_state``) leads the other kinds by at least this for the asked
#: attribute's prototypes (``_attributes``) is on topic when its own line is the asked person's statement,
#: whatever its words (first probe set, own-turn vectors: 0.03 and 0.06 alike, 0.06 kept)
AFFINITY_ON = 0.06
#: the step between a memory's lines in the order of lines (its context was said just before it)
_LINE_STEP = 1e-3
#: a line shorter than this ("Okay, bedtime for me.") states no attribute, whatever its vector says
_MIN_WORDS = 6
_SPEAKER = re.compile(r"^([^:\n]{1,40}):\s")
_SENTENCES = re.compile(r"(?<=[.!?;])\s+")


@dataclass
class _Line:
    order: tuple[float, float]  # (time, within the time)
    on_topic: bool
    claims: list[Claim]
    superseded: bool = False  # its memory was superseded at sleep time
    strong: bool = False  # names the asked attribute in its own words ("my laptop"), not only loosely
    cue: bool = False  # says that something is new or changed (``says_change``)


def _eligible(r: MemoryRecord) -> bool:
    return r.memory_class == "fact" and r.tier == "mtm"


def _statements(text: str, kinds: frozenset[str]) -> str:
    """What the line asserts about its speaker: its sentences less questions, hypotheticals and those
    about someone else ("My sister is learning to drive"; a partner counts for a relationship)."""
    return " ".join(s for s in _SENTENCES.split(text)
                    if s.strip() and not s.rstrip().endswith("?") and not is_hypothetical(s)
                    and ("relationship" in kinds or not of_someone_else(s)))


def _on_topic(speaker: str, text: str, kinds: frozenset[str], holders: frozenset[str]) -> bool:
    if holders and speaker.lower() not in holders:  # another speaker's line that names the person asked
        low = text.lower()
        return bool(topic_kinds(text, kinds)) and any(re.search(rf"\b{re.escape(h)}\b", low) for h in holders)
    said = _statements(text, kinds)
    return bool(said) and bool(topic_kinds(said, kinds))


def _about(found: Sequence[Claim], kinds: frozenset[str], holders: frozenset[str]) -> bool:
    return any(c.kinds & kinds and (not holders or c.holder in holders) for c in found)


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
    speakers = {r.speaker_name for r in records}
    for r in records:
        mine: list[_Line] = []
        if _eligible(r):
            texts = [t for t in r.memory.splitlines() if t.strip()]
            for pos, text in enumerate(texts):
                own = pos == len(texts) - 1
                line = lines.get(text)
                order = (r.float_time_stamp, r.created_at - (len(texts) - 1 - pos) * _LINE_STEP)
                if line is None:
                    m = _SPEAKER.match(text)
                    speaker, body = (m.group(1), text[m.end():]) if m else (r.speaker_name if own else "", text)
                    found = claims(text, r.speaker_name if own else "") if mentions_kind(text, kinds) else []
                    line = lines[text] = _Line(order, _on_topic(speaker, body, kinds, holders), found,
                                               strong=mentions_kind(body, kinds),
                                               cue=says_change(body) or names_something(body, speakers))
                if own:
                    line.order = order
                    line.superseded = line.superseded or not r.is_current
                mine.append(line)
        per_candidate.append(mine)
    _linked(candidates, per_candidate, holders, frozenset(r.speaker_name.lower() for r in records), kinds)
    topical = sorted({id(ln): ln for ln in lines.values() if ln.on_topic and not ln.superseded}.values(),
                     key=lambda ln: ln.order)
    # a line read as on topic only loosely (a topic word, its vector, a shared value) is the newest
    # statement only when it says that something changed: "I'm trying to drink more water" is not a diet
    marked = [ln for ln in topical if ln.strong or ln.cue]
    newest = marked[-1] if marked else (topical[-1] if topical else None)
    changed = len(topical) >= 2
    for i, mine in enumerate(per_candidate):
        if not mine:
            continue
        if holders and not any(ln.on_topic for ln in mine) and any(
                ln.claims and _about(ln.claims, kinds, frozenset()) for ln in mine):
            out[i] -= W_OTHER
        last, on = mine[-1], [ln for ln in mine if ln.on_topic]
        if not on or newest is None:
            continue
        if state == "present":
            if last is newest:
                out[i] += W_NEWEST
            elif newest in on:
                out[i] += W_NEWEST / 2
            elif changed and records[i].is_current:
                out[i] -= W_REPLACED
        elif changed:
            if last is newest or (newest in on and not last.on_topic):
                out[i] -= W_REPLACED
            elif last.on_topic:
                out[i] += W_PAST
            else:
                out[i] += W_PAST / 2
    return out


def _own_statement(r: MemoryRecord, line: _Line, holders: frozenset[str]) -> bool:
    """Whether a candidate's own line is a statement by the person asked about (not a question)."""
    if holders and r.speaker_name.lower() not in holders:
        return False
    text = line_text(r)
    return is_statement(text) and not is_hypothetical(text)


def is_statement(text: str) -> bool:
    """Whether a line is long enough to state an attribute and is not a question ("Okay, bedtime for me."
    states nothing, whatever its words or vector say)."""
    return len(text.split()) >= _MIN_WORDS and not text.rstrip().endswith("?")


def line_text(r: MemoryRecord) -> str:
    """A memory's own turn without its speaker's name (an LLM-free memory ends with it)."""
    last = r.memory.rstrip().rsplit("\n", 1)[-1]
    m = _SPEAKER.match(last)
    return last[m.end():] if m else last


def _linked(candidates: Sequence[ScoredRecord], per_candidate: list[list[_Line]], holders: frozenset[str],
            names: frozenset[str], kinds: frozenset[str]) -> None:
    """Own lines the words missed, made on topic when they are the asked person's statements (``_own_statement``)
    and any of:

    * their vector leads the other kinds for the asked attribute's prototypes (``affinity`` ≥
      ``AFFINITY_ON``, set by ``_state``);
    * they name a particular thing (a capitalised name mid-sentence, ``named_values``) that an on-topic line
      of the same speaker named ("Big Thief has taken Radiohead's crown" after "nothing will ever top
      Radiohead"; "Kai moved into my flat" after "Kai asked me out"): a change is often said against what
      it replaces, or of the same person or thing. A shared common word is no link: with any content word,
      "I finally cleaned out the kitchen cupboards" joined "Finally unpacked the last box ... in Leeds" and
      took first place for where Priya lives (first probe set: past rank 1 46 → 57 %, present 67 → 69 %).

    (A link by the cosine of two memories' vectors was tried: neighbouring memories share their context
    turns, so at 0.6 it tied small talk to the attribute and lost 28 points of rank 1 on the first probe
    set; at 0.7 it still lost on both sets.)

    Corrections ("scratch that, it's the 27th") are read the same way: they share the value they fix. A
    line that names another attribute in its own words ("I accepted a job in Seattle" for where Tom lives)
    is about that one, and is never linked."""
    others = ALL_KINDS - kinds
    stated = [bool(mine) and _own_statement(c.record, mine[-1], holders)
              for c, mine in zip(candidates, per_candidate, strict=True)]
    own = [ok and not _changes_other(c.record, others) for c, ok in zip(candidates, stated, strict=True)]
    for c, mine, ok, said in zip(candidates, per_candidate, own, stated, strict=True):
        # a turn's own vector tells which attribute it is about better than the words of another kind
        # ("I don't drink coffee anymore, doctor's orders" is a drink, not a doctor)
        if (ok or (said and getattr(c, "line_affinity", False))) and not mine[-1].on_topic:
            affinity = getattr(c, "affinity", None)
            # the vector is the window's: when a context line is on topic, the lead may be that line's
            if affinity is not None and affinity >= AFFINITY_ON and (
                    getattr(c, "line_affinity", False) or not any(ln.on_topic for ln in mine[:-1])):
                mine[-1].on_topic = True
    seeds = [i for i, mine in enumerate(per_candidate) if mine and mine[-1].on_topic]
    words: dict[str, set[str]] = {}
    for i in seeds:
        r = candidates[i].record
        words.setdefault(r.speaker_name.lower(), set()).update(named_values(line_text(r), names))
    for c, mine, ok in zip(candidates, per_candidate, own, strict=True):
        if not ok or mine[-1].on_topic:
            continue
        who = c.record.speaker_name.lower()
        if named_values(line_text(c.record), names) & words.get(who, set()):
            mine[-1].on_topic = True


def _changes_other(r: MemoryRecord, others: frozenset[str]) -> bool:
    """Whether a memory's own line says that one of ``others`` (attribute kinds) changed."""
    return any(c.changed & others for c in claims(line_text(r), r.speaker_name))
