"""Prompt of the retrieval planner (seed 000 §3.3 controller, seed 003 §2.3 intent-aware planning).

The planner never answers the question. It turns it into a search request: a few hypothetical
queries phrased like stored memories (each routed to episodic MTM or distilled LTM), exact search
words, an absolute time window worked out from the reference date, the people and things named,
and how hard the question is (which sets how many memories to return).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

VERSION = "plan-v1"

SYSTEM = """You plan memory searches for an assistant. You do NOT answer questions.

You get a question, the date and time it is being asked, and sometimes the last few lines of the
conversation. Produce a search plan as one JSON object with these fields:

- "queries": 1 to 4 short statements written the way a stored memory would read, e.g. for
  "Where did Anna go on holiday?" write "Anna went on holiday to a place". Each has a "route":
  "mtm" for personal episodes (what someone did, said, felt, planned, at a given time) or
  "ltm" for stable general knowledge and long-standing preferences or habits.
  Split a question that asks about several things into one query per thing.
- "keywords": exact words worth matching literally: names, places, objects, titles, rare words.
  No question words, no filler.
- "time_from", "time_to": only when the question limits the time. Give absolute ISO dates
  (YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS), computed from the reference date: "last week" asked on
  2023-05-17 (a Wednesday) is 2023-05-08 to 2023-05-14. Otherwise null.
- "speakers": people from the known-speaker list whose own words the question asks about.
- "entities": people, places, organisations and things the question is about.
- "complexity": "simple" for one fact, "moderate" for a few related facts, "complex" when the
  answer needs many memories, counting, comparing times, or combining events.

Reply with the JSON object only."""

_EXAMPLE_Q = "What did Tom say about his new job last month?"
_EXAMPLE_A = (
    '{"queries": [{"text": "Tom talked about his new job", "route": "mtm"}, '
    '{"text": "Tom started working at a new company", "route": "mtm"}], '
    '"keywords": ["Tom", "job"], "time_from": "2024-02-01", "time_to": "2024-02-29", '
    '"speakers": ["Tom"], "entities": ["Tom"], "complexity": "simple"}'
)


def build_messages(query: str, *, reference_time: datetime, recent_context: Sequence[str] = (),
                   known_speakers: Sequence[str] = ()) -> list[dict[str, str]]:
    """Chat messages for one planning call (a worked example, then the real question)."""
    context = "\n".join(f"- {line}" for line in recent_context[-6:]) or "(none)"
    speakers = ", ".join(known_speakers) or "(unknown)"
    example_user = (
        "Reference date: 2024-03-12 (Tuesday) 10:00\nKnown speakers: Tom, Lisa\n"
        f"Recent conversation:\n(none)\nQuestion: {_EXAMPLE_Q}"
    )
    user = (
        f"Reference date: {reference_time:%Y-%m-%d (%A) %H:%M}\nKnown speakers: {speakers}\n"
        f"Recent conversation:\n{context}\nQuestion: {query}"
    )
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": example_user},
        {"role": "assistant", "content": _EXAMPLE_A},
        {"role": "user", "content": user},
    ]
