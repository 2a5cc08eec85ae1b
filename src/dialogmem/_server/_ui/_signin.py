"""How often the inspector's sign-in form may be tried: per client address and per key, so neither
guessing keys from one address nor signing in a thousand times with one key gets far.

Pure (the caller passes the clock); used from the event loop only."""

from __future__ import annotations

import hashlib
from collections import OrderedDict

from .._limits import TokenBucket

#: attempts one client address, or one key, may make at once ...
BURST = 10
#: ... and then per minute
PER_MINUTE = 6.0
#: buckets kept per table; the least recently used one goes (it has refilled long ago)
MAX_ENTRIES = 10_000


class SignInLimits:
    """Token buckets of sign-in attempts, one per client address and one per key text tried."""

    def __init__(self, *, burst: int = BURST, per_minute: float = PER_MINUTE, max_entries: int = MAX_ENTRIES) -> None:
        self._burst = float(burst)
        self._rate = per_minute / 60.0
        self._max = max_entries
        self._clients: OrderedDict[str, TokenBucket] = OrderedDict()
        self._keys: OrderedDict[str, TokenBucket] = OrderedDict()

    def wait(self, client: str, key: str, now: float) -> float:
        """0.0 when this attempt may go ahead (it is counted under both), else the seconds to wait."""
        digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
        return max(self._take(self._clients, client, now), self._take(self._keys, digest, now))

    def _take(self, table: OrderedDict[str, TokenBucket], name: str, now: float) -> float:
        bucket = table.get(name)
        if bucket is None:
            bucket = table[name] = TokenBucket(self._rate, self._burst, self._burst, now)
            while len(table) > self._max:
                table.popitem(last=False)
        table.move_to_end(name)
        return bucket.take(now)
