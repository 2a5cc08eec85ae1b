"""Which pending turns are due for extraction (write/_buffer.py, pure) and the stages around it.

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

from dialogmem import ConfigError
from dialogmem._models import ChatMessage, LocalEmbedder, ScriptedLLM
from dialogmem._text._tokens import count_tokens
from dialogmem._write import BufferPolicy, WriteStages, due_batch, topic_id
from dialogmem._write._compress import CompressResult, NoCompressor
from dialogmem._write._extract import BufferedTurn, LLMExtractor, RuleExtractor
from dialogmem._write._segment import NoSegmenter, make_segmenter


class MarkerSegmenter:
    """Test stand-in segmenter: a new segment starts at every turn whose text starts with '#'."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def boundaries(self, turns: list[str], embeddings: np.ndarray | None = None) -> list[int]:
        self.calls.append(list(turns))
        return [i for i, t in enumerate(turns) if i > 0 and t.startswith("#")]


def bt(tid: str, text: str, *, speaker: str = "Ann", session: str | None = "s1", minute: int = 0) -> BufferedTurn:
    return BufferedTurn(turn_id=tid, speaker=speaker, text=text, time_stamp=f"2023-05-08T13:{minute:02d}:00",
                        float_time_stamp=1683550800.0 + minute * 60, weekday="Mon", session_id=session)


def marker_cuts(texts: list[str]) -> list[int]:
    return MarkerSegmenter().boundaries(texts)


def seg_ids(batch: list[list[BufferedTurn]]) -> list[list[str]]:
    return [[t.turn_id for t in seg] for seg in batch]


def test_nothing_is_due_until_both_buffers_are_full() -> None:
    policy = BufferPolicy(sensory_tokens=10, stm_threshold=10)
    turns = [bt("a", "x"), bt("b", "# y"), bt("c", "z")]
    assert due_batch(turns, [6, 6, 6], policy, force=False, boundaries=marker_cuts) == []  # 18 < 20
    turns.append(bt("d", "# w"))
    batch = due_batch(turns, [6, 6, 6, 3], policy, force=False, boundaries=marker_cuts)
    # The last topic ("d", 3 tokens) may go on: it stays pending, LightMem's residual.
    assert seg_ids(batch) == [["a"], ["b", "c"]]


def test_a_last_segment_that_fills_the_sensory_buffer_is_taken() -> None:
    policy = BufferPolicy(sensory_tokens=10, stm_threshold=5)
    turns = [bt("a", "x"), bt("b", "# y"), bt("c", "z")]
    batch = due_batch(turns, [3, 6, 6], policy, force=False, boundaries=marker_cuts)
    assert seg_ids(batch) == [["a"], ["b", "c"]]  # "b"+"c" = 12 tokens >= sensory 10


def test_immediate_policy_takes_every_turn_at_once_cut_by_session() -> None:
    turns = [bt("a", "x", session="s1"), bt("b", "y", session="s1"), bt("c", "z", session="s2")]
    batch = due_batch(turns, [1, 1, 1], BufferPolicy(), force=False, boundaries=marker_cuts)
    assert seg_ids(batch) == [["a", "b"], ["c"]]
    assert BufferPolicy().immediate and not BufferPolicy(1, 0).immediate


def test_force_takes_everything_and_session_changes_always_cut() -> None:
    policy = BufferPolicy(sensory_tokens=100, stm_threshold=100)
    turns = [bt("a", "x", session="s1"), bt("b", "y", session="s2"), bt("c", "# z", session="s2")]
    assert due_batch(turns, [1, 1, 1], policy, force=False, boundaries=marker_cuts) == []
    batch = due_batch(turns, [1, 1, 1], policy, force=True, boundaries=marker_cuts)
    assert seg_ids(batch) == [["a"], ["b"], ["c"]]


def test_topic_ids_are_stable_per_segment() -> None:
    turns = [bt("a", "x"), bt("b", "# y")]
    one = due_batch(turns, [1, 1], BufferPolicy(1, 0), force=True, boundaries=marker_cuts)
    two = due_batch(turns, [1, 1], BufferPolicy(1, 0), force=True, boundaries=marker_cuts)
    assert [t.topic_id for s in one for t in s] == [t.topic_id for s in two for t in s]
    assert one[0][0].topic_id == topic_id([turns[0]]) != one[1][0].topic_id


def test_negative_sizes_are_rejected() -> None:
    with pytest.raises(ConfigError):
        BufferPolicy(sensory_tokens=-1)


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder().load()


