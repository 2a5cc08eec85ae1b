"""``DialogmemStore``: a LangGraph ``BaseStore`` whose items are dialogmem memories.

    from dialogmem import Memory
    from dialogmem.integrations.langgraph import DialogmemStore

    graph = builder.compile(store=DialogmemStore(Memory(data_dir="~/.dialogmem")))

``namespace[0]`` is the dialogmem user id: every operation reads and writes that user's memories
only. How an item is kept as a memory is described in ``_lgitems``. Ops of one ``batch`` run in
order (a ``get`` after a ``put`` of the same item sees it); every op is checked before the first
one runs, so a batch holding a bad op writes nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any, Protocol

from .._errors import ConfigError, InputError, NotFoundError
from .._types import MemoryRecord, SearchResult

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
    )
except ImportError as exc:  # pragma: no cover - the extra is installed wherever the tests run
    raise ConfigError("dialogmem.integrations.langgraph needs LangGraph: pip install 'dialogmem[langgraph]'") from exc

from ._lgitems import (
    Namespace,
    NamespaceError,
    agent_of,
    check_filter,
    check_key,
    check_labels,
    check_value,
    item_metadata,
    item_name,
    legacy_item_id,
    namespace_matches,
    new_record,
    render,
    stored_item,
    to_item,
    user_of,
    value_matches,
)

__all__ = ["MAX_SEARCH_HITS", "DialogmemStore", "MemoryVerbs", "NamespaceError"]

log = logging.getLogger(__name__)

#: dialogmem's own bound on one search's hits; a query search ranks at most this many memories
MAX_SEARCH_HITS = 200
_PAGE = 1000
#: derived item ids kept by one store object
_ID_CACHE = 10_000


class MemoryVerbs(Protocol):
    """The verbs of ``Memory`` the store uses (any object with them will do, e.g. a remote client)."""

    def get(self, memory_id: str, user_id: str) -> MemoryRecord: ...

    def get_all(self, user_id: str, *, limit: int = ..., offset: str | None = ...,
                include_evicted: bool = ...) -> list[MemoryRecord]: ...

    def search(self, query: str, user_id: str, *, limit: int | None = ...) -> SearchResult: ...

    def update(self, memory_id: str, text: str, user_id: str, *, actor: str = ...,
               metadata: dict[str, Any] | None = ...) -> MemoryRecord: ...

    def delete(self, memory_id: str, user_id: str, *, actor: str = ...) -> None: ...

    def import_records(self, records: Iterable[MemoryRecord | dict[str, Any]]) -> int: ...

    def derived_id(self, user_id: str, name: str) -> str: ...


class DialogmemStore(BaseStore):
    """LangGraph long-term memory backed by a dialogmem ``Memory``.

    ``put`` stores or replaces an item (a replaced item keeps its memory id and created time: the
    change is an UPDATE in ``Memory.history``); ``put(value=None)`` and ``delete`` remove it;
    ``search`` with ``query`` uses dialogmem's retrieval (planner, hybrid dense + BM25, selection),
    without it lists the items under the prefix, most recently updated first. Not supported: TTL
    (``supports_ttl`` is False: a ``ttl`` is refused) and ``index=False`` (every memory is
    searchable); ``index=[paths]`` chooses the fields whose text is embedded.
    """

    supports_ttl = False

    def __init__(self, memory: MemoryVerbs, *, actor: str = "langgraph") -> None:
        missing = [verb for verb in ("get", "get_all", "search", "update", "delete", "import_records", "derived_id")
                   if not callable(getattr(memory, verb, None))]
        if missing:
            raise ConfigError(f"DialogmemStore needs a dialogmem Memory (open in this process); "
                              f"{type(memory).__name__} lacks {', '.join(missing)}. A remote Client cannot hold "
                              "items: their ids are keyed by the store's secret, which no client sees. Run the "
                              "graph beside the store, or use the Client's own verbs.")
        self.memory = memory
        self.actor = actor
        self._derived: dict[tuple[str, str], str] = {}  # (user, item name) -> derived id (a bounded cache)

    # -- BaseStore --------------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        for op in ops:
            _check(op)
        return [self._run(op) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """``batch`` in a worker thread (``Memory`` is thread-safe and its calls block)."""
        return await asyncio.to_thread(self.batch, list(ops))

    # -- one op -----------------------------------------------------------------------------
    def _run(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            return self._get(op.namespace, op.key)
        if isinstance(op, PutOp):
            self._put(op)
            return None
        if isinstance(op, SearchOp):
            return self._search(op)
        return self._list_namespaces(op)

    def _ids(self, namespace: Namespace, key: str) -> tuple[str, ...]:
        """The ids this item may have: its derived one, then the one of an older dialogmem."""
        name = item_name(namespace, key)
        cache_key = (namespace[0], name)
        derived = self._derived.get(cache_key)
        if derived is None:
            derived = self.memory.derived_id(namespace[0], name)
            if len(self._derived) >= _ID_CACHE:
                self._derived.clear()
            self._derived[cache_key] = derived
        return derived, legacy_item_id(namespace, key)

    def _record(self, namespace: Namespace, key: str) -> MemoryRecord | None:
        """The memory holding this item, or ``None`` (never put, deleted, or another user's)."""
        user = user_of(namespace)
        for memory_id in self._ids(namespace, key):
            try:
                record = self.memory.get(memory_id, user)
            except NotFoundError:
                continue
            held = stored_item(record, self._ids)
            if held is not None and held[:2] == (namespace, key):
                return record
        return None

    def _get(self, namespace: Namespace, key: str) -> Item | None:
        record = self._record(namespace, key)
        return None if record is None else to_item(record, self._ids)

    def _put(self, op: PutOp) -> None:
        user = user_of(op.namespace)
        old = self._record(op.namespace, op.key)
        if op.value is None:
            if old is not None:
                self.memory.delete(old.id, user, actor=self.actor)
            return
        value = dict(op.value)
        text = render(op.key, value, op.index or None)
        if old is None:
            memory_id = self._ids(op.namespace, op.key)[0]
            self.memory.import_records([new_record(memory_id, user, op.namespace, op.key, value, text)])
        else:
            self.memory.update(old.id, text, user, actor=self.actor,
                               metadata={**old.metadata, **item_metadata(op.namespace, op.key, value)})

    def _search(self, op: SearchOp) -> list[SearchItem]:
        user = user_of(op.namespace_prefix, what="namespace_prefix")
        if op.limit == 0:
            return []
        prefix = op.namespace_prefix
        found: list[SearchItem] = []
        if op.query:
            want = min(MAX_SEARCH_HITS, max(20, 3 * (op.offset + op.limit)))
            for hit in self.memory.search(op.query, user, limit=want).hits:
                record = self._hit_record(hit.id, user)
                item = None if record is None else to_item(record, self._ids, score=hit.score, search=True)
                if isinstance(item, SearchItem) and _within(item, prefix, op.filter):
                    found.append(item)
        else:
            for record in self._all(user):
                item = to_item(record, self._ids, search=True)
                if isinstance(item, SearchItem) and _within(item, prefix, op.filter):
                    found.append(item)
            found.sort(key=lambda i: (-i.updated_at.timestamp(), i.namespace, i.key))
        return found[op.offset:op.offset + op.limit]

    def _hit_record(self, memory_id: str, user: str) -> MemoryRecord | None:
        try:
            return self.memory.get(memory_id, user)
        except NotFoundError:  # a hit from the shared LTM graph, not one of this user's memories
            return None

    def _all(self, user: str) -> Iterable[MemoryRecord]:
        after: str | None = None
        while True:
            page = self.memory.get_all(user, limit=_PAGE, offset=after, include_evicted=True)
            yield from page
            if len(page) < _PAGE:
                return
            after = page[-1].id

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = tuple(op.match_conditions or ())
        user = _listed_user(conditions)
        namespaces = {held[0] for record in self._all(user) if (held := stored_item(record, self._ids)) is not None}
        chosen = [ns for ns in namespaces if namespace_matches(ns, conditions)]
        if op.max_depth is not None:
            chosen = list({ns[:op.max_depth] for ns in chosen})
        return sorted(chosen)[op.offset:op.offset + op.limit]


def _within(item: Item, prefix: Namespace, flt: dict[str, Any] | None) -> bool:
    return item.namespace[:len(prefix)] == prefix and value_matches(item.value, flt)


def _listed_user(conditions: tuple[MatchCondition, ...]) -> str:
    """The user whose namespaces ``list_namespaces`` lists: a prefix condition's first label."""
    for cond in conditions:
        if cond.match_type == "prefix" and cond.path and cond.path[0] != "*":
            return user_of(tuple(cond.path[:1]), what="prefix")
    raise InputError("list_namespaces needs prefix=(user_id, ...): DialogmemStore lists one user's namespaces "
                     "at a time (namespace[0] is the dialogmem user id)")


def _check(op: Op) -> None:
    """Refuse a bad op before any op of its batch runs (so a refused batch writes nothing)."""
    if isinstance(op, GetOp):
        user_of(op.namespace)
        check_key(op.key)
    elif isinstance(op, PutOp):
        _check_put(op)
    elif isinstance(op, SearchOp):
        user_of(op.namespace_prefix, what="namespace_prefix")
        check_filter(op.filter)
        for name, n in (("limit", op.limit), ("offset", op.offset)):
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise InputError(f"search {name} must be a non-negative integer, got {n!r}")
    elif isinstance(op, ListNamespacesOp):
        conditions = tuple(op.match_conditions or ())
        for cond in conditions:
            check_labels(tuple(label for label in cond.path if label != "*"), what=f"{cond.match_type} path")
        _listed_user(conditions)
        for name, n in (("limit", op.limit), ("offset", op.offset), ("max_depth", op.max_depth or 0)):
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise InputError(f"list_namespaces {name} must be a non-negative integer, got {n!r}")
    else:
        raise InputError(f"DialogmemStore does not know the operation {type(op).__name__}")


def _check_put(op: PutOp) -> None:
    user_of(op.namespace)
    if op.namespace[0] == "langgraph":
        raise NamespaceError("a namespace may not start with 'langgraph' (LangGraph reserves it)")
    agent_of(op.namespace)
    check_key(op.key)
    if op.ttl is not None:
        raise InputError("DialogmemStore does not support TTL: items stay until deleted (pass ttl=None)")
    if op.index is False:
        raise InputError("DialogmemStore indexes every item for search: index=False is not supported")
    if op.index is not None and (not isinstance(op.index, list)
                                 or not all(isinstance(p, str) and p for p in op.index)):
        raise InputError("index must be None or a list of field paths such as ['content', 'tags[*]']")
    if op.value is not None:
        check_value(op.value)
