"""Retrieval planning: question → ``QueryPlan`` (seed 000 §3.3, seed 003 §2.3).

Two backends share one output type. ``RulePlanner`` needs no model: temporal phrases become an
exact window (``_temporal``), content words and quoted phrases become keywords, capitalised runs
become entities, known speakers are matched by name, and a small heuristic sets the complexity and
so the depth ``k``. ``LLMPlanner`` asks the configured LLM for hypothetical queries, routing and
the rest, validates and clamps the result, and falls back to the rules when the LLM fails.

Speakers: a name in the question is usually what the question is *about*, and others may have
said the relevant thing ("What does Melanie's son like?" is answered by Melanie's words, but
"Where did Caroline go?" may be answered by Melanie saying "Caroline went to…"). So matched names
always go to ``speakers`` and ``entities``, but ``speaker_filter`` — a hard filter on who spoke —
is set only when the question asks for what someone *said* ("what did Caroline say/tell/mention").
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta
from typing import Literal, Protocol

from pydantic import BaseModel, Field, ValidationError

from .._backends import with_fallback
from .._errors import LLMOutputError
from .._models._llm_base import LLMClient
from .._prompts import plan as plan_prompt
from .._text._facts import change_words, question_state
from .._text._words import entities as find_entities
from .._text._words import query_keywords, tokens
from ._temporal import parse_time_window

logger = logging.getLogger(__name__)

Complexity = Literal["simple", "moderate", "complex"]
Route = Literal["mtm", "ltm", "any"]

K_MIN, K_MAX = 3, 20
MAX_HQS = 4
_K_FOR = {"simple": 5, "moderate": 10, "complex": 15}

_SPEECH_VERBS = (r"(?:said|say|says|told|tell|tells|mentioned|mention|mentions|asked|ask|suggested|suggest|"
                 r"recommended|recommend|shared|share|wrote|write|promised|promise|admitted|claimed|"
                 r"explained|explain|complained|complain|talked|talk)")
_COMPARISON = re.compile(
    r"\b(?:before|after|since|until|first|earlier|later|previously|how\s+long|how\s+many|how\s+often|"
    r"how\s+much|which\s+came|change[sd]?|compare|compared|difference|between|both|all|every|ever|"
    r"list|total|times|why|pattern|usually|trend)\b", re.IGNORECASE)
_CONJUNCTION = re.compile(r"\b(?:and|or|as\s+well\s+as|along\s+with)\b|,", re.IGNORECASE)
_PRONOUN = re.compile(r"\b(?:he|she|they|him|her|them|his|hers|their|it|that|there|this)\b", re.IGNORECASE)


class HypotheticalQuery(BaseModel):
    """One search view: a text phrased like a memory, and the tier it is routed to.

    ``"any"`` (no tier filter) is what the rules produce: without a model there is no reliable
    way to tell an episodic question from a knowledge one.
    """

    text: str
    route: Route = "any"


class QueryPlan(BaseModel):
    """What to search, how to constrain it, and how many memories to return."""

    query: str
    hqs: list[HypotheticalQuery] = Field(min_length=1, max_length=MAX_HQS)
    keywords: list[str] = Field(default_factory=list)
    time_from: float | None = None  # inclusive, unix seconds
    time_to: float | None = None  # inclusive
    time_strict: bool = True  # False for "recently"-style windows: preferred, never filtered on
    time_phrases: list[str] = Field(default_factory=list)
    speakers: list[str] = Field(default_factory=list)
    speaker_filter: bool = False  # hard filter on speakers ("what did X say")
    entities: list[str] = Field(default_factory=list)
    complexity: Complexity = "moderate"
    k: int = Field(default=10, ge=K_MIN, le=K_MAX)
    source: Literal["rules", "llm"] = "rules"
    # a question that says it asks how a mutable attribute is now ("now", "currently": "present") or
    # was ("before", "used to": "past"), and the words such a change is said with ("moved", "new
    # job"): the lexical side searches them too, and the candidates are drawn from a wider pool
    state: Literal["present", "past"] | None = None
    expansions: list[str] = Field(default_factory=list)

    @property
    def has_window(self) -> bool:
        return self.time_from is not None or self.time_to is not None


class Planner(Protocol):
    def plan(self, query: str, *, reference_time: datetime | None,
             recent_context: list[str] | None = None, known_speakers: Sequence[str] = ()) -> QueryPlan: ...


def k_for(complexity: str) -> int:
    return _K_FOR.get(complexity, _K_FOR["moderate"])


def _reference(reference_time: datetime | None) -> datetime:
    # The wall clock only when the caller gave no reference time.
    return reference_time if reference_time is not None else datetime.now(UTC)


def match_speakers(query: str, known_speakers: Sequence[str]) -> list[str]:
    """Known speakers named in the question, by full name or first name, case-insensitively."""
    words = set(tokens(query))
    low = query.lower()
    out: list[str] = []
    for name in known_speakers:
        n = name.strip()
        if not n:
            continue
        full = re.search(r"\b" + re.escape(n.lower()) + r"\b", low) is not None
        first = n.split()[0].lower()
        if (full or first in words) and n not in out:
            out.append(n)
    return out


def asks_what_said(query: str, speakers: Sequence[str]) -> bool:
    """True when the question asks what one of ``speakers`` said ("what did X tell…")."""
    for name in speakers:
        n = re.escape(name.split()[0])
        if re.search(rf"\b{n}\w*(?:['’]s)?\s+(?:\w+\s+)?{_SPEECH_VERBS}\b", query, re.IGNORECASE) or \
           re.search(rf"\b(?:did|does|has|had|would|will)\s+{n}\w*\s+(?:\w+\s+)?{_SPEECH_VERBS}\b", query,
                     re.IGNORECASE) or \
           re.search(rf"\baccording\s+to\s+{n}\b", query, re.IGNORECASE):
            return True
    return False


def estimate_complexity(query: str, entities: Sequence[str], keywords: Sequence[str],
                        has_window: bool) -> Complexity:
    """Comparison/aggregation words, clause conjunctions, several entities, length → complexity."""
    score = 0
    comparisons = len(_COMPARISON.findall(query))
    score += min(comparisons, 2)
    if _CONJUNCTION.search(query) and len(keywords) >= 4:
        score += 1
    if len(entities) >= 2:
        score += 1
    if len(keywords) >= 8 or query.count("?") >= 2:
        score += 1
    if has_window and comparisons:
        score += 1
    if score == 0:
        return "simple"
    return "moderate" if score == 1 else "complex"


class RulePlanner:
    """LLM-free planner: one view, the question itself (its keywords join it on the BM25 side,
    ``_retrieve.lexical_text``).

    A second view made of the keywords alone (for questions that are not simple) was dropped: on
    the LoCoMo dev set (LLM-free, 1,033 questions, runs of one session) evidence recall @1/@5/@10/@20
    .515/.755/.821/.869 with it, .519/.759/.823/.871 without; at 256/512/1,024 context tokens
    .649/.769/.827 and .654/.769/.826; session-level @10 .943 and .944. Its own query embedding
    was a third of the time of the 38 % of searches that had it. Searching it with the question's
    vector and its own BM25 text did no better (@10 .818, at 512 tokens .768).
    """

    def plan(self, query: str, *, reference_time: datetime | None,
             recent_context: list[str] | None = None, known_speakers: Sequence[str] = ()) -> QueryPlan:
        ref = _reference(reference_time)
        window = parse_time_window(query, ref)
        keywords = query_keywords(query)
        entities = find_entities(query)
        speakers = match_speakers(query, known_speakers)
        for s in speakers:
            if s.lower() not in {e.lower() for e in entities}:
                entities.append(s)
        if recent_context and not entities and _PRONOUN.search(query):
            # "what did she bring?" right after talking about Anna: search for Anna too.
            for line in reversed(recent_context[-2:]):
                for name in find_entities(line):
                    if name.lower() not in {e.lower() for e in entities}:
                        entities.append(name)
                        keywords.append(name.lower())
        complexity = estimate_complexity(query, entities, keywords, window is not None)
        k = k_for(complexity) + (5 if complexity == "complex" and len(entities) >= 3 else 0)
        hqs = [HypotheticalQuery(text=query.strip() or query, route="any")]
        return QueryPlan(
            query=query, hqs=hqs, keywords=keywords,
            time_from=window.time_from if window else None, time_to=window.time_to if window else None,
            time_strict=window.strict if window else True,
            time_phrases=list(window.phrases) if window else [],
            speakers=speakers, speaker_filter=asks_what_said(query, speakers), entities=entities,
            complexity=complexity, k=max(K_MIN, min(K_MAX, k)), source="rules",
            state=(state := question_state(query, explicit=True)), expansions=change_words(query, state),
        )


class _HQOut(BaseModel):
    text: str
    route: str = "mtm"


class PlanOutput(BaseModel):
    """The JSON the planning LLM must produce (validated by the LLM client)."""

    queries: list[_HQOut] = Field(min_length=1)
    keywords: list[str] = Field(default_factory=list)
    time_from: str | None = None
    time_to: str | None = None
    speakers: list[str] = Field(default_factory=list)
    entities: list[str] = Field(default_factory=list)
    complexity: str = "moderate"
    k: int | None = None


def _parse_bound(raw: str | None, ref: datetime, *, end: bool) -> float | None:
    """An ISO date or datetime from the LLM → unix seconds; a bare date covers its whole day."""
    if not raw or not raw.strip():
        return None
    text = raw.strip().replace("Z", "+00:00")
    tz = ref.tzinfo or UTC
    try:
        if len(text) <= 10:
            d = date.fromisoformat(text)
            day = datetime.combine(d + timedelta(days=1) if end else d, time(0), tzinfo=tz)
            return day.timestamp() - (0.001 if end else 0.0)
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    return (dt if dt.tzinfo else dt.replace(tzinfo=tz)).timestamp()


def _sane_window(lo: float | None, hi: float | None, ref: datetime) -> tuple[float | None, float | None]:
    """Drop bounds outside 1970..reference+1 year, and order the pair."""
    limit = ref.timestamp() + 366 * 86400
    lo = lo if lo is not None and 0 <= lo <= limit else None
    hi = hi if hi is not None and 0 <= hi <= limit else None
    if lo is not None and hi is not None and lo > hi:
        lo, hi = hi, lo
    return lo, hi


def _merged_terms(*lists: Sequence[str], cap: int = 16) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for items in lists:
        for item in items:
            s = item.strip() if isinstance(item, str) else ""
            if s and s.lower() not in seen:
                seen.add(s.lower())
                out.append(s)
    return out[:cap]


class LLMPlanner:
    """Plans with the LLM (stage ``plan``); an unusable answer gives the rules plan instead."""

    def __init__(self, llm: LLMClient, fallback: RulePlanner | None = None) -> None:
        self.llm = llm
        self.fallback = fallback or RulePlanner()

    def plan(self, query: str, *, reference_time: datetime | None,
             recent_context: list[str] | None = None, known_speakers: Sequence[str] = ()) -> QueryPlan:
        ref = _reference(reference_time)
        rules = self.fallback.plan(query, reference_time=ref, recent_context=recent_context,
                                   known_speakers=known_speakers)
        messages = plan_prompt.build_messages(query, reference_time=ref, recent_context=recent_context or (),
                                              known_speakers=known_speakers)

        def attempt() -> QueryPlan:
            out = self.llm.complete_json(messages, PlanOutput, stage="plan")
            try:
                return self._merge(query, out, rules, ref, known_speakers)
            except (ValidationError, ValueError) as exc:
                raise LLMOutputError(f"unusable plan: {exc}", stage="plan") from exc

        return with_fallback(self.llm, "plan", attempt, lambda: rules)

    @staticmethod
    def _merge(query: str, out: PlanOutput, rules: QueryPlan, ref: datetime,
               known_speakers: Sequence[str]) -> QueryPlan:
        hqs: list[HypotheticalQuery] = []
        for q in out.queries:
            text = q.text.strip()
            if text and text.lower() not in {h.text.lower() for h in hqs}:
                route = q.route.strip().lower()
                hqs.append(HypotheticalQuery(text=text, route=route if route in ("mtm", "ltm") else "any"))
        if not hqs:
            raise ValueError("the plan has no usable query")
        hqs = hqs[:MAX_HQS]
        if len(hqs) < MAX_HQS and query.strip().lower() not in {h.text.lower() for h in hqs}:
            hqs.append(HypotheticalQuery(text=query.strip(), route="any"))  # the raw question stays a view
        # Calendar arithmetic from the rules is exact; the LLM's window is used only for phrases
        # the rules do not know ("around Christmas", "when she was in college").
        if rules.has_window:
            lo, hi, strict = rules.time_from, rules.time_to, rules.time_strict
        else:
            a, b = out.time_from, out.time_to
            lo, hi = _parse_bound(a, ref, end=False), _parse_bound(b, ref, end=True)
            if lo is not None and hi is not None and lo > hi:  # given the wrong way round
                lo, hi = _parse_bound(b, ref, end=False), _parse_bound(a, ref, end=True)
            lo, hi = _sane_window(lo, hi, ref)
            strict = True
        known = {s.lower(): s for s in known_speakers}
        llm_speakers = [known[s.strip().lower()] for s in out.speakers if s.strip().lower() in known]
        speakers = _merged_terms(rules.speakers, llm_speakers)
        complexity = out.complexity.strip().lower()
        if complexity not in _K_FOR:
            complexity = rules.complexity
        k = out.k if out.k is not None else k_for(complexity)
        return QueryPlan(
            query=query, hqs=hqs, keywords=_merged_terms(out.keywords, rules.keywords),
            time_from=lo, time_to=hi, time_strict=strict, time_phrases=rules.time_phrases,
            speakers=speakers, speaker_filter=rules.speaker_filter and bool(speakers),
            entities=_merged_terms(out.entities, rules.entities), complexity=complexity,
            k=max(K_MIN, min(K_MAX, int(k))), source="llm", state=rules.state, expansions=rules.expansions,
        )
