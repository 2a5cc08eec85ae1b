"""Checkpoints of a benchmark run under ``OUT/state/`` and the scratch directories of its units.

A finished (system, conversation) unit is one JSON-lines file: a header line with the unit's cost,
then one line per question. Files are written to a temporary name and renamed, so a killed run
leaves either the whole unit or nothing. ``run.json`` holds the settings that make results
comparable (``STATE_VERSION`` among them); a resumed run must match them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from .._errors import InputError

#: the shape of a saved question record; part of the run settings, so checkpoints written in another
#: shape are refused instead of combined (2: session-level recall for LoCoMo, recall at token budgets)
STATE_VERSION = 2
_MARKER = ".dialogmem-bench-scratch"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def _slug(value: str) -> str:
    slug = _UNSAFE.sub("_", value)
    if slug != value:  # keep distinct ids distinct after replacing characters
        slug += "-" + hashlib.sha1(value.encode()).hexdigest()[:8]
    return slug


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class RunState:
    """Reads and writes the checkpoints of one output directory."""

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self.dir = self.out / "state"
        self.units_dir = self.dir / "units"
        self.scratch_root = self.out / "scratch"

    # -- one process at a time --------------------------------------------------------------------

    def acquire(self) -> None:
        """Take the output directory; a second live run on it is refused, a dead one's lock is taken over."""
        self.dir.mkdir(parents=True, exist_ok=True)
        lock = self.dir / "lock"
        if lock.is_file():
            try:
                pid = int(lock.read_text(encoding="utf-8").strip() or 0)
            except ValueError:
                pid = 0
            if pid and pid != os.getpid() and _alive(pid):
                raise InputError(f"{self.out} is in use by another benchmark run (pid {pid})")
        atomic_write(lock, f"{os.getpid()}\n")

    def release(self) -> None:
        lock = self.dir / "lock"
        if lock.is_file() and lock.read_text(encoding="utf-8").strip() == str(os.getpid()):
            lock.unlink()

    # -- run settings ---------------------------------------------------------------------------

    def check_settings(self, settings: dict[str, Any]) -> bool:
        """Record the settings of a new run, or check a resumed one against them.

        Returns True when earlier units exist and will be reused.
        """
        path = self.dir / "run.json"
        if path.is_file():
            saved = json.loads(path.read_text(encoding="utf-8"))
            differ = sorted(k for k in set(saved) | set(settings) if saved.get(k) != settings.get(k))
            if differ:
                raise InputError(
                    f"{self.out} holds a run with other settings ({', '.join(differ)} differ); "
                    "use another --out, or --fresh to discard it")
            return any(self.units_dir.glob("*.jsonl"))
        atomic_write(path, json.dumps(settings, indent=2, sort_keys=True, default=str))
        return False

    def discard(self) -> None:
        """Remove this run's checkpoints and scratch data: only what a benchmark run wrote."""
        if (self.dir / "run.json").is_file():
            for path in self.dir.iterdir():
                if path.name != "lock":
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
        if self.scratch_root.is_dir():
            for marker in self.scratch_root.glob(f"*/*/{_MARKER}"):
                self.remove_scratch(marker.parent)

    # -- units ----------------------------------------------------------------------------------

    def unit_path(self, system: str, conversation: str) -> Path:
        return self.units_dir / f"{_slug(system)}__{_slug(conversation)}.jsonl"

    def load_unit(self, system: str, conversation: str) -> dict[str, Any] | None:
        """The saved unit (``{"header": ..., "questions": [...]}``), or None if not finished."""
        path = self.unit_path(system, conversation)
        if not path.is_file():
            return None
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if not lines or lines[0].get("kind") != "unit":
            return None
        header = lines[0]
        questions = [ln for ln in lines[1:] if ln.get("kind") == "question"]
        if len(questions) != header.get("n_questions"):
            return None  # a file cut short is not a finished unit
        return {"header": header, "questions": questions}

    def save_unit(self, header: dict[str, Any], questions: list[dict[str, Any]]) -> None:
        header = {"kind": "unit", **header, "n_questions": len(questions)}
        lines = [json.dumps(header, sort_keys=True, default=str)]
        lines += [json.dumps({"kind": "question", **q}, sort_keys=True, default=str) for q in questions]
        atomic_write(self.unit_path(header["system"], header["conversation"]), "\n".join(lines) + "\n")

    # -- questions of an unfinished unit ---------------------------------------------------------

    def partial_path(self, system: str, conversation: str) -> Path:
        return self.units_dir / f"{_slug(system)}__{_slug(conversation)}.partial"

    def load_partial(self, system: str, conversation: str) -> dict[str, dict[str, Any]]:
        """Question records already saved for an unfinished unit, by question id (a line cut short by
        a kill is ignored)."""
        path = self.partial_path(system, conversation)
        if not path.is_file():
            return {}
        out: dict[str, dict[str, Any]] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and "qid" in rec:
                out[str(rec["qid"])] = rec
        return out

    def append_partial(self, system: str, conversation: str, record: dict[str, Any]) -> None:
        """Save one answered question of an unfinished unit at once (fsynced)."""
        self.units_dir.mkdir(parents=True, exist_ok=True)
        with self.partial_path(system, conversation).open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, sort_keys=True, default=str) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def drop_partial(self, system: str, conversation: str) -> None:
        self.partial_path(system, conversation).unlink(missing_ok=True)

    # -- scratch --------------------------------------------------------------------------------

    def fresh_scratch(self, system: str, conversation: str) -> Path:
        """An empty scratch directory for a unit; leftovers of an interrupted attempt are removed."""
        path = self.scratch_root / _slug(system) / _slug(conversation)
        self.remove_scratch(path)
        path.mkdir(parents=True)
        (path / _MARKER).write_text("scratch data of a dialogmem benchmark unit\n", encoding="utf-8")
        return path

    def remove_scratch(self, path: Path) -> None:
        """Delete a scratch directory, but only one this class created (it carries the marker)."""
        if not path.exists():
            return
        inside = self.scratch_root.resolve() in path.resolve().parents
        if inside and path.is_dir() and not any(path.iterdir()):
            path.rmdir()  # killed between mkdir and the marker's write: an empty directory holds nothing
            return
        if not (path / _MARKER).is_file() or not inside:
            raise InputError(f"refusing to delete {path}: it is not a benchmark scratch directory")
        shutil.rmtree(path)
        parent = path.parent
        if parent != self.scratch_root and not any(parent.iterdir()):
            parent.rmdir()
