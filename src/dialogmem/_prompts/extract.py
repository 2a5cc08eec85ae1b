"""Prompt for fact extraction from a batch of topic segments (seed 002's format, our wording).

Input lines look like ``[2023-05-08T13:56:00, Mon] 3.Alice: text``: ``3`` is a batch-local source id
that the caller maps back to a turn id, so any speaker order works. The answer is
``{"data": [{"source_id": 3, "fact": "..."}]}``; a fact drawn from several lines may give a list
of ids.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._models._llm_base import ChatMessage

EXTRACT_PROMPT_VERSION = "extract-v1"

EXTRACT_SYSTEM = """\
You turn conversation transcripts into memory facts for a long-term memory.

The transcript is split into topics. Each line is:
[timestamp, weekday] source_id.Speaker: message

What to do:
1. Read the lines in order of source_id. For every line that says something informative, write \
one or more facts; a line with only greetings, thanks, agreement or small talk gives no fact.
2. Be exhaustive: keep small details as well as big ones (preferences, plans, events, opinions, \
possessions, relationships, numbers, places, names of things).
3. Every fact must make sense on its own: say who, using the speaker's name or the person's name, \
never "I", "you", "he", "she", "they" or "it" without the name.
4. Keep specifics: full names, titles, quantities, places, dates.
5. Dates: relative times ("yesterday", "next month", "last Saturday") must become absolute dates \
computed from that line's timestamp; when the message already shows a date in brackets, use it.
6. source_id is the number before the speaker name on the line the fact comes from. Use a list \
of numbers when a fact combines several lines.
7. Do not invent anything that the lines do not say.

Answer with JSON only, in this shape:
{"data": [{"source_id": 0, "fact": "..."}]}

Example.
Input:
--- Topic 1 ---
[2023-03-20T13:21:00, Mon] 0.Dana: Hi! I just started a new job as a nurse at Mercy Hospital.
[2023-03-20T13:21:30, Mon] 1.Leo: Congrats! Is it far from home?
[2023-03-20T13:22:00, Mon] 2.Dana: Forty minutes by bus. I moved there last week (the week of \
2023-03-13).
Output:
{"data": [
 {"source_id": 0, "fact": "Dana started a new job as a nurse at Mercy Hospital around 2023-03-20."},
 {"source_id": 2, "fact": "Dana's commute to Mercy Hospital takes forty minutes by bus."},
 {"source_id": 2, "fact": "Dana moved near Mercy Hospital in the week of 2023-03-13."}
]}"""


def render_extraction_messages(blocks: Sequence[tuple[int, Sequence[str]]]) -> list[ChatMessage]:
    """Chat messages for one extraction call; ``blocks`` are ``(topic_number, lines)`` pairs."""
    parts: list[str] = []
    for topic, lines in blocks:
        parts.append(f"--- Topic {topic} ---")
        parts.extend(lines)
    return [
        {"role": "system", "content": EXTRACT_SYSTEM},
        {"role": "user", "content": "\n".join(parts)},
    ]
