"""Configuration precedence and the public surface."""

from __future__ import annotations

from pathlib import Path

import pytest

import dialogmem
from dialogmem import Config, ConfigError, Memory


def test_precedence_defaults_file_env_kwargs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toml = tmp_path / "dialogmem.toml"
    toml.write_text('data_dir = "/from/file"\n[llm]\nbackend = "openai"\nmodel = "file-model"\ntimeout_s = 5\n')
    assert Config.load().llm.backend == "none"  # no file in cwd: defaults
    cfg = Config.load(toml)
    assert cfg.llm.model == "file-model" and cfg.llm.timeout_s == 5 and str(cfg.data_dir) == "/from/file"
    monkeypatch.setenv("DIALOGMEM_LLM__MODEL", "env-model")
    monkeypatch.setenv("DIALOGMEM_LLM__TIMEOUT_S", "7.5")
    cfg = Config.load(toml)
    assert cfg.llm.model == "env-model" and cfg.llm.timeout_s == 7.5
    cfg = Config.load(toml, llm={"model": "kw-model"})
    assert cfg.llm.model == "kw-model" and cfg.llm.backend == "openai"
    monkeypatch.setenv("DIALOGMEM_CONFIG", str(toml))
    assert Config.load().llm.backend == "openai"


def test_bad_config_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"llm\.backend"):
        Config.load(llm={"backend": "gpt-7"})
    with pytest.raises(ConfigError, match="not found"):
        Config.load(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("this is = = not toml")
    with pytest.raises(ConfigError, match="cannot parse"):
        Config.load(bad)
    with pytest.raises(ConfigError):
        Memory(data_dir=tmp_path / "s", write={"segmenter": "psychic"})


def test_second_process_on_same_store_is_refused(tmp_path: Path) -> None:
    with Memory(data_dir=tmp_path / "s") as mem:
        with pytest.raises(dialogmem.StoreError, match="another process"):
            Memory(data_dir=tmp_path / "s")
        assert mem.stats()["counts"]["turns"] == 0  # the first one is unaffected
    Memory(data_dir=tmp_path / "s").close()  # and the lock is released on close


def test_public_all_is_exactly_the_public_names() -> None:
    public = {n for n in dir(dialogmem) if not n.startswith("_")}
    modules = {"models", "store", "read", "write", "sleep", "prompts", "bench", "cli", "integrations"}
    assert set(dialogmem.__all__) - {"__version__"} == public - modules
    assert issubclass(dialogmem.NotFoundError, dialogmem.DialogmemError)
    assert not issubclass(dialogmem.DialogmemError, MemoryError)


def test_failed_open_releases_the_store(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs an LLM"):
        Memory(data_dir=tmp_path / "s", write={"extractor": "llm"})  # fails after journal and index opened
    with Memory(data_dir=tmp_path / "s") as mem:  # nothing left locked or half-open
        mem.add("still works", "u", flush=True)
        assert mem.stats("u")["counts"]["memories"] == 1


def test_embedder_settings_that_cannot_be_honoured_are_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="all-MiniLM-L6-v2"):
        Memory(data_dir=tmp_path / "a", embedder={"model": "bge-large"})
    with pytest.raises(ConfigError, match="384"):
        Memory(data_dir=tmp_path / "b", embedder={"dim": 768})
    with pytest.raises(ConfigError, match=r"embedder\.model is required"):
        Memory(data_dir=tmp_path / "c", embedder={"backend": "openai"})
