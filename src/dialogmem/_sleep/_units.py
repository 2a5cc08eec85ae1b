"""Knowledge units: what one MTM memory contributes to the LTM graph, and the LLM-free way to get them
(seed 000 Algorithm 3, lines 5-7, without a model).

``RuleUnitExtractor`` reads a memory text line by line (a leading "Speaker:" is dropped, date notes
such as "(2023-05-07)" too), de-identifies each line with the store's ``Deidentifier``, and per
sentence takes:

- *Entity* nodes: capitalised names ("Mercy Hospital", "LGBTQ") as the write path finds them;
- *Concept* nodes: noun phrases opened by a determiner or possessive ("a support group", "my
  dog" -> "support group", "dog"), at most three content words, the last not an adverb;
- ``IsA`` from "X is/was a|an|the Y", ``HasProperty`` from "X is/was Z" (Z a content word) and
  "X has/have Y", where X is a node of the sentence ending right before the verb;
- ``RelatedTo`` between nodes of the same sentence (co-occurrence), at most ``max_pairs``.

It is deliberately conservative: at most ``max_nodes`` nodes per memory (pattern nodes, then names,
then noun phrases), no node from a filler line, none made only of placeholders ("a person"), digits,
time words or generic nouns ("photo", "thing"); a one-word common noun ("kids", "life") is a node
only as part of an ``IsA`` / ``HasProperty`` pattern, unless ``single_word_concepts`` is set — alone
it is too general to be knowledge, and on LoCoMo it was most of the nodes. A past-tense word ends a
noun phrase ("the kids loved ..."); a one-word name that opens a sentence is not taken (its capital
may be the sentence's), except as the subject of a pattern ("Paris is a capital city").

It misses: noun phrases without a determiner ("I love pottery"), pronoun subjects ("it is great"
gives nothing), coordination ("cats and dogs are pets"), ``Implies`` (never produced without a
model), negation ("X is not a Y" gives no edge), and names of people who are not users of the store
(they may become Entity nodes: see ``_deid``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from itertools import combinations
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .._graph import EdgeType, NodeType, normalise
from .._text._words import entities, is_filler, memory_keywords
from .._types import MemoryRecord
from ._deid import PLACEHOLDER_WORDS, Deidentifier
from ._sensitive import drop_sensitive_sentences, sensitive_reason

_SPEAKER = re.compile(r"^[^:\n]{1,40}:\s")
_DATE_NOTE = re.compile(r"\([^()\n]{0,60}\d{4}[^()\n]{0,60}\)")
_SENTENCES = re.compile(r"[^.!?;\n]+")
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’&-]*")
_DETERMINERS = frozenset({
    "a", "an", "the", "my", "our", "your", "his", "her", "their", "this", "that", "these", "those", "some", "its"})
_COPULA = frozenset({"is", "was", "are", "were"})
# Nouns that name the medium or a filler, not a thing talked about ("a photo of a lake", "take a look").
_GENERIC = frozenset({
    "photo", "picture", "pic", "image", "thing", "stuff", "lot", "bit", "look", "way", "time"})
_LY_NOUNS = frozenset({
    "family", "supply", "rally", "ally", "reply", "fly", "belly", "jelly", "holly", "lily", "assembly",
    "butterfly", "monopoly", "anomaly", "bully", "dragonfly", "firefly", "july", "italy"})
# Evaluative or relative modifiers that say nothing about the thing itself ("a new pottery class").
_LOOSE_MODIFIERS = frozenset({
    "new", "old", "big", "little", "small", "good", "bad", "first", "last", "other", "same", "whole",
    "own", "few", "several", "huge", "real", "best", "favorite", "favourite", "different", "next"})
_HAVE = frozenset({"has", "have", "had"})
_ARTICLES = frozenset({"a", "an", "the"})
_NEGATION = frozenset({"not", "never", "no", "n't"})
MAX_PHRASE_WORDS = 3


class UnitNode(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str = Field(min_length=1)
    type: NodeType


class UnitEdge(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    type: EdgeType
    source: str  # node texts of the same unit
    target: str


class KnowledgeUnit(BaseModel):
    """De-identified knowledge drawn from one memory of one subject."""

    memory_id: str
    subject_key: str
    nodes: list[UnitNode] = Field(default_factory=list)
    edges: list[UnitEdge] = Field(default_factory=list)
    method: Literal["llm", "rule"] = "rule"


class RuleUnitExtractor:
    """LLM-free co-occurrence units (see the module docstring)."""

    def __init__(self, deid: Deidentifier, *, max_nodes: int = 5, max_pairs: int = 6,
                 single_word_concepts: bool = False) -> None:
        self._deid = deid
        self.max_nodes = max_nodes
        self.max_pairs = max_pairs
        self.single_word_concepts = single_word_concepts

    def extract(self, text: str) -> tuple[list[UnitNode], list[UnitEdge]]:
        """Nodes and edges of one memory text."""
        found: list[_Sentence] = []
        for line in text.splitlines():
            clean = self._clean_line(line)
            if clean:
                found += [_parse_sentence(s.group()) for s in _SENTENCES.finditer(clean)]
        return self._select(found)

    def units(self, records: Sequence[MemoryRecord], subject_key: Callable[[str], str]) -> list[KnowledgeUnit]:
        """One unit per record that yields any node; ``subject_key(user_id)`` gives the opaque key."""
        out = []
        for r in records:
            nodes, edges = self.extract(r.memory)
            if nodes:
                out.append(KnowledgeUnit(memory_id=r.id, subject_key=subject_key(r.user_id),
                                         nodes=nodes, edges=edges, method="rule"))
        return out

    def _clean_line(self, line: str) -> str | None:
        line = _DATE_NOTE.sub(" ", _SPEAKER.sub("", line.strip(), count=1))
        if not line.strip() or is_filler(line):
            return None
        clean = self._deid(line)  # contacts first: a phone number goes, the rest of its sentence stays
        # then no secret, id number, health condition or amount: the whole sentence goes
        return (drop_sensitive_sentences(clean) or None) if clean else None

    def _select(self, sentences: list[_Sentence]) -> tuple[list[UnitNode], list[UnitEdge]]:
        ranked: dict[str, UnitNode] = {}
        for tier in ("pattern", "entity", "phrase"):
            for s in sentences:
                for node in s.nodes[tier]:
                    if tier == "phrase" and not self.single_word_concepts and _single_common_noun(node):
                        continue
                    if len(ranked) < self.max_nodes and usable_node_text(node.text, self._deid):
                        ranked.setdefault(normalise(node.text), node)
        keep = {normalise(n.text): n.text for n in ranked.values()}
        edges: list[UnitEdge] = []
        seen: set[tuple[str, str, str]] = set()
        pairs = 0
        for s in sentences:
            candidates = list(s.edges)
            names = list(dict.fromkeys(n.text for t in ("pattern", "entity", "phrase") for n in s.nodes[t]))
            candidates += [UnitEdge(type="RelatedTo", source=a, target=b) for a, b in combinations(names, 2)]
            for e in candidates:
                a, b = normalise(e.source), normalise(e.target)
                if a == b or a not in keep or b not in keep:
                    continue
                pair = ("pair", min(a, b), max(a, b))
                key = pair if e.type == "RelatedTo" else (e.type, a, b)
                if key in seen or (e.type == "RelatedTo" and pairs >= self.max_pairs):
                    continue  # a typed edge makes RelatedTo between the same pair redundant
                seen.update((key, pair))
                pairs += e.type == "RelatedTo"
                edges.append(UnitEdge(type=e.type, source=keep[a], target=keep[b]))
        return list(ranked.values()), edges


def _single_common_noun(node: UnitNode) -> bool:
    return node.type == "Concept" and " " not in node.text.strip()


def usable_node_text(text: str, deid: Deidentifier) -> bool:
    """A node text with a content word, no placeholder, no sensitive value (``_sensitive``), and
    unchanged by de-identification."""
    words = [w.lower() for w in _WORD.findall(text)]
    if not words or any(w in PLACEHOLDER_WORDS for w in words) or normalise(text) in _GENERIC:
        return False
    if sensitive_reason(text) is not None:
        return False
    if not any(memory_keywords(w, 1) for w in words):
        return False
    return deid(text) == text


class _Sentence:
    """Nodes (by tier) and pattern edges of one sentence."""

    def __init__(self) -> None:
        self.nodes: dict[str, list[UnitNode]] = {"pattern": [], "entity": [], "phrase": []}
        self.edges: list[UnitEdge] = []


def _parse_sentence(sentence: str) -> _Sentence:
    out = _Sentence()
    words = _WORD.findall(sentence)
    lower = [w.lower().replace("’", "'") for w in words]
    found = entities(sentence)
    entity_words = {w.lower() for e in found for w in e.split()}
    phrases = _phrases(words, lower)
    out.nodes["phrase"] = [UnitNode(text=p, type="Entity" if p[:1].isupper() else "Concept") for _, _, p in phrases]
    inside = " ".join(f" {p.lower()} " for _, _, p in phrases)
    opening = re.sub(r"['’]s$", "", words[0]) if words else ""  # "Let's" opens as "Let"
    out.nodes["entity"] = [UnitNode(text=e, type="Entity") for e in found
                           if f" {e.lower()} " not in inside  # "LGBTQ" inside "LGBTQ support group"
                           and e != opening]  # "Appreciate it", "Since then": capitalised by position
    for i, verb in enumerate(lower):
        if verb not in _COPULA and verb not in _HAVE:
            continue
        subject = _subject_before(words, lower, i, phrases, entity_words)
        if subject is None:
            continue
        edge = _pattern_edge(subject, verb, words, lower, i)
        if edge is not None:
            s_type: NodeType = "Entity" if subject[:1].isupper() else "Concept"
            out.nodes["pattern"] += [UnitNode(text=subject, type=s_type), UnitNode(text=edge.target, type="Concept")]
            out.edges.append(edge)
    return out


def _phrases(words: list[str], lower: list[str]) -> list[tuple[int, int, str]]:
    """(start, end, text) of determiner-led noun phrases; the determiner is not part of the text."""
    out = []
    for i, w in enumerate(lower[:-1]):
        if w not in _DETERMINERS:
            continue
        j = i + 1
        while j < len(words) and j - i <= MAX_PHRASE_WORDS and _phrase_word(lower[j]):
            j += 1
        while j > i + 1 and _adverb(words[j - 1]):
            j -= 1  # "a really" / "the only": an adverb is no head
        first = i + 1
        while first < j - 1 and lower[first] in _LOOSE_MODIFIERS:
            first += 1
        if j > i + 1 and lower[first] not in _LOOSE_MODIFIERS:
            out.append((first, j, " ".join(words[first:j])))
    return out


def _adverb(word: str) -> bool:
    return word.endswith("ly") and word.islower() and word not in _LY_NOUNS


def _phrase_word(word: str, *, participle: bool = False) -> bool:
    if not participle and len(word) > 4 and word.endswith("ed") and not word.endswith("eed"):
        return False  # "the kids loved": a past-tense verb ends the phrase
    return bool(memory_keywords(word, 1)) and word not in _NEGATION


def _subject_before(words: list[str], lower: list[str], i: int, phrases: list[tuple[int, int, str]],
                    entity_words: set[str]) -> str | None:
    """A noun phrase or a name that ends right before the verb at ``i``."""
    for _start, end, text in phrases:
        if end == i:
            return text
    j = i
    while j > 0 and lower[j - 1] in entity_words and i - j < MAX_PHRASE_WORDS:
        j -= 1
    return " ".join(words[j:i]) if j < i else None


def _pattern_edge(subject: str, verb: str, words: list[str], lower: list[str], i: int) -> UnitEdge | None:
    rest = lower[i + 1:]
    if not rest or rest[0] in _NEGATION:
        return None
    skip = 1 if rest[0] in _ARTICLES else 0
    j = i + 1 + skip
    while j + 1 < len(words) and lower[j] in _LOOSE_MODIFIERS and _phrase_word(lower[j + 1]):
        j += 1
    k = j
    while k < len(words) and k - j < MAX_PHRASE_WORDS and _phrase_word(lower[k], participle=k == j):
        k += 1
    if k == j:
        return None
    target = " ".join(words[j:k])
    if verb in _HAVE:
        return UnitEdge(type="HasProperty", source=subject, target=target)
    if skip:
        return UnitEdge(type="IsA", source=subject, target=target)
    return UnitEdge(type="HasProperty", source=subject, target=" ".join(words[j:j + 1]))
