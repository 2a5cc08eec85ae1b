"""The client is only a client: ``from dialogmem import Client`` (and ``import dialogmem``, and the
public types) load nothing of the engine, checked in a fresh interpreter's ``sys.modules``; the engine
loads when ``Memory`` is asked for; and an install without the engine (``pip install dialogmem``) gets
one error naming the command that installs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("numpy", "onnxruntime", "onnx", "qdrant_client", "qdrant_edge", "dateparser", "tokenizers", "openai",
         "torch", "fastapi")
ENGINE = ("dialogmem._read", "dialogmem._write", "dialogmem._sleep", "dialogmem._store", "dialogmem._journal",
          "dialogmem._models", "dialogmem._facade")


def loaded_after(code: str, *, block: tuple[str, ...] = ()) -> dict[str, object]:
    """Runs ``code`` in a fresh interpreter (``block``: top-level modules made uninstallable first);
    what it printed last (JSON) and which heavy and engine modules it loaded."""
    blocker = f"""
import importlib.abc, sys
class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {list(block)!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, _Block())
"""
    probe = f"""
{blocker if block else ""}
import json, sys
out = None
{code}
print(json.dumps({{"out": out, "loaded": sorted(m for m in sys.modules if m.split(".")[0] in {list(HEAVY)!r}
                   or m.startswith({ENGINE!r}))}}))
"""
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                         cwd=ROOT, env=_env())
    assert run.returncode == 0, run.stderr[-3000:]
    result: dict[str, object] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}


def test_the_client_and_the_public_types_load_nothing_of_the_engine() -> None:
    got = loaded_after("""
from dialogmem import Client, AsyncClient, SearchResult, DialogmemError
import dialogmem.types as types
from dialogmem.types import Answer, SleepReport, GraphAudit, ConsolidationReport, RepairReport, IndexFilter
out = [Client.__module__, types.Answer is Answer]
""")
    assert got["loaded"] == [], got["loaded"]
    assert got["out"] == ["dialogmem._client._sync", True]


def test_import_dialogmem_alone_is_lazy() -> None:
    got = loaded_after("import dialogmem\nout = sorted(dialogmem.__all__) == sorted(dir(dialogmem))")
    assert got["loaded"] == [] and got["out"] is True


def test_memory_loads_the_engine_and_every_public_name_resolves() -> None:
    got = loaded_after("""
import dialogmem
out = [name for name in dialogmem.__all__ if getattr(dialogmem, name) is None]
from dialogmem import Memory
""")
    assert got["out"] == []
    assert {"numpy", "qdrant_edge", "dialogmem._facade"} <= {m.split(".")[0] if not m.startswith("dialogmem")
                                                             else ".".join(m.split(".")[:2]) for m in got["loaded"]}


def test_old_import_paths_name_the_same_classes() -> None:
    from dialogmem import types
    from dialogmem._read import Answer
    from dialogmem._sleep._consolidator import ConsolidationReport
    from dialogmem._sleep._updater import SleepReport
    from dialogmem._sleep._visibility import GraphAudit
    from dialogmem._store import IndexFilter
    from dialogmem._sync._repair import RepairReport
    assert (Answer, SleepReport, ConsolidationReport, GraphAudit, IndexFilter, RepairReport) == (
        types.Answer, types.SleepReport, types.ConsolidationReport, types.GraphAudit, types.IndexFilter,
        types.RepairReport)


def test_without_the_engine_memory_names_the_install_command() -> None:
    got = loaded_after("""
from dialogmem import Client  # the client works without the engine
try:
    from dialogmem import Memory
except ImportError as exc:
    from dialogmem import ConfigError
    out = [type(exc).__name__, isinstance(exc, ConfigError), str(exc)]
""", block=("numpy",))
    name, is_config, message = got["out"]  # type: ignore[misc]
    assert name == "MissingPartError" and is_config is True
    assert "pip install 'dialogmem[local]'" in message and "numpy" in message


def test_the_command_without_the_engine_names_the_install_command() -> None:
    probe = """
import importlib.abc, sys
class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "typer":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, _Block())
from dialogmem._entry import main
main()
"""
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env=_env())
    assert run.returncode == 1 and "pip install 'dialogmem[local]'" in run.stderr, run.stderr[-2000:]
    assert "Traceback" not in run.stderr


def test_the_blocking_client_is_generated_from_the_async_one() -> None:
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_sync_client.py"), "--check"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
