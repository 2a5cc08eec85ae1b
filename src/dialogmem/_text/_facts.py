"""Mutable facts about people, read from one line of dialogue without a model (pure, no I/O).

A *claim* is one sentence's statement about a holder's mutable attribute: where they live, their
job, partner, pets, car, diet, favourites, plans, devices, the people in roles around them (manager,
coach, doctor), their school or gym, their hobbies. ``claims(text, speaker)`` finds them;
``supersedes(newer, older)`` says whether a newer claim replaces an older one, and
``question_state(query)`` whether a question asks about the present or the past.

Precision comes before recall: a wrong supersession hides a true fact, a missed one only leaves two
statements side by side. So a newer claim replaces an older one only when

* both are about the same holder (the speaker for "I"/"my", a relative of the speaker for "my
  sister", a named person for "Elena"; a sentence whose subject is a pronoun of another person has
  no holder and replaces nothing),
* they share an attribute kind,
* the newer one says that something changed ("moved", "switched", "new", "no longer", "not ...
  anymore", "actually", "instead", "postponed", ...), and what it names is not what the older one
  named ("I still live in Denver" changes nothing),
* and neither is a question, a hypothetical ("if", "might", "thinking about"), nor about someone
  else's plan.

Every pattern runs in linear time on any input (bounded alternations, no nested quantifiers).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from ._words import content_words, tokens

State = Literal["present", "past"]

# ---------------------------------------------------------------- attribute kinds

_EVENTS = (r"wedding|trip|vacation|holiday|honeymoon|flight|party|appointment|reunion|ceremony|recital|concert"
           r"|surgery|interview|move|launch|marathon|race|exam|graduation|birthday|visit|meeting")
_EVENT_RE = re.compile(rf"\b({_EVENTS})\b", re.I)
_THE_EVENT = re.compile(rf"^(?:the|this|that)\s+(?:\w+\s+)?({_EVENTS})\b", re.I)

_KINDS: dict[str, str] = {
    # "move" for a home only with where to ("moved to", "moving out"), not "moved some furniture"
    "residence": r"live[sd]?|living|mov(?:ed|ing|e)\s+(?:to|into|in|out|back|house|home|abroad|away|across|over"
                 r"|here|there|city|country|flat|apartment)|(?:have|has|'ve|just)\s+moved|relocat\w*|apartment"
                 r"|flat|neighbou?rhood|rent\w*"
                 r"|(?-i:here\s+in\s+[A-Z]\w+)|house|hometown|unpack\w*|boxes|commute|bedroom|landlord|lease"
                 r"|mortgage|neighbou?rs|moved\s+in",
    "job": r"job|jobs|work(?:s|ed|ing)?\s+(?:at|for|as)|started\s+at|employer|hired|promoted|career"
           r"|laid\s+off"
           r"|resign\w*|new\s+office|startup|freelanc\w*|intern\w*|(?:engineer|nurse|teacher|developer"
           r"|designer|analyst|consultant|accountant|lawyer|chef|barista|manager|architect|scientist)\s+at"
           r"|paramedics?|nurse|nursing|teacher|teaching|engineer|developer|programmer|analyst|consultant"
           r"|accountant|lawyer|solicitor|chef|baker|bakery|barista|architect|scientist|researcher|electrician"
           r"|plumber|carpenter|mechanic|pharmacist|librarian|journalist|editor|photographer|firefighter"
           r"|receptionist|apprentice\w*|trainee|colleagues|coworkers|shifts?|classroom|headteacher|salary"
           r"|clients|patients|contract",
    "relationship": r"dating|girlfriend|boyfriend|partner|married|marry|engaged|engagement|fianc[ée]e?|single"
                    r"|divorc\w*|broke\s+up|break\s+up|split\s+up|wife|husband|seeing\s+someone|relationship",
    "pet": r"dog|dogs|cat|cats|puppy|kitten|pet|pets|rabbit|hamster|parrot|adopt\w*|rehom\w*",
    "vehicle": r"car|cars|truck|motorbike|motorcycle|scooter|sedan|suv|van|hatchback|e-bike|vehicle|drive|drives"
               r"|driving|honda|toyota|tesla|ford|subaru|volkswagen|mazda|hyundai|kia|prius|jeep|volvo|nissan"
               r"|audi|bmw",
    "diet": r"vegan|vegetarian|keto|pescatarian|gluten|diet|dairy|eat(?:ing)?\s+meat|plant-based|sober|drinking",
    "favourite": r"favou?rites?|prefer\w*",
    "plan": _EVENTS + r"|postpon\w*|reschedul\w*|cancel\w*|booked",
    "device": r"phone|iphone|android|pixel|laptop|macbook|computer|tablet|ipad|smartwatch|kindle|headphones",
    "manager": r"managers?|boss|supervisor|team\s+lead",
    "coach": r"coach\w*|trainers?|tutors?|mentors?|instructors?|training\s+sessions?",
    "doctor": r"doctors?|gp|therapists?|dentists?|physio\w*|counsell?ors?",
    "school": r"school|university|college|course|degree|enrolled|studying|classes|bootcamp|masters?|phd",
    "gym": r"gym|fitness|crossfit|climbing\s+wall|bouldering|membership",
    "hobby": r"hobby|hobbies|took\s+up|taking\s+up|picked\s+up|gave\s+up|lessons|learning\s+to"
             r"|playing\s+the",
}
# every kind in one pattern, one named group each: one pass over a sentence finds all its kinds ("here in
# Denver" needs the capital: the rest is case-insensitive)
_ANY_KIND = re.compile("|".join(
    rf"\b(?P<{kind}>{p})\b" for kind, p in _KINDS.items()),
    re.I)
#: every attribute kind
ALL_KINDS = frozenset(_KINDS)
_KIND_RES = {kind: re.compile(rf"\b(?:{p})\b", re.I) for kind, p in _KINDS.items()}


def mentions_kind(text: str, kinds: Iterable[str]) -> bool:
    """Whether ``text`` has a word of one of ``kinds`` (a cheap test before ``claims``)."""
    return any(_KIND_RES[k].search(text) for k in kinds if k in _KIND_RES)


# the past of a place, not where one lives: never a residence claim
_NOT_RESIDENCE = re.compile(r"\b(?:grew\s+up|born|visit\w*|trip|holiday|vacation)\b", re.I)

# ---------------------------------------------------------------- cues

# Said of any attribute, these mean it changed.
_CHANGE = re.compile(
    r"\b(?:moved|moving\s+to|relocated|switched|switching|changed|anymore|any\s+more|no\s+longer|quit|left"
    r"|resigned|sold|replaced|upgraded|broke\s+up|split\s+up|divorced|gave\s+up|dropped|transferred"
    r"|postponed|rescheduled|pushed\s+(?:back|to)|cancell?ed|called\s+off|instead|actually|correction"
    r"|turns\s+out|i\s+meant|passed\s+away)\b", re.I)
# "new" only of the thing itself ("my new job", "a new coach"), not of anything ("new people")
_NEW_THING = re.compile(
    r"\bnew(?:ly)?\s+(?:\w+\s+)?(?:job|role|position|office|company|home|flat|apartment|house|place|city|car|bike"
    r"|phone|laptop|boss|manager|coach|trainer|doctor|gp|therapist|dentist|school|course|gym|partner|girlfriend"
    r"|boyfriend|dog|cat|puppy|kitten|pet|favou?rite|obsession|hobby|diet|headteacher|teacher|team|date)\b", re.I)
# Verbs that say a change only of some kinds ("started" a class, "adopted" a dog, "bought" a car).
_KIND_CHANGE = {
    kind: re.compile(rf"\b(?:{p})\b", re.I) for kind, p in {
        "job": r"started|starting|began|joined|promoted|hired|accepted|landed|took\s+(?:a|the)\s+job"
               r"|got\s+the\s+job|first\s+(?:week|day|month|shift)",
        "school": r"started|starting|began|joined|enrolled|first\s+(?:week|day|term)",
        "gym": r"started|starting|joined|signed\s+up|first\s+(?:week|session|class)",
        "hobby": r"started|starting|began|took\s+up|picked\s+up|taking\s+up",
        "pet": r"adopted|rehomed|got\s+(?:a|an)",
        "vehicle": r"bought|got\s+(?:a|an)|picked\s+up",
        "device": r"bought|got\s+(?:a|an)|caved",
        "relationship": r"got\s+(?:married|engaged)|engaged|married|seeing\s+someone|dating",
        "residence": r"first\s+(?:week|night|month)|unpacked",
        "manager": r"first\s+(?:week|day|meeting)",
        "coach": r"first\s+(?:week|session|training)",
        "doctor": r"first\s+(?:appointment|visit)",
        "favourite": r"obsess\w*|hooked",
    }.items()}


# one more of a thing is not a replacement: "we adopted another puppy", "got a second car"
_ADDITIVE = re.compile(r"\b(?:another|second|third|one\s+more|as\s+well|too)\b", re.I)
_COUNTABLE = frozenset({"pet", "vehicle", "device", "hobby"})


def _changed(sentence: str, kinds: frozenset[str]) -> frozenset[str]:
    """The kinds of the sentence that it says changed (a verb like "started" says it only of some)."""
    if _CONTINUE.search(sentence):
        return frozenset()
    if _CHANGE.search(sentence) or _NEW_THING.search(sentence):
        changed = set(kinds)
    else:
        changed = {k for k in kinds if k in _KIND_CHANGE and _KIND_CHANGE[k].search(sentence)}
    if _ADDITIVE.search(sentence):
        changed -= _COUNTABLE
    return frozenset(changed)


_ENDED = re.compile(r"\b(?:broke\s+up|split\s+up|divorced|sold|quit|left|rehomed|gave\s+up|dropped|cancell?ed"
                    r"|called\s+off|no\s+longer|stopped|moved\s+out\s+of|passed\s+away)\b", re.I)
_CONTINUE = re.compile(r"\b(?:still|again|as\s+always|same\s+(?:old|as))\b", re.I)
_NEGATION = re.compile(r"\b(?:not|no\s+longer|never|n't|don't|doesn't|isn't|aren't|wasn't)\b|n['’]t\b", re.I)
_HYPOTHETICAL = re.compile(
    r"\b(?:if|would|might|could|maybe|perhaps|wish|someday|one\s+day|dream\w*|imagine|thinking\s+(?:about|of)"
    r"|considering|hope|hoping|want\s+to|wants\s+to|plan\s+to|planning\s+to|should|wonder(?:ed|ing)?)\b", re.I)
_QUESTION_WORDS = re.compile(
    r"^(?:do|does|did|are|is|was|were|have|has|can|could|will|would|what|where|when|who|how|why|which)\b", re.I)

# ---------------------------------------------------------------- holders

_KIN = (r"sister|brother|mom|mum|mother|dad|father|wife|husband|partner|girlfriend|boyfriend|son|daughter"
        r"|friend|cousin|aunt|uncle|grandma|grandmother|grandpa|grandfather|roommate|flatmate|neighbou?r"
        r"|colleague|coworker|fianc[ée]e?|kid|kids|parents")
_FIRST_PERSON = re.compile(r"^(?:i|i'm|i've|i'd|i'll|im|ive|we|we're|we've|my|our|me)\b", re.I)
_MY_KIN = re.compile(rf"^(?:my|our)\s+(?:(?:older|younger|little|big|best|old)\s+)?({_KIN})\b", re.I)
_THIRD_PRONOUN = re.compile(r"^(?:he|she|they|he's|she's|they're|his|her|their|it|it's|you|you're|your)\b", re.I)
_WITH_ME = re.compile(r"^[A-Z][a-z]{1,20}\s+and\s+(?:I|me)\b")  # "Rhea and I broke up"
_SUBJECTLESS = re.compile(
    r"^(?:first|new|just|finally|already|officially|newly|started|starting|moved|moving|got|been|back|quit|left"
    r"|joined|bought|sold|adopted|switched|living|working|loving|settled|signed|handed|day|week|month|update"
    r"|still)\b", re.I)
_HERE_IN = re.compile(r"\bhere\s+in\s+[A-Z]")
_NAME = re.compile(r"^([A-Z][a-z]{1,20})\b")
_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\s+(?:but|and\s+then|so)\s+")
_OPENERS = re.compile(r"^(?:(?:oh|ah|well|so|and|but|also|yes|yeah|no|actually|update|news|btw|anyway|ha|haha|hey|"
                      r"guess\s+what|big\s+news|quick\s+update|by\s+the\s+way)[,:!.]?\s+){1,4}", re.I)
_BRACKETS = re.compile(r"\s*\([^()\n]{1,60}\)")  # the dates ``absolutize`` appended
_SPEAKER_PREFIX = re.compile(r"^([^:\n]{1,40}):\s")


@dataclass(frozen=True)
class Claim:
    """One sentence's statement about a holder's mutable attribute(s)."""

    holder: str  # lower case: "tom", "tom's sister", "elena"; "*": an event named without its owner
    kinds: frozenset[str]
    values: frozenset[str]  # the content words that name the value ("seattle", "vegan", ...)
    change: bool  # the sentence says something changed
    negated: bool
    text: str
    event: str | None = None  # for a plan: the event it is about ("wedding", "trip")
    ended: bool = False  # the sentence ends something ("broke up", "sold", "quit", "cancelled")
    changed: frozenset[str] = frozenset()  # the kinds it says changed


def _holder(sentence: str, speaker: str, kinds: frozenset[str]) -> tuple[str | None, str]:
    """The holder of a sentence's claim and the sentence without its subject words."""
    me = speaker.strip().lower()
    m = _MY_KIN.match(sentence)
    if m and not (kinds & {"manager", "coach", "doctor"} and m.group(1).lower() in {"partner"}):
        kin = m.group(1).lower()
        if "relationship" in kinds and kin in {"wife", "husband", "partner", "girlfriend", "boyfriend",
                                               "fiance", "fiancé", "fiancee", "fiancée"}:
            return me, sentence  # "my girlfriend and I broke up": the speaker's status
        return f"{me}'s {kin}", sentence[m.end():]
    if _FIRST_PERSON.match(sentence) or _HERE_IN.search(sentence) or _WITH_ME.match(sentence):
        return me, sentence
    if _SUBJECTLESS.match(sentence):  # "First week at the new office", "Moved last month": the speaker
        return me, sentence
    if _THIRD_PRONOUN.match(sentence):
        return None, sentence
    title = _TITLED.match(sentence)
    if title:  # "Dr Okafor is my GP": the speaker's doctor when said with "my"; else that person's
        if kinds & _ROLE_KINDS and _MINE.search(sentence):
            return me, sentence
        return title.group(1).lower(), sentence[title.end():]
    n = _NAME.match(sentence)
    if n and sentence[n.end():n.end() + 1] == ",":  # "Nate, my favourite treat is ...": said to Nate
        return _holder(sentence[n.end() + 1:].lstrip(), speaker, kinds)
    if n:
        word = n.group(1).lower()
        if word in _NOT_HOLDERS or word.endswith(("ing", "ed")):
            # "Things with Mei are great, we ...", "Plugging the Kia in ...": no named subject; the
            # speaker's only when the sentence speaks of them
            return (me, sentence) if word.endswith(("ing", "ed")) or _MINE.search(sentence) else (None, sentence)
        return (me if word == me else word), sentence[n.end():]
    return None, sentence


