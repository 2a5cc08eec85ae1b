"""Sensitive values that never become LTM node text, whoever's view of the graph is read.

De-identification (``_deid``) removes who a text is about; this module removes what must not be
kept even without a name attached: secrets, identifiers, health conditions and exact amounts.
``sensitive_reason(text)`` names the first kind found (or ``None``):

- ``credential``: a word that announces a secret or an account identifier (password, PIN, passcode,
  API key, token, CVV, IBAN, social security, passport number, account number...);
- ``id_number``: a number with four digits or more that is neither a year (1900-2099) nor a date
  ("4711", "078-05-1120", "4111 1111 1111 1111"), or a word mixing letters and digits
  ("hunter2zebra", "A1B2C3"; short ones such as "MP3" or "3D", and ordinals such as "21st" or
  "1990s", are kept);
- ``health``: a health condition, treatment or diagnosis from a fixed lexicon ("diabetes",
  "chemotherapy", "diagnosed", ...);
- ``amount``: money ("$1,200", "950 euros", "USD 40").

``drop_sensitive_sentences(text)`` removes every sentence of which ``sensitive_reason`` says
something, so that neither the rule extractor nor a model ever reads them. It errs towards privacy:
"a bowling pin" or "a token of thanks" are dropped too.

Every pattern runs in linear time (word-set lookups and single-pass regular expressions without
nested quantifiers).
"""

from __future__ import annotations

import re
from itertools import pairwise
from typing import Literal

SensitiveKind = Literal["credential", "id_number", "health", "amount"]

_WORDS = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_SENTENCES = re.compile(r"[^.!?;\n]+[.!?;]?")
# one- and two-word cues, matched on lower-cased words
_CREDENTIAL_WORDS = frozenset({
    "password", "passwords", "passwd", "passcode", "passcodes", "passphrase", "pin", "pins", "pincode",
    "token", "tokens", "apikey", "cvv", "cvc", "otp", "2fa", "mfa", "iban", "ssn", "credentials", "login",
    "logins", "username", "usernames", "mnemonic", "secret", "secrets", "keycode"})
_CREDENTIAL_PAIRS = frozenset({
    ("api", "key"), ("access", "key"), ("secret", "key"), ("private", "key"), ("ssh", "key"), ("security", "code"),
    ("recovery", "code"), ("recovery", "phrase"), ("seed", "phrase"), ("one", "time"), ("user", "name"),
    ("social", "security"), ("passport", "number"), ("account", "number"), ("routing", "number"),
    ("sort", "code"), ("card", "number"), ("credit", "card"), ("debit", "card"), ("tax", "id"),
    ("license", "number"), ("licence", "number"), ("insurance", "number"), ("member", "id"), ("bank", "details"),
    ("combination", "lock"), ("safe", "combination")})
_HEALTH_WORDS = frozenset({
    "diabetes", "diabetic", "cancer", "cancers", "tumor", "tumour", "tumors", "tumours", "leukemia", "leukaemia",
    "lymphoma", "melanoma", "carcinoma", "chemotherapy", "chemo", "radiotherapy", "hiv", "aids", "hepatitis",
    "tuberculosis", "syphilis", "herpes", "chlamydia", "gonorrhea", "std", "stds", "sti", "stis", "depression",
    "depressed", "antidepressant", "antidepressants", "anxiety", "bipolar", "schizophrenia", "schizophrenic",
    "psychosis", "ptsd", "ocd", "adhd", "autism", "autistic", "anorexia", "bulimia", "eating", "addiction",
    "addicted", "alcoholism", "alcoholic", "overdose", "rehab", "suicidal", "suicide", "epilepsy", "epileptic",
    "seizures", "dementia", "alzheimer", "alzheimer's", "parkinson", "parkinson's", "asthma", "copd", "stroke",
    "arthritis", "lupus", "sclerosis", "fibromyalgia", "celiac", "crohn", "crohn's", "colitis", "insulin",
    "diagnosed", "diagnosis", "diagnoses", "prognosis", "prescribed", "prescription", "medication",
    "medications", "pregnant", "pregnancy", "miscarriage", "abortion", "infertility", "ivf", "hypertension",
    "cholesterol", "transplant", "dialysis", "biopsy", "surgery", "disorder", "disease", "syndrome",
    "infection", "infected", "illness", "therapist", "psychiatrist", "psychiatric"})
