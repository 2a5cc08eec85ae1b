"""Sleep time: update queues and update / delete / ignore decisions, decided offline in parallel."""

from ._queue import UpdateQueues, age_key, build_update_queues
from ._update import (
    LLMUpdater,
    RuleUpdater,
    UpdateAnswer,
    UpdateDecision,
    Updater,
    apply_decision,
    plan_sleep,
    resolve_decisions,
)

__all__ = [
    "LLMUpdater",
    "RuleUpdater",
    "UpdateAnswer",
    "UpdateDecision",
    "UpdateQueues",
    "Updater",
    "age_key",
    "apply_decision",
    "build_update_queues",
    "plan_sleep",
    "resolve_decisions",
]
