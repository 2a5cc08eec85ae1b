"""Prompt of HyMem's event units (seed 004 §3.1: a topic segment summarised into one Level-1 unit
that says who, what, when and where; our words).

The model sees one unit: the turns of a topic segment, preceded by the last turns of the segment
before it (the overlap between neighbouring units), each line ``[date, weekday] Speaker: text``
with relative dates already resolved. It answers ``{"summary": "..."}``: two or three sentences
that name the people, say what happened or was said, and give the date and place; ``""`` when
the lines hold nothing worth remembering.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._models._llm_base import ChatMessage

VERSION = "events-v1"

SYSTEM = """\
You write the event summaries of a long-term memory of conversations.

Input: the lines of one part of a conversation, each "[date, weekday] Speaker: text".

Task: summarise what this part is about as one short event description.
- Who: name the people (the speakers and anyone they mention), never "I", "you", "he" or "she".
- What: the facts, events, plans, opinions and things that come up, with their specifics \
(names, numbers, titles, places).
- When: the date of the event if the lines give one, else the date of the lines; copy dates \
as they are written, never invent one.
- Where: the place, if the lines say it.

Rules: two or three sentences, at most 80 words. Only what the lines say. If the lines hold \
only greetings, thanks or small talk, the summary is "".

Answer with JSON only: {"summary": "..."}

Example.
Input:
[2023-05-07, Sun] Dana: We finally went to the lake house this weekend!
[2023-05-07, Sun] Leo: How was it?
[2023-05-07, Sun] Dana: Lovely. Max caught his first trout on 2023-05-06.
Output:
{"summary": "Dana told Leo on 2023-05-07 that she went to the lake house that weekend, where Max \
caught his first trout on 2023-05-06."}"""


def render_event_messages(lines: Sequence[str]) -> list[ChatMessage]:
    """Messages for one event unit; ``lines`` are ``[date, weekday] Speaker: text``."""
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Input:\n" + "\n".join(lines)},
    ]
