"""The read path: retrieval planning, two-stage retrieval (2K → K) and answering."""

from ._answer import Answer
from ._factory import make_planner, make_selector
from ._pipeline import ReadPipeline, ReadResult, context_tokens, describe_plan, render_context, to_hit
from ._plan import (
    HypotheticalQuery,
    LLMPlanner,
    Planner,
    PlanOutput,
    QueryPlan,
    RulePlanner,
    estimate_complexity,
    k_for,
    match_speakers,
)
from ._retrieve import Candidate, coarse_retrieve, per_view_budget
from ._select import LLMSelector, RuleSelector, Selector, SelectOutput
from ._temporal import TimeWindow, parse_time_window

__all__ = [
    "Answer",
    "Candidate",
    "HypotheticalQuery",
    "LLMPlanner",
    "LLMSelector",
    "PlanOutput",
    "Planner",
    "QueryPlan",
    "ReadPipeline",
    "ReadResult",
    "RulePlanner",
    "RuleSelector",
    "SelectOutput",
    "Selector",
    "TimeWindow",
    "coarse_retrieve",
    "context_tokens",
    "describe_plan",
    "estimate_complexity",
    "k_for",
    "make_planner",
    "make_selector",
    "match_speakers",
    "parse_time_window",
    "per_view_budget",
    "render_context",
    "to_hit",
]
