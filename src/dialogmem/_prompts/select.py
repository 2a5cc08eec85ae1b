"""Prompt of the stage-2 selector (seed 000 §3.4 SLM-2, seed 004's self-retrieval step).

The selector sees the question and a numbered list of candidate memories and names the numbers
worth keeping. It never rewrites, merges or answers: the memories go on unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

VERSION = "select-v1"

SYSTEM = """You filter search results for a memory system. You do NOT answer the question.

You get a question and numbered memories, each with the date it was recorded and who said it.
Return the numbers of the memories that help answer the question: memories that state the fact
asked about, give the time of the event, or supply a step needed to connect two facts.
Leave out memories that only share a word with the question. Keep at most {k} numbers, the most
useful first. Use only numbers from the list.

Reply with one JSON object: {{"ids": [numbers]}}"""


def format_candidate(i: int, time_stamp: str, speaker: str, memory: str) -> str:
    who = f"{speaker}: " if speaker else ""
    return f"[{i}] {time_stamp} {who}{memory}"


def build_messages(query: str, lines: Sequence[str], *, k: int,
                   hypothetical_queries: Sequence[str] = ()) -> list[dict[str, str]]:
    """Chat messages for one selection call; ``lines`` come from ``format_candidate``."""
    hints = [q for q in hypothetical_queries if q.strip() and q.strip() != query.strip()]
    hint_block = ("Related phrasings:\n" + "\n".join(f"- {q}" for q in hints) + "\n") if hints else ""
    user = f"Question: {query}\n{hint_block}Memories:\n" + "\n".join(lines)
    return [
        {"role": "system", "content": SYSTEM.format(k=k)},
        {"role": "user", "content": user},
    ]
