"""API keys in the journal (schema step ``_v3_keys``): create, list, revoke, and look a key up.

Only the SHA-256 of a key's secret is stored. The server checks a key on every request against
the row, so a revoked key stops working at once, also when another process revoked it.
"""

from __future__ import annotations

import time
from typing import Any

from .._apikeys import ApiKey, NewKey, Role, check_key_id, new_key, secret_matches, split_key
from .._errors import InputError, NotFoundError
from ._rows import SQLRows

_COLUMNS = "key_id, role, user_id, label, created_at, revoked_at"
MAX_LABEL_CHARS = 200


class KeySQL(SQLRows):
    """The server's API keys (the ``KeyRing`` role)."""

    def create_key(self, role: Role, user_id: str | None = None, *, label: str = "") -> tuple[ApiKey, str]:
        """A new key; returns its row and the full key text (shown once, never stored)."""
        if (role == "admin") != (user_id is None):
            raise InputError("an admin key reaches every user and takes no user id; a user key needs one")
        if len(label) > MAX_LABEL_CHARS or not label.isprintable():
            raise InputError(f"a key label is at most {MAX_LABEL_CHARS} printable characters (no control characters)")
        made: NewKey = new_key()
        row = ApiKey(key_id=made.key_id, role=role, user_id=user_id, label=label, created_at=time.time())
        with self._tx() as db:
            db.execute("INSERT INTO api_keys (key_id, secret_sha256, role, user_id, label, created_at) "
                       f"VALUES ({self.dialect.marks(6)})",
                       (row.key_id, made.secret_sha256, row.role, row.user_id, row.label, row.created_at))
        return row, made.key

    def list_keys(self, *, include_revoked: bool = False) -> list[ApiKey]:
        sql = f"SELECT {_COLUMNS} FROM api_keys"
        if not include_revoked:
            sql += " WHERE revoked_at IS NULL"
        return [_key(r) for r in self._query(sql + " ORDER BY created_at, key_id")]

    def revoke_key(self, key_id: str) -> ApiKey:
        check_key_id(key_id)
        p = self.dialect.mark
        with self._tx() as db:
            n = db.execute(f"UPDATE api_keys SET revoked_at={p} WHERE key_id={p} AND revoked_at IS NULL",
                           (time.time(), key_id)).rowcount
        rows = self._query(f"SELECT {_COLUMNS} FROM api_keys WHERE key_id={p}", (key_id,))
        if not rows:
            raise NotFoundError(f"no key {key_id}")
        if n == 0:
            raise InputError(f"key {key_id} was revoked already")
        return _key(rows[0])

    def verify_key(self, key: str) -> ApiKey | None:
        """The active key this text proves, or None (malformed, unknown, wrong secret, revoked)."""
        parts = split_key(key)
        if parts is None:
            return None
        key_id, secret = parts
        rows = self._query(f"SELECT {_COLUMNS}, secret_sha256 FROM api_keys WHERE key_id={self.dialect.mark}",
                           (key_id,))
        # the secret is hashed and compared also for an unknown id: a wrong secret on an existing
        # id must not answer measurably slower than an unknown id (which would reveal valid ids)
        matches = secret_matches(secret, rows[0][6] if rows else None)
        if not matches or rows[0][5] is not None:
            return None
        return _key(rows[0])


def _key(row: Any) -> ApiKey:
    return ApiKey(key_id=row[0], role=row[1], user_id=row[2], label=row[3], created_at=row[4], revoked_at=row[5])