_ROLE_KINDS = frozenset({"manager", "coach", "doctor"})
_TITLED = re.compile(r"^(?:dr|doctor|coach|mr|mrs|ms|miss|prof|professor)\.?\s+([A-Z][a-z]{1,20})\b", re.I)
_MINE = re.compile(r"\b(?:I|I'm|I've|me|my|we|we're|we've|our|us)\b")


_NOT_HOLDERS = frozenset([
    "the", "a", "an", "this", "that", "there", "it", "these", "those", "what", "where", "when", "who", "how",
    "why", "which", "my", "our", "his", "her", "their", "yes", "no", "yeah", "oh", "well", "so", "and", "but",
    "also", "i'm", "i", "we", "things", "everything", "nothing", "something", "life", "work", "home", "today",
    "tonight", "small", "big", "another", "confession", "update", "news", "honestly", "finally", "apparently",
    "caved", "renewed", "turns", "long", "short", "quick", "good", "great", "bad", "sadly", "luckily", "okay",
    "ok", "one", "two", "three",
])


def _kinds(sentence: str) -> frozenset[str]:
    found = {m.lastgroup for m in _ANY_KIND.finditer(sentence) if m.lastgroup}
    if "residence" in found and _NOT_RESIDENCE.search(sentence):
        found.discard("residence")
    return frozenset(found)


