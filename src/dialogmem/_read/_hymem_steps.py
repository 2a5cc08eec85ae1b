"""Pure steps of HyMem answering (seed 004 §3.1-3.4): what the models are shown and what their
replies map back to. No I/O and no model calls here; ``_hymem.HyMemAnswerer`` runs the loop.

* L1 units are memories (search hits), L2 units are the raw turns they cite (``source_turn_ids``).
* Every id that leaves this module is looked up from the numbered lines a model was shown, so a
  reply can never make the answer cite a memory or a turn it did not see.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import TypeVar

from .._prompts.answer_v2 import CitedAnswer, ContextLine, is_abstention
from .._text._render import ShownLine
from .._text._words import content_tokens
from .._types import SearchHit, Turn

T = TypeVar("T")


def _when(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


def hit_lines(hits: Sequence[SearchHit]) -> list[ContextLine]:
    """One context line per memory, in the order given."""
    return [ContextLine(when=_when(h.time_stamp), speaker=h.speaker_name, text=h.memory) for h in hits]


def turn_lines(turns: Sequence[Turn]) -> list[ContextLine]:
    return [ContextLine(when=_when(t.time_stamp), speaker=t.speaker, text=t.content) for t in turns]


def cited(items: Sequence[str], answer: CitedAnswer) -> list[str]:
    """The ids behind the 1-based line numbers an answer cites (numbers were bounded by the parser)."""
    return at_lines(items, answer.lines)


def match_lines(answer: str, rendered: Sequence[str], *, most: int = 3) -> list[int]:
    """The lines a plain answer rests on, found without a model: the 1-based numbers of the lines
    (as rendered, date and speaker included) that share the most content words with ``answer``
    (ties all count, in line order, at most ``most``); none for an abstention or an answer that
    shares no word with any line."""
    if is_abstention(answer):
        return []
    words = set(content_tokens(answer))
    overlap = [len(words & set(content_tokens(line))) for line in rendered]
    best = max(overlap, default=0)
    if best == 0:
        return []
    return [n for n, o in enumerate(overlap, start=1) if o == best][:most]


def sufficient(answer: CitedAnswer) -> bool:
    """Light module status: complete unless the generator abstained or said nothing."""
    return not is_abstention(answer.text)


def batches(items: Sequence[SearchHit], size: int) -> list[list[SearchHit]]:
    return [list(items[i:i + size]) for i in range(0, len(items), max(1, size))]


def light_lines(shown: Iterable[tuple[str, str, int]]) -> list[ContextLine]:
    """The light generator's lines: the reader's context lines (each once) as (time stamp, text,
    excerpt) triples, dated, each in its excerpt."""
    return [ContextLine(when=_when(stamp), text=text, excerpt=ex) for stamp, text, ex in shown]


def within_budget(hits: Sequence[SearchHit], budget: int | None, cost: Callable[[Sequence[SearchHit]], int]
                  ) -> list[SearchHit]:
    """The leading hits whose context ``cost`` fits ``budget``, taken in rank order up to the first
    that would overflow it; the first hit always (an answer needs something to read). None: all."""
    if budget is None:
        return list(hits)
    n = 1
    while n < len(hits) and cost(hits[:n + 1]) <= budget:
        n += 1
    return list(hits[:n])


def owners(shown: Sequence[ShownLine]) -> tuple[list[str], list[str]]:
    """The memories and turns behind ``shown`` lines, each once, in line order."""
    mids = dict.fromkeys(m for s in shown for m in s.memory_ids)
    tids = dict.fromkeys(t for s in shown for t in s.turn_ids)
    return list(mids), list(tids)


def at_lines(items: Sequence[T], numbers: Sequence[int]) -> list[T]:
    """The items shown as lines 1..len(items) that ``numbers`` name (other numbers are ignored): a
    reply can only ever point at what it was shown."""
    return [items[n - 1] for n in numbers if 1 <= n <= len(items)]


def backtrack(memories: Sequence[SearchHit], limit: int) -> list[str]:
    """L1 → L2: the turn ids of the picked memories, best-ranked memory first, without repeats,
    at most ``limit`` (the caller shows them oldest first)."""
    out: list[str] = []
    for hit in memories:
        for tid in hit.source_turn_ids:
            if tid not in out and len(out) < limit:
                out.append(tid)
    return out


def chronological(turns: Sequence[Turn]) -> list[Turn]:
    return sorted(turns, key=lambda t: (t.float_time_stamp, t.seq))


def memories_of(turn_ids: Sequence[str], memories: Sequence[SearchHit]) -> list[str]:
    """Memories (of those shown to the retriever) whose sources include one of ``turn_ids``."""
    wanted = set(turn_ids)
    return [m.id for m in memories if wanted.intersection(m.source_turn_ids)]


def note(question: str, answer: str) -> str:
    """One entry of the memory pool: an intermediate answer with the question it answers."""
    return f"{question} → {answer}"


def choose(kinds: Sequence[str], answers: Sequence[CitedAnswer]) -> int:
    """Which round's answer stands (``kinds[i]`` is "light" or "deep"): the last deep answer that is
    not an abstention, else a light one that is not, else the last deep reply with text ("not
    mentioned" is an answer too), else the light one; -1 when there is no round at all."""
    order = [i for i, k in enumerate(kinds) if k == "deep"][::-1] + [i for i, k in enumerate(kinds) if k == "light"]
    for i in order:
        if sufficient(answers[i]):
            return i
    for i in order:
        if answers[i].text:
            return i
    return order[-1] if order else -1
