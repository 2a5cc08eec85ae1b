"""write.vectors = "auto"/"turns": a memory's vector made of its turns' vectors, each turn embedded once."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from dialogmem import Memory
from dialogmem._models._embed import LocalEmbedder
from dialogmem._models._llm import NoLLM
from dialogmem._settings import WriteSettings
from dialogmem._write._compose import CONTEXT_WEIGHT, UNIT_CONTEXT_WEIGHT, PartVectors, compose, unit_parts
from dialogmem._write._extract import BufferedTurn, ExtractedFact, RuleExtractor
from dialogmem._write._stages import make_write_stages
from seams import stored_vectors


def fake_vector(text: str) -> np.ndarray:
    """A unit vector that depends on the text alone (the logic under test is not the model's)."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(16).astype(np.float32)
    return v / np.linalg.norm(v)


def fake_mass(text: str) -> float:
    return float(len(text))


class CountingEmbed:
    """A part embedder: fake unit vectors, each text's mass its length."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        self.seen += list(texts)
        return np.stack([fake_vector(t) for t in texts]), np.array([fake_mass(t) for t in texts], np.float32)


def massed(text: str) -> np.ndarray:
    return fake_vector(text) * fake_mass(text)


def turn(tid: str, speaker: str, text: str, minute: int, session: str = "s1") -> BufferedTurn:
    return BufferedTurn(turn_id=tid, speaker=speaker, text=text, compressed=text,
                        time_stamp=f"2023-05-08T13:{minute:02d}:00", float_time_stamp=1683550000.0 + minute * 60,
                        weekday="Mon", session_id=session)


def fact(text: str, parts: list[str]) -> ExtractedFact:
    return ExtractedFact(fact=text, source_turn_ids=["t"], speaker_name="Tom", time_stamp="2023-05-08T13:00:00",
                         float_time_stamp=1683550000.0, weekday="Mon", topic_id=0, original=text,
                         compressed=text, parts=parts)


def test_compose_weighs_the_own_turn_one_and_each_context_turn_less() -> None:
    a, b, c = fake_vector("a"), fake_vector("b"), fake_vector("c")
    got = compose(np.stack([a, b, c]))
    want = CONTEXT_WEIGHT * a + CONTEXT_WEIGHT * b + c
    assert np.allclose(got, want / np.linalg.norm(want), atol=1e-6)
    assert np.isclose(np.linalg.norm(got), 1.0, atol=1e-6)
    assert np.allclose(compose(np.stack([c])), c, atol=1e-6)  # a turn alone is its own vector
    assert np.allclose(compose(np.stack([c, -CONTEXT_WEIGHT * c])), -c)  # a sum of 0: the own turn's direction


def test_each_part_is_embedded_once_and_facts_without_parts_as_text() -> None:
    embed = CountingEmbed()
    parts = PartVectors(embed)
    first = parts.memory_vectors("u", [fact("A: one", ["A: one"]), fact("A: one\nB: two", ["A: one", "B: two"])])
    assert embed.seen == ["A: one", "B: two"]
    second = parts.memory_vectors("u", [fact("B: two\nA: three", ["B: two", "A: three"]),
                                        fact("a model's statement", [])])
    assert embed.seen == ["A: one", "B: two", "A: three", "a model's statement"]
    assert np.allclose(first[0], fake_vector("A: one"))
    # each part weighs its mass (its vector times its mass is what a concatenation sums)
    assert np.allclose(first[1], compose(np.stack([massed("A: one"), massed("B: two")])))
    assert np.array_equal(second[1], fake_vector("a model's statement"))  # a text's own vector, unscaled
    assert parts.memory_vectors("u", []).shape == (0, 0)
    parts.memory_vectors("v", [fact("A: one", ["A: one"])])  # another user's parts are their own
    assert embed.seen[-1] == "A: one"
    parts.forget("u")  # forget_user: nothing of u's turns stays in the process
    assert len(parts._cache) == 1  # v's one line
    seen = len(embed.seen)
    parts.memory_vectors("v", [fact("A: one", ["A: one"])])
    assert len(embed.seen) == seen  # v's is still known
    parts.memory_vectors("u", [fact("A: one", ["A: one"]), fact("B: two", ["B: two"])])
    assert embed.seen[seen:] == ["A: one", "B: two"]  # u's were dropped


def test_a_vector_does_not_depend_on_what_the_cache_holds() -> None:
    facts = [fact(f"t{i}", [f"t{i - 2}", f"t{i - 1}", f"t{i}"]) for i in range(2, 40)]
    warm = PartVectors(CountingEmbed(), size=3)
    got = np.concatenate([warm.memory_vectors("u", [f]) for f in facts])  # one at a time, evicting as it goes
    cold = PartVectors(CountingEmbed()).memory_vectors("u", facts)  # all at once, nothing evicted
    assert np.array_equal(got, cold)
    small = CountingEmbed()
    bounded = PartVectors(small, size=3)
    for f in facts:
        bounded.memory_vectors("u", [f])
    assert len(small.seen) == len(set(small.seen)) == 40  # the last turns stay remembered: none twice
    assert len(bounded._cache) == 3


def test_a_part_evicted_by_another_writer_while_embedding_is_still_used() -> None:
    """Two users write at once: what one found in the cache stays usable while the other's
    embedding call fills the cache (the second writer runs inside the first one's embed call)."""
    parts: PartVectors

    def embed(texts: Sequence[str]) -> np.ndarray:
        if "B: new" in texts:
            parts.memory_vectors("bob", [fact(f"x{i}", [f"x{i}"]) for i in range(3)])  # evicts all of alice's
        return np.stack([fake_vector(t) for t in texts])

    parts = PartVectors(unit_parts(embed), size=2, context_weight=UNIT_CONTEXT_WEIGHT)
    parts.memory_vectors("alice", [fact("A: old", ["A: old"])])
    got = parts.memory_vectors("alice", [fact("A: old\nB: new", ["A: old", "B: new"])])
    assert np.allclose(got[0], compose(np.stack([fake_vector("A: old"), fake_vector("B: new")]),
                                       context_weight=UNIT_CONTEXT_WEIGHT))
    assert len(parts._cache) == 2


def test_rule_facts_parts_are_the_memorys_own_lines_context_clipped() -> None:
    """A memory's parts are the lines of its text: a long context turn is clipped there as in the text
    (composing its whole line weighed it more than the text does), a short one is the same text as
    when it was a memory's own (one cached vector)."""
    long = "He is a beagle mix " + "very " * 60 + "cute."
    turns = [turn("a1", "Tom", "What's the dog's name?", 1), turn("a2", "Maya", long, 2),
             turn("a3", "Maya", "His name is Biscuit.", 3)]
    facts = RuleExtractor(context_turns=2).extract([turns])
    assert facts[2].parts == facts[2].fact.splitlines()
    assert facts[2].parts[1].endswith("...") and facts[2].parts[1] != f"Maya: {long}"
    assert facts[1].parts[-1] == f"Maya: {long}"  # its own memory: the whole line
    assert facts[1].parts[0] == facts[2].parts[0]  # a short turn's part is one text wherever it is cited
    alone = RuleExtractor(context_turns=0).extract([turns])
    assert [f.parts for f in alone] == [[f.fact] for f in alone]


@pytest.fixture
def turns_store(make_memory: Callable[..., Memory]) -> Memory:
    return make_memory("turns", write={"vectors": "turns"})


def test_a_store_with_turn_vectors_keeps_the_composed_vector_and_finds_by_it(turns_store: Memory) -> None:
    mem = turns_store
    said = [("Tom", "What's the dog's name?"), ("Maya", "His name is Biscuit, he is a beagle."),
            ("Tom", "Cute! I adopted a cat last week.")]
    for i, (speaker, text) in enumerate(said):
        mem.add([{"role": "user", "name": speaker, "content": text, "id": f"t{i}"}], "alice", session_id="s1",
                 timestamp="2023-05-08T13:00:00")
    records = sorted(mem.get_all("alice"), key=lambda r: len(r.source_turn_ids))
    last = records[-1]
    assert last.source_turn_ids == ["t0", "t1", "t2"]
    lines = last.memory.splitlines()  # short turns: no context line is clipped
    assert lines[:2] == [f"{s}: {t}" for s, t in said[:2]] and "(the week of 2023-05-01)" in lines[2]
    vectors, masses = mem._parts.embedder.embed_parts(lines)  # type: ignore[attr-defined]
    want = compose(np.asarray(vectors) * np.asarray(masses)[:, None])
    got = np.asarray(stored_vectors(mem, "alice", [last.id])[last.id], dtype=np.float32)
    assert float(got @ want) > 0.999  # the journal keeps the composed vector (int8 graph: one text a call)
    assert "t1" in mem.search("Biscuit the beagle", "alice", limit=1).hits[0].source_turn_ids
    assert mem.get_all("bob") == []


def test_without_masses_each_part_counts_one() -> None:
    """An embedder that gives no masses (an endpoint's): "turns" weighs unit vectors, the own turn 1
    and each context turn ``UNIT_CONTEXT_WEIGHT``."""
    parts = PartVectors(unit_parts(lambda texts: np.stack([fake_vector(t) for t in texts])),
                        context_weight=UNIT_CONTEXT_WEIGHT)
    got = parts.memory_vectors("u", [fact("A: one\nB: two", ["A: one", "B: two"])])[0]
    want = UNIT_CONTEXT_WEIGHT * fake_vector("A: one") + fake_vector("B: two")
    assert np.allclose(got, want / np.linalg.norm(want), atol=1e-6)


class _VectorsOnly:
    """An embedder with vectors and no masses (the shape of ``OpenAIEmbedder``)."""

    dim = 16

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([fake_vector(t) for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return fake_vector(text)


def test_auto_composes_where_the_embedder_gives_masses_and_embeds_text_elsewhere() -> None:
    local = LocalEmbedder(quantize="int8")
    assert WriteSettings().vectors == "text"  # the default: recall at 512 tokens not yet within 0.005
    assert make_write_stages(WriteSettings(), NoLLM(), local).parts is None
    auto = make_write_stages(WriteSettings(vectors="auto"), NoLLM(), local)
    assert auto.parts is not None and auto.parts.context_weight == CONTEXT_WEIGHT
    assert make_write_stages(WriteSettings(vectors="text"), NoLLM(), local).parts is None
    assert make_write_stages(WriteSettings(vectors="auto"), NoLLM(), _VectorsOnly()).parts is None
    turns = make_write_stages(WriteSettings(vectors="turns"), NoLLM(), _VectorsOnly())
    assert turns.parts is not None and turns.parts.context_weight == UNIT_CONTEXT_WEIGHT


def test_masses_make_a_composed_vector_closer_to_the_texts_own() -> None:
    """MiniLM's vector of several lines is about the normalised sum of the lines' token-state sums:
    composing unit vectors by mass comes closer to it than weighing each line alike."""
    emb = LocalEmbedder(quantize="int8")
    memories = [["Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
                 "Melanie: Wow, that's cool!",
                 "Caroline: The transgender stories were so inspiring! I was so happy and thankful for all the "
                 "support."],
                ["Tom: ok", "Maya: We finally booked the trip to Lisbon for the second week of June, flights "
                 "and a small flat near the river.", "Tom: nice"]]
    for lines in memories:
        own = emb.embed(["\n".join(lines)])[0]
        vectors, masses = emb.embed_parts(lines)
        by_mass = compose(vectors * masses[:, None], context_weight=1.0)
        alike = compose(vectors, context_weight=1.0)
        assert float(by_mass @ own) > float(alike @ own) + 0.01


def test_masses_are_token_counts_times_pooled_norms_whatever_the_batch() -> None:
    """A text's mass does not depend on the texts padded beside it (fp32 batches: the padding is
    not counted) and is the same in the int8 lanes; it grows with the text."""
    short, long = "Tom: ok", "Maya: We finally booked the trip to Lisbon for the second week of June."
    fp32 = LocalEmbedder(quantize="none")
    together = fp32.embed_parts([short, long])[1]
    alone = np.array([fp32.embed_parts([t])[1][0] for t in (short, long)])
    assert np.allclose(together, alone, rtol=1e-5)
    tokens = [len(fp32.load()._tokenizer.encode(t).ids) for t in (short, long)]  # padding off for one text
    norms = alone / np.array(tokens)
    assert tokens[1] > tokens[0] and np.all((norms > 1.0) & (norms < 20.0))  # MiniLM's pooled norms: ~2-7
    int8 = LocalEmbedder(quantize="int8")
    lanes = int8.embed_parts([short, long, short, long])[1]  # four texts: the one-thread lanes
    assert np.allclose(lanes, np.tile(int8.embed_parts([short, long])[1], 2), rtol=1e-6)
    assert np.allclose(lanes[:2], alone, rtol=0.05)


def test_the_context_weight_is_the_one_locomo_dev_recall_chose() -> None:
    """Composed memory vectors weigh each context part 0.75 of its mass (1.0 lost 0.009 evidence recall
    at 512 tokens against embedding the text, 0.75 lost 0.004): a composed vector is a stored value, so a
    change here changes which stores' vectors agree with new ones; this pins it."""
    assert CONTEXT_WEIGHT == 0.75
    rows = np.eye(3, dtype=np.float32) * np.array([[2.0], [1.0], [1.0]], dtype=np.float32)
    want = np.array([0.75 * 2.0, 0.75 * 1.0, 1.0]) / np.linalg.norm([1.5, 0.75, 1.0])
    assert np.allclose(compose(rows), want, atol=1e-6)  # the own turn (last) weighs 1
