"""The layout's rules hold: no import cycle (deferred or not) and the layer contracts of
pyproject.toml (import-linter), so a wrong arrow fails the suite, not a review."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_no_import_cycle() -> None:
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "check_imports.py")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert " 0 cycles" in run.stdout


def test_layer_contracts_are_kept() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    run = subprocess.run([str(lint), "--config", str(ROOT / "pyproject.toml"), "--no-cache"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "Contracts: 3 kept, 0 broken." in run.stdout
