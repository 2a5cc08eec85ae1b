"""LangGraph items as dialogmem memories, and back (pure: no I/O).

One item is one memory of the user named by ``namespace[0]``:

- its id is ``Memory.derived_id(user, [namespace..., key])``: keyed by the store's secret and the
  user, so ``get(namespace, key)`` is one lookup by id, the same item always lands on the same
  memory, and no other user can compute (and so occupy or probe) it. Items written before this
  (ids computable by anyone: :func:`legacy_item_id`) are still found, and kept where they are;
- its metadata holds the item under ``"langgraph"``: ``{"namespace": [...], "key": ..., "value": {...}}``;
  ``get`` and ``search`` return that value exactly as it was put;
- its text is a rendering of the value (or of the ``index=`` fields), which is what dialogmem embeds
  and searches;
- its ``agent_id`` is the rest of the namespace joined with ``"."`` (LangGraph refuses periods inside
  labels, so the join cannot be ambiguous), so ``Memory.search(filters={"agent_id": ...})`` sees one
  namespace.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import InvalidNamespaceError, Item, MatchCondition, SearchItem
from langgraph.store.base.embed import get_text_at_path

from .._errors import InputError
from .._input import check_id, check_metadata, check_text
from .._text._timeparse import to_fields
from .._text._words import entities, memory_keywords
from .._types import MemoryRecord

#: the metadata field that marks a memory as a LangGraph item and holds it
FIELD = "langgraph"
_ITEM_NS = uuid.UUID("0f6a8c2e-51b4-4e0b-9d4e-6c9b7a1e2f30")
_OPERATORS = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"})
#: structural checks of a value before anything is written; the store's own size limit
#: (``write.max_metadata_bytes``) is applied by ``Memory`` when the item is written
_VALUE_CHECK_BYTES = 10_000_000

Namespace = tuple[str, ...]


class NamespaceError(InputError, InvalidNamespaceError):
    """A namespace LangGraph's rules or dialogmem's user ids refuse: both an ``InputError`` and
    LangGraph's ``InvalidNamespaceError``, so either kind of caller can catch it."""


def item_name(namespace: Namespace, key: str) -> str:
    """What ``Memory.derived_id`` derives an item's memory id from."""
    return json.dumps([*namespace, key], ensure_ascii=False)


def legacy_item_id(namespace: Namespace, key: str) -> str:
    """The id an item got before ids were keyed by the store's secret (anyone could compute it)."""
    return str(uuid.uuid5(_ITEM_NS, item_name(namespace, key)))


def check_labels(namespace: Namespace, *, what: str = "namespace") -> Namespace:
    """LangGraph's label rules (strings, non-empty, no period, no NUL); ``BaseStore``'s own methods
    check these first, this covers ops passed straight to ``batch``."""
    if not isinstance(namespace, tuple):
        raise NamespaceError(f"{what} must be a tuple of strings, got {type(namespace).__name__}")
    for label in namespace:
        if not isinstance(label, str) or not label or "." in label or "\x00" in label:
            raise NamespaceError(f"invalid label {label!r} in {what} {namespace}: labels are non-empty "
                                        "strings without periods or NUL")
    return namespace


def user_of(namespace: Namespace, *, what: str = "namespace") -> str:
    """The dialogmem user an item or a search belongs to: the namespace's first label."""
    check_labels(namespace, what=what)
    if not namespace:
        raise NamespaceError(f"{what} must start with the user id (namespace[0]); an empty {what} names no user")
    try:
        return check_id(f"{what}[0] (the user id)", namespace[0])
    except InputError as exc:
        raise NamespaceError(str(exc)) from exc


def agent_of(namespace: Namespace) -> str | None:
    """The memory's ``agent_id``: the namespace below the user, joined with periods."""
    rest = ".".join(namespace[1:])
    return check_id("namespace below the user (the agent id)", rest) if rest else None


def check_key(key: object) -> str:
    if not isinstance(key, str) or not key:
        raise InputError("an item key must be a non-empty string")
    check_text("item key", key)
    return key


def check_value(value: object) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise InputError(f"an item value must be a dict (or None to delete), got {type(value).__name__}")
    return check_metadata("item value", dict(value), _VALUE_CHECK_BYTES)


def render(key: str, value: Mapping[str, Any], fields: Sequence[str] | None) -> str:
    """The text dialogmem embeds and searches. A value with one string field is that string (the
    usual ``{"content": "..."}`` or ``{"memory": "..."}``); otherwise one ``field: value`` line per
    top-level field. With ``fields`` (LangGraph's ``index=`` paths), only the text at those paths."""
    if fields is not None:
        parts = [text for path in fields for text in get_text_at_path(dict(value), path) if text.strip()]
        text = "\n".join(parts)
    elif len(value) == 1 and isinstance(next(iter(value.values())), str):
        text = next(iter(value.values()))
    else:
        text = "\n".join(f"{name}: {_plain(v)}" for name, v in value.items())
    return text if text.strip() else key


def _plain(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)


