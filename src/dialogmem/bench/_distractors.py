"""The haystack's distractor turns: other conversations in disguise, and generated everyday chat.

The recipe (``RECIPE_VERSION``), for one needle conversation and a size H:

* Half the turns are copies of the *other* conversations of the data file (never the needle): each
  copy replaces the speakers and every other proper noun (a capitalised word the conversation never
  writes in lower case and that does not start a sentence) with invented people and places
  (``_chatgen.PEOPLE``, ``PLACES``), the same way throughout the copy and differently in each copy,
  and shifts the years its text mentions by the copy's own shift.
* The other half is generated chat between invented people (``_chatgen.chat_session``), in threads
  of 2–10 sessions of 4–24 turns.
* Sessions get dates spread over ``years_before`` years before the needle's first session and up to
  its last one, so some fall between the needle's sessions; a copy keeps the spacing of its
  original sessions. Turns are given in time order.
* A turn that contains one of the needle's answers (``normalize_answer`` of both, whole words; answers
  shorter than ``MIN_ANSWER_CHARS`` are too common to check) or a needle speaker's name is dropped,
  and counted. The needle's speaker names are never drawn as invented names.

Everything is seeded: the same (data, needle, H, seed) gives the same turns, ids and times.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel

from ._chatgen import PEOPLE, PLACES, chat_session
from ._loaders import BenchConversation, BenchSession
from ._metrics import normalize_answer

RECIPE_VERSION = "haystack-1"
#: shorter normalised answers ("yes", "7", "two") are words any chat uses, not a leaked answer
MIN_ANSWER_CHARS = 4
#: the share of distractor turns copied from other conversations (when there are any)
COPY_SHARE = 0.5

_TOKEN = re.compile(r"[A-Za-z]+")
_CAPITALISED = re.compile(r"[A-Z][a-z]+")
_YEAR = re.compile(r"\b(19[5-9][0-9]|20[0-4][0-9])\b")
_PLACE_CUES = frozenset({"in", "to", "at", "from", "visited", "visiting", "near", "around", "toward", "towards"})
#: capitalised words that are not names of people or places
_NOT_NAMES = frozenset({
    "I", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "January", "February",
    "March", "April", "May", "June", "July", "August", "September", "October", "November", "December",
    "Mom", "Dad", "Mum", "God", "Christmas", "Easter", "Halloween", "Thanksgiving", "OK", "Ok", "Hey", "Hi",
    "Wow", "Oh", "Thanks", "Yes", "No", "Yeah", "English", "Mr", "Mrs", "Ms", "Dr",
})


class DistractorTurn(BaseModel):
    """One distractor turn, in the order it is fed; ``id`` never looks like a LoCoMo dia_id."""

    id: str
    session_id: str
    time: datetime
    speaker: str
    text: str


class RecipeReport(BaseModel):
    """What the recipe made for one needle and H, and what its answer filter dropped."""

    recipe: str = RECIPE_VERSION
    turns: int = 0
    sessions: int = 0
    copied_turns: int = 0
    generated_turns: int = 0
    copies: int = 0
    chat_threads: int = 0
    sources: list[str] = []
    answers_checked: int = 0
    answers_too_short: int = 0
    dropped_answer: int = 0
    dropped_name: int = 0
    first_time: datetime | None = None
    last_time: datetime | None = None


class AnswerFilter:
    """Says why a distractor line may not be used: it contains a needle answer, or a needle speaker's name."""

    def __init__(self, needle: BenchConversation) -> None:
        answers = {normalize_answer(q.answer) for q in needle.questions if q.answer.strip()}
        self.checked = sorted(a for a in answers if len(a) >= MIN_ANSWER_CHARS)
        self.too_short = len({a for a in answers if a} - set(self.checked))
        alternatives = "|".join(re.escape(a) for a in sorted(self.checked, key=len, reverse=True))
        self._answers = re.compile(rf"(?<!\S)(?:{alternatives})(?!\S)") if self.checked else None
        names = [re.escape(s) for s in needle.speakers if s.strip()]
        self._names = re.compile(rf"\b(?:{'|'.join(names)})\b", re.IGNORECASE) if names else None

    def reason(self, speaker: str, text: str) -> Literal["answer", "name"] | None:
        if self._names is not None and (self._names.search(text) or self._names.search(speaker)):
            return "name"
        if self._answers is not None and self._answers.search(normalize_answer(text)):
            return "answer"
        return None


