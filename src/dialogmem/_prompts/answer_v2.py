"""Short-answer prompts for small readers (seed 003 answer synthesis, seed 004 light generator).

Version 1 asked for a JSON object over memories stamped with ISO dates. Small local models copied the
ISO dates into their answers, wrote sentences where a short phrase was wanted, and were slow under
the JSON grammar. This version asks for plain text:

* every context line starts with its date written the way people write it ("20 January 2023"), and
  ISO dates inside a memory ("yesterday (2023-01-19)", added at write time) are rewritten the same
  way, so the model has only one date style to copy; week-grained phrases are re-said from the day
  they were said ("the week before 9 June 2023", version 3, ``_text._timenorm.anchored``);
* the reply is a short phrase, not a sentence; relative times are resolved against the date of the
  line that contains them;
* memory contexts come as excerpts (version 4): runs of neighbouring turns, the date once at the head
  of each, a blank line between them (``context_text``); raw turns found one by one stay one dated
  line each, as in version 3, so the naive baseline's prompt is unchanged;
* citations, when wanted, come in the same reply after the answer, as line numbers in square brackets
  (``7 May 2023 [2, 5]``). ``parse_cited_answer`` reads that tolerantly and keeps only numbers of lines
  the model was shown; a reply without numbers is still an answer, it just cites nothing.

``build_citation_messages`` is the alternative measured in ``benchmarks/bench_answer_prompts.py``: a
second, separate call that asks only which lines support a given answer. ``Memory.answer`` by default
asks for the plain short answer (``build_short_answer_messages``) and finds its lines by shared words
without a model (``answer.citations = "match"``): with the 1.5B reader that scored F1 0.551 against
0.490 for the inline numbers on the same contexts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import date, datetime

from pydantic import BaseModel, Field

from .._text._timenorm import anchored

VERSION = "answer-v4"

NOT_MENTIONED = "not mentioned"
MAX_WORDS = 6

_ISO_DAY = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})(?:T[\d:.]+)?\b")
_LEADING_SPEAKER = re.compile(r"^[A-Z][\w .'-]{0,40}:\s")
_BRACKETS = re.compile(r"\[([^\[\]]*)\]")
_LINES_PHRASE = re.compile(
    r"\(?\b(?:lines?|sources?|refs?)\b\s*:?\s*(\d+(?:(?:\s*(?:,|&|\band\b)\s*|\s+)\d+)*)\)?", re.I)
_NUMBER = re.compile(r"\d+")
_RANGE = re.compile(r"(\d+)\s*[-–]\s*(\d+)")
_ONLY_NUMBERS = re.compile(r"^\s*\d+(?:\s*(?:,|;|&|and|[-–])\s*\d+)*\s*$")
_MAX_RANGE = 50
_ANSWER_LABEL = re.compile(r"^\s*(?:\*\*)?(?:short\s+)?answer(?:\*\*)?\s*:\s*", re.I)
_QUOTES = "\"'“”‘’`*"

_TASK = "You answer a question about a conversation between people, using only the"
# how the context is laid out, as the system text says it, by (excerpts, cited). The flat plain text
# says "numbered" though its lines may not be: it is the text the naive baseline was measured with.
_LAYOUT = {
    (False, False): "numbered\nlines you are given. Each line starts with the date it was said and who said it.",
    (False, True): "numbered\nlines you are given. Each line starts with its number, the date it was said and "
                   "who said it.",
    (True, False): "excerpts you\nare given. Each excerpt starts with the date it was said; each line starts "
                   "with who said it.",
    (True, True): "excerpts you\nare given. Each excerpt starts with the date it was said; each line starts "
                  "with its number\nand who said it.",
}
_RELATIVE_FROM = {False: "that line's own date", True: "the date of its excerpt"}

_RULES = """Rules:
- Reply with the answer only: a short phrase of at most {words} words, not a sentence.
- Write dates the way people do: "7 May 2023", "May 2023", "2022".
- A line that says "yesterday", "last week" or "two days ago" counts from {relative_from}:
  give the date it points to.
