"""The turn log of the journal: raw turns as they arrived, their status, and each user's speakers.

Raw turns are committed before anything is derived from them, so a turn the caller was told was
accepted survives a crash at any later point; pending turns are the write buffer, processed when
their batch is due (also after a restart). Turns are written inside the journal's one commit
(:func:`insert_turns`); what this part adds is reading them and moving them between statuses.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from .._errors import InputError
from .._types import QuarantinedTurn, Turn, mend_stored
from ._dialect import Dialect
from ._rows import ID_PART, Conn, Row, SQLRows, many, parts, rows_where_in, tx_reader
from ._schema import TurnStatus

TURN_COLUMNS = ("seq, id, user_id, agent_id, session_id, speaker, role, content, time_stamp, float_time_stamp, "
                "weekday, metadata")


class TurnSQL(SQLRows):
    """The turn log's reads and status changes (the ``TurnLog`` role)."""

    def fresh_turns(self, turns: Sequence[Turn]) -> list[Turn]:
        """The turns the journal does not hold yet. A turn whose (user, id) is journaled with the
        same content is a retry and is left out; with other content it is an ``InputError``."""
        if not turns:
            return []
        d, user_id = self.dialect, turns[0].user_id
        known = {r[0]: r[1] for part in parts([t.id for t in turns], ID_PART) for r in self._query(
            f"SELECT id, content FROM turns WHERE user_id={d.mark} AND id IN ({d.marks(part)})", [user_id, *part])}
        for t in turns:
            if t.id in known and known[t.id] != t.content:
                raise InputError(f"message id {t.id!r} already exists with different content")
        return [t for t in turns if t.id not in known]

    def turns(self, user_id: str, *, ids: Iterable[str] | None = None, status: TurnStatus | None = None,
              limit: int | None = None) -> list[Turn]:
        p = self.dialect.mark
        sql = f"SELECT {TURN_COLUMNS} FROM turns WHERE user_id={p}"
        params: list[object] = [user_id]
        if status is not None:
            sql += f" AND processed={p}"
            params.append(int(status))
        tail, last = (f" ORDER BY seq LIMIT {p}", [limit]) if limit is not None else (" ORDER BY seq", [])
        if ids is None:
            return [turn_row(r) for r in self._query(sql + tail, [*params, *last])]
        found = [turn_row(r) for part in parts(list(ids), ID_PART)
                 for r in self._query(sql + f" AND id IN ({self.dialect.marks(part)})" + tail,
                                      [*params, *part, *last])]
        return sorted(found, key=lambda t: t.seq)[:limit]

    def turn_rows(self, user_id: str, *, after_seq: int = 0,
                  limit: int = 1000) -> list[tuple[Turn, TurnStatus, str | None]]:
        """This user's turns in journal order after ``after_seq`` (a page of an export), each with its
        status and error."""
        p = self.dialect.mark
        rows = self._query(f"SELECT {TURN_COLUMNS}, processed, error FROM turns WHERE user_id={p} AND seq>{p} "
                           f"ORDER BY seq LIMIT {p}", (user_id, after_seq, limit))
        out = []
        for r in rows:
            data = dict(r)
            status, error = TurnStatus(data.pop("processed")), data.pop("error")
            out.append((turn_row(data), status, error))
        return out

    def pending_turns(self, user_id: str) -> list[Turn]:
        return self.turns(user_id, status=TurnStatus.PENDING)

    def turns_before(self, user_id: str, seq: int | None, limit: int) -> list[Turn]:
        """The ``limit`` turns of this user just before ``seq`` (or the last ones), oldest first."""
        p = self.dialect.mark
        bound = seq if seq is not None else 2**62
        rows = self._query(
            f"SELECT * FROM (SELECT {TURN_COLUMNS} FROM turns WHERE user_id={p} AND seq<{p} ORDER BY seq DESC "
            f"LIMIT {p}) AS recent ORDER BY seq", (user_id, bound, limit))
        return [turn_row(r) for r in rows]

    def pending_users(self) -> list[str]:
        return [r[0] for r in self._query("SELECT DISTINCT user_id FROM turns WHERE processed=0")]

    def count_turns(self, user_id: str | None = None, status: TurnStatus | None = None) -> int:
        p = self.dialect.mark
        sql = "SELECT COUNT(*) FROM turns WHERE 1=1"
        params: list[object] = []
        if user_id is not None:
            sql, params = sql + f" AND user_id={p}", [user_id]
        if status is not None:
            sql, params = sql + f" AND processed={p}", [*params, int(status)]
        return int(self._query(sql, params)[0][0])

    def speakers(self, user_id: str) -> list[str]:
        rows = self._query(f"SELECT speaker FROM speakers WHERE user_id={self.dialect.mark} ORDER BY speaker",
                           (user_id,))
        return [r[0] for r in rows]

    def quarantined(self, user_id: str | None = None) -> list[tuple[str, QuarantinedTurn]]:
        """(user id, turn with its error) of every quarantined turn, oldest first."""
        p = self.dialect.mark
        sql = f"SELECT {TURN_COLUMNS}, error FROM turns WHERE processed={p}"
        params: list[object] = [int(TurnStatus.QUARANTINED)]
        if user_id is not None:
            sql, params = sql + f" AND user_id={p}", [*params, user_id]
        rows = self._query(sql + " ORDER BY seq", params)
        return [(r["user_id"], QuarantinedTurn(turn=turn_row(r), error=r["error"] or "")) for r in rows]

    def set_turn_status(self, user_id: str, ids: Sequence[str], status: TurnStatus, *,
                        only_from: TurnStatus | None = None) -> int:
        """Move turns to ``status`` (e.g. quarantined -> pending to retry, or -> dropped)."""
        if not ids:
            return 0
        d, changed = self.dialect, 0
        with self._tx() as db:  # every part or none
            for part in parts(ids, ID_PART):
                sql = (f"UPDATE turns SET processed={d.mark}, error=NULL WHERE user_id={d.mark} "
                       f"AND id IN ({d.marks(part)})")
                params: list[object] = [int(status), user_id, *part]
                if only_from is not None:
                    sql, params = sql + f" AND processed={d.mark}", [*params, int(only_from)]
                changed += db.execute(sql, params).rowcount
        return changed