def new_record(memory_id: str, user_id: str, namespace: Namespace, key: str, value: dict[str, Any],
               text: str) -> dict[str, Any]:
    """A fresh memory record (as ``Memory.import_records`` takes it) holding one item."""
    now = time.time()
    iso, ts, weekday = to_fields(datetime.now().replace(microsecond=0))
    return {"id": memory_id, "user_id": user_id, "agent_id": agent_of(namespace), "memory": text,
            "time_stamp": iso, "float_time_stamp": ts, "weekday": weekday, "keywords": memory_keywords(text),
            "entities": entities(text), "created_at": now, "updated_at": now,
            "metadata": item_metadata(namespace, key, value)}


def item_metadata(namespace: Namespace, key: str, value: dict[str, Any]) -> dict[str, Any]:
    return {FIELD: {"namespace": list(namespace), "key": key, "value": value}}


def stored_item(record: MemoryRecord, ids: Callable[[Namespace, str], tuple[str, ...]]
                ) -> tuple[Namespace, str, dict[str, Any]] | None:
    """(namespace, key, value) of a memory that holds an item (its id is one of ``ids(namespace,
    key)``); ``None`` for any other memory."""
    held = record.metadata.get(FIELD)
    if not isinstance(held, dict):
        return None
    namespace, key, value = held.get("namespace"), held.get("key"), held.get("value")
    if not (isinstance(namespace, list) and isinstance(key, str) and isinstance(value, dict)):
        return None
    ns = tuple(str(label) for label in namespace)
    return (ns, key, value) if record.id in ids(ns, key) else None


def to_item(record: MemoryRecord, ids: Callable[[Namespace, str], tuple[str, ...]], *, score: float | None = None,
            search: bool = False) -> Item | None:
    """The LangGraph item a memory holds (a ``SearchItem`` for search results), or ``None``."""
    held = stored_item(record, ids)
    if held is None:
        return None
    namespace, key, value = held
    created, updated = _utc(record.created_at), _utc(record.updated_at)
    if search:
        return SearchItem(namespace=namespace, key=key, value=value, created_at=created, updated_at=updated,
                          score=score)
    return Item(value=value, key=key, namespace=namespace, created_at=created, updated_at=updated)


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


# -- filters and namespace matching (LangGraph's in-memory store's rules) ------------------------
def check_filter(flt: object) -> dict[str, Any] | None:
    """A search filter LangGraph defines: field -> value, or field -> {"$op": value} with $eq, $ne,
    $gt, $gte, $lt, $lte; anything else is refused before the search runs."""
    if flt is None:
        return None
    if not isinstance(flt, dict):
        raise InputError(f"filter must be a dict, got {type(flt).__name__}")
    _string_keys("filter", flt)
    for name, want in flt.items():
        if isinstance(want, dict):
            ops = [k for k in want if isinstance(k, str) and k.startswith("$")]
            unknown = sorted(set(ops) - _OPERATORS)
            if unknown:
                raise InputError(f"filter.{name}: unknown operator {unknown[0]}; use one of {sorted(_OPERATORS)}")
            if ops and len(ops) != len(want):
                raise InputError(f"filter.{name} mixes operators and fields")
    return flt


def _string_keys(where: str, value: object, depth: int = 0) -> None:
    """Every key of a filter, at every level, is a string (a value's keys are: it is JSON)."""
    if depth > 32:
        raise InputError(f"{where} is nested more than 32 levels deep")
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise InputError(f"{where} has a key of type {type(k).__name__} ({k!r}); filter keys are strings")
            _string_keys(f"{where}.{k}", v, depth + 1)
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _string_keys(f"{where}[{i}]", v, depth + 1)


def value_matches(value: Mapping[str, Any], flt: Mapping[str, Any] | None) -> bool:
    return flt is None or all(_matches(value.get(name), want) for name, want in flt.items())


def _matches(have: Any, want: Any) -> bool:
    if isinstance(want, dict):
        if any(k.startswith("$") for k in want):
            return all(_compare(have, op, bound) for op, bound in want.items())
        return isinstance(have, dict) and all(_matches(have.get(k), v) for k, v in want.items())
    if isinstance(want, list | tuple):
        return (isinstance(have, list | tuple) and len(have) == len(want)
                and all(_matches(h, w) for h, w in zip(have, want, strict=True)))
    return bool(have == want)


def _compare(have: Any, op: str, bound: Any) -> bool:
    if op == "$eq":
        return bool(have == bound)
    if op == "$ne":
        return bool(have != bound)
    a, b = _number(have), _number(bound)
    if a is None or b is None:  # a missing or non-numeric field is outside every range
        return False
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]


def _number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        return None
    try:
        x = float(v)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def namespace_matches(namespace: Namespace, conditions: Sequence[MatchCondition]) -> bool:
    """Every condition holds: its path, ``"*"`` matching any label, fits the namespace's start
    (prefix) or end (suffix)."""
    for cond in conditions:
        path = tuple(cond.path)
        if len(namespace) < len(path):
            return False
        part = namespace[:len(path)] if cond.match_type == "prefix" else namespace[len(namespace) - len(path):]
        if any(p != "*" and p != n for p, n in zip(path, part, strict=True)):
            return False
    return True
