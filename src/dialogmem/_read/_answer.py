"""What ``Memory.answer`` returns (``Answer``). (Version 1 of the answer prompt and its JSON reply live
on in ``benchmarks/_answer_prompt_v1.py``, the measured variant P0 of ``bench_answer_prompts.py``.)

``Memory.answer`` runs ``_hymem.HyMemAnswerer`` (plain cited short answers, light → deep). There is no
LLM-free answerer: without a model ``answer`` raises ``LLMUnavailableError`` naming the setting to
change, and callers that want the memories themselves use ``search``.
"""

from __future__ import annotations

from ..types import Answer

__all__ = ["Answer"]