def insert_turns(db: Conn, d: Dialect, turns: Sequence[Turn], now: float, *, unheld: bool = False) -> list[Turn]:
    """Journal ``turns`` (inside the caller's transaction) in a few statements; a turn already there
    (or earlier in ``turns``) with the same content is a retry and is skipped, with other content an
    ``InputError``. ``unheld``: the caller has just read, in this transaction, that the journal holds
    none of them (no second read). Returns the turns written."""
    held: dict[tuple[str, str], str] = {}
    for user_id in () if unheld else dict.fromkeys(t.user_id for t in turns):
        ids = [t.id for t in turns if t.user_id == user_id]
        held.update(((user_id, r[0]), r[1]) for r in rows_where_in(
            tx_reader(db), d, f"SELECT id, content FROM turns WHERE user_id={d.mark} AND", "id", ids, [user_id]))
    fresh: list[Turn] = []
    for t in turns:
        known = held.get((t.user_id, t.id))
        if known is not None:  # a retry that raced its first attempt: already journaled
            if known != t.content:
                raise InputError(f"message id {t.id!r} already exists with different content")
            continue
        held[t.user_id, t.id] = t.content
        fresh.append(t)
    many(db, "INSERT INTO turns (id, user_id, agent_id, session_id, speaker, role, content, time_stamp, "
             f"float_time_stamp, weekday, metadata, created_at) VALUES ({d.marks(12)})",
         [(t.id, t.user_id, t.agent_id, t.session_id, t.speaker, t.role, t.content, t.time_stamp,
           t.float_time_stamp, t.weekday, json.dumps(t.metadata, ensure_ascii=False), now) for t in fresh])
    many(db, f"INSERT INTO speakers (user_id, speaker) VALUES ({d.mark}, {d.mark}) ON CONFLICT DO NOTHING",
         list(dict.fromkeys((t.user_id, t.speaker) for t in fresh)))
    return fresh


def set_pending_status(db: Conn, d: Dialect, user_id: str, ids: Sequence[str], status: TurnStatus,
                       error: str | None) -> int:
    """Moves pending turns to ``status`` (inside the caller's transaction); returns how many moved."""
    moved = 0
    for part in parts(ids, 500):
        sql, params = d.one_of("id", part)
        moved += db.execute(f"UPDATE turns SET processed={d.mark}, error={d.mark} WHERE user_id={d.mark} "
                            f"AND processed={d.mark} AND {sql}",
                            [int(status), error, user_id, int(TurnStatus.PENDING), *params]).rowcount
    return moved


def turn_row(row: Row | dict[str, Any]) -> Turn:
    data = dict(row)
    data.pop("error", None)
    data["metadata"] = json.loads(data["metadata"])
    return mend_stored(Turn, data, f"turn {data.get('id')!r} of user {data.get('user_id')!r}")
