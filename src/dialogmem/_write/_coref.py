"""LLM-free coreference for one turn (seed 003's g_coref, done by rules where rules are safe).

``resolve(text, speaker=..., context=...)`` keeps the speaker's words and appends what a pronoun
refers to in square brackets, as ``absolutize`` does for dates: ``"she [Jean] stayed positive"``,
``"there [the beach]"``, ``"you [Melanie]"``. Nothing said is lost, and a second pass changes
nothing. The rules, and only these (anything else is left untouched):

- first person (I, me, my, mine, myself) → the speaker. Resolved always, written into the text only
  with ``mark_first_person=True``: a memory line is already prefixed with its speaker's name;
- second person (you, your, yours, yourself) → the addressee, when the session has exactly two
  parties (a first turn's "Hey Audrey, ..." names the other one); not when the turn addresses a
  group ("you guys", "both of you"), nor the fillers ", you know," / "you never know";
- third person singular (he, him, his, himself, she, her, hers, herself) → the one candidate (a
  person or pet other than the parties) that agrees with the pronoun's gender, looked for in tiers:
  the pronoun's own sentence, the sentence before it in the turn, then the ``recent`` context turns
  and the whole turn up to the pronoun. The nearest tier with any candidate decides: one → resolved,
  several → untouched. An object "him"/"her" never takes a candidate of its own clause ("Toby needs
  time with him": not Toby). Candidates are capitalised names not read as places ("the Finals",
  "Lord of the Rings" and one-word capitals seen only opening a sentence, like "Guess", are not
  names), and animate nouns: "my sister" becomes "Caroline's sister" (resolvable); "a little girl",
  "his son", "a stranger" cannot be named, so they only block. "my sister Anna", "this woman,
  Jean,", "a cat named Bailey", "Oscar, my guinea pig", "my favourite is Aragorn" are one
  candidate; "LeBron is the man" adds none. Gender comes from the noun (sister, son, woman...) or
  "her name is Coco"; a name alone agrees with both;
- "there" / "that place" → the one place found the same way: a name after a locative word ("in
  Paris", "trip to Rome"), with a place head ("Mercy Hospital"), "McGee's pub", or "the/my <place
  noun>" (beach, park, museum, concert, ...). Never the existential "there is", nor "hi there",
  "out there", "hang in there", "get there", "not there yet", "be there for someone"; and "the
  library there" does not make the library the place.

Quoted spans ("Becoming Nicole") and existing bracket annotations are neither resolved nor used as
candidates. Every regular expression here is linear (literal alternations, bounded repeats) and
the work per turn is bounded (``MAX_SEARCHED``, ``MAX_NAMES``). Measured on hand-annotated LoCoMo
turns by ``benchmarks/coref_eval.py``.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from ._coref_lex import Candidate, Gender, scan_candidates

Kind = Literal["first", "second", "third", "place"]
RECENT_TURNS = 4
MAX_SEARCHED = 64  # third-person / place mentions resolved per turn (bounds the work)

_PRONOUN = re.compile(
    r"\b(?:(?P<first>I|me|my|mine|myself)|(?P<second>you|your|yours|yourself)"
    r"|(?P<third>he|him|his|himself|she|her|hers|herself)|(?P<place>there|that place))\b"
    r"(?P<tail>['’](?:m|s|re|ve|ll|d)\b)?",
    re.IGNORECASE,
)
_FEMININE = frozenset({"she", "her", "hers", "herself"})
_OBJECT = frozenset({"him", "her"})
# "her family" is possessive; "calm her down", "used to her." are objects
_POSSESSED_NOUN = re.compile(
    r"\s+(?!(?:to|and|or|but|a|an|the|in|on|at|for|with|down|up|out|off|again|too|so|that|as|how"
    r"|when|about|of|from|back|over|around|into|there|here|home|now|then|yesterday|today|tomorrow"
    r"|because|if|is|was|very|more|lots|a lot|feel|know|find|get|go)\b)[a-z]")
_POSSESSIVE = frozenset({"my", "mine", "your", "yours", "his", "hers"})
_ANNOTATION = re.compile(r"\[[^\[\]\n]{0,80}\]")
_QUOTED = re.compile(r"\"[^\"\n]{0,200}\"|“[^“”\n]{0,200}”")
_VOCATIVE = re.compile(r"\s*(?i:hey|hi|hello|hiya|yo|dear|thanks|thank\s+you|congrats|congratulations)"
                       r"[,!]?\s+(?P<name>[A-Z][a-z]+)\s*[,!.?]")
_ANNOTATED_AFTER = re.compile(r"\s*\[")
_ADJACENT = re.compile(r"\s*")
_SENTENCE_BREAK = re.compile(r"(?<!\b[A-Z])(?<!\bDr)(?<!\bMr)(?<!\bMs)(?<!\bMrs)[.!?]+[\"”')]?\s+|\n+")
_PLURAL_YOU = re.compile(r"\byou\s+(?:guys|all|two|both|folks)\b|\b(?:both|all|each|either|any|some"
                         r"|none)\s+of\s+you\b|\by['’]all\b", re.IGNORECASE)
_YOU_NEVER_KNOW = re.compile(r"\s+never\s+know\b", re.IGNORECASE)
_YOU_KNOW_FILLER = re.compile(r"\s+know\s*(?:[,.!?]|$)", re.IGNORECASE)
# "there" + a verb is existential when it opens a clause ("and there was a guy"), locative after a
# noun or verb ("the architecture there was"); "be there for someone" and "there you go" are idioms.
_THERE_VERB_AFTER = re.compile(
    r"\s+(?:is|are|was|were|will|would|could|might|may|must|should|can|has|have|had|seems?|seemed"
    r"|used|isn['’]t|aren['’]t|wasn['’]t|weren['’]t|won['’]t|ain['’]t|be|been|goes)\b",
    re.IGNORECASE,
)
_CLAUSE_OPENER = re.compile(
    r"(?:^|[,.!?;:(\-–—]|\b(?:and|but|so|because|cause|that|if|when|while|since|though|although|as"
    r"|where|then|now|yes|yeah|well|oh|wow|also|still|maybe|probably|think|guess|know|hope|bet|sure"
    r"|said|says|say|feel|thought|believe|hoping|glad|wish))\s*$",
    re.IGNORECASE,
)
_THERE_IDIOM_AFTER = re.compile(
    r"\s+(?:yet|you\s+go|we\s+go|for\s+(?:me|you|him|her|them|us|each|someone|people|others|everyone"
    r"|anyone|one|my|his|their|our|your|the))\b",
    re.IGNORECASE,
)
# "hang in there", "you'll get there", "not there yet", "thanks for being there", "what you've got
# there": support, progress and pointing, no place
_THERE_BEFORE = re.compile(
    r"\b(?:hi|hey|hello|out|over|here\s+and|then\s+and|hang(?:ing)?\s+in|get|getting|got"
    r"|for\s+(?:always\s+|just\s+)?being)\s+$",
    re.IGNORECASE,
)
_BE_BEFORE = re.compile(r"\b(?:is|are|was|were|isn['’]t|aren['’]t|wasn['’]t|weren['’]t)\s+$",
                        re.IGNORECASE)
_EXISTENTIAL_AFTER = re.compile(
    r"\s+(?:a|an|any|anything|anyone|anybody|something|someone|some|no|nothing|one|many|much|more"
    r"|lots|plenty|always|another|still|such|enough)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Mention:
    """One resolved pronoun: its span in the input text (a contraction included: "she's")."""

    start: int
    end: int
    word: str
    kind: Kind
    referent: str


@dataclass(frozen=True)
class Resolved:
    """The annotated text and every resolved mention (also those not bracketed in ``text``)."""

    text: str
    mentions: tuple[Mention, ...]


def resolve(text: str, *, speaker: str, context: Sequence[tuple[str, str]] = (),
            participants: Sequence[str] = (), recent: int = RECENT_TURNS,
            mark_first_person: bool = False) -> Resolved:
    """Resolve the pronouns of ``text`` said by ``speaker``.

    ``context``: the preceding ``(speaker, text)`` turns of the same session, oldest first (the last
    turns of the previous batch included); ``participants``: other known parties of the session.
    Work is linear in the text: at most ``MAX_SEARCHED`` third-person / place mentions per turn
    are resolved (each looks at every candidate), later ones are left as they are.
    """
    parties = _parties(speaker, context, participants)
    if len(parties) == 1:  # a session's first turn: "Hey Audrey, ..." names the other party
        parties = _parties(speaker, context, [*participants, *_vocative(text, speaker)])
    addressee = _addressee_of(speaker, parties)
    before, here = _candidates(text, speaker, list(context)[-recent:] if recent > 0 else [], parties)
    you = None if _PLURAL_YOU.search(text) else addressee  # "you guys ... did you": whom?
    blocked = _Spans([*_ANNOTATION.finditer(text), *_QUOTED.finditer(text)])
    starts = _sentence_starts(text)
    mentions: list[Mention] = []
    searched = 0
    for m in _PRONOUN.finditer(text):
        if blocked.covers(m.start()):
            continue
        tiers: list[list[Candidate]] = []
        if (m.group("third") or m.group("place")) and searched < MAX_SEARCHED:
            searched += 1
            # "the library there" is the library at that place, not the place itself
            near = [c for c in here
                    if not (c.kind == "place" and _ADJACENT.fullmatch(text, c.end, m.start()))]
            tiers = _tiers(m.start(), starts, before, near)
        referent = _referent(m, text, speaker, you, tiers)
        if referent is not None:
            kind: Kind = next(k for k in ("first", "second", "third", "place") if m.group(k))
            mentions.append(Mention(m.start(), m.end(), m.group(0), kind, referent))
    return Resolved(_render(text, mentions, mark_first_person), tuple(mentions))


def _candidates(text: str, speaker: str, window: Sequence[tuple[str, str]],
                parties: tuple[str, ...]) -> tuple[list[Candidate], list[Candidate]]:
    """Candidates of the context window and of the turn itself, made consistent."""
    before: list[Candidate] = []
    for who, said in window:
        before.extend(scan_candidates(said, speaker=who, addressee=_addressee_of(who, parties),
                                      parties=parties))
    here = scan_candidates(text, speaker=speaker, addressee=_addressee_of(speaker, parties),
                           parties=parties)
    seen = [*before, *here]
    return _consistent(before, seen), _consistent(here, seen)


class _Spans:
    """Spans of the text that are not the speaker's words to resolve (annotations, quotes)."""

    def __init__(self, matches: Sequence[re.Match[str]]) -> None:
        merged: list[list[int]] = []
        for a, b in sorted(m.span() for m in matches):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        self._starts = [a for a, _ in merged]
        self._ends = [b for _, b in merged]

    def covers(self, pos: int) -> bool:
        i = bisect.bisect_right(self._starts, pos) - 1
        return i >= 0 and pos < self._ends[i]


