"""The request-rate limiter's token bucket (``_server._limits``), without a server. Moved from
tests/server/test_server_limits.py, which checks the limits over HTTP."""

from __future__ import annotations

import pytest

from dialogmem._server._limits import TokenBucket


def test_token_bucket() -> None:
    bucket = TokenBucket(rate=2.0, capacity=3.0, tokens=3.0, stamp=0.0)
    assert [bucket.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(0.0) == pytest.approx(0.5)  # one token every half second
    assert bucket.take(0.5) == 0.0 and bucket.take(0.5) == pytest.approx(0.5)
    taken = [bucket.take(100.0) for _ in range(4)]
    assert taken[:3] == [0.0, 0.0, 0.0] and taken[3] > 0  # saved up to the capacity only