_CUE_WORDS = frozenset(tokens(
    "moved moving relocated switched switching changed new newly anymore longer started starting began quit "
    "left leaving resigned bought sold replaced upgraded adopted rehomed broke split divorced married engaged "
    "dropped gave took picked joined enrolled transferred promoted hired postponed rescheduled pushed back "
    "cancelled canceled called instead actually correction turns meant first week day month live lives lived "
    "living work works working job already last weekend"))


# the words that name an attribute, not its value: "my phone" and "the phone" share no value
_GENERIC = frozenset(tokens(
    "apartment flat house home city town place neighbourhood neighborhood job jobs work company office role "
    "position career boss manager supervisor coach trainer tutor mentor instructor doctor doctors therapist "
    "dentist gp partner girlfriend boyfriend wife husband relationship dog dogs cat cats puppy kitten pet pets "
    "car cars vehicle truck bike phone laptop computer tablet device diet food meat school university college "
    "course classes degree gym studio club hobby hobbies lessons favourite favorite plan plans old band song "
    "show series film movie book author game team sport drink dish restaurant cafe colour color dr mr mrs ms "
    "miss"))


def claims(text: str, speaker: str) -> list[Claim]:
    """The claims of one line said by ``speaker`` (a leading "Name: " is read as the speaker)."""
    line = text.strip()
    m = _SPEAKER_PREFIX.match(line)
    if m:
        speaker, line = m.group(1), line[m.end():]
    out: list[Claim] = []
    for raw in _SENTENCE.split(_BRACKETS.sub("", line[:2000])):
        sentence = _OPENERS.sub("", raw.strip())
        if not sentence or sentence.rstrip().endswith("?") or _QUESTION_WORDS.match(sentence):
            continue
        if _HYPOTHETICAL.search(sentence):
            continue
        kinds = _kinds(sentence)
        if not kinds:
            continue
        event_m = _EVENT_RE.search(sentence) if "plan" in kinds else None
        event = event_m.group(1).lower() if event_m else None
        the_event = _THE_EVENT.match(sentence) if event else None
        if the_event:  # "the wedding moved to October": the event, whoever's it is
            holder, rest = "*", sentence[the_event.end():]
        else:
            found, rest = _holder(sentence, speaker, kinds)
            if found is None:
                continue
            holder = found
        values = frozenset(w for w in content_words(tokens(rest))
                           if w not in _CUE_WORDS and w not in _GENERIC and w != event)
        out.append(Claim(holder=holder, kinds=kinds, values=values,
                         change=bool(changed := _changed(sentence, kinds)), changed=changed,
                         negated=bool(_NEGATION.search(sentence)), text=sentence, event=event,
                         ended=bool(_ENDED.search(sentence))))
    return out