def _sentence_starts(text: str) -> list[int]:
    return [0, *(m.end() for m in _SENTENCE_BREAK.finditer(text))]


def _tiers(at: int, starts: Sequence[int], before: Sequence[Candidate], here: Sequence[Candidate]
           ) -> list[list[Candidate]]:
    """Candidates by distance from a pronoun at ``at``: its own sentence (up to it), the sentence
    before it in this turn, then the whole window. The nearest tier with a candidate decides."""
    i = bisect.bisect_right(starts, at) - 1
    cur, prev = starts[i], starts[max(0, i - 1)]
    return [[c for c in here if cur <= c.start and c.end <= at],
            [c for c in here if prev <= c.start and c.end <= cur],
            [*before, *(c for c in here if c.end <= at)]]


def _consistent(cands: Sequence[Candidate], seen: Sequence[Candidate]) -> list[Candidate]:
    """Drop one-word names only ever seen opening a sentence — more often a common word ("Guess",
    "Besides") than a name — and read a name as a place everywhere once it is read as one."""
    named = {c.key for c in seen if not c.initial}
    places = {c.key for c in seen if c.kind == "place"}
    gender = {c.key: c.gender for c in seen if c.gender}  # "Her name's Coco": Coco is a she
    return [replace(c, kind="place", gender=None) if c.key in places
            else replace(c, gender=gender.get(c.key, c.gender))
            for c in cands if not c.initial or c.key in named]


