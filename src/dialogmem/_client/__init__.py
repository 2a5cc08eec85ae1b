"""``Client`` and ``AsyncClient``: dialogmem's verbs over a server's REST API (the ``client`` extra: httpx).

The decisions (where to connect, retries and waits, which error an answer becomes, how each verb
is sent) live in ``_policy`` and ``_calls``, without I/O; the two classes only send and receive.
"""

from ._async import AsyncClient
from ._sync import Client

__all__ = ["AsyncClient", "Client"]
