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
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ._errors import ConfigError
from ._settings import ReadSettings, SleepSettings, WriteSettings

ENV_PREFIX = "DIALOGMEM_"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StoreConfig(_Section):
    backend: Literal["edge", "qdrant"] = "edge"
    url: str | None = None  # remote Qdrant; ":memory:" for qdrant-client's in-process mode
    api_key: str | None = None
    collection: str = "dialogmem"


class EmbedderConfig(_Section):
    backend: Literal["local", "openai"] = "local"
    engine: Literal["auto", "onnx", "torch"] = "auto"  # local only
    model: str | None = None  # local: all-MiniLM-L6-v2 (the one shipped); openai: required
    base_url: str | None = None
    api_key: str | None = None
    dim: int = 384  # must match the model; it sizes the index
    batch_size: int = 64
    # local: query vectors kept per embedder (LRU by exact text); 0 turns the cache off
    query_cache: int = Field(256, ge=0, le=1_000_000)


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
    embedder: EmbedderConfig = Field(default_factory=EmbedderConfig)
    llm: LLMConfig = Field(default_factory=LLMConfig)
    write: WriteSettings = Field(default_factory=WriteSettings)
    read: ReadSettings = Field(default_factory=ReadSettings)
    sleep: SleepSettings = Field(default_factory=SleepSettings)
    # Open without taking the writer's lock: reads only (a CLI search or a backup beside a running
    # writer). Searches run on a per-user copy of the index built from the journal.
    read_only: bool = False

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
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "config"
        raise ConfigError(f"invalid config at {where}: {first['msg']}") from exc


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
