"""Prompt of the per-turn MTM writer (seed 000 §9.4, SLM-3: role, input, task, guidelines,
constraints, output format; our words).

The model sees the recent context and the current interaction (a user turn and the assistant's
reply, or any short run of turns), each line ``[time] Speaker: text``, and answers
``{"memory": "..."}``: one concise, self-contained summary of what is worth remembering about the
user, or ``""`` when the interaction holds nothing reusable.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._models._llm_base import ChatMessage

VERSION = "turnwrite-v1"

SYSTEM = """\
Role: you write the mid-term memory of a conversational assistant, one entry per interaction.

Input: a few lines of recent context, then the current interaction. Each line is \
"[time] Speaker: text".

Task: write one short memory entry with the information from the current interaction that may \
be useful in later conversations with this user: facts about the user and the people and things \
in their life, preferences, plans, decisions, events with their dates, answers the user relied \
on. Use the context only to understand the interaction (who "he" is, what "it" refers to).

Guidelines:
- One to three sentences, self-contained: name the speaker instead of "I" or "you", keep names, \
numbers, places and dates; write relative dates ("yesterday") as the absolute date they mean.
- Summarise, do not copy the dialogue.
- If the interaction holds nothing worth remembering (greetings, thanks, small talk), the memory \
is the empty string.

Constraints: do not answer the user, do not search or mention other memories, do not add facts \
the lines do not state, do not merge what other users said.

Output: JSON only, {"memory": "..."}

Example.
Context:
[2023-05-07 10:02] Dana: We finally picked a name for the puppy.
Interaction:
[2023-05-07 10:03] Dana: It's Biscuit! He's a beagle, we got him last Saturday.
[2023-05-07 10:03] assistant: Biscuit is a great name for a beagle!
Output:
{"memory": "Dana's new puppy is a beagle named Biscuit; Dana got him on 2023-05-06."}"""


def render_turnwrite_messages(context: Sequence[str], interaction: Sequence[str]) -> list[ChatMessage]:
    """Messages for one interaction; lines are ``[time] Speaker: text``."""
    parts = ["Context:", *(context or ["(none)"]), "Interaction:", *interaction]
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "\n".join(parts)},
    ]
