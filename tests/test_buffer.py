"""Sensory / STM buffers as a state machine (write/_buffer.py).

Real parts: the "none" compressor, the "none" and "similarity" segmenters (real MiniLM), the rule
extractor, and the LLM extractor driven by ``ScriptedLLM`` (a scripted fake, NOT a model).
``MarkerSegmenter`` below is a deterministic test stand-in: it cuts before every turn that starts
with "#", so the expected segments can be written down by hand.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from dialogmem._errors import ConfigError
from dialogmem._models import ChatMessage, ScriptedLLM
from dialogmem._write._buffer import WriteBuffer
from dialogmem._write._compress import CompressResult, NoCompressor
from dialogmem._write._extract import BufferedTurn, ExtractedFact, LLMExtractor, RuleExtractor
from dialogmem._write._segment import NoSegmenter, make_segmenter
from dialogmem._write._tokens import count_tokens


class MarkerSegmenter:
    """Test stand-in segmenter: a new segment starts at every turn whose text starts with '#'."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def boundaries(self, turns: list[str], embeddings: np.ndarray | None = None) -> list[int]:
        self.calls.append(list(turns))
        return [i for i, t in enumerate(turns) if i > 0 and t.startswith("#")]


class RecordingExtractor(RuleExtractor):
    """The real rule extractor, recording the batches it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[list[str]]] = []
        self.previous: list[list[str]] = []

    def extract(self, batch, *, previous=()):  # type: ignore[no-untyped-def]
        self.batches.append([[t.turn_id for t in seg] for seg in batch])
        self.previous.append([t.turn_id for t in previous])
        return super().extract(batch, previous=previous)


class FailingExtractor:
    """Test stand-in: an extractor that crashes (as a bug would)."""

    def extract(self, batch, *, previous=()):  # type: ignore[no-untyped-def]
        raise RuntimeError("extractor crashed")


def bt(tid: str, text: str, *, speaker: str = "Ann", session: str | None = "s1",
       minute: int = 0) -> BufferedTurn:
    return BufferedTurn(turn_id=tid, speaker=speaker, text=text, time_stamp=f"2023-05-08T13:{minute:02d}:00",
                        float_time_stamp=1683550800.0 + minute * 60, weekday="Mon", session_id=session)


WORDS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


def sized(tid: str, n_tokens: int, *, marker: bool = False, **kw: object) -> BufferedTurn:
    """A turn of exactly ``n_tokens`` tokens as the buffers count them."""
    words = (["#"] if marker else []) + [WORDS[i % len(WORDS)] for i in range(n_tokens)]
    while count_tokens(" ".join(words)) > n_tokens:
        words.pop()
    text = " ".join(words)
    assert count_tokens(text) == n_tokens
    return bt(tid, text, **kw)  # type: ignore[arg-type]


def ids(facts: list[ExtractedFact]) -> list[str]:
    return [tid for f in facts for tid in f.source_turn_ids]


def test_sensory_fill_segments_and_carries_the_residual() -> None:
    seg, ext = MarkerSegmenter(), RecordingExtractor()
    buf = WriteBuffer(NoCompressor(), seg, ext, sensory_tokens=30, stm_threshold=1000)
    assert buf.push([sized("a", 8), sized("b", 8)]) == []
    assert seg.calls == []  # 16 < 30: no segmentation yet
    buf.push([sized("c", 8, marker=True), sized("d", 8)])  # 32 ≥ 30 → segment: [a b] | [c d]
    assert len(seg.calls) == 1
    assert buf.pending_turn_ids() == ["a", "b", "c", "d"]
    assert [t.turn_id for t in buf.pending_turns()] == ["a", "b", "c", "d"]
    assert buf.stm_token_count == 16 and buf.sensory_token_count == 16  # [c d] carried over
    held = {t.turn_id: t.topic_id for t in buf.pending_turns()}
    assert held["a"] == held["b"] == 0 and held["c"] == -1  # the residual has no topic yet
    facts = buf.flush()
    assert ext.batches == [[["a", "b"], ["c", "d"]]]
    assert ids(facts) == ["a", "b", "c", "d"]
    assert [f.topic_id for f in facts] == [0, 0, 1, 1]
    assert buf.pending_turn_ids() == [] and buf.next_topic_id == 2


def test_stm_threshold_triggers_extraction() -> None:
    ext = RecordingExtractor()
    buf = WriteBuffer(NoCompressor(), MarkerSegmenter(), ext, sensory_tokens=20, stm_threshold=30)
    out: list[ExtractedFact] = []
    turns = [sized(f"t{i}", 10, marker=(i % 2 == 0)) for i in range(8)]
    for t in turns:
        out += buf.push([t])
    # Segments of 2 turns (20 tokens) reach STM one by one; at 40 ≥ 30 tokens STM is extracted.
    assert ext.batches[0] == [["t0", "t1"], ["t2", "t3"]]
    assert ids(out) == [tid for batch in ext.batches for seg in batch for tid in seg]
    out += buf.flush()
    assert ids(out) == [t.turn_id for t in turns]
    topics = [f.topic_id for f in out]
    assert topics == sorted(topics) and topics == [0, 0, 1, 1, 2, 2, 3, 3]


def test_threshold_zero_extracts_every_segment_at_once() -> None:
    ext = RecordingExtractor()
    buf = WriteBuffer(NoCompressor(), NoSegmenter(), ext, sensory_tokens=0, stm_threshold=0)
    facts = buf.push([bt("x", "I bought a red kayak."), bt("y", "It was cheap.", minute=1)])
    assert ids(facts) == ["x", "y"] and ext.batches == [[["x"]], [["y"]]]
    assert ext.previous == [[], ["x"]]  # the turn extracted before is handed on as context
    assert [f.topic_id for f in facts] == [0, 1]
    assert buf.pending_turn_ids() == []


def test_residual_that_fills_the_buffer_is_committed() -> None:
    # No boundary at all: the buffer must not grow without bound.
    buf = WriteBuffer(NoCompressor(), NoSegmenter(), RuleExtractor(), sensory_tokens=20, stm_threshold=1000)
    buf.push([sized("a", 12), sized("b", 12)])
    assert buf.sensory_token_count == 0 and buf.stm_token_count == 24


def test_session_change_starts_a_segment() -> None:
    ext = RecordingExtractor()
    buf = WriteBuffer(NoCompressor(), NoSegmenter(), ext, sensory_tokens=1000, stm_threshold=1000)
    buf.push([bt("a", "one", session="s1"), bt("b", "two", session="s1"), bt("c", "three", session="s2")])
    buf.flush()
    assert ext.batches == [[["a", "b"], ["c"]]]


def test_extractor_failure_keeps_the_batch_pending() -> None:
    buf = WriteBuffer(NoCompressor(), NoSegmenter(), FailingExtractor(), sensory_tokens=0, stm_threshold=0)
    with pytest.raises(RuntimeError):
        buf.push([bt("a", "I like tea.")])
    assert buf.pending_turn_ids() == ["a"]


def test_replayed_turn_ids_are_not_buffered_twice() -> None:
    buf = WriteBuffer(NoCompressor(), NoSegmenter(), RuleExtractor(), sensory_tokens=1000, stm_threshold=1000)
    buf.push([bt("a", "I like tea."), bt("b", "And cake.")])
    buf.push([bt("a", "I like tea."), bt("c", "Also jam.")])
    assert buf.pending_turn_ids() == ["a", "b", "c"]
    assert ids(buf.flush()) == ["a", "b", "c"]


def test_empty_compression_keeps_the_original_text() -> None:
    class DropAll:
        """Test stand-in compressor that removes everything."""

        def compress(self, text: str) -> CompressResult:
            return CompressResult(text="", original_tokens=count_tokens(text), compressed_tokens=0)

        def compress_many(self, texts: list[str]) -> list[CompressResult]:
            return [self.compress(t) for t in texts]

    buf = WriteBuffer(DropAll(), NoSegmenter(), RuleExtractor(), sensory_tokens=1000, stm_threshold=1000)
    buf.push([bt("a", "Bought a kayak in Oslo.")])
    assert buf.pending_turns()[0].compressed == "Bought a kayak in Oslo."
    assert buf.sensory_token_count == count_tokens("Bought a kayak in Oslo.")
    (fact,) = buf.flush()
    assert fact.fact == "Ann: Bought a kayak in Oslo."


def test_negative_sizes_are_rejected() -> None:
    with pytest.raises(ConfigError):
        WriteBuffer(NoCompressor(), NoSegmenter(), RuleExtractor(), sensory_tokens=-1)


def test_real_similarity_segmenter_with_embed_fn() -> None:
    segmenter = make_segmenter("similarity")
    embedded: list[list[str]] = []

    def embed(texts: list[str]) -> np.ndarray:
        embedded.append(list(texts))
        return segmenter._embeddings(texts, None)  # the segmenter's own MiniLM: real vectors

    ext = RecordingExtractor()
    buf = WriteBuffer(NoCompressor(), segmenter, ext, sensory_tokens=60, stm_threshold=0, embed_fn=embed)
    turns = [bt("p1", "I planted tomatoes and basil in my garden this spring.", minute=0),
             bt("p2", "The tomatoes in the garden need watering every morning.", minute=1),
             bt("p3", "My garden basil grows fast next to the tomatoes.", minute=2),
             bt("q1", "My laptop crashed and I lost my thesis files.", minute=3),
             bt("q2", "The laptop repair shop says the hard drive failed.", minute=4),
             bt("q3", "I should back up my thesis to the cloud.", minute=5)]
    facts = buf.push(turns) + buf.flush()
    assert embedded and embedded[0][0] == turns[0].text
    assert ids(facts) == [t.turn_id for t in turns]
    # The buffer filled at the sixth turn; the garden/laptop change is the cut, and the laptop
    # turns (whose topic might go on) waited in the sensory buffer until the flush.
    assert ext.batches[0] == [["p1", "p2", "p3"]]
    assert [tid for batch in ext.batches[1:] for seg in batch for tid in seg] == ["q1", "q2", "q3"]


# ---------------------------------------------------------------- with the LLM extractor

LINE = re.compile(r"^\[[^\]]+\] (\d+)\.([^:]+): (.*)$")


def test_buffer_with_llm_extractor_multiparty() -> None:
    seen: list[list[str]] = []

    def script(stage: str, messages: list[ChatMessage]) -> str:
        lines = [LINE.match(ln) for ln in messages[-1]["content"].splitlines()]
        lines = [m for m in lines if m]
        seen.append([m.group(2) for m in lines])
        # Facts for Cy's turns only; the rest must still be covered.
        data = [{"source_id": int(m.group(1)), "fact": f"{m.group(2)} said: {m.group(3)}"}
                for m in lines if m.group(2) == "Cy"]
        return json.dumps({"data": data})

    llm = ScriptedLLM(script)
    buf = WriteBuffer(NoCompressor(), MarkerSegmenter(), LLMExtractor(llm),
                      sensory_tokens=40, stm_threshold=0)
    turns = [bt("m3", "I repaired the old bike.", speaker="Ann"),
             bt("m1", "Cy here, I painted the fence blue.", speaker="Cy", minute=1),
             bt("m9", "# New topic: Cy booked flights to Lima.", speaker="Cy", minute=2),
             bt("m2", "Bob thinks Lima is lovely in June.", speaker="Bob", minute=3),
             bt("m5", "ok", speaker="Bob", minute=4)]
    facts = buf.push(turns) + buf.flush()
    assert [spk for call in seen for spk in call] == ["Ann", "Cy", "Cy", "Bob", "Bob"]
    by_id = {tid: f for f in facts for tid in f.source_turn_ids}
    assert set(by_id) == {"m3", "m1", "m9", "m2"}  # "ok" is filler and got no fact
    assert by_id["m1"].fact == "Cy said: Cy here, I painted the fence blue." and by_id["m1"].method == "llm"
    assert by_id["m3"].method == "rule" and by_id["m3"].fact == "Ann: I repaired the old bike."
    assert by_id["m9"].topic_id > by_id["m1"].topic_id
    assert buf.pending_turn_ids() == []