def supersedes(newer: Claim, older: Claim) -> bool:
    """Whether ``newer`` (said later) replaces ``older``: same holder, a shared kind, a change said,
    and a value that differs (or the same value negated)."""
    shared = newer.changed & older.kinds  # the change must be said of a kind both are about
    if not shared or not newer.change:
        return False
    if newer.holder != older.holder:
        # an event named without its owner ("the wedding") matches the same event of anyone's
        if "*" not in (newer.holder, older.holder) or "plan" not in shared:
            return False
        shared = frozenset({"plan"})
    if shared == {"plan"} and (newer.event is None or newer.event != older.event):
        return False  # two plans: only the same event replaces itself
    if (newer.negated or newer.ended) and not older.negated and (newer.values & older.values or not older.values):
        return True  # "not vegan anymore", "Rhea and I broke up", "I sold the Honda"
    # a new value, sharing no word with the old one ("I started a new shift at the library" does not
    # replace "I work at the library"; a move within the same city is missed: precision first)
    return bool(newer.values) and not newer.values & older.values


def line_of(memory: str) -> str:
    """A memory's own line: an LLM-free memory is its turn after the turns before it as context."""
    return memory.rstrip().rsplit("\n", 1)[-1]


def record_claims(memory: str, speaker: str, *, memory_class: str = "fact", tier: str = "mtm") -> list[Claim]:
    """The claims of a stored memory's own line. Only the memories of turns take part (``memory_class``
    "fact" in the user's own tier "mtm"): an event summary or shared knowledge holds many statements."""
    if memory_class != "fact" or tier != "mtm":
        return []
    return claims(line_of(memory), speaker)


