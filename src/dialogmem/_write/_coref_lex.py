"""Candidate antecedents in one turn, for the rule coreference of ``_coref``.

A candidate is a person or pet (``animate``) or a ``place`` that a later pronoun may point to. Its
``label`` is what a pronoun resolves to ("Jean", "Maria's cousin", "the beach"); a candidate that
cannot be named without guessing ("a little girl", "his son", "a cafe") has ``label=None``: it only
stops another candidate from being the only one. ``key`` says which mentions are the same thing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from .._text._words import entities as extract_entities

Gender = Literal["f", "m"] | None
MAX_NAMES = 50  # distinct names looked up per text: a chat turn has far fewer
CandidateKind = Literal["animate", "place"]


@dataclass(frozen=True)
class Candidate:
    key: str
    label: str | None
    kind: CandidateKind
    gender: Gender
    start: int
    end: int
    aliases: frozenset[str] = frozenset()  # keys of other mentions of the same thing
    initial: bool = False  # a one-word name seen only at a sentence start ("Guess", "Keep")


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_FEMALE = _words("""mom mother mum mommy sister daughter wife girlfriend aunt grandma grandmother
granny niece granddaughter lady woman girl stepmom stepmother stepdaughter actress""")
_MALE = _words("""dad father daddy brother son husband boyfriend uncle grandpa grandfather nephew
grandson man guy boy stepdad stepfather stepson""")
_NEUTRAL = _words("""friend cousin partner boss coworker co-worker colleague neighbor neighbour
teacher coach mentor kid child baby toddler roommate buddy pal teammate therapist doctor instructor
student classmate youngest oldest eldest sibling fiance fiancé fiancee spouse bestie dog cat puppy
pup kitten pet horse bird parrot rabbit bunny hamster turtle tortoise fish snake lizard stranger person
actor writer author singer artist player character hero customer client member volunteer veteran
officer nurse guest host owner""")
_PARENTS = frozenset(_words("""mom mother mum mommy dad father daddy grandma grandmother granny grandpa
grandfather"""))
_GENDER: dict[str, Gender] = {**{w: "f" for w in _FEMALE}, **{w: "m" for w in _MALE},
                              **{w: None for w in _NEUTRAL}, "guinea pig": None}
_PLACE_NOUNS = _words("""beach park lake museum cafe café restaurant bar pub city town village
country school college university campus church temple library gym studio mountains mountain forest
woods shelter hospital clinic office store shop bookstore mall market zoo farm camp campsite
campground garden island river trail theater theatre cinema stadium arena venue hotel resort airport
station house apartment neighborhood neighbourhood concert festival conference event party workshop
convention parade fair retreat center centre gallery club spa bakery wedding ceremony""")
_PLACE_HEADS = frozenset(_words("""Park Beach Lake Street St Avenue Ave Road Museum City Hospital Cafe
Café Restaurant Mountains Mountain Mount Island Islands River Center Centre Library School University
College Church Hotel Zoo Garden Gardens Bay Valley Falls Canyon Forest Trail County Square Station
Airport Mall Market Theater Theatre Stadium Arena Hall Bar Pub Bakery Gallery Studio Gym Coast Shore
Harbor Harbour Village Town Springs Bridge Tower Castle Palace Temple Cathedral Hills Desert Peak
Ranch Farm Resort Lodge Club Camp Institute Academy"""))


def _alternation(words: Sequence[str]) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


# Up to two lower-case modifiers ("this amazing woman", "my little sister"), never a determiner.
_ADJ = (r"(?:(?!(?:my|your|our|his|her|their|the|a|an|this|that|and|or|but|to|of|with|in|on|at"
        r"|for)\b)[a-z-]+\s+){0,2}?")
_ANIMATE_NP = re.compile(
    rf"(?:\b(?P<det>my|your|our|his|her|their|a|an|the|this|that|another|some)|(?P<gen>['’]s))\s+"
    rf"(?P<mod>{_ADJ})(?P<noun>{_alternation(list(_GENDER))})(?![-\w])"
    r"|\b(?P<someone>someone|somebody)(?=\s+(?:named|called)\b)",
    re.IGNORECASE,
)
_PLACE_NP = re.compile(
    rf"\b(?P<det>the|my|our|your|this|that|a|an)\s+(?P<mod>{_ADJ})"
    rf"(?P<noun>{_alternation(_PLACE_NOUNS)})(?![-\w])",
    re.IGNORECASE,
)
_MOTION = (r"trip|been|went|go|going|gone|goes|moved|move|moving|travel|traveled|travelled|traveling"
           r"|travelling|flew|fly|flying|drove|drive|driving|headed|heading|back|vacation|came|come"
           r"|coming|returned|return|relocated")
_LOCATIVE_BEFORE = re.compile(
    rf"(?:\b(?:in|at|near|around|across|through|toward|towards|into|visited|visit|visiting"
    rf"|explored|exploring)|\b(?:{_MOTION})\s+to)\s+(?:the\s+)?$",
    re.IGNORECASE,
)
_PREDICATE = re.compile(r"\b(?P<subject>\w+)(?:\s+(?:is|was|are|were|be|been|being|become|became|am)"
                        r"|['’](?:s|m|re))(?:\s+(?:such|quite|really|truly|also|just|still|so))?\s+$",
                        re.IGNORECASE)
_POINTING = frozenset({"this", "that", "it", "here", "there", "which", "who"})
_OWNED_PLACE = re.compile(rf"['’]s\s+(?P<noun>{_alternation(_PLACE_NOUNS)})(?![-\w])", re.IGNORECASE)
_ARTICLE_BEFORE = re.compile(r"\b(?:the|this|that)\s+(?:['’]?\d+\s+)?$", re.IGNORECASE)
_NAMED_AFTER_NP = re.compile(r"\s*(?:(?:named|called|is|was)\s+)?")  # "my favourite is Aragorn"
_COMMA = re.compile(r"\s*,\s*")
_APPOSITION_END = re.compile(r"\s*(?:[,.;:!?)]|$)")
_SUBJECT_VERB = re.compile(
    r"['’]s\b|\s+(?:is|was|has|had|must|will|would|can|could|might|looks|seems|loves|likes|got|gets"
    r"|said|says|went|came|told|made|took|gave|found|left|met|saw|did)\b|\s+(?:and|&)\s+[A-Z]")
_NAME_IS = re.compile(r"\b(?P<pro>his|her)\s+name(?:\s+is|['’]s|\s+was)\s+$", re.IGNORECASE)
_POSSESSED = re.compile(r"(?:my|our|your|his|her|the|a|an)\b", re.IGNORECASE)
# Initials or a title before a surname: "J.K. Rowling", "Dr. Smith" (the lexical rules split them).
_TITLED = re.compile(r"\b(?:(?P<initials>(?:[A-Z]\.\s?){1,3})|(?P<title>Dr|Mr|Mrs|Ms|Prof)\.?\s)"
                     r"[A-Z][a-z]+(?:\s[A-Z][a-z]+)?\b")
_TITLE_GENDER: dict[str, Gender] = {"Mr": "m", "Mrs": "f", "Ms": "f"}
_SENTENCE_END = frozenset(".!?:;\"“”(\n")
_MASK = re.compile(r"\[[^\[\]\n]{0,80}\]|\([^()\n]{0,40}\d{4}[^()\n]{0,40}\)|\"[^\"\n]{0,200}\"|“[^“”\n]{0,200}”")


def scan_candidates(text: str, *, speaker: str, addressee: str | None,
                    parties: Sequence[str]) -> list[Candidate]:
    """The candidates mentioned in ``text`` (said by ``speaker`` to ``addressee``), in text order;
    the parties themselves (and their short forms, "Mel" for "Melanie") are never candidates."""
    clean = _MASK.sub(lambda m: " " * len(m.group(0)), text)
    nps = [*_noun_phrases(clean, _ANIMATE_NP, "animate", speaker, addressee),
           *_noun_phrases(clean, _PLACE_NP, "place", speaker, addressee)]
    out: list[Candidate] = []
    used: set[int] = set()
    for name, start, end in _name_spans(clean):
        if _is_party(name, parties) or name.removesuffix("s").isupper():  # "LGBTQ", "DIYs"
            continue
        cand = _name_candidate(clean, name, start, end, speaker)
        if cand is None:
            continue
        partner = _apposition(clean, cand, nps)
        if partner is not None:
            used.add(partner)
            np = nps[partner]
            cand = replace(cand, kind=np.kind, gender=np.gender or cand.gender, initial=False,
                           start=min(cand.start, np.start), end=max(cand.end, np.end),
                           aliases=frozenset({np.key}) if np.label else frozenset())
        out.append(cand)
    out.extend(np for i, np in enumerate(nps) if i not in used)
    return sorted(out, key=lambda c: c.start)


def _noun_phrases(clean: str, pattern: re.Pattern[str], kind: CandidateKind, speaker: str,
                  addressee: str | None) -> list[Candidate]:
    out = []
    for m in pattern.finditer(clean):
        if kind == "animate" and _predicative(clean, m.start()):
            continue  # "LeBron is the man", "I'm a mom": the subject again, not someone new
        if kind == "animate" and m.group("someone"):
            out.append(Candidate(f"np:{m.group(0).lower()}", None, kind, None, m.start(), m.end()))
            continue
        det = (m.group("det") or "'s").lower()
        phrase = " ".join(f"{m.group('mod')}{m.group('noun')}".lower().split())
        owner = {"my": speaker, "our": speaker, "your": addressee}.get(det)
        label = f"{owner}'s {phrase}" if owner else ("the " + phrase if kind == "place" and det in (
            "the", "this", "that") else None)
        noun = " ".join(m.group("noun").lower().split())
        gender = _GENDER.get(noun) if kind == "animate" else None
        key = label.lower() if label else f"np:{det} {phrase}"
        out.append(Candidate(key, label, kind, gender, m.start(), m.end()))
    return out


def _predicative(clean: str, at: int) -> bool:
    said = _PREDICATE.search(clean[max(0, at - 30):at])
    return said is not None and said.group("subject").lower() not in _POINTING  # "this is my father"


def _name_spans(clean: str) -> list[tuple[str, int, int]]:
    spans = [(m.group(0), m.start(), m.end()) for m in _TITLED.finditer(clean)]
    rest = _TITLED.sub(lambda m: " " * len(m.group(0)), clean)
    for name in extract_entities(rest)[:MAX_NAMES]:  # each name is one pass over the text
        spans += [(name, m.start(), m.end())
                  for m in re.finditer(rf"(?<![\w'’.])(?<!\w-){re.escape(name)}(?!\w|-\w)", rest)]
    return sorted(spans, key=lambda s: s[1])


def _is_party(name: str, parties: Sequence[str]) -> bool:
    low = name.lower()
    return any(low == p.lower() or (len(low) >= 3 and p.lower().startswith(low)) for p in parties)


def _name_candidate(clean: str, name: str, start: int, end: int, speaker: str) -> Candidate | None:
    """A name as a candidate: the speaker's parent ("Mom"), a place, a person or pet; None for a
    name no pronoun "he"/"she" stands for: "the Finals", "The Wolves" (a person's name takes no
    article), "Lord of the Rings" (nor "of" / "the" inside)."""
    low = name.lower()
    if low in _PARENTS:  # "Mom said...": the speaker's mom
        label = f"{speaker}'s {low}"
        return Candidate(label.lower(), label, "animate", _GENDER[low], start, end)
    head = clean[max(0, start - 30):start]
    owned = _OWNED_PLACE.match(clean, end)
    if owned:  # "McGee's pub"
        label = f"{name}'s {owned.group('noun').lower()}"
        return Candidate(label.lower(), label, "place", None, start, owned.end())
    if name.split()[-1] in _PLACE_HEADS or _LOCATIVE_BEFORE.search(head):
        return Candidate(low, name, "place", None, start, end)
    if re.search(r"\s(?:of|the|&)\s", name) or _ARTICLE_BEFORE.search(head):
        return None
    said = _NAME_IS.search(head)
    titled = _TITLED.fullmatch(name)
    gender: Gender = _TITLE_GENDER.get(titled.group("title") or "") if titled else None
    if said:
        gender = "f" if said.group("pro").lower() == "her" else "m"
    # "Guess what", "Besides that": a capital that only opens a sentence is weak evidence of a
    # name; "Precious must have...", "Max looks..." read as a subject, hence a name.
    initial = (" " not in name and (not head.strip() or head.rstrip()[-1] in _SENTENCE_END)
               and (low == "let" or not _SUBJECT_VERB.match(clean, end)))
    return Candidate(low, name, "animate", gender, start, end, initial=initial)


def _apposition(clean: str, cand: Candidate, nps: Sequence[Candidate]) -> int | None:
    """The noun phrase that names the same thing as the name ``cand``: "my sister Anna", "a cat
    named Bailey", "Oscar, my guinea pig", "a puppy ... her name is Coco"; None when there is none."""
    for i, np in enumerate(nps):
        if np.end <= cand.start and _NAMED_AFTER_NP.fullmatch(clean, np.end, cand.start):
            return i
        # with a comma, only a closed apposition: "this woman, Jean, who..." (not "the theater,
        # Samantha loves theater")
        if (np.end <= cand.start and _COMMA.fullmatch(clean, np.end, cand.start)
                and _APPOSITION_END.match(clean, cand.end)):
            return i
        if cand.end <= np.start and _COMMA.fullmatch(clean, cand.end, np.start) and (
                _POSSESSED.match(clean, np.start)):
            return i
    if _NAME_IS.search(clean[max(0, cand.start - 30):cand.start]):
        before = [i for i, np in enumerate(nps) if np.end <= cand.start and np.kind == "animate"
                  and np.label is None]
        return before[-1] if before else None
    return None
