"""Which memories a newer statement replaces, found without a model (pure, no I/O).

``find_supersessions(new, pool)`` reads the claims (``_text._facts``) of each new entry's own line
and of the user's other current memories, and pairs a newer claim of change with the older claims
it replaces: same holder, same attribute kind, a different value (or the same one negated). The
result is pure data; the sleep runner turns each pair into a rewrite of the older memory with
``invalid_at`` (the newer statement's time) and ``superseded_by`` (its id). Nothing is deleted.

A chain keeps both links: entries are visited oldest first, and an entry already superseded (earlier
in this pass, or stored so) is not superseded again, so A → B → C leaves A pointing at B and B at C.
Only the LLM-free memories of turns take part (``memory_class == "fact"`` in the user's own tier):
event summaries and shared knowledge hold several statements each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .._text._facts import Claim, any_supersedes, line_of, mentions_kind, record_claims
from .._types import MemoryRecord
from ._queue import age_key


@dataclass(frozen=True)
class Supersession:
    """``target_id`` stopped holding at ``invalid_at``, replaced by ``successor_id``."""

    target_id: str
    successor_id: str
    invalid_at: str


def claims_of(record: MemoryRecord) -> list[Claim]:
    """The claims of a memory's own line, said by its speaker (none for other kinds of memory)."""
    return record_claims(record.memory, record.speaker_name, memory_class=record.memory_class, tier=record.tier)


def find_supersessions(new: Sequence[MemoryRecord], pool: Sequence[MemoryRecord]) -> list[Supersession]:
    """The older memories (in ``pool`` or ``new``) that the entries of ``new`` replace."""
    fresh = {r.id: c for r in new if (c := claims_of(r))}
    changed_kinds = {k for cl in fresh.values() for c in cl if c.change for k in c.kinds}
    if not changed_kinds:  # no new entry says that anything changed
        return []
    records = {r.id: r for r in [*pool, *new]}
    claims = dict(fresh)
    for r in pool:  # the older side: only memories whose own line names a kind that changed
        if r.id not in claims and mentions_kind(line_of(r.memory), changed_kinds) and (c := claims_of(r)):
            claims[r.id] = c
    ordered = sorted((records[rid] for rid in claims), key=age_key)
    superseded = {rid for rid in claims if not records[rid].is_current}
    out: list[Supersession] = []
    for i, newer in enumerate(ordered):
        if newer.id not in fresh or not any(c.change for c in claims[newer.id]):
            continue
        for older in ordered[:i]:
            if older.id not in superseded and any_supersedes(claims[newer.id], claims[older.id]):
                superseded.add(older.id)
                out.append(Supersession(older.id, newer.id, newer.time_stamp))
    return out


def superseded_record(target: MemoryRecord, change: Supersession, *, now: float) -> MemoryRecord:
    """``target`` marked as replaced: same text and evidence, a new version with its validity closed."""
    if change.target_id != target.id:
        raise ValueError(f"supersession of {change.target_id} applied to {target.id}")
    return target.model_copy(update={"invalid_at": change.invalid_at, "superseded_by": change.successor_id,
                                     "updated_at": now, "version": target.version + 1})
