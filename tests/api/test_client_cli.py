"""The CLI acting on a real server with ``--url`` / ``--api-key`` (or ``DIALOGMEM_URL`` /
``DIALOGMEM_API_KEY``): the same commands, through ``Client``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dialogmem._transfer._conversation import sample_path
from dialogmem.cli import app
from serverkit import rest_server

runner = CliRunner()


def _run(*args: str) -> tuple[int, str, str]:
    res = runner.invoke(app, list(args))
    return res.exit_code, res.stdout, res.stderr


def test_commands_act_on_a_remote_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with rest_server(tmp_path / "store", ["maya"]) as (url, keys, mem):
        remote = ["--url", url, "--api-key", keys["admin"]]
        code, out, err = _run(*remote, "add", str(sample_path()), "--user", "maya")
        assert code == 0, err
        assert "added 36 turns for maya" in out and mem.stats("maya")["counts"]["turns"] == 36  # on the server

        code, out, err = _run(*remote, "search", "What is the name of Maya's dog?", "--user", "maya", "--json")
        hits = json.loads(out)
        assert code == 0 and any("D1:3" in h["source_turn_ids"] for h in hits)
        mid = hits[0]["id"]
        code, out, _ = _run(*remote, "update", mid, "Biscuit is a beagle mix.", "--user", "maya")
        assert code == 0 and "version 2" in out and mem.get(mid, "maya").memory == "Biscuit is a beagle mix."
        code, out, _ = _run(*remote, "history", mid, "--user", "maya", "--json")
        assert [h["event"] for h in json.loads(out)] == ["ADD", "UPDATE"]
        code, out, _ = _run(*remote, "list", "--user", "maya", "--json", "-n", "5")
        assert code == 0 and len(json.loads(out)) == 5

        export = tmp_path / "maya.jsonl"
        code, _, err = _run(*remote, "export", "--user", "maya", "-o", str(export))
        assert code == 0, err
        assert json.loads(export.read_text().splitlines()[0])["users"] == ["maya"]

        # the environment names the server too; the user's own key reaches that user only
        monkeypatch.setenv("DIALOGMEM_URL", url)
        monkeypatch.setenv("DIALOGMEM_API_KEY", keys["maya"])
        code, out, _ = _run("stats", "--user", "maya")
        assert code == 0 and json.loads(out)["counts"]["turns"] == 36
        code, out, err = _run("search", "dog", "--user", "someone-else")
        assert code == 1 and "does not reach that user" in out + err
        code, out, _ = _run("import", str(export))
        assert code == 0 and json.loads(out)["skipped_memories"] > 0  # nothing new: same ids
        code, out, _ = _run("quarantine", "list", "--user", "maya")
        assert code == 0 and json.loads(out) == []
        code, out, _ = _run("delete", mid, "--user", "maya")
        assert code == 0 and mem.get_all("maya", limit=1000, filters={"ids": [mid]}) == []
        code, out, _ = _run("forget-user", "--user", "maya", "--yes")
        assert code == 0 and mem.stats("maya")["counts"]["turns"] == 0

        # a local store and a server at once is refused; so is a file import meant for a local store
        code, out, err = _run("stats", "--data-dir", str(tmp_path / "other"))
        assert code == 1 and "--url acts on a server" in out + err
        code, out, err = _run("import", str(export), "--from", "openai", "--user", "maya")
        assert code == 1 and "local store" in out + err


def test_a_wrong_key_is_one_line(tmp_path: Path) -> None:
    with rest_server(tmp_path / "store", []) as (url, _, _):
        code, out, err = _run("--url", url, "--api-key", "dm_000000000000_" + "x" * 43, "stats")
        assert code == 1 and "invalid or revoked API key" in out + err
