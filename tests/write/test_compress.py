"""Pre-compression with the real SmolLM2-135M GGUF through llama.cpp."""

from __future__ import annotations

import importlib.util
import threading

import numpy as np
import pytest

from dialogmem import ConfigError
from dialogmem._text._tokens import RegexTokenCounter, count_tokens, count_tokens_many
from dialogmem._write._compress import (
    Compressor,
    CompressResult,
    EntropyCompressor,
    LLMLingua2Compressor,
    NoCompressor,
    chunk_at_words,
    make_compressor,
    select_words,
    self_information,
    word_starts,
)

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                                reason="llama-cpp-python is not installed (pip install llama-cpp-python)")

TURNS = [
    "Hey Caroline! Good to see you! I'm swamped with the kids and work. What's up with you? Anything new?",
    "I went to an LGBTQ support group yesterday and it was so powerful, everyone shared their stories.",
    "My sister Jenna just moved to Portland for a nursing job at the children's hospital downtown.",
    "We drove up to Lake Tahoe on the 14th of March and rented a small cabin with a wood stove for a week.",
    "Honestly I think you should go for it, the pottery class on Thursday evenings sounds like a lot of fun.",
]


@pytest.fixture(scope="module")
def compressor() -> EntropyCompressor:
    return EntropyCompressor(rate=0.6)


@pytest.mark.parametrize("rate", [0.4, 0.6, 0.8])
def test_kept_ratio_follows_rate(compressor: EntropyCompressor, rate: float) -> None:
    comp = EntropyCompressor(model_path=str(compressor.model_path), rate=rate)
    comp._llm, comp._bos = compressor._load(), compressor._bos  # share the loaded model
    results = comp.compress_many(TURNS)
    for text, res in zip(TURNS, results, strict=True):
        assert isinstance(res, CompressResult)
        assert res.original_tokens > 10
        assert abs(res.ratio - rate) <= 0.1, (rate, res)
        # Kept words appear in the original, in order.
        pos = 0
        for word in res.text.split():
            found = text.find(word, pos)
            assert found >= 0, (word, text)
            pos = found + len(word)
    total = sum(r.compressed_tokens for r in results) / sum(r.original_tokens for r in results)
    assert abs(total - rate) <= 0.05


def test_keeps_informative_words(compressor: EntropyCompressor) -> None:
    res = compressor.compress(TURNS[2])
    # Names are among the least predictable words; filler is dropped first.
    assert "Jenna" in res.text and "sister" in res.text
    assert " to " not in res.text and " the " not in res.text
    # Numbers are protected by default (they are what temporal questions ask about).
    assert "14th" in compressor.compress(TURNS[3]).text
    plain = EntropyCompressor(model_path=str(compressor.model_path), rate=0.6, protect=None)
    plain._llm, plain._bos = compressor._load(), compressor._bos
    assert "14th" not in plain.compress(TURNS[3]).text


def test_deterministic(compressor: EntropyCompressor) -> None:
    first = [r.text for r in compressor.compress_many(TURNS)]
    again = [r.text for r in compressor.compress_many(TURNS)]
    assert first == again
    results: list[str] = []
    threads = [threading.Thread(target=lambda: results.append(compressor.compress(TURNS[3]).text))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [first[3]] * 3


@pytest.mark.parametrize("text", ["ok", "Caroline", "?", "  lots    of \n\n\n  whitespace  here ", " \n\t "])
def test_never_empty(compressor: EntropyCompressor, text: str) -> None:
    res = compressor.compress(text)
    assert res.text.strip() or res.text == text
    assert res.text  # never an empty string
    assert res.compressed_tokens <= res.original_tokens


def test_short_turn_kept_whole(compressor: EntropyCompressor) -> None:
    assert compressor.compress("ok").text == "ok"
    assert compressor.compress(" \n ").text == " \n "


def test_turn_longer_than_window() -> None:
    comp = EntropyCompressor(rate=0.5, n_ctx=64)
    long_text = " ".join(TURNS * 3)  # about 300 tokens, five windows of 63
    res = comp.compress(long_text)
    assert res.original_tokens > 200
    assert abs(res.ratio - 0.5) <= 0.1
    assert "Portland" in res.text


def test_max_tokens_recompresses() -> None:
    comp = EntropyCompressor(rate=0.9, max_tokens=20)
    res = comp.compress(TURNS[3])
    assert res.compressed_tokens <= 20
    assert res.original_tokens > 20


def test_no_compressor_is_identity() -> None:
    comp = NoCompressor()
    assert isinstance(comp, Compressor)
    for t in [*TURNS, "", "  x  "]:
        res = comp.compress(t)
        assert res.text == t and res.original_tokens == res.compressed_tokens == count_tokens(t)
    assert [r.text for r in comp.compress_many(TURNS)] == TURNS


def test_llmlingua2_unavailable_is_a_clear_config_error() -> None:
    if importlib.util.find_spec("llmlingua") is None:
        with pytest.raises(ConfigError, match="pip install llmlingua"):
            LLMLingua2Compressor(model_path="/nonexistent")
        with pytest.raises(ConfigError, match="pip install llmlingua"):
            make_compressor("llmlingua2", model_path=None)
    else:
        with pytest.raises(ConfigError, match="model_path"):
            LLMLingua2Compressor(model_path="/nonexistent/llmlingua-2")


def test_factory_and_config_errors(tmp_path) -> None:
    assert isinstance(make_compressor("none"), NoCompressor)
    assert isinstance(make_compressor("entropy", rate=0.5), EntropyCompressor)
    with pytest.raises(ConfigError, match="unknown compressor"):
        make_compressor("zip")
    with pytest.raises(ConfigError, match="rate"):
        EntropyCompressor(rate=0.0)
    with pytest.raises(ConfigError, match="rate"):
        EntropyCompressor(rate=1.5)
    with pytest.raises(ConfigError, match="not found"):
        EntropyCompressor(model_path=str(tmp_path / "missing.gguf"))
    with pytest.raises(ConfigError):
        make_compressor("none", rate=0.5)


def test_pure_selection_rules() -> None:
    logits = np.log(np.array([[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]]))
    info = self_information(logits, np.array([1, 2]))
    np.testing.assert_allclose(info, [np.log(4), -np.log(0.8)], rtol=1e-6)
    pieces = [b"Hel", b"lo", b" big", b" wor", b"ld", b"!"]
    starts = word_starts(pieces)
    assert starts.tolist() == [True, False, True, True, False, False]
    info = np.array([5.0, 0.1, 0.2, 0.3, 4.0, 0.1])
    keep = select_words(info, starts, rate=0.8)  # budget 5 tokens: "Hello" (2) + "world!" (3)
    assert keep.tolist() == [True, True, False, True, True, True]
    assert select_words(info, starts, rate=0.01).sum() >= 1
    protected = np.array([False, False, True, False, False, False])
    assert select_words(info, starts, rate=0.4, protected=protected).tolist() == [
        False, False, True, False, False, False]
    assert chunk_at_words(starts, 4) == [(0, 3), (3, 6)]
    assert chunk_at_words(np.array([True, False, False, False, False]), 2) == [(0, 2), (2, 4), (4, 5)]


def test_token_counter() -> None:
    assert count_tokens("") == 0
    assert count_tokens("Hello there, how are you?") == 7
    assert count_tokens_many(["a b", "c"]) == [2, 1]
    approx = RegexTokenCounter()
    text = " ".join(TURNS)
    assert abs(approx.count(text) - count_tokens(text)) <= 0.15 * count_tokens(text)