def proper_nouns(conv: BenchConversation) -> dict[str, Literal["person", "place"]]:
    """The conversation's names of people and places as a substitution must see them: the speakers,
    and each capitalised word never written in lower case that appears inside a sentence (a place
    when it mostly follows a word like "in" or "to")."""
    lower: set[str] = set()
    votes: dict[str, list[int]] = {}
    for turn in conv.turns():
        previous = ""
        for match in _TOKEN.finditer(turn.text):
            word = match.group(0)
            before = turn.text[:match.start()].rstrip()
            starts_sentence = not before or before[-1] in ".!?\"'(:"
            if word.islower():
                lower.add(word.lower())
            elif _CAPITALISED.fullmatch(word) and not starts_sentence and word not in _NOT_NAMES:
                place = previous.lower() in _PLACE_CUES
                counts = votes.setdefault(word, [0, 0])
                counts[1 if place else 0] += 1
            previous = word
    out: dict[str, Literal["person", "place"]] = {
        w: "place" if c[1] > c[0] else "person" for w, c in votes.items() if w.lower() not in lower}
    for speaker in conv.speakers:
        out[speaker] = "person"
    return out


@dataclass
class _Copy:
    """One disguised copy of a source conversation: its word map and year shift."""

    pattern: re.Pattern[str] | None
    names: dict[str, str]
    year_shift: int

    def apply(self, text: str) -> str:
        if self.pattern is not None:
            text = self.pattern.sub(lambda m: self.names[m.group(0)], text)
        if self.year_shift:
            text = _YEAR.sub(lambda m: str(int(m.group(0)) + self.year_shift), text)
        return text


@dataclass(frozen=True)
class _Planned:
    """A distractor session to write: where its lines come from, how many of its kept lines to take."""

    time: datetime
    order: int
    kind: Literal["copy", "chat"]
    key: tuple[int, int, int]  # copy: (source, copy, session); chat: (thread, session, turns)
    take: int


