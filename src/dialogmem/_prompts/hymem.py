"""Prompts of HyMem's deep module (seed 004 §3.3-3.4): the LLM retriever and the reflection check.

Both are plain text for small models: the retriever replies with line numbers in square brackets
(read with ``answer_v2.parse_line_numbers``, which keeps only numbers of lines it was shown); the
reflection replies ``DONE`` or ``ASK: <one follow-up question>`` (read with ``parse_reflection``).
The generator of both modules is ``answer_v2``'s cited short-answer prompt.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import BaseModel

from .answer_v2 import ContextLine, render_lines

VERSION = "hymem-v1"

RETRIEVE_SYSTEM = """You help find the notes that answer a question about a conversation. You get
numbered notes and the question. Reply only with the numbers of the notes that help to answer it,
in square brackets, most useful first, for example [3] or [2, 7]. Reply [] if no note helps."""

REFLECT_SYSTEM = """You check whether a question about a conversation has been answered. You get
the question and the answers found so far.
- If the answers cover every part of the question, reply exactly: DONE
- Otherwise reply with one short follow-up question about the part that is still missing, written
  as: ASK: <question>"""

_DONE = re.compile(r"^\W*done\b", re.I)
_ASK = re.compile(r"\bask\s*:\s*(.+)", re.I)
_MAX_SUBQUESTION_CHARS = 300


class Reflection(BaseModel):
    """A parsed reflection: done, a follow-up question, or neither (``usable`` False)."""

    done: bool = False
    question: str = ""
    usable: bool = True


def build_retrieve_messages(question: str, lines: Sequence[ContextLine]) -> list[dict[str, str]]:
    user = "Notes:\n" + "\n".join(render_lines(lines)) + f"\n\nQuestion: {question}\nHelpful notes:"
    return [{"role": "system", "content": RETRIEVE_SYSTEM}, {"role": "user", "content": user}]


def build_reflect_messages(question: str, found: Sequence[str]) -> list[dict[str, str]]:
    body = "\n".join(f"- {f}" for f in found) if found else "- (nothing yet)"
    user = f"Question: {question}\nAnswers found so far:\n{body}\nReply:"
    return [{"role": "system", "content": REFLECT_SYSTEM}, {"role": "user", "content": user}]


def parse_reflection(raw: str) -> Reflection:
    """``DONE`` → done; ``ASK: q`` → the follow-up ``q``; anything else is not usable. Never raises."""
    text = raw.strip()
    if _DONE.match(text):
        return Reflection(done=True)
    ask = _ASK.search(text)
    if ask:
        follow = ask[1].strip().splitlines()[0].strip().strip("\"'`*").strip()[:_MAX_SUBQUESTION_CHARS]
        if follow:
            return Reflection(question=follow)
    return Reflection(usable=False)
