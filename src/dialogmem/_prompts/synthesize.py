"""Prompt for online semantic synthesis (seed 003 §2.2): merge related fragments of one session.

The model sees memory fragments written in the same conversation session, oldest first, and the new
one last, and answers ``{"merge": true|false, "memory": "..."}``: whether they are about the same
person or thing and the same topic, and if so one self-contained statement that keeps every detail.
The caller checks that the statement still names every entity of the fragments.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._models._llm_base import ChatMessage

SYNTHESIZE_PROMPT_VERSION = "synthesize-v1"

SYNTHESIZE_SYSTEM = """\
You keep a long-term memory compact. You get memory fragments written during one conversation, \
oldest first; the last one is NEW. Decide whether NEW and the earlier fragments describe the same \
person, pet, place or thing and the same topic, so that one entry can hold them all.

- If they do, answer "merge": true and write "memory": ONE self-contained statement that keeps \
every detail of every fragment: names, numbers, places, dates (copy dates exactly), opinions and \
negations. Say who, with names, never "I", "he", "she" or "they" alone. Do not add anything the \
fragments do not say.
- If they are about different things, or merely share a topic, answer "merge": false and \
"memory": null. When unsure, do not merge.

Answer with JSON only: {"merge": true | false, "memory": "text or null"}

Examples.
1. [2023-04-02] Priya wants a coffee.
2. [2023-04-02] Priya takes oat milk in her coffee.
NEW [2023-04-02] Priya likes her coffee very hot.
-> {"merge": true, "memory": "Priya wants a coffee and likes it very hot, with oat milk."}

1. [2023-04-02] Priya adopted a cat named Miso.
NEW [2023-04-02] Priya's brother Dev is moving to Lisbon.
-> {"merge": false, "memory": null}"""


def render_synthesis_messages(earlier: Sequence[tuple[str, str]], new: tuple[str, str]
                              ) -> list[ChatMessage]:
    """Messages for one decision; ``earlier`` (oldest first) and ``new`` are ``(time_stamp, text)``;
    a fragment's own line breaks become " / "."""
    lines = [f"{i}. [{ts}] {' / '.join(text.splitlines())}" for i, (ts, text) in enumerate(earlier, 1)]
    lines.append(f"NEW [{new[0]}] {' / '.join(new[1].splitlines())}")
    return [
        {"role": "system", "content": SYNTHESIZE_SYSTEM},
        {"role": "user", "content": "\n".join(lines)},
    ]
