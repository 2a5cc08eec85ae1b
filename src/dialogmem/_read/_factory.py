"""Pick the planner and selector backends a config names."""

from __future__ import annotations

from typing import Literal

from .._errors import ConfigError
from .._models._llm_base import LLMClient
from ._plan import LLMPlanner, Planner, RulePlanner
from ._select import LLMSelector, RuleSelector, Selector

Mode = Literal["auto", "llm", "rules"]


def _use_llm(mode: str, llm: LLMClient, role: str) -> bool:
    if mode == "rules":
        return False
    if mode == "auto":
        return bool(getattr(llm, "available", False))
    if mode == "llm":
        # An explicit "llm" without a model still works (every call falls back to the rules),
        # but the fallbacks show up in the usage stats under this stage.
        return True
    raise ConfigError(f"unknown read.{role} {mode!r}; expected 'auto', 'llm' or 'rules'")


def make_planner(mode: Mode | str, llm: LLMClient) -> Planner:
    """``rules``: ``RulePlanner``; ``llm``: ``LLMPlanner``; ``auto``: LLM when one is configured."""
    rules = RulePlanner()
    return LLMPlanner(llm, rules) if _use_llm(mode, llm, "planner") else rules


def make_selector(mode: Mode | str, llm: LLMClient) -> Selector:
    """``rules``: ``RuleSelector``; ``llm``: ``LLMSelector``; ``auto``: LLM when one is configured."""
    rules = RuleSelector()
    return LLMSelector(llm, rules) if _use_llm(mode, llm, "selector") else rules