def any_supersedes(newer: Iterable[Claim], older: Iterable[Claim]) -> bool:
    olds = list(older)
    return any(supersedes(n, o) for n in newer for o in olds)


# ---------------------------------------------------------------- questions

_PRESENT = re.compile(r"\b(?:now|currently|current|these\s+days|nowadays|still|any\s?more|any\s+longer|latest"
                      r"|at\s+the\s+moment|at\s+present|today|these\s+days|most\s+recent(?:ly)?|lately)\b", re.I)
_PAST = re.compile(r"\b(?:before|used\s+to|use\s+to|first|previous(?:ly)?|originally|former(?:ly)?|old|earlier"
                   r"|initially|at\s+the\s+(?:start|beginning)\s+of|in\s+the\s+past"
                   r"|at\s+first|back\s+(?:then|when|in)|prior|until|originally)\b", re.I)
_PRESENT_TENSE = re.compile(r"^(?:where|what|who|which|how)\s+(?:does|do|is|are|'s)\b|^(?:does|do|is|are)\b",
                            re.I)


#: the tense a question is asked in, from its grammar alone: its first auxiliary ("does", "is" / "did",
#: "was"), a wh-word contracted with "is" ("what's"), else the verb after the wh-word and at most one word
#: ("which animal lives", "who trains"; "which doctor looked" is past). "has"/"have" (the perfect asks
#: about a history), "can" and "will" say no tense of a state.
_AUX = re.compile(r"\b(?:(?P<present>do|does|is|are|am)|(?P<past>did|was|were|used))\b"
                  r"|^(?:what|who|where|which|how|when)(?P<contracted>'s|’s)\b", re.I)