_HEALTH_PAIRS = frozenset({("eating", "disorder"), ("heart", "attack"), ("blood", "pressure"), ("mental", "illness"),
                           ("panic", "attack"), ("panic", "attacks")})
_NOT_HEALTH_ALONE = frozenset({"eating", "stroke"})  # "eating out", "a stroke of luck": only in a pair
_CURRENCY_WORDS = ("dollars?|usd|eur|euros?|pounds?|gbp|bucks|yen|jpy|rupees?|inr|francs?|chf|"
                   "yuan|cny|rmb|pesos?|cad|aud|sek|nok|dkk|kr|zloty|pln")
_AMOUNT = re.compile(
    rf"[$€£¥₹]\s?\d|\b\d[\d,.]*\s?(?:k|m|bn|million|billion|thousand)?\s?(?:{_CURRENCY_WORDS})\b"
    rf"|\b(?:{_CURRENCY_WORDS})\s?\d", re.IGNORECASE)
# a run of digits with single separators: "4711", "078-05-1120", "4111 1111 1111 1111", "12.5"
_NUMBER = re.compile(r"\d+(?:[-./ ]\d+)*")
_DATE = re.compile(r"\d{4}-\d{1,2}-\d{1,2}|\d{1,2}[/.-]\d{1,2}[/.-]\d{2,4}|\d{1,2}[:.]\d{2}")
# dates and clock times anywhere ("2023-05-07T14:00", "7/5/2023", "14:00:30"), removed before numbers are read
_DATE_TIME = re.compile(r"\d{4}-\d{1,2}-\d{1,2}(?:[T ]\d{1,2}:\d{2}(?::\d{2})?)?|\d{1,2}/\d{1,2}/\d{2,4}"
                        r"|\d{1,2}:\d{2}(?::\d{2})?")
_YEAR = re.compile(r"(?:19|20)\d\d")
_MIXED = re.compile(r"\b(?=[A-Za-z]*\d)(?=\d*[A-Za-z])[A-Za-z0-9]+\b")
_ORDINAL = re.compile(r"\d+(?:st|nd|rd|th|s|am|pm|k)", re.IGNORECASE)
_SHORT_MIXED = 3  # "MP3", "3D", "4K", "B12": a model, a format, a vitamin — not a secret


def sensitive_reason(text: str) -> SensitiveKind | None:
    """The first kind of sensitive value ``text`` holds (see the module docstring), or ``None``."""
    words = _WORDS.findall(text.lower().replace("’", "'"))
    pairs = set(pairwise(words))
    if any(w in _CREDENTIAL_WORDS for w in words) or pairs & _CREDENTIAL_PAIRS:
        return "credential"
    if _AMOUNT.search(text):
        return "amount"
    if _has_id_number(text):
        return "id_number"
    if any(w in _HEALTH_WORDS and w not in _NOT_HEALTH_ALONE for w in words) or pairs & _HEALTH_PAIRS:
        return "health"
    return None


def drop_sensitive_sentences(text: str) -> str:
    """``text`` without its sensitive sentences (split at ``. ! ? ;`` and line breaks), line
    breaks kept."""
    lines = []
    for line in text.split("\n"):
        kept = [m.group() for m in _SENTENCES.finditer(line) if sensitive_reason(m.group()) is None]
        lines.append("".join(kept).strip())
    return "\n".join(lines)


def _has_id_number(text: str) -> bool:
    text = _DATE_TIME.sub(" ", text)
    for m in _NUMBER.finditer(text):
        span = m.group().strip()
        digits = sum(ch.isdigit() for ch in span)
        if digits < 4 or _DATE.fullmatch(span) or _YEAR.fullmatch(span):
            continue
        if all(_YEAR.fullmatch(g) for g in re.split(r"[-./ ]", span)):
            continue  # "1999 2004", "2019-2021": years
        return True
    for m in _MIXED.finditer(text):
        token = m.group()
        if len(token) > _SHORT_MIXED and not _ORDINAL.fullmatch(token):
            return True
    return False
