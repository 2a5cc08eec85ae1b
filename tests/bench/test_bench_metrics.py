"""Benchmark metrics against examples computed by hand."""

from __future__ import annotations

import math

import pytest

from dialogmem.bench import (
    BenchQuestion,
    bleu1,
    budget_cut,
    budget_scores,
    evidence_recall,
    locomo_f1,
    locomo_session,
    longmemeval_session,
    multi_answer_f1,
    normalise_evidence,
    normalize_answer,
    percentile,
    recall_all,
    recall_any,
    retrieval_scores,
    says_not_mentioned,
    score_hits,
    sessions_of,
    token_f1,
)
from dialogmem.bench._metrics import budget_prefix_tokens, retrieved_ids


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
    sessions_at_2 = sessions_of(turns_at_2, longmemeval_session)
    assert sessions_at_2 == {"s1", "s3"}
    assert recall_any(["s1", "s2"], sessions_at_2) == 1.0
    assert recall_all(["s1", "s2"], sessions_at_2) == 0.0
    sessions_at_3 = sessions_of(retrieved_ids(hits, 3), longmemeval_session)
    assert recall_all(["s1", "s2"], sessions_at_3) == 1.0
    assert recall_any(["s1:1"], turns_at_2) == 0.0
    assert recall_any([], sessions_at_3) is None and recall_all([], sessions_at_3) is None


def test_session_of_a_turn_id_and_malformed_ids() -> None:
    assert locomo_session("D3:5") == "session_3"
    assert locomo_session("D10:19") == "session_10"
    assert locomo_session("D03:5") == "session_3"  # the loader's session names carry no leading zero
    for bad in ("D", "D10:19x", "D3", "D:3", "3:5", "d3:5", " D3:5", "D3:5 ", "D3::5", "", "D３:5"):
        assert locomo_session(bad) is None, bad
    assert longmemeval_session("answer_4be1b6b4_2:13") == "answer_4be1b6b4_2"
    assert longmemeval_session("sess:b:0") == "sess:b"  # the turn index is after the last colon
    for bad in ("sess_b", ":3", "sess_b:", "sess_b:x", "sess_b:1x"):
        assert longmemeval_session(bad) is None, bad
    # ids that map to no session are left out, never counted as a session of their own
    assert sessions_of(["D1:1", "D3:5", "D", "D10:19x", "D3:2"], locomo_session) == {"session_1", "session_3"}


def _q(evidence: list[str], sessions: list[str] | None = None) -> BenchQuestion:
    return BenchQuestion(id="q", question="?", answer="", category="c", evidence=evidence,
                         evidence_sessions=sessions or [])


def test_locomo_turn_and_session_recall_by_hand() -> None:
    # evidence in sessions 1 and 10; a hit citing the malformed "D10:19x" covers no session
    q = _q(["D1:3", "D10:19"])
    hits = [["D1:4"], ["D10:19x", "D"], ["D10:2"], ["D1:3"]]
    by_k = retrieval_scores("locomo", q, hits, [1, 2, 3, 4])
    assert by_k["evidence"] == {"1": 0.0, "2": 0.0, "3": 0.0, "4": 0.5}
    assert by_k["turn_any"] == {"1": 0.0, "2": 0.0, "3": 0.0, "4": 1.0}
    assert by_k["turn_all"] == {"1": 0.0, "2": 0.0, "3": 0.0, "4": 0.0}
    assert by_k["session_any"] == {"1": 1.0, "2": 1.0, "3": 1.0, "4": 1.0}
    # session 10 only counts once a well-formed D10 turn is cited (k=3): looser than turn level
    assert by_k["session_all"] == {"1": 0.0, "2": 0.0, "3": 1.0, "4": 1.0}
    # the loader's evidence_sessions, when given, are the targets
    assert score_hits("locomo", _q(["D1:3"], ["session_1", "session_2"]), [["D1:1"]])["session_all"] == 0.0
    # no hits at all: zero, not missing
    assert score_hits("locomo", q, []) == dict.fromkeys(by_k, 0.0)


def test_longmemeval_session_targets_are_answer_sessions() -> None:
    # answer_session_ids name sess_b and sess_c; only one turn of sess_b is marked has_answer
    q = _q(["sess_b:0"], ["sess_b", "sess_c"])
    hits = [["sess_a:1"], ["sess_c:2"], ["sess_b:1"]]
    by_k = retrieval_scores("longmemeval", q, hits, [1, 2, 3])
    assert by_k["session_any"] == {"1": 0.0, "2": 1.0, "3": 1.0}
    assert by_k["session_all"] == {"1": 0.0, "2": 0.0, "3": 1.0}
    assert by_k["evidence"] == by_k["turn_any"] == {"1": 0.0, "2": 0.0, "3": 0.0}
    # a question with answer sessions but no marked turn has session-level numbers only
    only_sessions = score_hits("longmemeval", _q([], ["sess_c"]), hits)
    assert only_sessions == {"evidence": None, "session_any": 1.0, "session_all": 1.0, "turn_any": None,
                             "turn_all": None}


def test_budget_cut_stops_at_the_first_hit_that_overflows() -> None:
    prefix = [100, 180, 300, 310, 600]  # context tokens of the first 1, 2, ... hits
    assert budget_cut(prefix, 256) == 2
    assert budget_cut(prefix, 300) == 3  # a context exactly at the budget fits
    assert budget_cut(prefix, 99) == 0  # the first hit alone overflows: nothing is kept
    assert budget_cut(prefix, 1000) == 5
    assert budget_cut([], 256) == 0
    # hits of 100, 300 and 20 tokens: the 20-token third hit would fit under 256 after the first, but
    # the walk stops at the 300-token second hit (stop, not skip-and-continue)
    sizes = [100, 300, 20, 50]
    calls: list[int] = []

    def tokens_of_prefix(n: int) -> int:
        calls.append(n)
        return sum(sizes[:n])

    prefix = budget_prefix_tokens(len(sizes), tokens_of_prefix, 256)
    assert prefix == [100, 400] and calls == [1, 2]  # nothing is rendered past the first overflow
    assert budget_cut(prefix, 256) == 1
    assert budget_prefix_tokens(len(sizes), tokens_of_prefix, 10_000) == [100, 400, 420, 470]


def test_budget_scores_by_hand() -> None:
    q = _q(["D1:3", "D2:1"])
    sources = [["D1:3"], ["D5:1"], ["D2:1"]]
    prefix = [100, 250, 400]
    scores, fill = budget_scores("locomo", q, sources, prefix, [50, 256, 512], fetch_k=3)
    assert fill == {"50": {"hits": 0, "tokens": 0, "ended": "budget"},
                    "256": {"hits": 2, "tokens": 250, "ended": "budget"},
                    "512": {"hits": 3, "tokens": 400, "ended": "fetch"}}  # every one of the 3 fetched fit
    assert scores["evidence"] == {"50": 0.0, "256": 0.5, "512": 1.0}
    assert scores["session_any"] == {"50": 0.0, "256": 1.0, "512": 1.0}
    assert scores["session_all"] == {"50": 0.0, "256": 0.0, "512": 1.0}
    assert scores["turn_all"] == {"50": 0.0, "256": 0.0, "512": 1.0}
    # the same hits from a fetch of 10: the system had no more to give
    _, fill = budget_scores("locomo", q, sources, prefix, [512], fetch_k=10)
    assert fill["512"]["ended"] == "hits"


def test_percentile_interpolates() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0], 95) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert percentile(list(range(1, 101)), 95) == pytest.approx(95.05)