_WH_VERB = re.compile(r"^(?:who|what|which)(?:\s+\w+)?\s+(?:(?P<now>[a-z]{3,}(?<![su])s)|[a-z]{2,}ed)\b", re.I)
_PERFECT = re.compile(r"\b(?:has|have|had)\b", re.I)
#: a season as a time ("in the summer"): the time window parser gives seasons no dates
_SEASON = re.compile(r"\b(?:in|over|during|through(?:out)?)\s+the\s+(?:spring|summer|autumn|fall|winter)\b", re.I)


def question_tense(query: str) -> State | None:
    """"present" or "past": the tense of a question's verb (see ``_AUX``); ``None`` when it has none of
    those ("What has Ana painted?", "Where will they live?")."""
    q = query.strip()
    m = _AUX.search(q)
    if m is not None:
        return "past" if m.group("past") else "present"
    m = None if _PERFECT.search(q) else _WH_VERB.match(q)  # "what books has ...": "books" is no verb
    return None if m is None else "present" if m.group("now") else "past"


def says_season(query: str) -> bool:
    """Whether a question names a season as its time ("in the spring", "over the summer")."""
    return _SEASON.search(query) is not None


def question_state(query: str, *, explicit: bool = False) -> State | None:
    """"present" for a question about how things are now, "past" for one about how they were,
    ``None`` when it says neither (or is not about a mutable attribute). ``explicit``: only a
    question that says so in words ("now", "before", ...), not by its tense alone."""
    q = query.strip()
    if _PAST.search(q):
        return "past"
    if _PRESENT.search(q):
        return "present"
    if not explicit and _PRESENT_TENSE.match(q) and question_kinds(q):
        return "present"
    return None


_QUESTION_KINDS = {
    **{k: v for k, v in _KINDS.items() if k != "residence"},
    "residence": r"live[sd]?|living|home|moved|move|based|city|town|apartment|reside\w*|staying|stay|stays"
                 r"|address|house|flat",
    "job": _KINDS["job"] + r"|work(?!\s*out)|works(?!\s*out)|do\s+for\s+(?:a\s+)?living|employed|teach\w*"
                           r"|employs?|company|firm|occupation|profession|position|role|title",
    "pet": _KINDS["pet"] + r"|animals?",
    "vehicle": _KINDS["vehicle"] + r"|drive|drives|driving|ride|rides|riding|get\s+around|commute\w*|bike",
    "diet": _KINDS["diet"] + r"|eat|eats|eating|food|animal\s+products|meat|fish",
    "favourite": _KINDS["favourite"] + r"|like\s+(?:best|most)|go-to|(?:loves?|enjoys?)\s+most|top\s+pick",
    "device": _KINDS["device"] + r"|e-?reader|handset|mobile|gadget|device",
    "manager": _KINDS["manager"] + r"|reports?\s+to|supervis\w*|in\s+charge",
    "coach": _KINDS["coach"] + r"|coaching",
    "doctor": _KINDS["doctor"] + r"|physician|teeth|medical",
    "school": _KINDS["school"] + r"|attends?|studying|enrolled|institution|study|studies",
    "gym": _KINDS["gym"] + r"|work\s*out|exercis\w*|train|trains",
    "hobby": _KINDS["hobby"] + r"|craft|pastime|for\s+fun|into|instrument|language|spare\s+time|free\s+time",
}
_QUESTION_KIND_RES = {k: re.compile(rf"\b(?:{p})\b", re.I) for k, p in _QUESTION_KINDS.items()}