@dataclass
class DistractorRecipe:
    """The distractors of one needle: ``plan(h)`` fixes which sessions, ``turns()`` yields them in time order."""

    needle: BenchConversation
    sources: Sequence[BenchConversation]
    seed: int = 0
    years_before: float = 4.0
    report: RecipeReport = field(default_factory=RecipeReport)
    _plan: list[_Planned] = field(default_factory=list)
    _copies: dict[tuple[int, int], _Copy] = field(default_factory=dict)
    _nouns: dict[int, dict[str, Literal["person", "place"]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.sources = [s for s in self.sources if s.id != self.needle.id]
        self.filter = AnswerFilter(self.needle)
        taken = {s.casefold() for s in self.needle.speakers}
        self._people = [p for p in PEOPLE if p.casefold() not in taken]
        self._places = [p for p in PLACES if p.casefold() not in taken]
        times = [s.time for s in self.needle.sessions if s.time is not None]
        self._end = max(times) if times else datetime(2023, 1, 1)
        first = min(times) if times else self._end
        self._start = first - timedelta(days=365.25 * self.years_before)
        self.report = RecipeReport(sources=[s.id for s in self.sources], answers_checked=len(self.filter.checked),
                                   answers_too_short=self.filter.too_short)

    # -- planning ---------------------------------------------------------------------------------
    def plan(self, h: int) -> RecipeReport:
        """Choose sessions until exactly ``h`` kept turns (the last session chosen may be cut short)."""
        self._plan = []
        copied = generated = copies = threads = 0
        while copied + generated < h:
            use_copy = bool(self.sources) and copied <= generated * COPY_SHARE / (1 - COPY_SHARE)
            if use_copy:
                added = self._plan_copy(copies, h - copied - generated)
                copies += 1
                copied += added
            else:
                added = self._plan_thread(threads, h - copied - generated)
                threads += 1
                generated += added
        r = self.report
        r.turns, r.copied_turns, r.generated_turns = copied + generated, copied, generated
        r.sessions, r.copies, r.chat_threads = len(self._plan), copies, threads
        times = [p.time for p in self._plan]
        r.first_time, r.last_time = (min(times), max(times)) if times else (None, None)
        return r

    def _plan_copy(self, n: int, room: int) -> int:
        source_i, copy_i = n % len(self.sources), n // len(self.sources)
        source = self.sources[source_i]
        origin, begin = self._copy_times(source_i, copy_i)
        rng = random.Random(f"{self.seed}:copy:{source_i}:{copy_i}:minutes")
        added = 0
        for j, session in enumerate(source.sessions):
            if added >= room:
                break
            when = begin + ((session.time or origin) - origin) + timedelta(minutes=rng.randrange(0, 60))
            kept = len(self._copy_lines(source_i, copy_i, session, count=True))
            take = min(kept, room - added)
            if take:
                self._plan.append(_Planned(when, len(self._plan), "copy", (source_i, copy_i, j), take))
                added += take
        return added

    def _plan_thread(self, n: int, room: int) -> int:
        rng = random.Random(f"{self.seed}:thread:{n}")
        added = 0
        span = (self._end - self._start).total_seconds()
        for j in range(rng.randint(2, 10)):
            if added >= room:
                break
            turns = rng.randint(4, 24)
            when = (self._start + timedelta(seconds=rng.random() * span)).replace(second=0, microsecond=0)
            kept = len(self._chat_lines(n, j, turns, count=True))
            take = min(kept, room - added)
            if take:
                self._plan.append(_Planned(when, len(self._plan), "chat", (n, j, turns), take))
                added += take
        return added

    # -- writing ----------------------------------------------------------------------------------
    def turns(self) -> Iterator[DistractorTurn]:
        """The planned turns in time order (a session's own order within it), with fresh ids."""
        n = 0
        for k, p in enumerate(sorted(self._plan, key=lambda p: (p.time, p.order))):
            if p.kind == "copy":
                source_i, copy_i, j = p.key
                lines = self._copy_lines(source_i, copy_i, self.sources[source_i].sessions[j])
            else:
                lines = self._chat_lines(*p.key)
            sid = f"hs{k:07d}"
            for speaker, text in lines[:p.take]:
                yield DistractorTurn(id=f"h{n:08d}", session_id=sid, time=p.time, speaker=speaker, text=text)
                n += 1

    def _kept(self, lines: list[tuple[str, str]], count: bool) -> list[tuple[str, str]]:
        kept = []
        for speaker, text in lines:
            why = self.filter.reason(speaker, text)
            if why is None:
                kept.append((speaker, text))
            elif count and why == "answer":
                self.report.dropped_answer += 1
            elif count:
                self.report.dropped_name += 1
        return kept

    def _copy_lines(self, source_i: int, copy_i: int, session: BenchSession, *,
                    count: bool = False) -> list[tuple[str, str]]:
        copy = self._copy(source_i, copy_i)
        lines = [(copy.names.get(t.speaker, t.speaker), copy.apply(t.text)) for t in session.turns]
        return self._kept(lines, count)

    def _chat_lines(self, thread: int, session: int, n_turns: int, *, count: bool = False) -> list[tuple[str, str]]:
        who = random.Random(f"{self.seed}:thread:{thread}:people")
        pair = who.sample(self._people, 2)
        friends = [p for p in who.sample(self._people, 6) if p not in pair]
        rng = random.Random(f"{self.seed}:thread:{thread}:session:{session}")
        lines = chat_session(rng, (pair[0], pair[1]), n_turns, friends=friends, places=self._places)
        return self._kept(lines, count)

    def _copy(self, source_i: int, copy_i: int) -> _Copy:
        found = self._copies.get((source_i, copy_i))
        if found is not None:
            return found
        source = self.sources[source_i]
        nouns = self._nouns.get(source_i)
        if nouns is None:
            nouns = self._nouns[source_i] = proper_nouns(source)
        rng = random.Random(f"{self.seed}:copy:{source_i}:{copy_i}:names")
        pools = {"person": rng.sample(self._people, len(self._people)),
                 "place": rng.sample(self._places, len(self._places))}
        used = {"person": 0, "place": 0}
        names: dict[str, str] = {}
        for word in sorted(nouns):
            kind = nouns[word]
            pool, i = pools[kind], used[kind]
            names[word] = pool[i % len(pool)] + ("" if i < len(pool) else f" {pool[(i // len(pool)) % len(pool)]}")
            used[kind] += 1
        alternatives = "|".join(re.escape(w) for w in sorted(names, key=len, reverse=True))
        pattern = re.compile(rf"\b(?:{alternatives})\b") if names else None
        origin, begin = self._copy_times(source_i, copy_i)
        copy = self._copies[(source_i, copy_i)] = _Copy(pattern, names, begin.year - origin.year)
        return copy

    def _copy_times(self, source_i: int, copy_i: int) -> tuple[datetime, datetime]:
        """(the source's first session time, the copy's): the copy starts at a seeded point of the
        timeline from which all of its sessions, spaced as in the source, end before the needle's last."""
        dated = [s.time for s in self.sources[source_i].sessions if s.time is not None]
        origin = min(dated, default=self._end)
        span = max(dated, default=origin) - origin
        latest = max(self._start, self._end - span - timedelta(days=1))
        draw = random.Random(f"{self.seed}:copy:{source_i}:{copy_i}").random()
        return origin, (self._start + (latest - self._start) * draw).replace(second=0, microsecond=0)
