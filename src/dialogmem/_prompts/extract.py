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


# ---------------------------------------------------------------- window variant (seed 003 §2.1)
# A sliding window shows the turns just before its new lines as read-only context, so that "she",
# "that place" or "the week after" in a new line can be resolved; those context lines were written
# by an earlier window and must not be written again. Same output shape as above.

EXTRACT_WINDOW_PROMPT_VERSION = "extract-window-v1"

EXTRACT_WINDOW_SYSTEM = """\
You turn a window of a conversation into memory facts for a long-term memory.

The window has two parts. Each line is:
[timestamp, weekday] source_id.Speaker: message

--- Context --- lines were already turned into memories. Read them only to understand the new \
lines: who "he", "she", "they" or "you" are, what "there" or "that place" is, which day "that day" \
was. Never write a fact that comes only from a context line, and never use a context source_id.
--- New --- lines are the ones to write facts for.

What to do:
1. For every new line that says something informative, write one or more facts; a line with only \
greetings, thanks, agreement or small talk gives no fact.
2. Be exhaustive: keep small details as well as big ones (preferences, plans, events, opinions, \
possessions, relationships, numbers, places, names of things).
3. Every fact must stand on its own: replace pronouns and vague references with the names, places \
and things they point to, using the context when needed. Never leave "I", "you", "he", "she", \
"they", "it" or "there" without saying who or what.
4. Keep specifics: full names, titles, quantities, places, dates.
5. Dates: relative times ("yesterday", "next month", "the week after") become absolute dates \
computed from the timestamp of the line that says them; when a message already shows a date in \
brackets, use it.
6. source_id is the number of the new line the fact comes from; a list of numbers when a fact \
combines several new lines. Only numbers of new lines are allowed.
7. Do not invent anything that the lines do not say.

Answer with JSON only, in this shape:
{"data": [{"source_id": 2, "fact": "..."}]}

Example.
Input:
Participants: Dana, Leo
--- Context ---
[2023-03-20T13:20:00, Mon] 0.Leo: How is your sister Maya doing?
[2023-03-20T13:20:30, Mon] 1.Dana: Great, she just moved to Lisbon.
--- New ---
[2023-03-20T13:21:00, Mon] 2.Leo: Does she like it there?
[2023-03-20T13:21:30, Mon] 3.Dana: She loves it. She starts a job at a bakery there next week \
(the week of 2023-03-27).
Output:
{"data": [
 {"source_id": 3, "fact": "Dana's sister Maya loves living in Lisbon."},
 {"source_id": 3, "fact": "Dana's sister Maya starts a job at a bakery in Lisbon in the week of \
2023-03-27."}
]}"""


def render_window_extraction_messages(context_lines: Sequence[str], new_lines: Sequence[str], *,
                                      participants: Sequence[str] = ()) -> list[ChatMessage]:
    """Chat messages for one window: ``context_lines`` (read only) then ``new_lines``, numbered
    continuously by the caller (context ``0..c-1``, new lines from ``c``)."""
    parts: list[str] = []
    if participants:
        parts.append("Participants: " + ", ".join(participants))
    parts.append("--- Context ---")
    parts.extend(context_lines or ["(none)"])
    parts.append("--- New ---")
    parts.extend(new_lines)
    return [
        {"role": "system", "content": EXTRACT_WINDOW_SYSTEM},
        {"role": "user", "content": "\n".join(parts)},
    ]
