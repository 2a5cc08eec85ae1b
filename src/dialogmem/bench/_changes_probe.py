"""The changes probe set: conversations in which facts change, and questions about the present and the past.

The file is LoCoMo's JSON (``load_locomo`` reads it) with four more keys per ``qa`` item:

* ``state``: ``"present"`` (the newest statement answers it) or ``"past"`` (an older one does);
* ``change_kind``: what changed (``residence``, ``job``, ``relationship``, ``pet``, …);
* ``said``: how the change was said: ``explicit``, ``implicit``, ``negation`` or ``correction`` (for a
  past question, how the change that made its answer stale was said);
* ``superseded``: the dia_ids of the statements a present question's answer replaced (stale ones).

One is bundled with the package (``BUNDLED``); ``load_changes`` reads it or any file of this shape.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from .._errors import InputError, first_problem
from ._loaders import BenchDataset, load_locomo

#: the name ``--data`` takes for the probe set shipped with the package
BUNDLED = "changes"
_FILE = "changes_probe.json"

State = Literal["present", "past"]
Said = Literal["explicit", "implicit", "negation", "correction"]


class ChangeNote(BaseModel):
    """A question's annotations beyond LoCoMo's own keys."""

    state: State
    change_kind: str = Field(min_length=1)
    said: Said
    superseded: list[str] = Field(default_factory=list)


class ChangesProbe(BaseModel):
    dataset: BenchDataset
    notes: dict[str, ChangeNote]  # by question id (``{sample_id}/q{i}``, as the LoCoMo loader names them)


def bundled_path() -> Path:
    """The probe set shipped with the package."""
    return Path(str(resources.files("dialogmem") / "data" / _FILE))


def resolve_data(data: str | Path | None) -> Path:
    """``None`` or ``"changes"`` is the bundled probe set; anything else is a path."""
    if data is None or str(data) == BUNDLED:
        return bundled_path()
    return Path(data)


def load_changes(data: str | Path | None = None) -> ChangesProbe:
    """Read a changes probe file; ``InputError`` when it is not one (a question without usable evidence,
    an annotation missing or out of range, a superseded id that names no turn, or a present question
    without superseded statements)."""
    path = resolve_data(data)
    dataset = load_locomo(path)
    raw = json.loads(path.read_text(encoding="utf-8"))
    by_id = {c.id: c for c in dataset.conversations}
    notes: dict[str, ChangeNote] = {}
    for sample in raw:
        conv = by_id[str(sample["sample_id"])]
        known = {t.id for t in conv.turns()}
        for i, qa in enumerate(sample.get("qa", [])):
            qid = f"{conv.id}/q{i}"
            note = _note(qid, qa)
            question = conv.questions[i]
            if question.malformed_evidence or not question.evidence:
                raise InputError(f"{path}: {qid} has evidence that names no turn: {question.malformed_evidence}")
            unknown = [s for s in note.superseded if s not in known]
            if unknown:
                raise InputError(f"{path}: {qid} lists superseded turns that do not exist: {unknown}")
            if note.state == "present" and not note.superseded:
                raise InputError(f"{path}: {qid} is a present-state question without superseded statements")
            notes[qid] = note
    return ChangesProbe(dataset=dataset, notes=notes)


def _note(qid: str, qa: dict[str, Any]) -> ChangeNote:
    try:
        return ChangeNote.model_validate({k: qa.get(k) for k in ("state", "change_kind", "said")}
                                         | {"superseded": qa.get("superseded") or []})
    except ValidationError as exc:
        where, what = first_problem(exc)
        raise InputError(f"{qid}: invalid {where}: {what}") from exc


# Words too common to count as copied from the evidence, even at five letters or more.
_COMMON_WORDS = """
about above after again against along already also always among another anyone anything around because
become been before being below between both could didn doesn doing during each either else enough even
every everything first from going gonna have having here itself just later least little maybe might more
most much never next nothing other others over quite rather really right same shall should since some
someone something still such than that their theirs them then there these they thing things think those
though three through today together under until very wanna were what whatever when where whether which
while whose with without would years your yours yourself thats
"""
_COMMON = frozenset(_COMMON_WORDS.split())
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")


def distinctive_words(text: str, exclude: Collection[str] = ()) -> set[str]:
    """The words of ``text`` that copying would show: five letters or more, not in a short list of common
    words, not in ``exclude`` (the speakers' names); lowercased, a possessive and a plural
    ending dropped so that "sister" and "sisters", "class" and "classes" are one word."""
    out: set[str] = set()
    for raw in _WORD.findall(text):
        word = raw.lower().strip("'-")
        if word.endswith("'s"):
            word = word[:-2]
        if len(word) < 5 or word in _COMMON or word in exclude:
            continue
        out.add(_singular(word))
    return out


def _singular(word: str) -> str:
    """A rough singular: "classes" → "class", "sisters" → "sister"; "glass" stays."""
    if word.endswith(("sses", "ches", "shes", "xes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def copied_words(probe: ChangesProbe) -> dict[str, set[str]]:
    """For every question that shares distinctive words with one of its evidence turns, those words."""
    out: dict[str, set[str]] = {}
    for conv in probe.dataset.conversations:
        names = {s.lower() for s in conv.speakers}
        text = {t.id: t.text for t in conv.turns()}
        for q in conv.questions:
            asked = distinctive_words(q.question, names)
            shared = set().union(*(asked & distinctive_words(text[e], names) for e in q.evidence))
            if shared:
                out[q.id] = shared
    return out
