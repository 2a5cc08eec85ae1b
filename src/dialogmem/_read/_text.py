"""Lexical signals of a question: content keywords, quoted phrases, proper nouns (pure, no I/O)."""

from __future__ import annotations

import re

# Function words, question words, auxiliaries and time words: none of them helps BM25 find a
# memory (stored memories carry absolute dates, so "yesterday" or "week" would only add noise).
STOPWORDS = frozenset(
    """
a about above after again against ago all also am an and any are aren't as at be because been before
being below between both but by can can't could couldn't did didn't do does doesn't doing don't down
during each either else ever every few for from further get gets getting got had hadn't has hasn't have
haven't having he he'd he'll he's her here here's hers herself him himself his how how's however i i'd
i'll i'm i've if in into is isn't it it's its itself just let's like lately me might more most much
must mustn't my myself never no nor not now of off often on once one only or other ought our ours
ourselves out over own per please quite rather really recently same shall shan't she she'd she'll she's
should shouldn't since so some still such than that that's the their theirs them themselves then there
there's these they they'd they'll they're they've this those though through thus to too under until up
upon us very was wasn't we we'd we'll we're we've were weren't what what's whatever when when's where
where's whether which while who who's whom whose why why's will with won't would wouldn't yes yet you
you'd you'll you're you've your yours yourself yourselves may
tell told say said says mention mentioned remember recall know think thought describe
today yesterday tomorrow tonight morning afternoon evening night day days week weeks weekend month
months year years time times last past previous next first earlier later soon
monday tuesday wednesday thursday friday saturday sunday
january february march april june july august september october november december
""".split()  # noqa: SIM905 - a word list reads better as text
)

# Capitalised words that start a sentence or a question but are not names.
_NOT_NAMES = STOPWORDS | frozenset({"may", "mr", "mrs", "ms", "dr", "i"})

_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’&.-]*[A-Za-z0-9]|[A-Za-z0-9]")
_QUOTED = re.compile(r"[\"“”]([^\"“”]{2,80})[\"“”]|(?<![A-Za-z])'([^']{2,80})'(?![A-Za-z])")
# A run of capitalised words ("New York", "Melanie", "LGBTQ"); possessive "'s" is stripped after.
_PROPER = re.compile(r"\b[A-Z][A-Za-z0-9&'’.-]*(?:\s+(?:of\s+|de\s+|the\s+)?[A-Z][A-Za-z0-9&'’.-]*)*")
_POSSESSIVE = re.compile(r"['’]s?$")
_HOW_X = re.compile(r"\bhow\s+(?:long|many|much|often|old|far)\b", re.IGNORECASE)


def _norm(token: str) -> str:
    return _POSSESSIVE.sub("", token.lower().replace("’", "'")).strip(".-")


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens with possessives removed (no filtering)."""
    return [t for t in (_norm(m.group(0)) for m in _TOKEN.finditer(text)) if t]


def content_tokens(text: str) -> list[str]:
    """Tokens that are neither stopwords nor single characters."""
    return [t for t in tokens(text) if len(t) > 1 and t not in STOPWORDS]


def quoted_phrases(text: str) -> list[str]:
    return [(a or b).strip() for a, b in _QUOTED.findall(text) if (a or b).strip()]


def keywords(text: str) -> list[str]:
    """Quoted phrases first, then content words, de-duplicated in order of appearance."""
    seen: set[str] = set()
    out: list[str] = []
    for item in [*quoted_phrases(text), *content_tokens(_HOW_X.sub(" ", text))]:
        key = item.lower()
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def proper_nouns(text: str) -> list[str]:
    """Capitalised word runs that are not sentence-initial function words ("What", "Did")."""
    seen: set[str] = set()
    out: list[str] = []
    for m in _PROPER.finditer(text):
        words = m.group(0).split()
        while words and _norm(words[0]) in _NOT_NAMES:
            words = words[1:]  # "What Caroline" → "Caroline"
        while words and _norm(words[-1]) in _NOT_NAMES:
            words = words[:-1]
        if not words:
            continue
        name = _POSSESSIVE.sub("", " ".join(words).replace("’", "'")).strip(".-")
        if len(name) > 1 and name.lower() not in seen:
            seen.add(name.lower())
            out.append(name)
    return out
