"""API keys of the server: their format, how a secret is hashed and checked (pure, no I/O).

A key reads ``dm_<key id>_<secret>``: the key id (12 hex characters) finds the row, the secret
(32 random bytes, URL-safe base64) proves it. The journal keeps the SHA-256 of the secret only; a
secret of 256 random bits needs no slow password hash. Comparison is constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import Literal

from pydantic import BaseModel

from ._errors import InputError

Role = Literal["user", "admin"]
PREFIX = "dm"
_KEY = re.compile(r"dm_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")


class ApiKey(BaseModel):
    """A stored key, without its secret."""

    key_id: str
    role: Role
    user_id: str | None = None  # the one user a user key reaches; None for an admin key
    label: str = ""
    created_at: float
    revoked_at: float | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def reaches(self, user_id: str) -> bool:
        """Whether this key may act for ``user_id``."""
        return self.active and (self.role == "admin" or self.user_id == user_id)


class NewKey(BaseModel):
    """A freshly made key: the full text is shown once and never stored."""

    key_id: str
    key: str
    secret_sha256: str


def new_key() -> NewKey:
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    return NewKey(key_id=key_id, key=f"{PREFIX}_{key_id}_{secret}", secret_sha256=hash_secret(secret))


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def split_key(key: str) -> tuple[str, str] | None:
    """(key id, secret) of a well-formed key; None for anything else."""
    m = _KEY.fullmatch(key.strip())
    return (m.group(1), m.group(2)) if m else None


def secret_matches(secret: str, stored_sha256: str | None) -> bool:
    """Whether ``secret`` hashes to ``stored_sha256``. ``None`` (no such key id) is checked against a
    stand-in hash that no secret matches, so an unknown id costs the same work as a wrong secret."""
    same = hmac.compare_digest(hash_secret(secret), _NO_KEY_SHA256 if stored_sha256 is None else stored_sha256)
    return same and stored_sha256 is not None


#: not the SHA-256 of any secret (it has a character outside hex), but of the same length
_NO_KEY_SHA256 = "x" * 64


def check_key_id(key_id: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{12}", key_id):
        raise InputError(f"not a key id: {key_id!r} (12 hex characters, as `dialogmem keys list` shows)")
    return key_id
