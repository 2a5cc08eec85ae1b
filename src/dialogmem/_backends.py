"""One way to choose a backend, and one way to fall back from the LLM one.

Every role that has an LLM backend and an LLM-free one (extractor, planner, selector, updater,
answerer, and the roles to come) is set with the same three words:

* ``"rules"``: the LLM-free backend, always;
* ``"llm"``: the LLM backend; without a configured model this is a ``ConfigError`` at once;
* ``"auto"``: the LLM backend when a model is configured, the rules otherwise.

An LLM backend that cannot use the model's answer for one piece of work (the call failed, the
output was unusable, or it named targets it was not given) hands that piece to its LLM-free
backend through :func:`with_fallback`, which logs it and counts it under the stage in ``stats()``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal, TypeVar

from ._errors import ConfigError, LLMError
from ._models._llm_base import LLMClient

log = logging.getLogger(__name__)

Mode = Literal["auto", "llm", "rules"]
T = TypeVar("T")


def use_llm(setting: str, mode: str, llm: LLMClient) -> bool:
    """Whether the role named by ``setting`` (e.g. ``"write.extractor"``) runs its LLM backend."""
    if mode == "rules":
        return False
    if mode == "llm":
        if not llm.available:
            raise ConfigError(f"{setting} = 'llm' needs an LLM: set llm.backend (DIALOGMEM_LLM__BACKEND=openai|"
                              "llama_cpp) with llm.model/llm.base_url or llm.model_path, or set "
                              f"{setting} = 'auto' or 'rules'")
        return True
    if mode == "auto":
        return bool(llm.available)
    raise ConfigError(f"{setting} = {mode!r}: expected 'auto', 'llm' or 'rules'")


def with_fallback(llm: LLMClient, stage: str, attempt: Callable[[], T], fallback: Callable[[], T],
                  *, what: str = "") -> T:
    """``attempt()``; on an ``LLMError`` (raised by the client or by the stage's own validation of the
    answer), ``fallback()`` instead, counted as a fallback of ``stage``."""
    try:
        return attempt()
    except LLMError as exc:
        log.warning("stage %s%s: %s; using the LLM-free backend", stage, f" ({what})" if what else "", exc)
        record_fallback(llm, stage)
        return fallback()


def record_fallback(llm: LLMClient, stage: str) -> None:
    llm.usage.record("llm", stage, calls=0, fallbacks=1)
