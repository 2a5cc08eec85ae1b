"""Sliding windows over buffered turns (seed 003 §2.1), with each turn extracted exactly once.

SimpleMem cuts the dialogue into overlapping windows of ``W`` turns that advance by a stride. Here
the overlap is *read-only context*, never a second extraction: a window is ``W`` consecutive turns
whose last ``stride`` turns are its **targets** (the only turns it may write facts for) and whose
first ``W - stride`` turns are **context** (already targets of the window before). So

- the targets of successive windows are consecutive, disjoint chunks of ``stride`` turns (the last
  chunk may be shorter): every turn is a target of exactly one window, by construction;
- the context of a window ends where its targets begin, so the windows need no look-ahead and a
  stream can be processed as the turns arrive;
- ``context_before`` (the last turns of the previous batch of the same session) fills the context
  of the first windows, so a pronoun at the start of a batch still sees its antecedent;
- with a ``group`` key (the session), no window spans two groups: context is cut at the boundary
  and a group's first window starts a new chunk.

The module is generic over the turn type and does no I/O. ``map_citation`` is the rule an LLM
extractor applies to the source ids a model gives for one fact of a window (see its docstring).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from .._models._llm_base import ChatMessage
from .._prompts.extract import render_window_extraction_messages
from .._text._words import content_tokens
from ._extract import BufferedTurn, render_line

T = TypeVar("T")


@dataclass(frozen=True)
class Window(Generic[T]):
    """Read-only ``context`` turns, then the ``targets`` this window writes facts for.

    ``start`` is the position of the first target in the ``turns`` given to ``plan_windows``.
    """

    context: tuple[T, ...]
    targets: tuple[T, ...]
    start: int

    @property
    def lines(self) -> tuple[T, ...]:
        """Context then targets, in dialogue order (what a prompt shows)."""
        return (*self.context, *self.targets)


def plan_windows(turns: Sequence[T], *, window: int, stride: int,
                 context_before: Sequence[T] = (),
                 group: Callable[[T], Hashable] | None = None) -> list[Window[T]]:
    """Windows of at most ``window`` turns whose targets are chunks of ``stride`` turns.

    ``1 <= stride <= window``; ``stride == window`` means no overlap inside the batch (only
    ``context_before`` gives context to the first window). Every turn of ``turns`` is a target of
    exactly one window, in order; context turns are always earlier turns of the same group.
    """
    if stride < 1 or window < stride:
        raise ValueError(f"need 1 <= stride <= window (window={window}, stride={stride})")
    keep = window - stride
    windows: list[Window[T]] = []
    offset = 0
    for run in _runs(turns, group):
        before = _same_group_tail(context_before, run[0], group) if offset == 0 else ()
        history = [*before, *run]
        lead = len(before)
        for a in range(0, len(run), stride):
            i = lead + a
            windows.append(Window(context=tuple(history[max(0, i - keep):i]),
                                  targets=tuple(run[a:a + stride]), start=offset + a))
        offset += len(run)
    return windows


def _runs(turns: Sequence[T], group: Callable[[T], Hashable] | None) -> list[list[T]]:
    if group is None:
        return [list(turns)] if turns else []
    return [list(g) for _, g in itertools.groupby(turns, key=group)]


def _same_group_tail(before: Sequence[T], first: T, group: Callable[[T], Hashable] | None
                     ) -> tuple[T, ...]:
    """The trailing turns of ``before`` that share ``first``'s group (all when no group key)."""
    if group is None:
        return tuple(before)
    key = group(first)
    n = 0
    for t in reversed(before):
        if group(t) != key:
            break
        n += 1
    return tuple(before[len(before) - n:])


# ---------------------------------------------------------------- citations of an LLM fact

Outcome = Literal["cited", "context_stripped", "reattributed", "dropped"]


@dataclass(frozen=True)
class Citation:
    """Where one extracted fact is written: ``targets`` are positions in ``Window.targets``
    (empty when the fact is dropped); ``outcome`` says which rule of ``map_citation`` applied."""

    targets: tuple[int, ...]
    outcome: Outcome


def map_citation(ids: Sequence[int], fact: str, *, context_texts: Sequence[str],
                 target_texts: Sequence[str]) -> Citation:
    """Map the line ids a model cited for ``fact`` to target positions; context is never cited.

    Lines are numbered as the window prompt shows them: context lines ``0..c-1``, then target
    lines ``c..c+t-1``. The rules, in order:

    1. ids of target lines are kept; ids of context lines next to them are removed
       (``context_stripped``): the context was there to resolve the target, and its turns were
       written by the window that had them as targets, so citing them again would count them twice;
    2. a fact citing only context lines (or only unknown ids) is **re-attributed** to the target
       line that shares the most content words with it, when that line shares strictly more than
       every context line does (the model slipped on the number; the words show which line it
       read) — otherwise it is **dropped**: it restates a turn that an earlier window extracted
       (or chose to skip), and writing it here would duplicate that turn's memories.
    """
    n_ctx = len(context_texts)
    valid = sorted({i for i in ids if 0 <= i < n_ctx + len(target_texts)})
    on_targets = tuple(i - n_ctx for i in valid if i >= n_ctx)
    if on_targets:
        outcome: Outcome = "cited" if len(on_targets) == len(valid) else "context_stripped"
        return Citation(on_targets, outcome)
    words = set(content_tokens(fact))
    context_best = max((len(words & set(content_tokens(t))) for t in context_texts), default=0)
    best, best_overlap = -1, 0
    for pos, text in enumerate(target_texts):
        overlap = len(words & set(content_tokens(text)))
        if overlap > best_overlap:
            best, best_overlap = pos, overlap
    if best >= 0 and best_overlap > context_best:
        return Citation((best,), "reattributed")
    return Citation((), "dropped")


def render_window(window: Window[BufferedTurn]) -> list[ChatMessage]:
    """The window prompt (``extract-window-v1``): context lines numbered ``0..c-1``, targets from
    ``c``, so ``map_citation`` can tell a cited context line from a target line."""
    n_ctx = len(window.context)
    context = [render_line(i, t) for i, t in enumerate(window.context)]
    new = [render_line(n_ctx + i, t) for i, t in enumerate(window.targets)]
    speakers = list(dict.fromkeys(t.speaker for t in window.lines))
    return render_window_extraction_messages(context, new, participants=speakers)


def map_window_citation(window: Window[BufferedTurn], ids: Sequence[int], fact: str) -> Citation:
    """``map_citation`` for a window rendered by ``render_window``."""
    return map_citation(ids, fact, context_texts=[t.content() for t in window.context],
                        target_texts=[t.content() for t in window.targets])