def stages(embedder: LocalEmbedder, *, compressor: object = None, segmenter: object = None,
           policy: BufferPolicy = BufferPolicy(0, 0), extractor: object = None) -> WriteStages:
    return WriteStages(compressor or NoCompressor(), segmenter or NoSegmenter(),  # type: ignore[arg-type]
                       extractor or RuleExtractor(), embedder, policy)  # type: ignore[arg-type]


def test_empty_compression_keeps_the_original_text(embedder: LocalEmbedder) -> None:
    class DropAll:
        """Test stand-in compressor that removes everything, counting its calls."""

        calls = 0

        def compress(self, text: str) -> CompressResult:
            return CompressResult(text="", original_tokens=count_tokens(text), compressed_tokens=0)

        def compress_many(self, texts: list[str]) -> list[CompressResult]:
            DropAll.calls += len(texts)
            return [self.compress(t) for t in texts]

    s = stages(embedder, compressor=DropAll(), policy=BufferPolicy(1000, 1000))
    turn = bt("a", "Bought a kayak in Oslo.")
    assert s.due("u", [turn], force=False) == []
    ((kept,),) = s.due("u", [turn], force=True)
    assert kept.compressed == "Bought a kayak in Oslo."
    assert DropAll.calls == 1  # the second decision reused the first compression
    (fact,) = RuleExtractor().extract([[kept]])
    assert fact.fact == "Ann: Bought a kayak in Oslo."


def test_real_similarity_segmenter_cuts_at_the_topic_change(embedder: LocalEmbedder) -> None:
    s = stages(embedder, segmenter=make_segmenter("similarity"), policy=BufferPolicy(60, 0))
    turns = [bt("p1", "I planted tomatoes and basil in my garden this spring.", minute=0),
             bt("p2", "The tomatoes in the garden need watering every morning.", minute=1),
             bt("p3", "My garden basil grows fast next to the tomatoes.", minute=2),
             bt("q1", "My laptop crashed and I lost my thesis files.", minute=3),
             bt("q2", "The laptop repair shop says the hard drive failed.", minute=4),
             bt("q3", "I should back up my thesis to the cloud.", minute=5)]
    # The garden/laptop change is the cut; the laptop turns (whose topic may go on) stay pending.
    assert seg_ids(s.due("u", turns, force=False)) == [["p1", "p2", "p3"]]
    flushed = s.due("u", turns[3:], force=True)  # a flush takes every pending turn, in order
    assert [tid for seg in seg_ids(flushed) for tid in seg] == ["q1", "q2", "q3"]


LINE = re.compile(r"^\[[^\]]+\] (\d+)\.([^:]+): (.*)$")


def test_llm_extractor_on_a_due_batch_multiparty(embedder: LocalEmbedder) -> None:
    seen: list[list[str]] = []

    def script(stage: str, messages: list[ChatMessage]) -> str:
        lines = [m for m in (LINE.match(ln) for ln in messages[-1]["content"].splitlines()) if m]
        seen.append([m.group(2) for m in lines])
        # Facts for Cy's turns only; the rest must still be covered.
        data = [{"source_id": int(m.group(1)), "fact": f"{m.group(2)} said: {m.group(3)}"}
                for m in lines if m.group(2) == "Cy"]
        return json.dumps({"data": data})

    s = stages(embedder, segmenter=MarkerSegmenter(), policy=BufferPolicy(40, 0),
               extractor=LLMExtractor(ScriptedLLM(script)))
    turns = [bt("m3", "I repaired the old bike.", speaker="Ann"),
             bt("m1", "Cy here, I painted the fence blue.", speaker="Cy", minute=1),
             bt("m9", "# New topic: Cy booked flights to Lima.", speaker="Cy", minute=2),
             bt("m2", "Bob thinks Lima is lovely in June.", speaker="Bob", minute=3),
             bt("m5", "ok", speaker="Bob", minute=4)]
    facts = s.extractor.extract(s.due("u", turns, force=True))
    assert [spk for call in seen for spk in call] == ["Ann", "Cy", "Cy", "Bob", "Bob"]
    by_id = {tid: f for f in facts for tid in f.source_turn_ids}
    assert set(by_id) == {"m3", "m1", "m9", "m2"}  # "ok" is filler and got no fact
    assert by_id["m1"].fact == "Cy said: Cy here, I painted the fence blue." and by_id["m1"].method == "llm"
    assert by_id["m3"].method == "rule" and by_id["m3"].fact == "Ann: I repaired the old bike."
    assert by_id["m9"].topic_id != by_id["m1"].topic_id