- If the question asks for several things, name them all, separated by commas."""

ABSTAIN_RULE = f'- If the lines do not contain the answer, reply exactly: {NOT_MENTIONED}'

_CITE_RULE = """- After the answer, on the same line, give the numbers of the lines it comes from in square
  brackets. Example reply: 7 May 2023 [2, 5]"""


def system_text(*, excerpts: bool, cited: bool, abstain: bool) -> str:
    """The reader's instructions for a context laid out as ``excerpts`` (``context_text``) or as
    dated lines, asking for line numbers after the answer when ``cited``."""
    rules = _RULES.format(words=MAX_WORDS, relative_from=_RELATIVE_FROM[excerpts])
    parts = [f"{_TASK} {_LAYOUT[(excerpts, cited)]}", "", rules]
    if cited:
        parts.append(_CITE_RULE)
    if abstain:
        parts.append(ABSTAIN_RULE)
    return "\n".join(parts)

CITE_SYSTEM = """You check where an answer comes from. You get numbered lines of a conversation, a
question and its answer. Reply with the numbers of the lines that state or support the answer, in
square brackets, most important first, for example [3] or [2, 5]. Reply [] if no line supports it."""


class ContextLine(BaseModel):
    """One thing shown to the reader: a raw turn or a memory, with when it was said and by whom."""

    when: datetime | None = None
    speaker: str = ""
    text: str
    #: lines of one excerpt (consecutive turns of one conversation) share a number; None: the line
    #: stands alone. See ``context_text``.
    excerpt: int | None = None


class CitedAnswer(BaseModel):
    """A parsed reply: the answer text and the 1-based numbers of the shown lines it cites."""

    text: str
    lines: list[int] = Field(default_factory=list)


def human_date(day: date) -> str:
    """``date(2023, 5, 7)`` → ``"7 May 2023"`` (the style of LoCoMo's reference answers)."""
    return f"{day.day} {day:%B %Y}"


def natural_dates(text: str) -> str:
    """ISO dates inside ``text`` (``2023-05-07``, with or without a time) written as ``7 May 2023``;
    strings that look like ISO dates but are not valid dates are left alone."""

    def swap(match: re.Match[str]) -> str:
        try:
            return human_date(date(int(match[1]), int(match[2]), int(match[3])))
        except ValueError:
            return match[0]

    return _ISO_DAY.sub(swap, text)


def render_line(number: int | None, line: ContextLine, *, dated: bool = True) -> str:
    """``[2] 20 January 2023, Jon: text`` (without the number when ``number`` is None, without the
    date when not ``dated``: relative phrases are still re-said from the line's date).

    A memory that already starts with ``Name:`` (a stored turn pair) keeps its own speakers; its
    inner line breaks become `` / `` so that one numbered line is one memory.
    """
    text = " / ".join(part.strip() for part in line.text.splitlines() if part.strip())
    text = natural_dates(anchored(text, line.when.date()) if line.when is not None else text)
    if line.speaker and not _LEADING_SPEAKER.match(text):
        text = f"{line.speaker}: {text}"
    stamp = f"{human_date(line.when.date())}, " if dated and line.when is not None else ""
    head = f"[{number}] " if number is not None else ""
    return f"{head}{stamp}{text}"


def render_lines(lines: Sequence[ContextLine], *, numbered: bool = True) -> list[str]:
    """One dated line each (``render_line``): what line numbers and citation matching refer to."""
    return [render_line(i if numbered else None, line) for i, line in enumerate(lines, start=1)]


def in_excerpts(lines: Sequence[ContextLine]) -> bool:
    """Whether ``context_text`` lays ``lines`` out as excerpts: every line carries an excerpt number."""
    return bool(lines) and all(line.excerpt is not None for line in lines)


def context_text(lines: Sequence[ContextLine], *, numbered: bool = True) -> str:
    """The context as the reader sees it.

    Lines that carry excerpt numbers are shown as excerpts: a blank line between excerpts, the date
    once at the head of each (``On 20 January 2023:``), then its lines as ``Name: text``. The
    excerpts of a memory context are runs of neighbouring turns; written flat, with a date on every
    line and nothing between runs, a small reader took a reply in one run for the answer to a
    question in another (measured with the 1.5B reader: README). Other lines (raw turns found one
    by one) are one dated line each, as ``render_lines``. Numbers, when shown, count lines only.
    """
    if not in_excerpts(lines):
        return "\n".join(render_lines(lines, numbered=numbered))
    blocks: list[list[str]] = []
    for i, line in enumerate(lines, start=1):
        if i == 1 or line.excerpt != lines[i - 2].excerpt:
            blocks.append([f"On {human_date(line.when.date())}:"] if line.when is not None else [])
        blocks[-1].append(render_line(i if numbered else None, line, dated=False))
    return "\n\n".join("\n".join(block) for block in blocks)


def _user(question: str, body: str, reference_time: datetime | None, tail: str) -> str:
    asked = f"Today is {human_date(reference_time.date())}.\n" if reference_time is not None else ""
    return f"{asked}Lines:\n{body or '(no lines)'}\n\nQuestion: {question}\n{tail}"


def build_short_answer_messages(question: str, lines: Sequence[ContextLine], *,
                                reference_time: datetime | None = None, abstain: bool = False,
                                numbered: bool = True, notes: Sequence[str] = ()) -> list[dict[str, str]]:
    """A plain short answer; ``abstain`` adds the "not mentioned" rule; ``notes`` as for the cited
    prompt (answers found earlier, shown before the lines)."""
    system = system_text(excerpts=in_excerpts(lines), cited=False, abstain=abstain)
    user = _with_notes(_user(question, context_text(lines, numbered=numbered), reference_time, "Answer:"), notes)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def _with_notes(user: str, notes: Sequence[str]) -> str:
    if not notes:
        return user
    return "Found so far:\n" + "\n".join(f"- {natural_dates(n)}" for n in notes) + "\n\n" + user


def build_cited_answer_messages(question: str, lines: Sequence[ContextLine], *,
                                reference_time: datetime | None = None, abstain: bool = False,
                                notes: Sequence[str] = ()) -> list[dict[str, str]]:
    """One call: a short answer followed by ``[line numbers]``; read the reply with ``parse_cited_answer``.

    ``abstain`` adds the "not mentioned" rule (the light generator's "missing information" status);
    ``notes`` are answers found earlier (HyMem's memory pool), shown before the lines, unnumbered.
    """
    system = system_text(excerpts=in_excerpts(lines), cited=True, abstain=abstain)
    # "Answer:" and not "Answer [line numbers]:": with the latter the reference 1.5B model replied
    # with the numbers alone ("[1]") on conv-30 (measured 2026-11-23), an answer with no text
    user = _with_notes(_user(question, context_text(lines), reference_time, "Answer:"), notes)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def is_abstention(text: str) -> bool:
    """The reply says the lines do not hold the answer (or says nothing at all)."""
    low = " ".join(text.lower().split())
    return not low or NOT_MENTIONED in low or "not in the lines" in low or low in {"unknown", "none", "n/a"}


def build_citation_messages(question: str, answer: str,
                            lines: Sequence[ContextLine]) -> list[dict[str, str]]:
    """Second call: which lines support ``answer``; read the reply with ``parse_line_numbers``."""
    user = "Lines:\n" + "\n".join(render_lines(lines)) + f"\n\nQuestion: {question}\nAnswer: {answer}\nLines:"
    return [{"role": "system", "content": CITE_SYSTEM}, {"role": "user", "content": user}]


def _numbers(group: str) -> list[str]:
    """The numbers of one group, a range ``2-4`` counting as 2, 3, 4."""

    def spread(match: re.Match[str]) -> str:
        lo, hi = int(match[1]), int(match[2])
        if lo <= hi <= lo + _MAX_RANGE:
            return " ".join(str(n) for n in range(lo, hi + 1))
        return f"{match[1]} {match[2]}"

    return _NUMBER.findall(_RANGE.sub(spread, group))


def _keep(numbers: Sequence[str], n_lines: int) -> list[int]:
    out: list[int] = []
    for raw in numbers:
        n = int(raw)
        if 1 <= n <= n_lines and n not in out:
            out.append(n)
    return out


def parse_line_numbers(raw: str, n_lines: int) -> list[int]:
    """Line numbers in a reply (bracketed groups first, else every number), in order, without
    repeats, and only those between 1 and ``n_lines``."""
    groups = [g for g in _BRACKETS.findall(raw) if _NUMBER.search(g)]
    found = [n for g in groups for n in _numbers(g)] if groups else _NUMBER.findall(raw)
    return _keep(found, n_lines)


def parse_cited_answer(raw: str, n_lines: int) -> CitedAnswer:
    """Read ``answer [2, 5]`` tolerantly.

    The answer is the first non-empty line once an ``Answer:`` label, bracketed number groups and a
    trailing ``(lines 2 and 5)`` are taken out; the cited lines are the numbers in those groups,
    anywhere in the reply, that name a line the model was shown (1..``n_lines``). Brackets holding
    words are part of the answer. Never raises: an empty reply is an empty answer citing nothing.
    """
    cited: list[str] = []

    def take_group(match: re.Match[str]) -> str:
        inside = match[1]
        if not inside.strip():
            return " "
        if _ONLY_NUMBERS.match(inside):
            cited.extend(_numbers(inside))
            return " "
        return match[0]

    def take_phrase(match: re.Match[str]) -> str:
        cited.extend(_numbers(match[1]))
        return " "

    text = _BRACKETS.sub(take_group, raw)
    text = _LINES_PHRASE.sub(take_phrase, text)
    return CitedAnswer(text=_first_line(text, trailing=" ,;:-–("), lines=_keep(cited, n_lines))


def clean_short_answer(raw: str) -> str:
    """The first non-empty line of a plain reply, without an ``Answer:`` label or wrapping quotes."""
    return _first_line(raw)


def _first_line(text: str, *, trailing: str = "") -> str:
    """The first line of ``text`` that is not empty once an ``Answer:`` label, wrapping quotes and
    the ``trailing`` characters at its end are taken off; "" when there is none."""
    for part in text.splitlines():
        part = _ANSWER_LABEL.sub("", part).strip().strip(_QUOTES).strip()
        part = part.rstrip(trailing).strip() if trailing else part
        if part:
            return part
    return ""
