"""API keys: the key format and hashing (pure), the journal's key table (schema step _v3_keys), and
the sleep-job rule of one job at a time per user."""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path

import pytest

from dialogmem import InputError, NotFoundError, SleepReport, StoreError
from dialogmem._apikeys import hash_secret, new_key, secret_matches, split_key
from dialogmem._journal import SCHEMA_VERSION
from dialogmem._journal import SQLiteJournal as Journal
from dialogmem._journal._dialect import SQLITE
from dialogmem._journal._schema import MIGRATIONS
from dialogmem._server._errors import Conflict, status_for
from dialogmem._server._jobs import SleepJobs


def test_key_format_and_hash() -> None:
    made = new_key()
    key_id, secret = split_key(made.key) or ("", "")
    assert key_id == made.key_id and made.key == f"dm_{key_id}_{secret}"
    assert made.secret_sha256 == hash_secret(secret) and secret not in made.secret_sha256
    assert secret_matches(secret, made.secret_sha256)
    assert not secret_matches(secret[:-1] + "x", made.secret_sha256)
    assert new_key().key != made.key
    for bad in ("", "dm_", made.key + "x", made.key.replace("dm_", "xx_"), "dm_ABCDEF012345_" + secret,
                "Bearer " + made.key, "dm_" + key_id + "_" + secret[:-1]):
        assert split_key(bad) is None, bad


def test_journal_keys_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    with closing(Journal(path)) as j:
        row, key = j.create_key("user", "alice", label="phone")
        admin, admin_key = j.create_key("admin")
        assert j.verify_key(key) == row and row.reaches("alice") and not row.reaches("bob")
        assert j.verify_key(admin_key) == admin and admin.reaches("anyone")
        assert j.verify_key(key[:-1] + ("A" if key[-1] != "A" else "B")) is None
        assert j.verify_key("dm_" + "0" * 12 + "_" + key.split("_", 2)[2]) is None
        with pytest.raises(InputError):
            j.create_key("admin", "alice")
        with pytest.raises(InputError):
            j.create_key("user")
        for label in ("a\x00b", "line\nbreak", "x" * 201):  # PostgreSQL cannot store NUL: refused on both
            with pytest.raises(InputError, match="label"):
                j.create_key("user", "alice", label=label)
        assert {k.key_id for k in j.list_keys()} == {row.key_id, admin.key_id}
        assert j.revoke_key(row.key_id).revoked_at is not None
        assert j.verify_key(key) is None
        assert [k.key_id for k in j.list_keys()] == [admin.key_id]
        assert len(j.list_keys(include_revoked=True)) == 2
        with pytest.raises(InputError, match="revoked already"):
            j.revoke_key(row.key_id)
        with pytest.raises(NotFoundError):
            j.revoke_key("0123456789ab")
    raw = path.read_bytes() + (tmp_path / "j.sqlite3-wal").read_bytes() if (tmp_path / "j.sqlite3-wal").exists() \
        else path.read_bytes()
    assert key.split("_", 2)[2].encode() not in raw  # the secret is never written


def test_an_unknown_key_id_costs_the_same_hash_as_a_wrong_secret(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 6 of issue 27: without a hash for unknown ids, a wrong secret on an existing id answered
    measurably slower, which tells a caller which key ids exist."""
    import dialogmem._apikeys as apikeys

    hashed: list[str] = []

    def counting_hash(secret: str) -> str:
        hashed.append(secret)
        return hash_secret(secret)

    monkeypatch.setattr(apikeys, "hash_secret", counting_hash)
    with closing(Journal(tmp_path / "j.sqlite3")) as j:
        row, key = j.create_key("user", "alice")
        secret = key.split("_", 2)[2]
        hashed.clear()
        wrong, unknown = f"dm_{row.key_id}_{'A' * 43}", f"dm_{'0' * 12}_{'B' * 43}"
        assert j.verify_key(wrong) is None and j.verify_key(unknown) is None and j.verify_key(key) == row
        assert hashed == ["A" * 43, "B" * 43, secret]  # one hash each, whether the id exists or not
    assert not secret_matches(secret, None) and not secret_matches("", None)


def test_a_v2_store_gains_the_key_table(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite3"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    MIGRATIONS[1](db, SQLITE)
    MIGRATIONS[2](db, SQLITE)
    db.execute("INSERT INTO meta VALUES ('schema_version', '2')")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="needs an upgrade"):
        Journal(path, read_only=True)
    with closing(Journal(path)) as j:
        assert j.schema_version == SCHEMA_VERSION
        assert j.list_keys() == []
        j.create_key("admin")


def test_one_sleep_job_per_user() -> None:
    release = threading.Event()
    ran: list[str | None] = []

    def run(user: str | None) -> SleepReport:
        ran.append(user)
        if user == "boom":
            raise StoreError("disk on fire")
        release.wait(10)
        return SleepReport(users=1)

    jobs = SleepJobs(run, kept=2, workers=4)
    first = jobs.start("alice")
    with pytest.raises(Conflict):
        jobs.start("alice")
    assert status_for(Conflict("x")) == 409
    other = jobs.start("bob")  # another user is not held up
    everyone = jobs.start(None)
    with pytest.raises(Conflict):
        jobs.start(None)
    failed = jobs.start("boom")
    release.set()
    deadline = time.monotonic() + 10
    while any((jobs.get(j.job_id) or first).status in ("queued", "running") for j in (first, other, everyone, failed)):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    done = jobs.get(other.job_id)
    assert done is not None and done.status == "done" and done.report is not None and done.report.users == 1
    bad = jobs.get(failed.job_id)
    assert bad is not None and bad.status == "failed" and "disk on fire" in (bad.error or "")
    again = jobs.start("alice")  # the user's first job ended: a new one may start
    assert sorted(str(u) for u in ran) == ["None", "alice", "bob", "boom"]
    jobs.close()
    assert jobs.get(again.job_id) is not None and jobs.get(first.job_id) is None  # only `kept` finished jobs
