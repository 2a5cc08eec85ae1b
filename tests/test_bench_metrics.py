"""Benchmark metrics against examples computed by hand."""

from __future__ import annotations

import math

import pytest

from dialogmem.bench import (
    bleu1,
    evidence_recall,
    locomo_f1,
    multi_answer_f1,
    normalise_evidence,
    normalize_answer,
    percentile,
    recall_all,
    recall_any,
    says_not_mentioned,
    token_f1,
)
from dialogmem.bench._metrics import retrieved_ids, session_of


def test_normalisation_drops_case_punctuation_articles_and_and() -> None:
    assert normalize_answer("The Quick, brown-fox AND an Apple!") == "quick brownfox apple"
    assert normalize_answer("  7   May 2023. ") == "7 may 2023"
    assert normalize_answer(2022) == "2022"  # some LoCoMo answers are integers


def test_f1_counts_stemmed_tokens() -> None:
    # "cat sat" vs "cat sitting" -> stems {cat, sat} vs {cat, sit}: P = R = 1/2
    assert token_f1("The cat sat.", "a cat sitting") == pytest.approx(0.5)
    # Porter stemming makes inflections match
    assert token_f1("running dogs", "dog runs") == pytest.approx(1.0)
    # "Psychology counseling certification" vs "psychology": P = 1/3, R = 1 -> F1 = 0.5
    assert token_f1("Psychology counseling certification", "psychology") == pytest.approx(0.5)
    assert token_f1("", "anything") == 0.0
    assert token_f1("the a an", "the") == 0.0  # nothing left after normalisation


def test_multi_hop_f1_is_mean_over_reference_parts_of_best_prediction_part() -> None:
    assert multi_answer_f1("pottery, sailing", "sailing, pottery") == pytest.approx(1.0)
    # reference parts: "sailing" (best 0) and "pottery" (best 1) -> 0.5
    assert multi_answer_f1("pottery", "sailing, pottery") == pytest.approx(0.5)
    # one prediction part may serve several reference parts
    assert multi_answer_f1("pottery and sailing", "sailing, pottery") == pytest.approx(2 / 3)
    assert locomo_f1("pottery", "sailing, pottery", 1) == pytest.approx(0.5)
    # other categories do not split on commas: tokens {pottery} vs {sail, pottery}
    assert locomo_f1("pottery", "sailing, pottery", 4) == pytest.approx(2 / 3)


def test_open_domain_scores_first_alternative_and_adversarial_is_detection() -> None:
    assert locomo_f1("psychology", "Psychology; counseling", 3) == pytest.approx(1.0)
    assert says_not_mentioned("That is NOT mentioned in the conversation.")
    assert says_not_mentioned("No information available about it")
    assert not says_not_mentioned("blue")
    assert locomo_f1("It was not mentioned.", "blue", 5) == 1.0
    assert locomo_f1("blue", "blue", 5) == 0.0


def test_bleu1_unigram_precision_with_brevity_penalty() -> None:
    # clipped unigram matches 5 of 6, same length -> 5/6
    assert bleu1("the cat sat on the mat", "the cat is on the mat") == pytest.approx(5 / 6)
    # all 2 unigrams match, but 2 vs 6 words: brevity penalty exp(1 - 6/2)
    assert bleu1("the cat", "the cat is on the mat") == pytest.approx(math.exp(-2))
    assert bleu1("The CAT", "the cat") == pytest.approx(1.0)
    assert bleu1("dog", "cat") == 0.0
    assert bleu1("", "cat") == 0.0


KNOWN = {"D1:3", "D8:6", "D9:17", "D30:5", "D2:1", "D11:26"}


def test_evidence_normalisation_repairs_unambiguous_entries_and_counts_the_rest() -> None:
    raw = ["D1:3", "D8:6; D9:17", "D30:05", "D 2:1", "D:11:26", "D", "D99:1", 7, "", "D1:3 extra"]
    ids, malformed, normalised = normalise_evidence(raw, KNOWN)
    assert ids == ["D1:3", "D8:6", "D9:17", "D30:5", "D2:1", "D11:26"]
    assert normalised == 4  # the split pair, the leading zero, the space, the extra colon
    assert malformed == ["D", "D99:1", "7", "''", "D1:3 extra"]


def test_evidence_recall_at_k_uses_union_of_sources_of_top_k_hits() -> None:
    hits = [["D1:1"], ["D2:1", "D8:6"], [], ["D9:17"]]
    evidence, malformed, _ = normalise_evidence(["D8:6; D9:17", "D:x"], KNOWN)
    assert malformed == ["D:x"]
    assert evidence_recall(evidence, hits, 1) == 0.0
    assert evidence_recall(evidence, hits, 2) == pytest.approx(0.5)
    assert evidence_recall(evidence, hits, 3) == pytest.approx(0.5)
    assert evidence_recall(evidence, hits, 4) == pytest.approx(1.0)
    assert evidence_recall(evidence, hits, 50) == pytest.approx(1.0)
    # a question whose evidence was all malformed is skipped, not scored 0
    assert evidence_recall([], hits, 4) is None


def test_longmemeval_recall_any_and_all() -> None:
    hits = [["s1:0"], ["s3:2"], ["s2:1"]]
    turns_at_2 = retrieved_ids(hits, 2)
    sessions_at_2 = {session_of(t) for t in turns_at_2}
    assert sessions_at_2 == {"s1", "s3"}
    assert recall_any(["s1", "s2"], sessions_at_2) == 1.0
    assert recall_all(["s1", "s2"], sessions_at_2) == 0.0
    sessions_at_3 = {session_of(t) for t in retrieved_ids(hits, 3)}
    assert recall_all(["s1", "s2"], sessions_at_3) == 1.0
    assert recall_any(["s1:1"], turns_at_2) == 0.0
    assert recall_any([], sessions_at_3) is None and recall_all([], sessions_at_3) is None
    assert session_of("answer_4be1b6b4_2:13") == "answer_4be1b6b4_2"


def test_percentile_interpolates() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 95) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile(list(range(1, 101)), 95) == pytest.approx(95.05)
