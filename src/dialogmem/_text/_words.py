"""One text toolkit for stored memories and for questions (pure, no I/O).

Stored text and queries go through the same tokenizer (:func:`tokens`) and the same stopword list,
so a word that counts as content in a memory counts the same in a question. What differs is only
what each side leaves out on purpose: a question's speech and time words ("tell", "last week")
never help find a memory, and a memory's keywords skip chat filler ("haha", "cool").

Every pattern here runs on user text in linear time: no nested or adjacent unbounded quantifiers
over the same characters, and bounded repeats where a match may start at every position. The
adversarial-input test (``tests/test_text_safety.py``) holds every function to that.
"""

from __future__ import annotations

import re
from collections import Counter

from ._calendar import MONTH_NAMES, WEEKDAY_NAMES


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: function words, contractions and chat noise: never content, in memories or in questions
STOPWORDS = _words("""
a about above after again against all also am an and any anything are aren't as at be because been
before being below between both but by can can't cannot cant could couldn't did didn't didnt do does
doesn't doing don't dont down during each either else ever every everything few for from further get
gets getting go going gone got had hadn't has hasn't have haven't having he he'd he'll he's her here
here's hers herself him himself his how how's however i i'd i'll i'm i've id if ill im in into is
isn't it it's its itself ive just let's like lot lots many may me might more most much must mustn't
my myself never no nope nor not now of off often on once one ones only or other ought our ours
ourselves out over own per please quite rather really same shall shan't she she'd she'll she's
should shouldn't since so some something still such than that that's thats the their theirs them
themselves then there there's these they they'd they'll they're they've thing things this those
though through thus to too under until up upon us very was wasn't we we'd we'll we're we've went
were weren't what what's whatever when when's where where's whether which while who who's whom whose
why why's will with won't would wouldn't yeah yep yes yet you you'd you'll you're you've youre your
yours yourself yourselves
""")
#: words with no content on their own in chat: a turn made only of these is filler
FILLER = _words("""
hi hey hello hiya bye goodbye thanks thank thx ty ok okay k sure cool great nice awesome good fine
wow oh ah haha hahaha lol lmao hmm um uh yay congrats congratulations welcome sorry see soon later
take care night morning evening afternoon glad happy right true totally absolutely definitely indeed
agreed sounds amazing wonderful fantastic lovely love same too well alright np please anytime
""")
#: calendar and relative-time words: stored memories carry absolute dates, so these find nothing
TIME_WORDS = frozenset(WEEKDAY_NAMES) | frozenset(MONTH_NAMES) | _words("""
today yesterday tomorrow tonight morning afternoon evening night day days week weeks weekend month
months year years time times last past previous next first earlier later soon ago recently lately
this
""")
#: what a question says about the asking, not about the memory ("what did X tell ... remember")
QUESTION_NOISE = _words("tell told say said says mention mentioned remember recall know think thought describe")
#: capitalised words that open a sentence or a question without being names
_NOT_NAMES = STOPWORDS | FILLER | TIME_WORDS | QUESTION_NOISE | _words("""
maybe actually anyway btw still now then definitely mr mrs ms dr according based around whose
""")
_CONNECTORS = frozenset({"of", "de", "la", "van", "von", "the", "&"})

WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’&.-]*[A-Za-z0-9]|[A-Za-z0-9]")
_SENTENCE_BREAK = re.compile(r"[.!?:;\n\"“”()]")
# Bounded repeats: a quote may open at any position, so an unbounded body would be quadratic.
_QUOTED = re.compile(r"[\"“”]([^\"“”\n]{2,80})[\"“”]|(?<![A-Za-z])'([^'\n]{2,80})'(?![A-Za-z])")
_HOW_X = re.compile(r"\bhow\s{1,8}(?:long|many|much|often|old|far)\b", re.IGNORECASE)
# The "(2023-05-07)" annotations that time normalisation appends: not words of the speaker.
_DATE_NOTE = re.compile(r"\([^()\n]{0,60}\d{4}[^()\n]{0,60}\)")
_VERB_SUFFIXES = ("ing", "ed", "ly")


def normalise_word(word: str) -> str:
    """Lower case, typographic apostrophes made plain, possessive "'s" removed."""
    return _without_possessive(word.lower().replace("’", "'"))


def _without_possessive(word: str) -> str:
    """A lower-case word with plain apostrophes, its possessive "'s" (or bare "'") removed."""
    return word.removesuffix("'s").removesuffix("'")


def tokens(text: str) -> list[str]:
    """Every word of ``text``, normalised (see :func:`normalise_word`), in order."""
    if text.isascii():  # the same words, lower-cased once for the whole text: a quarter faster
        low = text.lower()
        if "'" not in low:  # a word ends in a letter or digit: without an apostrophe nothing to strip
            return WORD.findall(low)
        return [w for w in map(_without_possessive, WORD.findall(low)) if w]
    return [w for w in (normalise_word(m) for m in WORD.findall(text)) if w]


