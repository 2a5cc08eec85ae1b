"""Prompt for the sleep-time update decision over one target's queue (seed 002's rules, our words).

The model sees one older *target* memory and the newer *candidate* memories most similar to it,
each with its date, and answers ``{"action": "update"|"delete"|"ignore", "new_memory": ...,
"sources": [...]}``. ``sources`` lists the candidate numbers an update draws on or a delete rests
on: required for both, so the updated memory cites only the turns it really draws on, and an answer
that names no valid candidate is never applied.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._models._llm_base import ChatMessage

UPDATE_PROMPT_VERSION = "update-v2"

UPDATE_SYSTEM = """\
You maintain a long-term memory. You get one TARGET memory and a numbered list of CANDIDATE \
memories that were recorded at the same time or later. Decide what should happen to the TARGET.

- "update": a candidate is about the same fact and adds detail or refines it. Write new_memory: \
one self-contained statement that combines the target with that detail, keeping names, numbers \
and dates. List the numbers of the candidates you used in "sources".
- "delete": a candidate states something newer that directly contradicts the target, so the \
target is no longer true. The candidate itself stays in memory. List the contradicting candidates' numbers in "sources".
- "ignore": the candidates are about other things, only related in topic, or add nothing; also \
when they merely repeat the target. Two different facts that can both be true are not a conflict: \
answer "ignore" for them.

"update" and "delete" must list at least one candidate number in "sources". When unsure, \
answer "ignore". Answer with JSON only:
{"action": "update" | "delete" | "ignore", "new_memory": "text or null", "sources": [numbers]}

Examples.
TARGET [2023-01-05]: Sam likes tea.
CANDIDATES:
1. [2023-02-10] Sam drinks green tea every morning.
2. [2023-02-11] Sam is learning to swim.
-> {"action": "update", "new_memory": "Sam likes tea, especially green tea every morning.", \
"sources": [1]}

TARGET [2023-01-05]: Sam works at a bakery in Leeds.
CANDIDATES:
1. [2023-04-02] Sam quit the bakery in March 2023 and now works at a library in York.
-> {"action": "delete", "new_memory": null, "sources": [1]}

TARGET [2023-01-05]: Sam has a dog named Rex.
CANDIDATES:
1. [2023-03-01] Sam adopted a cat named Miso.
-> {"action": "ignore", "new_memory": null, "sources": []}"""


def render_update_messages(target: tuple[str, str], candidates: Sequence[tuple[str, str]]
                           ) -> list[ChatMessage]:
    """Messages for one decision; ``target`` and each candidate are ``(time_stamp, memory)``."""
    lines = [f"TARGET [{target[0]}]: {target[1]}", "CANDIDATES:"]
    lines += [f"{i}. [{ts}] {text}" for i, (ts, text) in enumerate(candidates, start=1)]
    return [
        {"role": "system", "content": UPDATE_SYSTEM},
        {"role": "user", "content": "\n".join(lines)},
    ]
