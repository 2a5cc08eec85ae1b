"""Online semantic synthesis with an LLM (prompt ``synthesize-v1``), rule fallback per decision.

The candidates are chosen as for the rule (same user and session unless ``cross_session``, cosine ≥
``min_cosine``, at most ``max_group - 1``, best first) but without the lexical test: the model judges
whether the fragments are about the same thing, and writes the merged statement. An answer is used
only when the statement still names every entity of the fragments (case-insensitive); otherwise, and
on an ``LLMError``, the rule decides and the call is counted as a fallback of stage ``synthesize``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pydantic import BaseModel, field_validator

from .._errors import LLMError
from .._models._llm_base import LLMClient
from .._prompts.synthesize import render_synthesis_messages
from .._text._measures import cosine
from ._synthesize import (
    Fragment,
    RuleConfig,
    Synthesis,
    decision_for,
    in_scope,
    rule_decider,
)

logger = logging.getLogger(__name__)

STAGE = "synthesize"


class SynthesisAnswer(BaseModel):
    """The JSON the synthesis prompt asks for."""

    merge: bool
    memory: str | None = None

    @field_validator("memory", mode="before")
    @classmethod
    def _text(cls, v: object) -> object:
        return " ".join(v.split()) if isinstance(v, str) else v


class LLMSynthesizer:
    """``decide(new, candidates)`` by the model; the rule (``RuleConfig``) when it cannot be used."""

    def __init__(self, llm: LLMClient, config: RuleConfig | None = None, *,
                 max_tokens: int | None = None) -> None:
        self._llm = llm
        self.config = config if config is not None else RuleConfig()
        self._rule = rule_decider(self.config)
        self._max_tokens = max_tokens

    def decide(self, new: Fragment, candidates: Sequence[Fragment]) -> Synthesis | None:
        scored = [(c, cosine(new.vector, c.vector)) for c in candidates
                  if c.id != new.id and in_scope(new, c, cross_session=self.config.cross_session)]
        group = sorted([(c, s) for c, s in scored if s >= self.config.min_cosine],
                       key=lambda cs: (-cs[1], cs[0].id))[:max(0, self.config.max_group - 1)]
        if not group:
            return None  # nothing close enough in scope: no call
        earlier = sorted((c for c, _ in group), key=lambda f: (f.time, f.id))
        messages = render_synthesis_messages([(f.time_stamp, f.text) for f in earlier],
                                             (new.time_stamp, new.text))
        try:
            answer = self._llm.complete_json(messages, SynthesisAnswer, stage=STAGE,
                                             max_tokens=self._max_tokens)
        except LLMError as exc:
            return self._fall_back(new, candidates, f"LLM failed: {exc}")
        if not answer.merge:
            return None
        text = answer.memory or ""
        missing = [e for e in dict.fromkeys(e for f in (*earlier, new) for e in f.entities)
                   if e.lower() not in text.lower()]
        if not text or text.lower() in {"null", "none"} or missing:
            return self._fall_back(new, candidates, f"merged text drops {missing or 'everything'}")
        return decision_for(new, earlier, text, "llm", {c.id: s for c, s in group}, method="llm")

    def _fall_back(self, new: Fragment, candidates: Sequence[Fragment], why: str) -> Synthesis | None:
        logger.warning("synthesis of %s: %s; using the rule", new.id, why)
        self._llm.usage.record("llm", STAGE, calls=0, fallbacks=1)
        return self._rule(new, candidates)
