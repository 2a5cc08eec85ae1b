"""De-identification for the shared long-term memory (seed 000 §3.2, §3.6: LTM holds no user id and
no personal identifier).

``Deidentifier(names, user_ids)(text)`` (or ``deidentify(text, names=..., user_ids=...)``):

1. Whitespace-separated tokens longer than ``MAX_TOKEN_CHARS`` are dropped (no general knowledge is
   100 characters without a space; it also bounds the per-token checks). Tokens holding an e-mail
   address, a URL (``http://``, ``https://``, ``www.``, or a domain followed by a path) or a
   ``@handle`` are dropped.
2. Phone numbers (7 to 15 digits with ``+ ( ) . -`` and spaces between, not a date and not a run of
   4-digit years), street addresses ("12 Baker Street", "1600 Pennsylvania Avenue NW" — a 1-5 digit
   number, up to four capitalised words, a street word) and "PO Box 12" are dropped.
3. The store's person names and user ids are replaced, case-insensitively and as whole words:
   names (the full name and each part of a multiword name, possessives included: "Maya's" ->
   "a person's") by ``"a person"``, user ids by ``"someone"``. Parts shorter than two characters
   and particles ("de", "van", "jr") are not matched alone; a name that is also a common word
   ("May", "Rose") is still replaced everywhere — privacy over fidelity. A capitalised word that is
   a prefix of three letters or more of a name word is taken for a nickname ("Mel" for "Melanie",
   "Chris" for "Christina") and replaced too.
4. ``None`` when no content word is left besides the placeholders.

Every pattern runs in linear time: tokens come from ``\\S+`` / ``\\w+`` scans, the phone pattern has
one bounded quantifier, names are matched by looking word n-grams up in a set (cost independent of
the number of names), and there is no nested quantifier on user text.

Not covered (documented gaps): names of people who are not users of the store ("my friend John"),
nicknames that are no prefix of the name ("Bob" for "Robert") or written in lower case ("mel"),
postcodes, street addresses without a number or a street word, national id numbers shorter than 7
digits, and identifiers spelled with spaces inside ("m a y a").
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .._text._words import FILLER, content_tokens

PERSON = "a person"
SOMEONE = "someone"
MAX_TOKEN_CHARS = 100
MIN_NICKNAME = 3
PLACEHOLDER_WORDS = frozenset({"person", "someone", "persons", "people"})

_TOKEN = re.compile(r"\S+")
_WORD = re.compile(r"\w+")
_EMAIL = re.compile(r"[\w.+%-]+@[\w-]+\.[\w.-]+")
_URL = re.compile(r"(?:https?://|ftp://|www\.)|^[\w-]+\.[a-z]{2,}(?:\.[a-z]{2,})?/", re.IGNORECASE)
_HANDLE = re.compile(r"^[(\[\"'“]?@\w")
_PHONE = re.compile(r"(?<![\w+])\+?\(?\d[\d ().-]{5,30}\d(?!\w)")
_DATE = re.compile(r"\d{4}-\d{1,2}-\d{1,2}|\d{1,2}/\d{1,2}/\d{2,4}|\d{1,2}\.\d{1,2}\.\d{4}")
_YEAR = re.compile(r"[12]\d{3}")
_PO_BOX = re.compile(r"\bP\.?\s?O\.?\s?Box\s{1,3}\d{1,6}\b", re.IGNORECASE)
_STREET_WORDS = frozenset({
    "street", "st", "avenue", "ave", "road", "rd", "boulevard", "blvd", "lane", "ln", "drive", "dr",
    "court", "ct", "way", "place", "pl", "terrace", "square", "sq", "parkway", "pkwy", "highway", "hwy",
    "close", "crescent", "alley", "row"})
_PARTICLES = frozenset({
    "de", "da", "di", "del", "der", "den", "van", "von", "la", "le", "du", "dos", "das", "the", "of",
    "jr", "sr", "mr", "mrs", "ms", "dr", "ii", "iii"})
_NAME_GAP = frozenset(" \t\n-.")
_ID_GAP = frozenset(" \t\n-._:/@+")


class Deidentifier:
    """Built once from the store's names and user ids; call it on each text."""

    def __init__(self, names: Iterable[str], user_ids: Iterable[str]) -> None:
        self._grams: dict[tuple[str, ...], str] = {}
        for name in names:
            self._add(name, PERSON, parts=True)
        for uid in user_ids:
            self._add(uid, SOMEONE, parts=False)
        self._longest = max((len(g) for g in self._grams), default=0)
        self._first = frozenset(g[0] for g in self._grams)
        # "Mel" for "Melanie", "Chris" for "Christopher": a capitalised prefix of a name word
        self._nicknames = frozenset(w[:i] for g, p in self._grams.items() if p == PERSON and len(g) == 1
                                    for w in g for i in range(MIN_NICKNAME, len(w)))

    def _add(self, raw: str, placeholder: str, *, parts: bool) -> None:
        words = tuple(w.lower() for w in _WORD.findall(raw))
        if not words or len("".join(words)) < 2:
            return
        self._grams.setdefault(words, placeholder)
        if not parts or len(words) == 1:
            return
        pieces = [tuple(w.lower() for w in _WORD.findall(p)) for p in raw.split()]  # "Jean-Luc"
        pieces += [(w,) for w in words]
        for piece in pieces:
            if piece and len("".join(piece)) >= 2 and piece[0] not in _PARTICLES and not piece[0].isdigit():
                self._grams.setdefault(piece, placeholder)

    def __call__(self, text: str) -> str | None:
        text = _drop_contact_tokens(text)
        text = _PO_BOX.sub(" ", text)
        text = _PHONE.sub(_phone_or_keep, text)
        text = _drop_addresses(text)
        text = self._replace_identities(text)
        text = " ".join(text.split())
        if not [w for w in content_tokens(text) if w not in PLACEHOLDER_WORDS and w not in FILLER]:
            return None
        return text

    def _replace_identities(self, text: str) -> str:
        if not self._grams:
            return text
        words = list(_WORD.finditer(text))
        lower = [m.group().lower() for m in words]
        out: list[str] = []
        last = 0
        k = 0
        while k < len(words):
            hit = self._match_at(text, words, lower, k) if lower[k] in self._first else None
            if hit is None and lower[k] in self._nicknames and words[k].group()[:1].isupper():
                hit = (1, PERSON)
            if hit is None:
                k += 1
                continue
            n, placeholder = hit
            start, end = words[k].start(), words[k + n - 1].end()
            end, possessive = _possessive(text, end)
            out += [text[last:start], placeholder + ("'s" if possessive else "")]
            last = end
            k += n
        out.append(text[last:])
        return "".join(out)

    def _match_at(self, text: str, words: list[re.Match[str]], lower: list[str], k: int) -> tuple[int, str] | None:
        """Longest name or id starting at word ``k``: (number of words, placeholder)."""
        for n in range(min(self._longest, len(words) - k), 0, -1):
            gram = tuple(lower[k:k + n])
            placeholder = self._grams.get(gram)
            if placeholder is None:
                continue
            gap_chars = _NAME_GAP if placeholder == PERSON else _ID_GAP
            if all(_is_gap(text, words[i].end(), words[i + 1].start(), gap_chars) for i in range(k, k + n - 1)):
                return n, placeholder
        return None