def _vocative(text: str, speaker: str) -> list[str]:
    m = _VOCATIVE.match(text)
    return [m.group("name")] if m and m.group("name") != speaker else []


def _parties(speaker: str, context: Sequence[tuple[str, str]], participants: Sequence[str]
             ) -> tuple[str, ...]:
    return tuple(dict.fromkeys([speaker, *(who for who, _ in context), *participants]))


def _addressee_of(who: str, parties: tuple[str, ...]) -> str | None:
    others = [p for p in parties if p != who]
    return others[0] if len(others) == 1 else None


def _referent(m: re.Match[str], text: str, speaker: str, addressee: str | None,
              tiers: Sequence[Sequence[Candidate]]) -> str | None:
    if m.group("first"):
        return speaker
    if m.group("second"):
        return addressee if addressee and not _generic_you(text, m) else None
    if m.group("third"):
        word = m.group("third").lower()
        gender: Gender = "f" if word in _FEMININE else "m"
        if word in _OBJECT and not _POSSESSED_NOUN.match(text, m.end()):
            # "Toby needs time to get along with him": not Toby, who is in the same clause
            mates = {k for c in tiers[0] for k in (c.key, *c.aliases)}
            tiers = [[c for c in t if c.key not in mates] for t in tiers[1:]]
        return _nearest(tiers, lambda c: c.kind == "animate" and c.gender in (None, gender))
    if m.group("place").lower() == "there" and not _locative_there(text, m):
        return None
    return _nearest(tiers, lambda c: c.kind == "place")


