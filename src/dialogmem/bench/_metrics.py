"""Scoring functions: answer F1 and BLEU-1 as LoCoMo computes them, evidence recall, latency stats.

All pure functions: the runner feeds them strings and id lists and stores what they return.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

from nltk.stem import PorterStemmer
from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
# nltk's word_tokenize needs the punkt corpus (a download); words are enough for BLEU-1
_WORD = re.compile(r"\w+")
# LoCoMo counts an adversarial question as answered when the reply says the fact is absent
_NOT_MENTIONED = ("not mentioned", "no information available")
# a LoCoMo dia_id: D{session}:{turn}
_LOCOMO_TURN = re.compile(r"D([0-9]+):([0-9]+)")
_DIGITS = re.compile(r"[0-9]+")


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


def locomo_session(turn_id: str) -> str | None:
    """LoCoMo's session of a dia_id: ``D3:5`` → ``session_3``; None for anything else (``D``,
    ``D10:19x``, ``3:5``), which then counts for no session."""
    match = _LOCOMO_TURN.fullmatch(turn_id)
    return f"session_{int(match.group(1))}" if match else None


def longmemeval_session(turn_id: str) -> str | None:
    """The session of the harness's LongMemEval turn ids ``{session_id}:{turn_index}``; None when
    the id has no such form (no colon, empty session, a non-numeric index)."""
    session, sep, index = turn_id.rpartition(":")
    return session if sep and session and _DIGITS.fullmatch(index) else None


def session_mapper(dataset: str) -> Callable[[str], str | None]:
    """The turn-id → session-id function of a dataset (LoCoMo dia_ids, or LongMemEval's own ids)."""
    return locomo_session if dataset == "locomo" else longmemeval_session


def sessions_of(turn_ids: Iterable[str], session_of: Callable[[str], str | None]) -> set[str]:
    """The sessions the turn ids belong to; ids that map to no session are left out."""
    return {s for t in turn_ids if (s := session_of(t)) is not None}


def budget_prefix_tokens(n_hits: int, tokens_of_prefix: Callable[[int], int], ceiling: int) -> list[int]:
    """Context tokens of the first 1, 2, … hits (``tokens_of_prefix(n)`` renders hits[:n] and counts
    it), stopping after the first prefix over ``ceiling``: nothing later can fit any budget ≤ it."""
    counts: list[int] = []
    for n in range(1, n_hits + 1):
        counts.append(tokens_of_prefix(n))
        if counts[-1] > ceiling:
            break
    return counts


def budget_cut(prefix_tokens: Sequence[int], budget: int) -> int:
    """How many leading hits a ``budget``-token context holds: hits are taken in rank order while
    the rendered context of the hits taken so far fits; the first hit that would overflow ends the
    walk (stop, never skip-and-continue, so a short hit ranked lower cannot jump the queue)."""
    for n, tokens in enumerate(prefix_tokens):
        if tokens > budget:
            return n
    return len(prefix_tokens)


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


def first_rank(targets: Iterable[str], hit_sources: Sequence[Sequence[str]]) -> int | None:
    """The 1-based rank of the first hit that cites any of ``targets``; None when no hit does (or there
    are no targets)."""
    wanted = set(targets)
    for rank, sources in enumerate(hit_sources, 1):
        if wanted & set(sources):
            return rank
    return None


def stale_first(evidence: Iterable[str], superseded: Iterable[str], hit_sources: Sequence[Sequence[str]]
                ) -> float | None:
    """1.0 when a hit citing a superseded (stale) turn ranks above every hit citing the current evidence,
    or a stale turn is among the hits and the evidence is not; 0.0 otherwise (a hit that cites both
    counts as the evidence first); None when there is nothing superseded to put first."""
    stale = set(superseded)
    if not stale:
        return None
    stale_at = first_rank(stale, hit_sources)
    if stale_at is None:
        return 0.0
    evidence_at = first_rank(evidence, hit_sources)
    return 1.0 if evidence_at is None or stale_at < evidence_at else 0.0