#: words a change of each kind is usually said with (the lexical side of a state question's search)
_CHANGE_WORDS: dict[str, tuple[str, ...]] = {
    "residence": ("moved", "move", "living", "flat", "apartment", "house"),
    "job": ("job", "work", "started", "new", "company"),
    "relationship": ("dating", "together", "partner", "broke", "engaged", "married"),
    "pet": ("adopted", "dog", "cat", "puppy"),
    "vehicle": ("car", "bought", "drive"),
    "diet": ("vegan", "vegetarian", "diet", "eating"),
    "favourite": ("favourite", "favorite", "new", "obsessed"),
    "plan": ("date", "moved", "postponed", "booked"),
    "device": ("phone", "laptop", "new", "got"),
    "manager": ("manager", "boss", "new"),
    "coach": ("coach", "trainer", "new"),
    "doctor": ("doctor", "gp", "new"),
    "school": ("school", "course", "started"),
    "gym": ("gym", "joined", "membership"),
    "hobby": ("started", "learning", "gave", "took"),
}


def change_words(query: str, state: State | None) -> list[str]:
    """For a question that says it asks about the present or the past ("now", "before": ``state``,
    from ``question_state(query, explicit=True)``), the words its attribute's changes are said with."""
    if state is None:
        return []
    return list(dict.fromkeys(w for k in sorted(question_kinds(query)) for w in _CHANGE_WORDS.get(k, ())))


def question_kinds(query: str) -> frozenset[str]:
    """The attribute kinds a question asks about."""
    return frozenset(k for k, r in _QUESTION_KIND_RES.items() if r.search(query))


def question_holders(query: str, known: Iterable[str] = ()) -> frozenset[str]:
    """Lower-case names the question mentions (capitalised words not at the start, or ``known`` names)."""
    names = {m.group(1).lower() for m in re.finditer(r"(?<!^)(?<![.?!]\s)\b([A-Z][a-z]{1,20})\b", query)}
    low = query.lower()
    names |= {k.lower() for k in known if k and k.lower() in low}
    return frozenset(n for n in names if n not in _NOT_HOLDERS)


# ---------------------------------------------------------------- topics (reading only)

# What a line is *about*, read more loosely than a claim: reading only reorders candidates (a wrong
# topic hides nothing), so a line that never names its attribute ("the keyboard on this one is a
# dream", "the vet says they get along") can still count. Never used to supersede anything.
_TOPIC_EXTRA: dict[str, str] = {
    "residence": r"home|place|village|cottage|studio|street|road|suburb|keys|staying|stay|commute",
    "job": r"work|working|company|firm|employ\w*|hospital|ward|clinic|onboarding|role|position|career|notice"
           r"|redundan\w*|students|pupils|customers|staff|boss|manager|promotion|bakery|restaurant|warehouse|crew"
           r"|ambulance|agency|department",
    "relationship": r"together|seeing|date|dates|dated|ring|proposed|wedding|honeymoon|ex",
    "pet": r"animals?|vet|guinea\s+pigs?|bunn(?:y|ies)|tortoise|goldfish|fish|budgie|walkies|litter|lead|leash"
           r"|kennel|hutch|paws?",
    "vehicle": r"bike|bicycle|cycl\w*|ride|riding|rides|parking|parked|park|mot|tyres?|tires?|petrol|diesel|garage"
               r"|electric|commute|mileage|road\s+trip|wheels",
    "diet": r"meat|fish|steak|chicken|eat|eats|eating|ate|food|meals?|cook\w*|sugar|bread|carbs|dairy|cheese"
            r"|fasting|coffee|tea|alcohol|drinks?|wine|beer",
    "favourite": r"love|loves|loved|best|obsess\w*|go-to|into|fan|hooked|addicted|dethroned|beats|ever",
    "plan": r"date|dates|venue|moved|postponed|booked|tickets|flight|deposit",
    "device": r"e-?reader|reader|keyboard|screen|watch|console|camera|earbuds|handset|mobile|typing|battery|charger"
              r"|model|apps?",
    "manager": r"reports?\s+to|one-to-one|1:1|line\s+manager|appraisal|team|role|in\s+charge",
    "coach": r"training|practice|session|sessions|squad|club|team|drills",
    "doctor": r"clinic|practice|appointment|surgery|teeth|check-?up|prescription|dr",
    "school": r"term|teacher|teachers|class|pupils|enrolled|transferred|uni|study|studying|modules?|lectures?",
    "gym": r"class|classes|session|sessions|spin|yoga|pilates|pool|lido|swim\w*|workout|weights|running|cycling",
    "hobby": r"class|classes|lessons?|learning|learn|practice|practis\w*|playing|club|swim\w*|running|painting"
             r"|pottery|knitting|guitar|piano|cello|violin|drums|chess|garden\w*|baking|climbing|carv\w*"
             r"|crochet\w*|photography|language|course",
}
_TOPIC_RES = {kind: re.compile(rf"\b(?:{_KINDS[kind]}|{extra})\b", re.I) for kind, extra in _TOPIC_EXTRA.items()}