def _nearest(tiers: Sequence[Sequence[Candidate]], fits: Callable[[Candidate], bool]) -> str | None:
    """The label of the one fitting thing in the nearest tier that has any; None when that tier
    has several, or only one that cannot be named."""
    for tier in tiers:
        things = _distinct([c for c in tier if fits(c)])
        if things:
            return things[0].label if len(things) == 1 else None
    return None


def _distinct(candidates: Sequence[Candidate]) -> list[Candidate]:
    """One candidate per thing (a name and its alias "Caroline's sister" are one thing)."""
    canonical: dict[str, str] = {}  # key or alias -> the key of the first mention of that thing
    merged: dict[str, Candidate] = {}
    for c in candidates:
        key = next((canonical[k] for k in (c.key, *c.aliases) if k in canonical), c.key)
        for k in (c.key, *c.aliases):
            canonical.setdefault(k, key)
        seen = merged.get(key)
        if seen is None or (seen.label is None and c.label is not None):
            merged[key] = c  # a named mention ("Anna") beats an alias ("Caroline's sister")
    return list(merged.values())


def _generic_you(text: str, m: re.Match[str]) -> bool:
    """"you never know", and ", you know," as a filler (but "let you know" is the addressee)."""
    if m.group("second").lower() != "you" or m.group("tail"):
        return False
    if _YOU_NEVER_KNOW.match(text, m.end()):
        return True
    head = text[max(0, m.start() - 40):m.start()].rstrip()
    return bool(_YOU_KNOW_FILLER.match(text, m.end())) and (not head or head[-1] in ",.!?;:")


def _locative_there(text: str, m: re.Match[str]) -> bool:
    if m.group("tail"):  # there's, there're, there'll: existential
        return False
    head = text[max(0, m.start() - 20):m.start()]
    if _THERE_IDIOM_AFTER.match(text, m.end()) or _THERE_BEFORE.search(head):
        return False
    if _THERE_VERB_AFTER.match(text, m.end()) and _CLAUSE_OPENER.search(head):
        return False
    return not (_BE_BEFORE.search(head) and _EXISTENTIAL_AFTER.match(text, m.end()))


def _render(text: str, mentions: Sequence[Mention], mark_first_person: bool) -> str:
    """Bracket the first mention of each referent (per turn), after the whole token."""
    done = {_plain(a.group(0)[1:-1]) for a in _ANNOTATION.finditer(text)}
    out: list[str] = []
    last = 0
    for mention in mentions:
        if mention.kind == "first" and not mark_first_person:
            continue
        if mention.referent in done or _ANNOTATED_AFTER.match(text, mention.end):
            continue
        done.add(mention.referent)
        label = mention.referent
        if mention.word.lower() in _POSSESSIVE:
            label = f"{label}'s"
        out.append(text[last:mention.end])
        out.append(f" [{label}]")
        last = mention.end
    out.append(text[last:])
    return "".join(out)


def _plain(label: str) -> str:
    return label[:-2] if label.endswith("'s") else label
