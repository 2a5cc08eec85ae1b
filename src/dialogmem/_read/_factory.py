"""Pick the planner and selector backends a config names (``_backends.use_llm`` decides)."""

from __future__ import annotations

from .._backends import use_llm
from .._models._llm_base import LLMClient
from ._plan import LLMPlanner, Planner, RulePlanner
from ._select import LLMSelector, RuleSelector, Selector


def make_planner(mode: str, llm: LLMClient) -> Planner:
    """``rules``: ``RulePlanner``; ``llm``: ``LLMPlanner``; ``auto``: LLM when one is configured."""
    rules = RulePlanner()
    return LLMPlanner(llm, rules) if use_llm("read.planner", mode, llm) else rules


def make_selector(mode: str, llm: LLMClient) -> Selector:
    """``rules``: ``RuleSelector``; ``llm``: ``LLMSelector``; ``auto``: LLM when one is configured."""
    rules = RuleSelector()
    return LLMSelector(llm, rules) if use_llm("read.selector", mode, llm) else rules
