"""Scoring functions: answer F1 and BLEU-1 as LoCoMo computes them, evidence recall, latency stats.

All pure functions: the runner feeds them strings and id lists and stores what they return.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence

from nltk.stem import PorterStemmer
from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
# nltk's word_tokenize needs the punkt corpus (a download); words are enough for BLEU-1
_WORD = re.compile(r"\w+")
# LoCoMo counts an adversarial question as answered when the reply says the fact is absent
_NOT_MENTIONED = ("not mentioned", "no information available")


def normalize_answer(text: str) -> str:
    """Lowercase, drop commas, punctuation and the words a/an/the/and, squeeze spaces."""
    text = str(text).lower().replace(",", "")
    text = text.translate(_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _stems(text: str, stemmer: PorterStemmer) -> list[str]:
    return [stemmer.stem(w) for w in normalize_answer(text).split()]


def token_f1(prediction: str, reference: str) -> float:
    """Harmonic mean of token precision and recall after normalisation and Porter stemming."""
    stemmer = PorterStemmer()
    pred = _stems(prediction, stemmer)
    ref = _stems(reference, stemmer)
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision = same / len(pred)
    recall = same / len(ref)
    return 2 * precision * recall / (precision + recall)


def multi_answer_f1(prediction: str, reference: str) -> float:
    """Multi-hop scoring: each comma-separated part of the reference is matched with its best
    comma-separated part of the prediction; the score is the mean over reference parts."""
    preds = [p.strip() for p in str(prediction).split(",")]
    refs = [r.strip() for r in str(reference).split(",")]
    return sum(max(token_f1(p, r) for p in preds) for r in refs) / len(refs)


def says_not_mentioned(prediction: str) -> bool:
    """LoCoMo's rule for category 5: the reply states that the information is absent."""
    low = str(prediction).lower()
    return any(marker in low for marker in _NOT_MENTIONED)


def locomo_f1(prediction: str, reference: str, category_id: int | None) -> float:
    """F1 the way LoCoMo scores each category (5 is detection of "not mentioned", 0 or 1)."""
    if category_id == 5:
        return 1.0 if says_not_mentioned(prediction) else 0.0
    if category_id == 1:
        return multi_answer_f1(prediction, reference)
    if category_id == 3:
        # open-domain references list alternatives after ';' and the first one is scored
        reference = str(reference).split(";")[0].strip()
    return token_f1(prediction, reference)


def bleu1(prediction: str, reference: str) -> float:
    """Sentence BLEU with unigram weights only, smoothing method 1 (lowercased word tokens)."""
    ref = _WORD.findall(str(reference).lower())
    pred = _WORD.findall(str(prediction).lower())
    if not ref or not pred:
        return 0.0
    return float(sentence_bleu([ref], pred, weights=(1.0, 0.0, 0.0, 0.0),
                               smoothing_function=SmoothingFunction().method1))


def retrieved_ids(hit_sources: Sequence[Sequence[str]], k: int) -> set[str]:
    """Union of the source ids of the top-k hits."""
    found: set[str] = set()
    for sources in hit_sources[:k]:
        found.update(sources)
    return found


def evidence_recall(evidence: Sequence[str], hit_sources: Sequence[Sequence[str]], k: int) -> float | None:
    """Fraction of the evidence ids cited by the top-k hits; None when there is no evidence."""
    wanted = set(evidence)
    if not wanted:
        return None
    return len(wanted & retrieved_ids(hit_sources, k)) / len(wanted)


def recall_any(targets: Iterable[str], retrieved: set[str]) -> float | None:
    """1.0 when at least one target was retrieved (LongMemEval recall_any); None without targets."""
    wanted = set(targets)
    if not wanted:
        return None
    return 1.0 if wanted & retrieved else 0.0


def recall_all(targets: Iterable[str], retrieved: set[str]) -> float | None:
    """1.0 when every target was retrieved (LongMemEval recall_all); None without targets."""
    wanted = set(targets)
    if not wanted:
        return None
    return 1.0 if wanted <= retrieved else 0.0


def session_of(turn_id: str) -> str:
    """The session part of a ``{session_id}:{turn_index}`` id."""
    return turn_id.rsplit(":", 1)[0]


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (``q`` in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def mean(values: Iterable[float | None]) -> float | None:
    """Mean of the values that are not None; None when there are none."""
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None