def is_hypothetical(sentence: str) -> bool:
    """Whether a sentence speaks of what might be, not what is ("If I moved ...", "I want to try ...")."""
    return bool(_HYPOTHETICAL.search(sentence))


def of_someone_else(sentence: str) -> bool:
    """Whether a sentence is about someone other than its speaker ("My sister is learning to drive",
    "She moved"): not the speaker's own attribute."""
    s = _OPENERS.sub("", sentence.strip())
    return bool(_MY_KIN.match(s) or _THIRD_PRONOUN.match(s))


def topic_kinds(text: str, kinds: Iterable[str]) -> frozenset[str]:
    """Which of ``kinds`` a line of dialogue is about, read loosely (see ``_TOPIC_EXTRA``): for ranking,
    never for superseding."""
    return frozenset(k for k in kinds if k in _TOPIC_RES and _TOPIC_RES[k].search(text))


# A line that takes back what its speaker said before ("small correction", "scratch that", "I got the
# dates wrong", "ignore what I said about ...", "it's X, not Y"): read with the older statement it fixes.
_CORRECTION = re.compile(
    r"\b(?:correction|corrected|actually|scratch\s+that|i\s+meant|turns\s+out|(?:got|had)\s+(?:it|that|them"
    r"|the\s+\w+(?:\s+\w+)?)\s+wrong|wrong\s+(?:date|day|name)|ignore\s+what\s+i\s+said|mix(?:ed)?\s+(?:them|it)"
    r"\s+up|change\s+of\s+plans?|slight\s+change|last\s+update|(?:it's|it\s+is|its)\s+(?:now\s+)?[\w'&]+"
    r"(?:\s+[\w'&]+)?,?\s+not)\b", re.I)


def is_correction(text: str) -> bool:
    """Whether a line corrects something said before (see ``_CORRECTION``)."""
    return bool(_CORRECTION.search(text))


# Said of a present state, these mark it as new (loosely: for reading only, never for superseding)
_NOW_CUES = re.compile(r"\b(?:now|these\s+days|lately|nowadays|since|first|new|newly|just|finally|got|bought"
                       r"|started|switched|swapped|moved|joined|anymore|any\s+more|no\s+longer|instead|back\s+to"
                       r"|again)\b", re.I)


def says_change(text: str) -> bool:
    """Whether a line says that something is new or changed ("now", "got", "the new ...", "back to ...",
    "anymore", a correction): a loose cue, for reading only."""
    return bool(_NOW_CUES.search(text) or _CHANGE.search(text) or _CORRECTION.search(text))


_NAMED = re.compile(r"(?<![.!?:]\s)(?<!^)(?<![.!?:])\b([A-Z][\w'&-]+)")
_NOT_NAMES = frozenset({"I", "I'm", "I've", "I'd", "I'll", "OK", "TV"})


_CALENDAR = frozenset(tokens(
    "january february march april may june july august september october november december monday tuesday "
    "wednesday thursday friday saturday sunday christmas easter new year"))


def _named(text: str, skip: Iterable[str]) -> Iterator[str]:
    """The capitalised words a line has mid-sentence, lower case, less "I" and ``skip`` (the speakers)."""
    low = {w.lower() for w in skip}
    for m in _NAMED.finditer(text.strip()):
        key = m.group(1).lower().split("'")[0]
        if m.group(1) not in _NOT_NAMES and key not in low:
            yield key


def named_values(text: str, skip: Iterable[str] = ()) -> frozenset[str]:
    """The particular things a line names mid-sentence, lower case ("Radiohead", "Kai", "Fleetwood"): its
    capitalised words not opening a sentence, less "I", the speakers (``skip``) and calendar words. Two
    lines that share one speak of the same thing; sharing a common word ("finally", "week") says nothing."""
    return frozenset(key for key in _named(text, skip) if key not in _CALENDAR)


def names_something(text: str, skip: Iterable[str] = ()) -> bool:
    """Whether a line names a particular thing mid-sentence ("parking the Land Rover", "Onboarding at Orbit
    Games"): a capitalised word not opening a sentence, not "I", nor one of ``skip`` (the speakers)."""
    return next(_named(text, skip), None) is not None
