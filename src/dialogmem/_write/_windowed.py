"""Sliding-window extraction (seed 003 §2.1) and rule coreference across batches, as an ``Extractor``.

``WindowedExtractor`` cuts a batch into the windows of ``_window.plan_windows``: ``W`` turns whose
last ``stride`` turns are the window's targets and whose turns before them are read-only context
(filled, for the first windows, by the turns said just before the batch: the ``previous`` turns the
write path reads from the journal, so a pronoun at the start of a batch sees its antecedent).

- LLM backend: one call per window with the window prompt (``extract-window-v1``); the cited line
  numbers are mapped by ``map_window_citation``, which never writes a fact for a context line, so
  each turn's facts come from the one window that has it as a target. Informative targets that got
  no fact are covered by the rule backend; an ``LLMError`` sends the window to the rule backend and
  counts a fallback of stage ``add_memory``.
- LLM-free backend: the rule memory of each target, carrying the ``W - stride`` turns before it as
  context lines (the rule extractor given here is built with ``context_turns = W - stride``); a
  ``CorefRuleExtractor`` first resolves the targets' pronouns against the window's context and the
  earlier targets.

``resolve_turns`` (rule coreference over a run of turns) is also used without windows.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from .._backends import with_fallback
from .._models._llm_base import LLMClient
from ._coref import RECENT_TURNS, resolve
from ._extract import (
    STAGE,
    Batch,
    BufferedTurn,
    ExtractedFact,
    ExtractionOutput,
    RuleExtractor,
    facts_in_turn_order,
)
from ._window import Window, map_window_citation, plan_windows, render_window

logger = logging.getLogger(__name__)


def resolve_turns(turns: Sequence[BufferedTurn], previous: Sequence[BufferedTurn] = (), *,
                  recent: int = RECENT_TURNS) -> list[BufferedTurn]:
    """``turns`` with their pronouns resolved (``compressed`` annotated, ``text`` kept) against
    the up to ``recent`` turns before each in the same session (``previous`` first)."""
    history = list(previous)
    out: list[BufferedTurn] = []
    for turn in turns:
        context: list[tuple[str, str]] = []
        for prev in reversed(history[-recent:] if recent > 0 else []):
            if prev.session_id != turn.session_id:
                break
            context.insert(0, (prev.speaker, prev.text))
        resolved = resolve(turn.content(), speaker=turn.speaker, context=context, recent=recent)
        out.append(turn.model_copy(update={"compressed": resolved.text}))
        history.append(turn)
    return out


class CorefRuleExtractor(RuleExtractor):
    """The rule extractor with rule coreference: each turn resolved against the turns before it."""

    def __init__(self, *, context_turns: int = 0, recent: int = RECENT_TURNS) -> None:
        super().__init__(context_turns=context_turns)
        self.recent = recent

    def extract(self, batch: Batch, *, previous: Sequence[BufferedTurn] = ()) -> list[ExtractedFact]:
        turns = [t for segment in batch for t in segment]
        return super().extract([resolve_turns(turns, previous, recent=self.recent)], previous=previous)


class WindowedExtractor:
    """Extraction over sliding windows; ``llm=None`` for the LLM-free backend."""

    def __init__(self, rules: RuleExtractor, llm: LLMClient | None = None, *, window: int, stride: int,
                 max_tokens: int | None = None, enrich: bool = False) -> None:
        if stride < 1 or window < stride:
            raise ValueError(f"need 1 <= stride <= window (window={window}, stride={stride})")
        self._rules = rules
        self._llm = llm
        self.window = window
        self.stride = stride
        self._max_tokens = max_tokens
        self._enrich = enrich

    @property
    def context_needed(self) -> int:
        """Turns before a batch its first window reads as context."""
        return max(self.window - self.stride, RECENT_TURNS if isinstance(self._rules, CorefRuleExtractor) else 0)

    def windows(self, batch: Batch, previous: Sequence[BufferedTurn] = ()) -> list[Window[BufferedTurn]]:
        turns = [t for segment in batch for t in segment]
        return plan_windows(turns, window=self.window, stride=self.stride, context_before=previous,
                            group=lambda t: t.session_id)

    def extract(self, batch: Batch, *, previous: Sequence[BufferedTurn] = ()) -> list[ExtractedFact]:
        facts: list[ExtractedFact] = []
        for w in self.windows(batch, previous):
            facts.extend(self._rule_window(w) if self._llm is None else self._llm_window(self._llm, w))
        return facts

    def _rule_window(self, w: Window[BufferedTurn]) -> list[ExtractedFact]:
        return self._rules.extract([list(w.targets)], previous=list(w.context))

    def _llm_window(self, llm: LLMClient, w: Window[BufferedTurn]) -> list[ExtractedFact]:
        def attempt() -> list[ExtractedFact]:
            out = llm.complete_json(render_window(w), ExtractionOutput, stage=STAGE, max_tokens=self._max_tokens)
            return self._map(out, w)

        return with_fallback(llm, STAGE, attempt, lambda: self._rule_window(w),
                             what=f"window of {len(w.targets)} targets")

    def _map(self, out: ExtractionOutput, w: Window[BufferedTurn]) -> list[ExtractedFact]:
        """Facts of the targets only (context never cited); uncovered informative targets by rules."""
        def fill(missing: list[int]) -> list[tuple[int, ExtractedFact]]:
            by_turn = {f.source_turn_ids[-1]: f for f in self._rule_window(w)}
            found = ((i, by_turn.get(w.targets[i].turn_id)) for i in missing)
            return [(i, fact) for i, fact in found if fact is not None]

        return facts_in_turn_order(out, w.targets, lambda item, text: map_window_citation(w, item.ids(), text).targets,
                                   fill, what="window extraction", enrich=self._enrich)
