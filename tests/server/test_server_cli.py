"""``dialogmem keys`` and ``dialogmem serve`` as a user runs them (the serve test is a real subprocess)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from typer.testing import CliRunner

from dialogmem.cli import app

SRC = str(Path(__file__).resolve().parents[2] / "src")
runner = CliRunner()


def _keys(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, ["keys", *args])
    return r.exit_code, r.stdout, r.stderr


def test_keys_create_list_revoke(tmp_path: Path) -> None:
    d = ["--data-dir", str(tmp_path / "store")]
    code, out, err = _keys("create", "--user", "alice", "--label", "laptop", *d)
    assert code == 0, err
    key = out.strip().splitlines()[-1]
    assert key.startswith("dm_") and len(key) == 3 + 12 + 1 + 43
    assert "not shown again" in err
    code, out, _ = _keys("create", "--admin", *d)
    admin = out.strip().splitlines()[-1]
    code, listing, _ = _keys("list", *d)
    assert code == 0 and key.split("_")[1] in listing and admin.split("_")[1] in listing
    assert key not in listing and key.split("_", 2)[2] not in listing  # never the secret
    assert "alice" in listing and "laptop" in listing
    code, out, _ = _keys("revoke", key.split("_")[1], *d)
    assert code == 0 and "revoked" in out
    assert key.split("_")[1] not in _keys("list", *d)[1]
    assert key.split("_")[1] in _keys("list", "--revoked", *d)[1]
    code, _, err = _keys("revoke", key.split("_")[1], *d)
    assert code == 1 and "revoked already" in err
    code, _, err = _keys("create", *d)
    assert code == 1 and "exactly one of --user" in err
    code, _, err = _keys("create", "--admin", "--user", "x", *d)
    assert code == 1
    code, _, err = _keys("revoke", "nothex", *d)
    assert code == 1 and "not a key id" in err


def test_no_auth_refuses_other_hosts(tmp_path: Path) -> None:
    r = runner.invoke(app, ["serve", "--no-auth", "--host", "0.0.0.0", "--data-dir", str(tmp_path)])
    assert r.exit_code == 1 and "127.0.0.1 only" in r.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_subprocess(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    key = _keys("create", "--user", "alice", "--data-dir", store)[1].strip().splitlines()[-1]
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": SRC, "DIALOGMEM_WRITE__EXTRACTOR": "rules"}
    proc = subprocess.Popen([sys.executable, "-c", "from dialogmem.cli import main; main()", "serve",
                             "--port", str(port), "--data-dir", store], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "server did not start"
            time.sleep(0.2)
        h = {"Authorization": f"Bearer {key}"}
        r = httpx.post(f"{url}/v1/memories", json={"messages": "I adopted a cat named Miso", "flush": True},
                       headers=h, timeout=60)
        assert r.status_code == 200, r.text
        # a key made while the server runs works at once
        other = _keys("create", "--user", "bob", "--data-dir", store)[1].strip().splitlines()[-1]
        r = httpx.post(f"{url}/v1/search", json={"query": "cat name"}, headers={"X-API-Key": other}, timeout=60)
        assert r.status_code == 200 and r.json()["hits"] == []
        hits = httpx.post(f"{url}/v1/search", json={"query": "cat name"}, headers=h, timeout=60).json()["hits"]
        assert "Miso" in hits[0]["memory"]
        assert httpx.post(f"{url}/v1/search", json={"query": "x"}, timeout=10).status_code == 401
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