def deidentify(text: str, *, names: Iterable[str], user_ids: Iterable[str]) -> str | None:
    """``text`` without the store's names, user ids and contact details; ``None`` when nothing
    general is left. Build a ``Deidentifier`` once when calling this for many texts."""
    return Deidentifier(names, user_ids)(text)


def _is_gap(text: str, start: int, end: int, allowed: frozenset[str]) -> bool:
    return 0 < end - start <= 3 and all(ch in allowed for ch in text[start:end])


def _possessive(text: str, end: int) -> tuple[int, bool]:
    """Extend a name match over "'s" / "’s" / a bare trailing apostrophe ("James'")."""
    if end < len(text) and text[end] in "'’":
        if end + 1 < len(text) and text[end + 1] in "sS" and (end + 2 == len(text) or not text[end + 2].isalnum()):
            return end + 2, True
        return end + 1, True
    return end, False


def _drop_contact_tokens(text: str) -> str:
    out: list[str] = []
    last = 0
    for m in _TOKEN.finditer(text):
        token = m.group()
        if len(token) > MAX_TOKEN_CHARS or _is_contact(token):
            out.append(text[last:m.start()])
            last = m.end()
    out.append(text[last:])
    return " ".join(out) if len(out) > 1 else text


def _is_contact(token: str) -> bool:
    core = token.strip("()[]{}<>\"'“”‘’.,;:!?")
    return bool(("@" in token and _EMAIL.search(token)) or _URL.search(core) or _HANDLE.match(token))


def _phone_or_keep(m: re.Match[str]) -> str:
    span = m.group()
    digits = sum(ch.isdigit() for ch in span)
    if not 7 <= digits <= 15 or _DATE.search(span):
        return span
    groups = [g for g in re.split(r"[ ().-]+", span) if g]
    if all(_YEAR.fullmatch(g) for g in groups):
        return span  # "1999 2004": years, not a phone number
    return " "


def _drop_addresses(text: str) -> str:
    """Remove "<1-5 digit number> <up to 4 capitalised words> <street word>[.]"."""
    words = list(_WORD.finditer(text))
    cut: list[tuple[int, int]] = []
    k = 0
    while k < len(words):
        end = _street_end(text, words, k)
        if end is None:
            k += 1
            continue
        stop = words[end].end()
        if stop < len(text) and text[stop] == ".":
            stop += 1
        cut.append((words[k].start(), stop))
        k = end + 1
    if not cut:
        return text
    out, last = [], 0
    for start, stop in cut:
        out += [text[last:start], " "]
        last = stop
    out.append(text[last:])
    return "".join(out)


def _street_end(text: str, words: list[re.Match[str]], k: int) -> int | None:
    head = words[k].group()
    if not (len(head) <= 5 and head.isdigit()) or k + 2 >= len(words) or not words[k + 1].group()[:1].isupper():
        return None
    for j in range(k + 1, min(k + 6, len(words))):
        word = words[j].group()
        if not text[words[j - 1].end():words[j].start()].isspace() or not word[:1].isupper():
            return None
        if j > k + 1 and word.lower() in _STREET_WORDS:
            return j
    return None