def content_tokens(text: str) -> list[str]:
    """Words that carry content: numbers, and words of two letters or more that are not stopwords."""
    return content_words(tokens(text))


def content_words(words: list[str]) -> list[str]:
    """The content words (see :func:`content_tokens`) of words that ``tokens`` gave."""
    return [w for w in words if w.isdigit() or (len(w) > 1 and w not in STOPWORDS)]


def missing_words(source: str, text: str) -> list[str]:
    """The content words of ``source`` that ``text`` does not contain, in order, each once."""
    have = set(content_tokens(text))
    out: list[str] = []
    for word in content_tokens(source):
        if word not in have:
            have.add(word)
            out.append(word)
    return out


#: what ``clip_words`` puts where it cut a text (the reader's context leaves a clipped line out when
#: the whole line is shown beside it: ``_text._render``)
CLIP_MARK = " ..."


def clip_words(text: str, words: int) -> str:
    """``text`` cut after ``words`` words, marked with ``CLIP_MARK``; unchanged when not longer."""
    parts = text.split()
    return text if len(parts) <= words else " ".join(parts[:words]) + CLIP_MARK


def is_filler(text: str) -> bool:
    """True when ``text`` says nothing but chat filler ("ok thanks!", "Haha, so cool")."""
    return all(w in FILLER for w in content_tokens(text))


def strip_date_notes(text: str) -> str:
    return _DATE_NOTE.sub(" ", text)


def memory_keywords(text: str, limit: int = 8) -> list[str]:
    """Up to ``limit`` content words of a memory (3+ letters, no filler or time words), most
    frequent first, ties in text order."""
    words = [w for w in content_tokens(strip_date_notes(text))
             if len(w) >= 3 and not w.isdigit() and w not in FILLER and w not in TIME_WORDS]
    counts = Counter(words)
    first = {w: i for i, w in reversed(list(enumerate(words)))}
    return sorted(counts, key=lambda w: (-counts[w], first[w]))[:limit]


def quoted_phrases(text: str) -> list[str]:
    return [(a or b).strip() for a, b in _QUOTED.findall(text) if (a or b).strip()]


def query_keywords(text: str) -> list[str]:
    """A question's search words: quoted phrases first, then content words that are not about the
    asking or the calendar, de-duplicated in order of appearance."""
    seen: set[str] = set()
    out: list[str] = []
    words = [w for w in content_tokens(_HOW_X.sub(" ", text)) if w not in QUESTION_NOISE and w not in TIME_WORDS]
    for item in [*quoted_phrases(text), *words]:
        key = item.lower()
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def looks_like_verb(word: str) -> bool:
    """"Painting", "Walked", "Honestly": at least three word characters before an -ing/-ed/-ly end."""
    for suffix in _VERB_SUFFIXES:
        stem = word[:-len(suffix)]
        if word.endswith(suffix) and len(stem) >= 3 and all(c.isalnum() or c == "_" for c in stem[-3:]):
            return True
    return False


class _NameRun:
    """The capitalised words of one candidate name while :func:`entities` scans a text."""

    def __init__(self) -> None:
        self.words: list[str] = []
        self.opens_sentence = False

    def close(self, found: list[str]) -> None:
        run = self.words
        while run and run[-1].lower() in _CONNECTORS:
            run.pop()
        while run and run[0].lower() in _NOT_NAMES:
            run.pop(0)
        single = len(run) == 1
        if single and self.opens_sentence and looks_like_verb(run[0]):
            run.clear()  # "Painting with Mel..." opens a sentence; a lone -ing word is no name
        if run and not (single and (len(run[0]) < 2 or run[0].lower() in _NOT_NAMES)):
            name = " ".join(run)
            if name not in found:
                found.append(name)
        run.clear()


def entities(text: str) -> list[str]:
    """Capitalised names and multiword names ("Mercy Hospital", "Bank of America", "Barnes & Noble"),
    without the words that merely open a sentence ("Yesterday", "What", "Thanks")."""
    text = strip_date_notes(text).replace("’", "'")
    found: list[str] = []
    run = _NameRun()
    prev_end = 0
    sentence_start = True
    for m in WORD.finditer(text):
        gap = text[prev_end:m.start()]
        if run.words and gap.strip() == "&":
            run.words.append("&")
        elif run.words and gap.strip():  # other punctuation between words ends a name
            run.close(found)
        if prev_end == 0 or _SENTENCE_BREAK.search(gap):
            sentence_start = True
        word = m.group().removesuffix("'s")
        lower = word.lower()
        if run.words and lower in _CONNECTORS:
            run.words.append(word)
        elif word[:1].isupper() and lower not in STOPWORDS:
            if not (sentence_start and not run.words and lower in _NOT_NAMES):
                if not run.words:
                    run.opens_sentence = sentence_start
                run.words.append(word)
        elif run.words:
            run.close(found)
        sentence_start = False
        prev_end = m.end()
    run.close(found)
    return found
