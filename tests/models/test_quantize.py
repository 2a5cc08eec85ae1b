"""embedder.quantize: the int8 graph (real MiniLM weights), and the store's record of its embedder."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dialogmem import ConfigError, EmbedderConfig, Memory
from dialogmem._models import LocalEmbedder, make_embedder
from dialogmem._models._bert_onnx import cached_onnx
from dialogmem._models._embed import local_identity
from dialogmem._models._factory import embedder_identity
from dialogmem._models._quantize import quantized_onnx
from dialogmem._sync._embedder_check import META_KEY, auto_quantize, mismatch_message, recorded_embedder

SENTENCES = [
    "Ana adopted a beagle puppy from the shelter last weekend.",
    "Last weekend Ana took home a young beagle from an animal shelter.",
    "The quarterly tax report is due to the accountant on Friday.",
    "Ben is training for a marathon in October.",
    "",
    "word " * 400,
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def pair(cache_dir: Path) -> tuple[LocalEmbedder, LocalEmbedder]:
    fp32 = LocalEmbedder(engine="onnx", cache_dir=cache_dir, query_cache=0).load()
    int8 = LocalEmbedder(engine="onnx", cache_dir=cache_dir, query_cache=0, quantize="int8").load()
    return fp32, int8


def test_int8_vectors_are_close_to_fp32_but_not_equal(pair: tuple[LocalEmbedder, LocalEmbedder]) -> None:
    fp32, int8 = pair
    a, b = fp32.embed(SENTENCES), int8.embed(SENTENCES)
    assert b.shape == (len(SENTENCES), 384) and b.dtype == np.float32
    assert np.allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
    cos = (a * b).sum(axis=1)
    assert cos.min() > 0.95, cos
    assert np.abs(a - b).max() > 1e-3  # really another graph, not the fp32 one under another name
    sims = b @ b.T
    assert sims[0, 1] > sims[0, 2] + 0.3  # the paraphrase stays far nearer than the unrelated text
    assert np.allclose(int8.embed_query(SENTENCES[3]), b[3], atol=1e-6)


def test_an_int8_list_gives_each_text_the_vector_it_gets_alone(cache_dir: Path) -> None:
    """A list of 4+ texts runs on one-thread lanes side by side; each vector must still be a function
    of its text alone, bit for bit, whatever the list around it (retries and re-embeds agree)."""
    int8 = LocalEmbedder(engine="onnx", cache_dir=cache_dir, query_cache=0, quantize="int8", threads=2).load()
    texts = [*SENTENCES, *(f"{s} Then, on day {i}, nothing else happened." for i, s in enumerate(SENTENCES))]
    alone = np.stack([int8.embed([t])[0] for t in texts])
    together = int8.embed(texts)
    assert len(texts) >= 4 and int8._lanes  # the lanes really ran
    assert np.array_equal(together, alone)
    assert np.array_equal(int8.embed(texts[::-1]), alone[::-1])  # another order, other lane mates


def test_lists_reuse_the_lanes_threads(cache_dir: Path) -> None:
    """The lanes' worker threads start once per embedder: a session's ``add`` (one list a call) does
    not pay a thread start per lane per call (issue 45, the write path's own work)."""
    import threading

    int8 = LocalEmbedder(engine="onnx", cache_dir=cache_dir, query_cache=0, quantize="int8", threads=2).load()
    seen: list[set[int]] = []
    inner = int8._embed_onnx

    def spy(texts: list[str], session: object, *, batch_size: int) -> tuple[np.ndarray, np.ndarray, int]:
        seen[-1].add(id(threading.current_thread()))
        return inner(texts, session, batch_size=batch_size)

    int8._embed_onnx = spy  # type: ignore[method-assign]
    threads: list[list[threading.Thread]] = []
    for _ in range(3):
        seen.append(set())
        int8.embed(SENTENCES)
        threads.append([t for t in threading.enumerate() if t.name.startswith("dialogmem-embed")])
    assert all(len(s) >= 1 for s in seen)
    assert threads[0] and threads[0] == threads[1] == threads[2]  # the same live workers, none started again
    assert set().union(*seen) <= {id(t) for t in threads[0]}


def test_the_weights_are_hashed_once_per_embedder_lanes_included(cache_dir: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding the graph file hashes the 90 MB weights; the lanes of a first list (one session each)
    reuse the path the load found instead of hashing again (~0.35 s a session on the first bulk add)."""
    from dialogmem._models import _bert_onnx

    calls: list[Path] = []
    real = _bert_onnx.weights_key
    monkeypatch.setattr(_bert_onnx, "weights_key", lambda w, c: calls.append(w) or real(w, c))
    int8 = LocalEmbedder(engine="onnx", cache_dir=cache_dir, query_cache=0, quantize="int8", threads=2).load()
    int8.embed(SENTENCES)  # a list: two one-thread lane sessions are made
    assert len(int8._lanes["int8"]) == 2
    assert len(calls) == 1


def test_int8_graph_is_cached_beside_the_fp32_one_and_deterministic(cache_dir: Path, tmp_path: Path,
                                                                     pair: tuple[LocalEmbedder, LocalEmbedder],
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    fp32 = cached_onnx(pair[0]._model_dir, cache_dir)
    built = quantized_onnx(fp32)
    assert built.parent == cache_dir and built.name.startswith(fp32.stem) and "int8" in built.name
    assert built.stat().st_size < fp32.stat().st_size / 2
    copy = tmp_path / fp32.name
    shutil.copyfile(fp32, copy)
    caplog.set_level(logging.DEBUG)
    again = quantized_onnx(copy)  # a fresh build from the same graph gives the same bytes
    # onnxruntime's pre-processing hint is not a WARNING on the root logger (a first run prints none)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert any("pre-processing" in r.getMessage() and r.name == "dialogmem._models._quantize" for r in caplog.records)
    assert again != built and again.read_bytes() == built.read_bytes()
    assert quantized_onnx(copy) == again  # and is reused, not rebuilt


def test_quantize_settings(cache_dir: Path) -> None:
    with pytest.raises(ConfigError, match="onnx engine"):
        LocalEmbedder(engine="torch", quantize="int8")
    with pytest.raises(ConfigError, match="quantize"):
        LocalEmbedder(quantize="int4")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="local embedder only"):
        make_embedder(EmbedderConfig(backend="openai", model="m", quantize="int8"))
    emb = make_embedder(EmbedderConfig(quantize="int8"))
    assert isinstance(emb, LocalEmbedder) and emb.engine == "onnx" and emb.quantize == "int8"
    plain = make_embedder(EmbedderConfig())
    assert isinstance(plain, LocalEmbedder) and plain.quantize == "none"
    assert emb.identity == embedder_identity(EmbedderConfig(quantize="int8")) != plain.identity
    assert embedder_identity(EmbedderConfig(backend="openai", model="m", dim=8)) == "openai/m/8"


def test_recorded_embedder_rules() -> None:
    int8 = EmbedderConfig(quantize="int8")
    assert recorded_embedder("x", int8, has_memories=True) == "x"
    # an old store with memories was written in fp32 (no quantisation existed); an empty one takes the config
    assert recorded_embedder(None, int8, has_memories=True) == embedder_identity(EmbedderConfig())
    assert recorded_embedder(None, int8, has_memories=False) == embedder_identity(int8)
    assert mismatch_message("a", "a") is None
    fp32_id, int8_id = embedder_identity(EmbedderConfig()), embedder_identity(int8)
    assert "quantize=none" in (mismatch_message(fp32_id, int8_id) or "")
    assert "quantize=int8" in (mismatch_message(int8_id, fp32_id) or "")


FP32, INT8 = {"quantize": "none"}, {"quantize": "int8"}


def test_store_records_its_embedder_and_refuses_another(make_memory: Callable[..., Memory], tmp_path: Path) -> None:
    mem = make_memory("s", embedder=FP32)
    mem.add("I adopted a beagle called Rex", user_id="u")
    assert mem._parts.journal.meta(META_KEY) == embedder_identity(EmbedderConfig(**FP32))
    mem.close()
    with pytest.raises(ConfigError, match="cannot be compared"):
        Memory(data_dir=tmp_path / "s", embedder=INT8)
    with pytest.raises(ConfigError, match="cannot be compared"):
        Memory(data_dir=tmp_path / "s", embedder=INT8, read_only=True)
    again = make_memory("s", embedder=FP32)  # the recorded embedder opens it, and finds the memory
    assert again.search("what dog do I have", "u").hits[0].memory.endswith("beagle called Rex")
    again.close()
    auto = make_memory("s")  # "auto" follows the record
    assert auto.config.embedder.quantize == "none"
    assert auto.search("what dog do I have", "u").hits[0].memory.endswith("beagle called Rex")


def test_int8_store_round_trip(make_memory: Callable[..., Memory], tmp_path: Path) -> None:
    mem = make_memory("q", embedder=INT8)
    mem.add("I adopted a beagle called Rex", user_id="u")
    mem.add("My sister lives in Lisbon", user_id="u")
    assert mem._parts.journal.meta(META_KEY) == embedder_identity(EmbedderConfig(**INT8))
    assert "beagle" in mem.search("what dog do I have", "u").hits[0].memory
    mem.close()
    with pytest.raises(ConfigError, match="quantize=int8"):
        Memory(data_dir=tmp_path / "q", embedder=FP32)


def test_auto_writes_and_searches_new_stores_in_int8(make_memory: Callable[..., Memory], tmp_path: Path,
                                                     cache_dir: Path) -> None:
    mem = make_memory("a")
    assert mem.config.embedder.quantize == "int8" and mem.config.embedder.query_quantize == "int8"
    mem.add("I adopted a beagle called Rex", user_id="u")
    assert mem._parts.journal.meta(META_KEY) == local_identity("int8")
    emb = mem._parts.embedder
    assert isinstance(emb, LocalEmbedder) and emb.quantize == "int8" and emb.query_quantize == "int8"
    int8 = LocalEmbedder(engine="onnx", cache_dir=cache_dir, query_cache=0, quantize="int8").load()
    assert np.allclose(emb.embed_query("what dog do I have"), int8.embed(["what dog do I have"])[0], atol=1e-6)
    mem.close()
    again = make_memory("a", embedder={"query_quantize": "none"})  # a choice the caller makes stays
    assert again.config.embedder.quantize == "int8" and again.config.embedder.query_quantize == "none"
    fp32 = LocalEmbedder(engine="onnx", cache_dir=cache_dir, query_cache=0).load()
    query = again._parts.embedder.embed_query("what dog do I have")
    assert np.allclose(query, fp32.embed(["what dog do I have"])[0], atol=1e-6)
    assert "beagle" in again.search("what dog do I have", "u").hits[0].memory


@pytest.mark.parametrize(("cfg", "recorded", "has_memories", "expected"), [
    ({}, None, False, "int8"),  # a new store
    ({}, None, True, "none"),  # memories written before the record: fp32
    ({}, "local/all-MiniLM-L6-v2", False, "none"),
    ({}, "local/all-MiniLM-L6-v2/int8-dyn-v1", True, "int8"),
    ({}, "openai/m/384", True, "none"),  # the mismatch is reported by check_embedder
    ({"engine": "torch"}, None, False, "none"),  # no int8 graph on torch
    ({"backend": "openai", "model": "m"}, None, False, "none"),
])
def test_auto_quantize(cfg: dict, recorded: str | None, has_memories: bool, expected: str) -> None:
    assert auto_quantize(EmbedderConfig(**cfg), recorded, has_memories=has_memories) == expected


def test_store_from_before_the_record(make_memory: Callable[..., Memory], tmp_path: Path) -> None:
    old = make_memory("old", embedder=FP32)
    old.add("I adopted a beagle called Rex", user_id="u")
    old._parts.journal.set_meta(META_KEY, None)  # as a store written before the embedder was recorded
    old.close()
    with pytest.raises(ConfigError, match="cannot be compared"):
        Memory(data_dir=tmp_path / "old", embedder=INT8)
    ro = make_memory("old", read_only=True)  # read-only: checked, not written
    assert ro._parts.journal.meta(META_KEY) is None
    ro.close()
    reopened = make_memory("old")  # auto: memories without a record are fp32
    assert reopened._parts.journal.meta(META_KEY) == embedder_identity(EmbedderConfig(**FP32))
    empty = make_memory("empty")
    empty._parts.journal.set_meta(META_KEY, None)
    empty.close()
    fresh = make_memory("empty", embedder=FP32)  # no vectors yet: any embedder may start it
    assert fresh._parts.journal.meta(META_KEY) == embedder_identity(EmbedderConfig(**FP32))


def test_a_refused_configuration_records_nothing(make_memory: Callable[..., Memory], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"embedder\.model"):
        Memory(data_dir=tmp_path / "c", embedder={"backend": "openai"})
    mem = make_memory("c")  # the store is still free to take the default embedder (int8 for a new store)
    assert mem._parts.journal.meta(META_KEY) == local_identity("int8")


def test_query_quantize_changes_queries_only(cache_dir: Path, pair: tuple[LocalEmbedder, LocalEmbedder]) -> None:
    fp32, int8 = pair
    mixed = LocalEmbedder(engine="onnx", cache_dir=cache_dir, query_cache=0, query_quantize="int8").load()
    assert mixed.identity == fp32.identity  # what it stores is fp32
    assert mixed._query_session is not mixed._session
    assert np.array_equal(mixed.embed(SENTENCES[:4]), fp32.embed(SENTENCES[:4]))
    queries = mixed.embed_queries(SENTENCES[:4])
    assert np.allclose(queries, int8.embed(SENTENCES[:4]), atol=1e-6)  # the int8 graph, one text per run
    assert np.allclose(mixed.embed_query(SENTENCES[2]), queries[2], atol=1e-6)
    assert not np.allclose(queries, fp32.embed(SENTENCES[:4]), atol=1e-4)
    same = LocalEmbedder(engine="onnx", cache_dir=cache_dir, query_cache=0, quantize="int8").load()
    assert same.query_quantize == "int8" and same._query_session is same._session  # unset: follows quantize
    with pytest.raises(ConfigError, match="query_quantize"):
        LocalEmbedder(query_quantize="int4")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="onnx engine"):
        LocalEmbedder(engine="torch", query_quantize="int8")
    with pytest.raises(ConfigError, match="local embedder only"):
        make_embedder(EmbedderConfig(backend="openai", model="m", query_quantize="int8"))


def test_query_quantize_opens_an_fp32_store(make_memory: Callable[..., Memory]) -> None:
    mem = make_memory("m", embedder=FP32)
    mem.add("I adopted a beagle called Rex", user_id="u")
    mem.add("My sister lives in Lisbon", user_id="u")
    mem.close()
    again = make_memory("m", embedder={"query_quantize": "int8"})  # same stored vectors: no refusal
    assert again._parts.journal.meta(META_KEY) == embedder_identity(EmbedderConfig())
    assert "beagle" in again.search("what dog do I have", "u").hits[0].memory
