"""Readers for the LoCoMo and LongMemEval files, in their original formats.

Both datasets become the same shape: a ``BenchConversation`` holds the sessions to feed (in order,
each turn with its session's time) and the questions to ask about them. A LoCoMo conversation is
one scope; every LongMemEval question brings its own haystack and so is its own scope.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from .._errors import InputError
from .._text._timeparse import parse_timestamp
from ._metrics import locomo_session, sessions_of

logger = logging.getLogger(__name__)

LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
ADVERSARIAL = "adversarial"

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_DIA_ID = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")
_EVIDENCE_SEPARATORS = re.compile(r"[\s;,]+")


class BenchTurn(BaseModel):
    """One turn to feed; ``id`` is what memories must cite in ``source_turn_ids``."""

    id: str
    session_id: str
    speaker: str
    role: str | None = None
    text: str
    time: datetime | None = None
    raw_time: str = ""
    has_answer: bool = False


class BenchSession(BaseModel):
    id: str
    raw_time: str = ""
    time: datetime | None = None
    turns: list[BenchTurn]


class BenchQuestion(BaseModel):
    id: str
    question: str
    answer: str
    category: str
    category_id: int | None = None
    evidence: list[str] = Field(default_factory=list)  # turn ids, normalised and known
    evidence_sessions: list[str] = Field(default_factory=list)
    malformed_evidence: list[str] = Field(default_factory=list)  # raw entries that were skipped
    question_time: datetime | None = None
    adversarial: bool = False  # LoCoMo category 5: the right answer is "not mentioned"
    abstention: bool = False  # LongMemEval ``*_abs``: the right answer is "unanswerable"


class BenchConversation(BaseModel):
    id: str
    scope: str  # the user_id the conversation is stored under
    speakers: list[str] = Field(default_factory=list)
    sessions: list[BenchSession]
    questions: list[BenchQuestion]

    def turns(self) -> list[BenchTurn]:
        return [t for s in self.sessions for t in s.turns]

    def last_time(self) -> datetime | None:
        times = [s.time for s in self.sessions if s.time is not None]
        return max(times) if times else None


class EvidenceReport(BaseModel):
    """How many evidence entries were usable as given, repaired, or skipped."""

    entries: int = 0
    normalised: int = 0
    malformed: int = 0
    questions_without_evidence: int = 0
    examples: list[str] = Field(default_factory=list)


class BenchDataset(BaseModel):
    name: Literal["locomo", "longmemeval"]
    path: str
    sha256: str
    conversations: list[BenchConversation]
    evidence: EvidenceReport = Field(default_factory=EvidenceReport)


def parse_locomo_time(text: str) -> datetime | None:
    """``"1:56 pm on 8 May, 2023"`` → datetime; None when the text is not a date-time."""
    return _parse_or_none(text)


def parse_longmemeval_time(text: str) -> datetime | None:
    """``"2023/05/20 (Sat) 02:21"`` → datetime; None when the text is not a date-time."""
    return _parse_or_none(text)


def _parse_or_none(text: str) -> datetime | None:
    # the same parser Memory.add applies to message timestamps, so the bench feeds what it checked
    try:
        return parse_timestamp(text)
    except InputError:
        return None


def normalise_evidence(raw: Sequence[Any], known_ids: set[str]) -> tuple[list[str], list[str], int]:
    """Map raw evidence entries to known turn ids.

    Returns ``(ids, malformed, normalised)``: an entry made only of dia_id patterns (``D8:6; D9:17``,
    ``D30:05``, ``D 2:1``) becomes those ids when every one of them exists in the conversation;
    anything else (``D``, an id of a turn that does not exist, a non-string) is reported as malformed.
    ``normalised`` counts entries whose text differed from the id(s) they became.
    """
    ids: list[str] = []
    malformed: list[str] = []
    normalised = 0
    for entry in raw:
        if not isinstance(entry, str) or not entry.strip():
            malformed.append(repr(entry))
            continue
        found = [f"D{int(a)}:{int(b)}" for a, b in _DIA_ID.findall(entry)]
        leftover = _EVIDENCE_SEPARATORS.sub("", _DIA_ID.sub("", entry))
        if not found or leftover or any(f not in known_ids for f in found):
            malformed.append(entry)
            continue
        if found != [entry]:
            normalised += 1
        ids.extend(f for f in found if f not in ids)
    return ids, malformed, normalised


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise InputError(f"data file not found: {path}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{path} is not valid JSON: {exc}") from exc


def _answer_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return str(value)


def load_locomo(path: str | Path, conversations: Sequence[str] | None = None) -> BenchDataset:
    """Read ``locomo10.json`` (or a subset of it); ``conversations`` picks sample_ids, in file order."""
    return _load(path, "locomo", "LoCoMo samples", "conversation", "sample_id", conversations,
                 _locomo_conversation)


def _locomo_conversation(sample: dict[str, Any], report: EvidenceReport) -> BenchConversation:
    sample_id = str(sample["sample_id"])
    conv = sample["conversation"]
    numbers = sorted(int(m.group(1)) for k in conv if (m := _SESSION_KEY.match(k)))
    sessions: list[BenchSession] = []
    for n in numbers:
        raw_time = str(conv.get(f"session_{n}_date_time", ""))
        when = parse_locomo_time(raw_time)
        if when is None:
            logger.warning("%s session_%d: unrecognised date-time %r", sample_id, n, raw_time)
        sid = f"session_{n}"
        turns = []
        for t in conv[sid] or []:
            text = str(t.get("text", ""))
            caption = t.get("blip_caption")
            if caption:
                text = f"{text} [image: {caption}]".strip()
            turns.append(BenchTurn(id=str(t["dia_id"]), session_id=sid, speaker=str(t.get("speaker", "")),
                                   text=text, time=when, raw_time=raw_time))
        sessions.append(BenchSession(id=sid, raw_time=raw_time, time=when, turns=turns))
    known = {t.id for s in sessions for t in s.turns}
    questions = []
    for i, qa in enumerate(sample.get("qa", [])):
        cat_id = int(qa.get("category", 0))
        raw_evidence = qa.get("evidence") or []
        ids, malformed, normalised = normalise_evidence(raw_evidence, known)
        report.entries += len(raw_evidence)
        report.normalised += normalised
        report.malformed += len(malformed)
        report.examples.extend(f"{sample_id}: {m}" for m in malformed)
        if not ids:
            report.questions_without_evidence += 1
        answer = qa.get("answer", qa.get("adversarial_answer"))
        questions.append(BenchQuestion(
            id=f"{sample_id}/q{i}", question=str(qa["question"]), answer=_answer_text(answer),
            category=LOCOMO_CATEGORIES.get(cat_id, f"category-{cat_id}"), category_id=cat_id,
            evidence=ids, evidence_sessions=sorted(sessions_of(ids, locomo_session)),
            malformed_evidence=malformed, adversarial=cat_id == 5))
    speakers = [str(conv[k]) for k in ("speaker_a", "speaker_b") if conv.get(k)]
    return BenchConversation(id=sample_id, scope=f"locomo-{sample_id}", speakers=speakers,
                             sessions=sessions, questions=questions)


def load_longmemeval(path: str | Path, questions: Sequence[str] | None = None,
                     limit: int | None = None) -> BenchDataset:
    """Read a LongMemEval file (a JSON list of questions, each with its own haystack)."""
    return _load(path, "longmemeval", "LongMemEval questions", "question", "question_id", questions,
                 _longmemeval_conversation, limit=limit)


def _load(path: str | Path, name: str, listing: str, what: str, id_key: str, ids: Sequence[str] | None,
          build: Callable[[dict[str, Any], EvidenceReport], BenchConversation], *,
          limit: int | None = None) -> BenchDataset:
    """The items of a JSON list whose ``id_key`` is in ``ids`` (all when None), in file order, at most
    ``limit``; a requested id that is not there is an error unless a limit cut the list short."""
    path = Path(path)
    data = _read_json(path)
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a JSON list of {listing}")
    wanted = set(ids) if ids else None
    report = EvidenceReport()
    convs: list[BenchConversation] = []
    for item in data:
        if wanted is not None and str(item.get(id_key, "")) not in wanted:
            continue
        convs.append(build(item, report))
        if limit is not None and len(convs) >= limit:
            break
    if wanted is not None and limit is None:
        missing = wanted - {c.id for c in convs}
        if missing:
            raise InputError(f"{path}: no {what} {', '.join(sorted(missing))}")
    return BenchDataset(name=name, path=str(path), sha256=_sha256(path), conversations=convs, evidence=report)


def _longmemeval_conversation(item: dict[str, Any], report: EvidenceReport) -> BenchConversation:
    qid = str(item["question_id"])
    session_ids = [str(s) for s in item.get("haystack_session_ids", [])]
    dates = [str(d) for d in item.get("haystack_dates", [])]
    haystack = item.get("haystack_sessions", [])
    if not (len(session_ids) == len(dates) == len(haystack)):
        raise InputError(f"question {qid}: haystack ids, dates and sessions differ in length")
    sessions: list[BenchSession] = []
    evidence: list[str] = []
    for sid, raw_time, turns_raw in zip(session_ids, dates, haystack, strict=True):
        when = parse_longmemeval_time(raw_time)
        if when is None:
            logger.warning("%s %s: unrecognised date %r", qid, sid, raw_time)
        turns = []
        for j, t in enumerate(turns_raw):
            tid = f"{sid}:{j}"
            role = str(t.get("role", "user"))
            has = bool(t.get("has_answer", False))
            if has:
                evidence.append(tid)
            turns.append(BenchTurn(id=tid, session_id=sid, speaker=role, role=role,
                                   text=str(t.get("content", "")), time=when, raw_time=raw_time,
                                   has_answer=has))
        sessions.append(BenchSession(id=sid, raw_time=raw_time, time=when, turns=turns))
    # sessions are fed in time order, whatever order the file lists them in
    sessions.sort(key=lambda s: (s.time is None, s.time or datetime.min))
    qtype = str(item.get("question_type", "unknown"))
    abstention = qid.endswith("_abs")
    answer_sessions = [str(s) for s in item.get("answer_session_ids", [])]
    report.entries += len(answer_sessions)
    if not evidence and not abstention:
        report.questions_without_evidence += 1
    question = BenchQuestion(
        id=qid, question=str(item["question"]), answer=_answer_text(item.get("answer")),
        category=qtype, evidence=evidence, evidence_sessions=answer_sessions,
        question_time=parse_longmemeval_time(str(item.get("question_date", ""))),
        abstention=abstention)
    return BenchConversation(id=qid, scope=f"lme-{qid}", speakers=["user", "assistant"],
                             sessions=sessions, questions=[question])
