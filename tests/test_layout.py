"""The layout's rules hold: no import cycle (deferred or not), the layer contracts of
pyproject.toml (import-linter), and the journal's roles, so a wrong arrow fails the suite, not a review."""

from __future__ import annotations

import ast
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


#: modules outside the journal that may hold the whole ``Journal``: the facade opens and wires a store
WHOLE_JOURNAL = ("dialogmem._facade",)
#: the journal's parts behind its package: only ``_journal`` itself imports them
JOURNAL_PARTS = {"_sql", "_rows", "_dialect", "_turns", "_memories", "_graph", "_keys", "_ltmqueue", "_sqlite",
                 "_postgres", "_protocol", "_factory", "_schema"}


def _journal_imports(path: Path) -> list[tuple[str, str]]:
    """(module, name) of each name ``path`` imports from the journal package or one of its modules."""
    package = list(path.relative_to(ROOT / "src").parent.parts)  # what a relative import starts from
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = package[: len(package) - node.level + 1] if node.level else []
        target = ".".join([*base, *([node.module] if node.module else [])])
        if target == "dialogmem._journal" or target.startswith("dialogmem._journal."):
            found += [(target, a.name) for a in node.names]
    return found


def test_consumers_name_the_journal_role_they_use() -> None:
    """Outside the facade, code names the journal role it calls (``TurnLog``, ``MemoryRows``,
    ``UserRows``, ``GraphRows``, ``IndexSource``, ``KeyRing``), never the whole ``Journal``, and no
    module outside the journal reaches into its parts (the SQL journal, its dialect, its schema)."""
    src = ROOT / "src" / "dialogmem"
    whole, parts, named = [], [], set()
    for path in sorted(src.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT / "src").with_suffix("").parts)
        if module.startswith("dialogmem._journal"):
            continue
        for target, name in _journal_imports(path):
            named.add(name)
            if target != "dialogmem._journal" and target.rsplit(".", 1)[1] in JOURNAL_PARTS:
                parts.append(f"{module}: {target}")
            if name == "Journal" and not module.startswith(WHOLE_JOURNAL):
                whole.append(module)
    assert whole == [], "these modules take the whole Journal: name the role they use instead"
    assert parts == [], "these modules import a part of the journal: import from dialogmem._journal"
    assert {"TurnLog", "MemoryRows", "UserRows", "GraphRows", "IndexSource", "KeyRing", "Journal"} - named == {
        "TurnLog"}  # the turn log is used through UserRows (the write path reads turns and memories)
