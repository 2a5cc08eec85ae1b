"""The CLI through typer's runner: each command is one library call; errors are one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dialogmem.cli import app
from seams import sample_path

runner = CliRunner()


def _run(*args: str) -> tuple[int, str, str]:
    res = runner.invoke(app, list(args))
    return res.exit_code, res.stdout, res.stderr


@pytest.fixture
def store(tmp_path: Path) -> list[str]:
    return ["--data-dir", str(tmp_path / "store")]


def test_add_search_list_update_delete_history_stats_forget(store: list[str]) -> None:
    code, out, err = _run("add", str(sample_path()), "--user", "maya", *store)
    assert code == 0, err
    assert "added 36 turns for maya" in out

    code, out, _ = _run("search", "What is the name of Maya's dog?", "--user", "maya", "--json", "-k", "3", *store)
    assert code == 0
    hits = json.loads(out)
    assert len(hits) == 3 and any("D1:3" in h["source_turn_ids"] for h in hits)

    code, out, _ = _run("list", "--user", "maya", "--json", *store)
    records = json.loads(out)
    assert code == 0 and len(records) >= 30
    mid = hits[0]["id"]

    code, out, _ = _run("update", mid, "Biscuit is a beagle mix.", "--user", "maya", *store)
    assert code == 0 and "version 2" in out
    code, out, _ = _run("history", mid, "--user", "maya", "--json", *store)
    assert [h["event"] for h in json.loads(out)] == ["ADD", "UPDATE"]
    code, out, _ = _run("delete", mid, "--user", "maya", *store)
    assert code == 0

    code, out, _ = _run("stats", "--user", "maya", *store)
    assert code == 0 and json.loads(out)["counts"]["memories"] == len(records) - 1

    code, out, _ = _run("forget-user", "--user", "maya", "--yes", *store)
    assert code == 0 and "forgot maya" in out
    code, out, _ = _run("list", "--user", "maya", "--json", *store)
    assert json.loads(out) == []


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe\x00garbage", b'{"foo": 1}', b"[]"])
def test_bad_files_give_one_line_errors(tmp_path: Path, store: list[str], content: bytes) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    code, out, err = _run("add", str(bad), "--user", "u", *store)
    assert code == 1
    assert err.startswith("Error: ") and len(err.strip().splitlines()) == 1
    assert "Traceback" not in out + err


def test_errors_are_one_line(store: list[str]) -> None:
    code, _, err = _run("get-nothing", *store)
    assert code != 0
    code, _, err = _run("delete", "no-such-id", "--user", "u", *store)
    assert code == 1 and err.startswith("Error: ") and "not found" in err
    code, _, err = _run("add", "/nonexistent/file.json", "--user", "u", *store)
    assert code == 1 and err.startswith("Error: cannot read")


def test_message_list_file(tmp_path: Path, store: list[str]) -> None:
    f = tmp_path / "msgs.json"
    f.write_text(json.dumps([
        {"content": "I am moving to Oslo in May.", "name": "Kari", "timestamp": "2024-03-01T09:00:00", "id": "k1"},
        {"content": "Oslo is lovely in spring!", "name": "Lars", "timestamp": "2024-03-01T09:01:00", "id": "k2"},
    ]))
    code, out, err = _run("add", str(f), "--user", "kari", *store)
    assert code == 0, err
    code, out, _ = _run("search", "where is Kari moving", "--user", "kari", "--json", *store)
    assert json.loads(out)[0]["source_turn_ids"] == ["k1"]


def test_every_command_has_help() -> None:
    import typer.main

    group = typer.main.get_command(app)
    for name, cmd in group.commands.items():  # type: ignore[attr-defined]
        assert cmd.help, f"command {name} has no help"
        code, out, _ = _run(name, "--help")
        assert code == 0 and "Usage" in out
