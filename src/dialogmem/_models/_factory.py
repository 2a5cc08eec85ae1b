"""Build the configured embedder and LLM client from the config sections."""

from __future__ import annotations

from .._config import EmbedderConfig, LLMConfig
from .._errors import ConfigError
from .._usage import UsageTracker
from ._embed import LocalEmbedder, OpenAIEmbedder, local_identity, openai_identity
from ._embed_base import Embedder
from ._llm import NoLLM
from ._llm_base import LLMClient
from ._quantize import Quantize

LOCAL_MODEL = "all-MiniLM-L6-v2"
LOCAL_DIM = 384


def make_llm(cfg: LLMConfig, usage: UsageTracker | None = None) -> LLMClient:
    """The one client every stage shares; ``backend="none"`` gives ``NoLLM``."""
    usage = usage if usage is not None else UsageTracker()
    if cfg.backend == "none":
        return NoLLM(usage)
    if cfg.backend == "openai":
        from ._llm_openai import OpenAICompatibleLLM

        if not cfg.model:
            raise ConfigError("llm.model is required for llm.backend=openai "
                              "(DIALOGMEM_LLM__MODEL=gpt-4o-mini, or the name your server serves)")
        return OpenAICompatibleLLM(model=cfg.model, base_url=cfg.base_url, api_key=cfg.api_key, usage=usage,
                                   timeout_s=cfg.timeout_s, max_retries=cfg.max_retries, backoff_s=cfg.backoff_s,
                                   temperature=cfg.temperature, max_tokens=cfg.max_tokens)
    if cfg.backend == "llama_cpp":
        from ._llm_llamacpp import INSTALL_HINT, LlamaCppLLM

        if not cfg.model_path:
            raise ConfigError("llm.model_path (a GGUF file) is required for llm.backend=llama_cpp")
        try:
            import llama_cpp  # noqa: F401  (fail at configuration time, not on the first call)
        except ImportError as exc:
            raise ConfigError(f"llm.backend=llama_cpp needs llama-cpp-python: {INSTALL_HINT}") from exc
        return LlamaCppLLM(model_path=cfg.model_path, n_ctx=cfg.n_ctx, n_threads=cfg.n_threads, usage=usage,
                           timeout_s=cfg.timeout_s, max_retries=cfg.max_retries, backoff_s=cfg.backoff_s,
                           temperature=cfg.temperature, max_tokens=cfg.max_tokens)
    raise ConfigError(f"unknown llm.backend {cfg.backend!r}: use none, openai or llama_cpp")


def concrete_quantize(cfg: EmbedderConfig) -> Quantize:
    """``cfg.quantize`` for an embedder without a store to follow: ``"auto"`` is fp32 there (a store
    resolves it first, see ``_sync._embedder_check.resolve_embedder``)."""
    return "none" if cfg.quantize == "auto" else cfg.quantize


def embedder_identity(cfg: EmbedderConfig) -> str:
    """Which vectors ``cfg``'s embedder makes: stores record it, so that vectors of two different
    embedders are never compared (see ``_facade._open``)."""
    if cfg.backend == "local":
        return local_identity(concrete_quantize(cfg))
    return openai_identity(str(cfg.model), cfg.dim)


def make_embedder(cfg: EmbedderConfig, usage: UsageTracker | None = None) -> Embedder:
    """The configured embedder; an unknown or uninstalled backend is a ``ConfigError``."""
    if cfg.backend == "local":
        if cfg.model not in (None, LOCAL_MODEL) or cfg.dim != LOCAL_DIM:
            raise ConfigError(f"the local embedder is {LOCAL_MODEL} ({LOCAL_DIM}-d); for another model use "
                              "embedder.backend=openai with an OpenAI-compatible embeddings server")
        return LocalEmbedder(engine=cfg.engine, batch_size=cfg.batch_size, usage=usage,
                             query_cache=cfg.query_cache, spin_wait=cfg.spin_wait,
                             quantize=concrete_quantize(cfg), query_quantize=cfg.query_quantize,
                             model_dir=cfg.model_dir)
    if cfg.backend == "openai":
        if cfg.quantize == "int8" or cfg.query_quantize not in (None, "none"):
            raise ConfigError("embedder.quantize and embedder.query_quantize apply to the local embedder only")
        if not cfg.model:
            raise ConfigError("embedder.model is required for embedder.backend=openai "
                              "(and embedder.dim must be its vector size)")
        return OpenAIEmbedder(model=cfg.model,
                              base_url=cfg.base_url, api_key=cfg.api_key, dim=cfg.dim,
                              batch_size=cfg.batch_size, usage=usage)
    raise ConfigError(f"unknown embedder.backend {cfg.backend!r}: use local or openai")
