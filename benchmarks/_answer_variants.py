"""Prompt variants measured by ``bench_answer_prompts.py``: how each one builds its calls and reads replies.

A variant takes the retrieved context (rank order, best first) and asks the reader one or two calls.
P0 is version 1 of the answer prompt (JSON with ``used_ids``), as the library's first answerer sent it; the
others use ``dialogmem._prompts.answer_v2``, with one change each against P1 so that a difference
in score can be put down to that change.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import _answer_prompt_v1 as v1
from _answer_prompt_v1 import AnswerOutput
from pydantic import BaseModel, Field

from dialogmem._errors import DialogmemError
from dialogmem._models import LLMClient
from dialogmem._prompts import answer_v2 as v2
from dialogmem.bench._systems import count_tokens

Mode = Literal["json_v1", "short", "cite_call", "inline_cite"]
SHORT_MAX_TOKENS = 48
CITE_MAX_TOKENS = 64


@dataclass(frozen=True)
class Variant:
    name: str
    about: str
    mode: Mode
    order: Literal["time", "rank"] = "time"  # order of the lines in the prompt
    k: int = 10  # top-k of the retrieved context, taken in rank order
    dates: Literal["natural", "iso"] = "natural"
    abstain: bool = False
    numbered: bool = True


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("P0", "v1 JSON {answer, used_ids}, ISO-dated memories", "json_v1"),
    Variant("P1", "plain short answer, natural dates, numbered lines oldest first", "short"),
    Variant("P1u", "P1 with unnumbered lines", "short", numbered=False),
    Variant("P1-iso", "P1 with ISO dates on the lines and inside memories", "short", dates="iso"),
    Variant("P1-rank", "P1 with lines in rank order (best first)", "short", order="rank"),
    Variant("P1-k5", "P1 over the top 5 only", "short", k=5),
    Variant("P2", "P1 + 'not mentioned' when absent", "short", abstain=True),
    Variant("P3", "P1 + a second call naming the supporting lines", "cite_call"),
    Variant("P4", "one call: short answer then [line numbers]", "inline_cite"),
    Variant("P4-k5", "P4 over the top 5 only", "inline_cite", k=5),
)}


class Item(BaseModel):
    """One retrieved thing as cached: enough to render it for v1 and for v2."""

    time_stamp: str  # ISO, as stored
    weekday: str = ""
    speaker: str = ""
    text: str
    sources: list[str] = Field(default_factory=list)


class Outcome(BaseModel):
    raw: str = ""
    answer: str = ""
    cited: list[list[str]] | None = None  # the sources of each cited line; None: the variant cites nothing
    context_tokens: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    calls: int = 0
    error: str | None = None


def arrange(items: list[Item], variant: Variant) -> list[Item]:
    top = items[:variant.k]
    return sorted(top, key=lambda it: it.time_stamp) if variant.order == "time" else top


def to_line(item: Item) -> v2.ContextLine:
    return v2.ContextLine(when=datetime.fromisoformat(item.time_stamp), speaker=item.speaker, text=item.text)


def _iso_lines(items: list[Item], numbered: bool) -> list[str]:
    out = []
    for i, it in enumerate(items, start=1):
        text = " / ".join(p.strip() for p in it.text.splitlines() if p.strip())
        who = "" if text.startswith(f"{it.speaker}:") or ":" in text[:30] else f"{it.speaker}: "
        head = f"[{i}] " if numbered else ""
        out.append(f"{head}{it.time_stamp[:10]}, {who}{text}")
    return out


def short_messages(question: str, items: list[Item], variant: Variant,
                   ref: datetime | None) -> tuple[list[dict[str, str]], str]:
    """The messages of a plain short-answer call and the context text they show."""
    lines = [to_line(it) for it in items]
    msgs = v2.build_short_answer_messages(question, lines, reference_time=ref, abstain=variant.abstain,
                                          numbered=variant.numbered)
    if variant.dates == "iso":
        rendered = _iso_lines(items, variant.numbered)
        asked = f"Today is {ref:%Y-%m-%d}.\n" if ref is not None else ""
        msgs[1]["content"] = f"{asked}Lines:\n" + "\n".join(rendered) + f"\n\nQuestion: {question}\nAnswer:"
        return msgs, "\n".join(rendered)
    return msgs, "\n".join(v2.render_lines(lines, numbered=variant.numbered))


class Usage:
    """Prompt and completion tokens spent by one client since the last ``take``."""

    def __init__(self, llm: LLMClient) -> None:
        self.llm = llm
        self.last = self._now()

    def _now(self) -> tuple[int, int]:
        stages = self.llm.usage.snapshot().get("llm", {})
        return (sum(int(s.get("prompt_tokens", 0)) for s in stages.values()),
                sum(int(s.get("completion_tokens", 0)) for s in stages.values()))

    def take(self) -> tuple[int, int]:
        now = self._now()
        delta = (now[0] - self.last[0], now[1] - self.last[1])
        self.last = now
        return delta


def run_variant(llm: LLMClient, usage: Usage, variant: Variant, question: str, items: list[Item],
                ref: datetime | None, base: Outcome | None = None) -> Outcome:
    """Ask the reader; an error is recorded on the outcome, never raised (a long run goes on)."""
    shown = arrange(items, variant)
    out = Outcome()
    usage.take()
    started = time.perf_counter()
    try:
        _ask(llm, variant, question, shown, ref, out, base)
    except DialogmemError as exc:
        out.error = f"{type(exc).__name__}: {exc}"[:300]
    out.seconds += time.perf_counter() - started
    prompt, completion = usage.take()
    out.prompt_tokens += prompt
    out.completion_tokens += completion
    return out


def _cited(items: list[Item], numbers: list[int]) -> list[list[str]]:
    return [items[n - 1].sources for n in numbers]


def _ask(llm: LLMClient, variant: Variant, question: str, shown: list[Item], ref: datetime | None,
         out: Outcome, base: Outcome | None) -> None:
    if variant.mode == "json_v1":
        lines = [v1.format_memory(i, it.time_stamp, it.weekday, it.speaker, it.text)
                 for i, it in enumerate(shown, start=1)]
        out.context_tokens = count_tokens("\n".join(lines))
        out.calls = 1
        got = llm.complete_json(v1.build_messages(question, lines, reference_time=ref), AnswerOutput,
                                stage="answer")
        out.raw = got.model_dump_json()
        out.answer = got.answer.strip()
        out.cited = _cited(shown, [n for n in dict.fromkeys(got.used_ids) if 1 <= n <= len(shown)])
        return
    if variant.mode == "inline_cite":
        lines = [to_line(it) for it in shown]
        out.context_tokens = count_tokens("\n".join(v2.render_lines(lines)))
        out.calls = 1
        out.raw = llm.complete(v2.build_cited_answer_messages(question, lines, reference_time=ref),
                               stage="answer", max_tokens=CITE_MAX_TOKENS)
        parsed = v2.parse_cited_answer(out.raw, len(shown))
        out.answer, out.cited = parsed.text, _cited(shown, parsed.lines)
        return
    if base is not None and base.error is None:  # cite_call on top of P1's answer, already computed
        out.raw, out.answer, out.context_tokens = base.raw, base.answer, base.context_tokens
        out.seconds, out.calls = base.seconds, base.calls
        out.prompt_tokens, out.completion_tokens = base.prompt_tokens, base.completion_tokens
    else:
        msgs, context = short_messages(question, shown, variant, ref)
        out.context_tokens = count_tokens(context)
        out.calls = 1
        out.raw = llm.complete(msgs, stage="answer", max_tokens=SHORT_MAX_TOKENS)
        out.answer = v2.clean_short_answer(out.raw)
    if variant.mode == "cite_call":
        out.calls += 1
        lines = [to_line(it) for it in shown]
        reply = llm.complete(v2.build_citation_messages(question, out.answer, lines), stage="cite",
                             max_tokens=CITE_MAX_TOKENS)
        out.cited = _cited(shown, v2.parse_line_numbers(reply, len(shown)))


def describe() -> list[dict[str, Any]]:
    return [{"name": v.name, "about": v.about} for v in VARIANTS.values()]
