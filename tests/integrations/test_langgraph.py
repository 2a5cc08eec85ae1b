"""DialogmemStore against LangGraph's BaseStore contract, with the real langgraph package and a real
store (SQLite journal, Qdrant Edge, MiniLM). LangGraph ships no store test suite in its wheels, so
the contract cases are written here from BaseStore's documentation, and the query-less behaviour
is compared op for op with LangGraph's own InMemoryStore."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any, TypedDict

import pytest
from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore, GetOp, InvalidNamespaceError, Item, PutOp, SearchItem
from langgraph.store.memory import InMemoryStore

from dialogmem import InputError, Memory
from dialogmem.integrations.langgraph import DialogmemStore, NamespaceError
from portable import header, memory_line, write_export

MakeMemory = Callable[..., Memory]


@pytest.fixture
def mem(make_memory: MakeMemory) -> Memory:
    return make_memory()


@pytest.fixture
def store(mem: Memory) -> DialogmemStore:
    return DialogmemStore(mem)


def item_records(mem: Memory, user: str) -> list[Any]:
    return [r for r in mem.get_all(user, limit=1000, include_evicted=True) if "langgraph" in r.metadata]


# -- put / get / update / delete ------------------------------------------------------------------
def test_put_then_get_returns_the_value_exactly(store: DialogmemStore) -> None:
    value = {"content": "Alice loves spicy Thai food", "tags": ["food", "thai"], "n": 3, "nested": {"a": None}}
    store.put(("alice", "prefs"), "food", value)
    item = store.get(("alice", "prefs"), "food")
    assert isinstance(item, Item)
    assert (item.namespace, item.key, item.value) == (("alice", "prefs"), "food", value)
    assert item.created_at == item.updated_at and item.created_at.tzinfo is not None
    assert store.get(("alice", "prefs"), "drink") is None
    assert store.get(("alice", "other"), "food") is None
    assert store.get(("alice",), "food") is None


def test_put_of_an_existing_key_updates_it_and_keeps_its_history(store: DialogmemStore, mem: Memory) -> None:
    store.put(("alice", "prefs"), "food", {"content": "Alice loves spicy Thai food"})
    first = store.get(("alice", "prefs"), "food")
    time.sleep(0.01)
    store.put(("alice", "prefs"), "food", {"content": "Alice now prefers Italian pasta", "since": 2024})
    second = store.get(("alice", "prefs"), "food")
    assert first is not None and second is not None
    assert second.value == {"content": "Alice now prefers Italian pasta", "since": 2024}
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    [record] = item_records(mem, "alice")  # one memory per key, rewritten in place
    assert record.memory == "content: Alice now prefers Italian pasta\nsince: 2024" and record.version == 2
    assert record.agent_id == "prefs"
    events = [(h.event.value, h.old_memory, h.actor) for h in mem.history(record.id, "alice")]
    assert events[-1] == ("UPDATE", "Alice loves spicy Thai food", "langgraph")


def test_delete_and_put_none_remove_the_item_and_a_later_put_brings_it_back(store: DialogmemStore) -> None:
    store.put(("alice", "a"), "k1", {"content": "the sky over Lisbon is blue"})
    store.put(("alice", "a"), "k2", {"content": "the sea near Porto is cold"})
    store.delete(("alice", "a"), "k1")
    store.put(("alice", "a"), "k2", None)  # type: ignore[arg-type]  # LangGraph's "delete" spelling
    store.delete(("alice", "a"), "never-put")  # deleting what is not there is a no-op
    assert store.get(("alice", "a"), "k1") is None and store.get(("alice", "a"), "k2") is None
    assert store.search(("alice",)) == [] and store.search(("alice",), query="sky over Lisbon") == []
    assert store.list_namespaces(prefix=("alice",)) == []
    store.put(("alice", "a"), "k1", {"content": "the sky over Lisbon is grey today"})
    again = store.get(("alice", "a"), "k1")
    assert again is not None and again.value == {"content": "the sky over Lisbon is grey today"}


def test_a_batch_runs_in_order_and_a_bad_op_writes_nothing(store: DialogmemStore) -> None:
    got = store.batch([PutOp(("alice", "a"), "k", {"v": 1}), GetOp(("alice", "a"), "k")])
    assert got[0] is None and isinstance(got[1], Item) and got[1].value == {"v": 1}
    with pytest.raises(InputError, match="TTL"):
        store.batch([PutOp(("alice", "a"), "k2", {"v": 2}), PutOp(("alice", "a"), "k3", {"v": 3}, ttl=5.0)])
    assert store.get(("alice", "a"), "k2") is None  # the good op before the bad one did not run


def test_what_is_not_supported_is_refused_with_a_clear_error(store: DialogmemStore, mem: Memory) -> None:
    with pytest.raises(NotImplementedError, match="TTL"):  # LangGraph's own check: supports_ttl is False
        store.put(("alice",), "k", {"v": 1}, ttl=10)
    with pytest.raises(InputError, match="index=False"):
        store.put(("alice",), "k", {"v": 1}, index=False)
    with pytest.raises(InputError, match="must be a dict"):
        store.batch([PutOp(("alice",), "k", ["not", "a", "dict"])])  # type: ignore[arg-type]
    with pytest.raises(InputError, match="unknown operator"):
        store.search(("alice",), filter={"n": {"$in": [1, 2]}})
    with pytest.raises(InputError, match="prefix=\\(user_id"):
        store.list_namespaces()
    with pytest.raises(InputError, match="prefix=\\(user_id"):
        store.list_namespaces(prefix=("*", "prefs"))
    big = {"content": "x" * (mem.config.write.max_metadata_bytes + 10)}
    with pytest.raises(InputError, match="max_metadata_bytes"):
        store.put(("alice",), "big", big)
    assert store.get(("alice",), "big") is None and item_records(mem, "alice") == []


@pytest.mark.parametrize("namespace", [(), ("alice.smith",), ("alice", ""), ("langgraph", "x")])
def test_a_bad_namespace_is_both_an_input_error_and_langgraphs_own(store: DialogmemStore,
                                                                   namespace: tuple[str, ...]) -> None:
    with pytest.raises(NamespaceError) as caught:
        store.batch([PutOp(namespace, "k", {"v": 1})])
    assert isinstance(caught.value, InputError) and isinstance(caught.value, InvalidNamespaceError)
    with pytest.raises(InvalidNamespaceError):
        store.put(namespace, "k", {"v": 1})


def test_index_paths_choose_the_text_that_is_searched(store: DialogmemStore, mem: Memory) -> None:
    store.put(("alice", "docs"), "d1", {"title": "Rocket engine notes", "body": "torque tables", "n": 1},
              index=["title"])
    store.put(("alice", "docs"), "d2", {"title": "Garden plan", "tags": ["tomato", "basil"]}, index=["tags[*]"])
    texts = {r.metadata["langgraph"]["key"]: r.memory for r in item_records(mem, "alice")}
    assert texts == {"d1": "Rocket engine notes", "d2": "tomato\nbasil"}
    item = store.get(("alice", "docs"), "d1")
    assert item is not None and item.value["body"] == "torque tables"  # the whole value is kept


# -- search --------------------------------------------------------------------------------------
FACTS = {
    (("alice", "prefs"), "food"): {"content": "Alice loves spicy Thai curry", "rank": 1},
    (("alice", "prefs"), "drink"): {"content": "Alice drinks green tea every morning", "rank": 2},
    (("alice", "work", "projects"), "rocket"): {"content": "Alice builds a small rocket engine in her garage",
                                                 "rank": 3},
    (("alice", "work", "team"), "boss"): {"content": "Alice reports to Maria, the head of engineering",
                                           "rank": 4, "meta": {"kind": "person"}},
    (("bob", "prefs"), "food"): {"content": "Bob loves spicy Thai curry", "rank": 9},
}


def put_facts(store: BaseStore) -> None:
    for (namespace, key), value in FACTS.items():
        store.put(namespace, key, value)


def test_query_search_uses_dialogmem_retrieval_within_the_prefix(store: DialogmemStore) -> None:
    put_facts(store)
    hits = store.search(("alice",), query="What tea does Alice drink in the morning?", limit=3)
    assert hits and all(isinstance(h, SearchItem) and h.score is not None for h in hits)
    assert hits[0].key == "drink" and hits[0].value == FACTS[(("alice", "prefs"), "drink")]
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)  # type: ignore[misc]
    work = store.search(("alice", "work"), query="spicy Thai curry", limit=10)
    assert {h.namespace for h in work} <= {("alice", "work", "projects"), ("alice", "work", "team")}
    assert work
    rocket = store.search(("alice",), query="rocket engine garage", filter={"rank": {"$gte": 3}}, limit=10)
    assert rocket[0].key == "rocket" and all(h.value["rank"] >= 3 for h in rocket)
    page = store.search(("alice",), query="Alice", limit=2, offset=1)
    full = store.search(("alice",), query="Alice", limit=3)
    assert [h.key for h in page] == [h.key for h in full[1:3]]


def test_search_without_a_query_filters_and_pages_like_langgraphs_own_store(store: DialogmemStore) -> None:
    reference = InMemoryStore()
    for s in (store, reference):
        put_facts(s)
        time.sleep(0.01)
        s.put(("alice", "prefs"), "drink", {"content": "Alice switched to black coffee", "rank": 2})

    def keys(s: BaseStore, prefix: tuple[str, ...], **kw: Any) -> set[tuple[tuple[str, ...], str, str]]:
        return {(i.namespace, i.key, i.value["content"]) for i in s.search(prefix, limit=100, **kw)}

    cases: list[tuple[tuple[str, ...], dict[str, Any]]] = [
        (("alice",), {}), (("alice", "work"), {}), (("alice", "prefs"), {}), (("bob",), {}), (("carol",), {}),
        (("alice",), {"filter": {"rank": 2}}), (("alice",), {"filter": {"rank": {"$gt": 1, "$lte": 3}}}),
        (("alice",), {"filter": {"rank": {"$ne": 1}}}), (("alice",), {"filter": {"meta": {"kind": "person"}}}),
        (("alice",), {"filter": {"rank": {"$lt": 2}, "content": "Alice loves spicy Thai curry"}}),
        (("alice",), {"filter": {"missing": 1}}),
    ]
    for prefix, kw in cases:
        assert keys(store, prefix, **kw) == keys(reference, prefix, **kw), (prefix, kw)
    listed = store.search(("alice",), limit=10)
    assert listed[0].key == "drink"  # most recently updated first
    pages = store.search(("alice",), limit=2) + store.search(("alice",), limit=2, offset=2)
    assert [(i.namespace, i.key) for i in pages] == [(i.namespace, i.key) for i in listed]
    assert store.search(("alice",), limit=0) == []


def test_list_namespaces_matches_langgraphs_own_store(store: DialogmemStore) -> None:
    reference = InMemoryStore()
    extra = [(("alice", "work", "projects", "old"), "k"), (("alice", "notes"), "k"), (("alice",), "root")]
    for s in (store, reference):
        put_facts(s)
        for namespace, key in extra:
            s.put(namespace, key, {"content": f"{key} in {'/'.join(namespace)}"})
    cases: list[dict[str, Any]] = [
        {"prefix": ("alice",)}, {"prefix": ("alice", "work")}, {"prefix": ("alice",), "max_depth": 2},
        {"prefix": ("alice",), "max_depth": 1}, {"prefix": ("alice",), "suffix": ("projects",)},
        {"prefix": ("alice", "*", "projects")}, {"prefix": ("alice",), "suffix": ("work", "*")},
        {"prefix": ("alice",), "limit": 2}, {"prefix": ("alice",), "limit": 2, "offset": 2},
        {"prefix": ("bob",)}, {"prefix": ("carol",)},
    ]
    for kw in cases:
        assert store.list_namespaces(**kw) == reference.list_namespaces(**kw), kw


def test_another_users_items_never_show(store: DialogmemStore, mem: Memory) -> None:
    put_facts(store)
    store.put(("bob", "prefs"), "drink", {"content": "Bob drinks green tea every morning"})
    assert store.get(("alice", "prefs"), "food") != store.get(("bob", "prefs"), "food")
    for hit in store.search(("alice",), query="Bob drinks green tea", limit=10):
        assert hit.namespace[0] == "alice"
    assert {h.namespace[0] for h in store.search(("bob",), limit=100)} == {"bob"}
    assert all(ns[0] == "alice" for ns in store.list_namespaces(prefix=("alice",)))
    assert store.get(("carol", "prefs"), "food") is None and store.search(("carol",), query="Thai curry") == []
    store.delete(("carol", "prefs"), "food")  # another namespace's delete touches no one else
    assert store.get(("bob", "prefs"), "food") is not None
    # dialogmem's own scoping agrees: bob's item is no memory of alice's
    bob_ids = {r.id for r in item_records(mem, "bob")}
    assert bob_ids and not bob_ids & {r.id for r in item_records(mem, "alice")}


def test_memories_written_by_dialogmem_itself_are_not_items(store: DialogmemStore, mem: Memory) -> None:
    mem.add("I adopted a grey cat named Miso last spring.", "alice", flush=True)
    assert mem.get_all("alice")  # a memory of alice's, made by the write path
    store.put(("alice", "pets"), "cat", {"content": "Alice has a grey cat named Miso"})
    hits = store.search(("alice",), query="grey cat named Miso", limit=10)
    assert [(h.namespace, h.key) for h in hits] == [(("alice", "pets"), "cat")]
    assert [(i.namespace, i.key) for i in store.search(("alice",))] == [(("alice", "pets"), "cat")]
    assert store.list_namespaces(prefix=("alice",)) == [("alice", "pets")]


def test_items_survive_closing_and_reopening_the_store(make_memory: MakeMemory) -> None:
    first = make_memory("kept")
    DialogmemStore(first).put(("alice", "prefs"), "food", {"content": "Alice loves Thai food"})
    first.close()
    again = DialogmemStore(make_memory("kept"))
    item = again.get(("alice", "prefs"), "food")
    assert item is not None and item.value == {"content": "Alice loves Thai food"}


# -- async ---------------------------------------------------------------------------------------
def test_async_variants(store: DialogmemStore) -> None:
    async def run() -> None:
        await store.aput(("alice", "prefs"), "food", {"content": "Alice loves spicy Thai curry", "rank": 1})
        await store.aput(("alice", "prefs"), "drink", {"content": "Alice drinks green tea", "rank": 2})
        got = await store.aget(("alice", "prefs"), "food")
        assert got is not None and got.value["rank"] == 1
        hits = await store.asearch(("alice",), query="green tea", limit=1)
        assert [h.key for h in hits] == ["drink"]
        assert [i.key for i in await store.asearch(("alice",), filter={"rank": 1})] == ["food"]
        assert await store.alist_namespaces(prefix=("alice",)) == [("alice", "prefs")]
        await store.adelete(("alice", "prefs"), "food")
        assert await store.aget(("alice", "prefs"), "food") is None
        both = await asyncio.gather(store.aget(("alice", "prefs"), "drink"), store.aget(("alice", "x"), "y"))
        assert both[0] is not None and both[1] is None
        with pytest.raises(InputError, match="TTL"):
            await store.abatch([PutOp(("alice",), "k", {"v": 1}, ttl=1.0)])

    asyncio.run(run())


# -- a compiled LangGraph graph ------------------------------------------------------------------
class State(TypedDict):
    user: str
    said: str
    recalled: list[str]


def remember(state: State, *, store: BaseStore) -> dict[str, Any]:
    """A node that writes what the user said as a memory item (the store LangGraph injects)."""
    if state["said"]:
        store.put((state["user"], "memories"), str(uuid.uuid4()), {"content": state["said"]})
    return {}


def recall(state: State) -> dict[str, Any]:
    """A node that reads memories back (the store from the run's config)."""
    store = get_store()
    hits = store.search((state["user"], "memories"), query="Which pet does the user have?", limit=1)
    return {"recalled": [h.value["content"] for h in hits]}


def test_a_compiled_graph_writes_in_one_run_and_reads_in_a_later_one(store: DialogmemStore) -> None:
    builder = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_node("recall", recall)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    builder.add_edge("recall", END)
    graph = builder.compile(store=store)
    graph.invoke({"user": "alice", "said": "I have a parrot called Kiwi", "recalled": []})
    graph.invoke({"user": "alice", "said": "My favourite city is Lisbon", "recalled": []})
    graph.invoke({"user": "bob", "said": "I have a dog called Rex", "recalled": []})
    later = graph.invoke({"user": "alice", "said": "", "recalled": []})
    assert later["recalled"] == ["I have a parrot called Kiwi"]
    later_async = asyncio.run(graph.ainvoke({"user": "bob", "said": "", "recalled": []}))
    assert later_async["recalled"] == ["I have a dog called Rex"]
    assert sorted(len(store.search((u, "memories"))) for u in ("alice", "bob")) == [1, 2]


# -- the facade addition the store relies on ------------------------------------------------------
def test_memory_update_can_replace_metadata_and_refuses_bad_metadata_before_writing(mem: Memory) -> None:
    mem.import_records([{"id": str(uuid.uuid4()), "user_id": "alice", "memory": "Alice likes tea",
                         "time_stamp": "2024-05-01T10:00:00", "float_time_stamp": 1714557600.0,
                         "weekday": "Wed", "metadata": {"a": 1}}])
    [old] = mem.get_all("alice")
    kept = mem.update(old.id, "Alice likes green tea", "alice")
    assert kept.metadata == {"a": 1}  # without metadata=, it stays
    new = mem.update(old.id, "Alice likes black tea", "alice", metadata={"b": [1, 2]})
    assert mem.get(old.id, "alice").metadata == new.metadata == {"b": [1, 2]}
    assert mem.history(old.id, "alice")[-1].previous.metadata == {"a": 1}  # type: ignore[union-attr]
    with pytest.raises(InputError, match="metadata"):
        mem.update(old.id, "Alice likes coffee", "alice", metadata={"bad": {1, 2}})  # type: ignore[dict-item]
    assert mem.get(old.id, "alice").memory == "Alice likes black tea"


# -- ids nobody else can take or probe (issue 41 item 4) --------------------------------------------
def test_another_user_can_neither_occupy_nor_probe_an_items_id(store: DialogmemStore, mem: Memory,
                                                              tmp_path: Any) -> None:
    """Item ids used to be uuid5 of namespace + key: alice computed bob's, imported a memory with it
    (bob's later put failed, his get returned None) and learnt from a 422 whether bob's item existed."""
    from dialogmem.integrations._lgitems import item_name, legacy_item_id

    store.put(("bob", "prefs"), "home", {"content": "Bob lives in Porto"})
    bob_id = item_records(mem, "bob")[0].id
    assert bob_id == mem.derived_id("bob", item_name(("bob", "prefs"), "home"))
    assert bob_id != legacy_item_id(("bob", "prefs"), "home")  # what anyone could compute
    assert mem.derived_id("alice", item_name(("bob", "prefs"), "home")) != bob_id  # per user
    # alice plants what she can compute: the old derivation of bob's next item, as a user key's import would
    planted = legacy_item_id(("bob", "prefs"), "car")
    path = write_export(tmp_path / "squat.jsonl", [header(), memory_line(1, id=planted, memory="squatted")])
    assert mem.import_(path).memories == 1
    store.put(("bob", "prefs"), "car", {"content": "Bob drives a red van"})  # not refused: another id
    item = store.get(("bob", "prefs"), "car")
    assert item is not None and item.value == {"content": "Bob drives a red van"}
    assert mem.get(planted, "alice").memory == "squatted"


def test_items_written_under_the_old_ids_are_still_found_and_updated(store: DialogmemStore, mem: Memory) -> None:
    from dialogmem.integrations._lgitems import item_metadata, legacy_item_id

    old_id = legacy_item_id(("carol", "notes"), "k")
    mem.import_records([{"id": old_id, "user_id": "carol", "agent_id": "notes", "memory": "old note",
                         "time_stamp": "2023-05-08T14:00:00", "float_time_stamp": 1.0, "weekday": "Mon",
                         "metadata": item_metadata(("carol", "notes"), "k", {"content": "old note"})}])
    item = store.get(("carol", "notes"), "k")
    assert item is not None and item.value == {"content": "old note"}
    store.put(("carol", "notes"), "k", {"content": "new note"})
    assert [r.id for r in item_records(mem, "carol")] == [old_id]  # updated where it is, not doubled
    got = store.get(("carol", "notes"), "k")
    assert got is not None and got.value == {"content": "new note"}


def test_a_remote_client_is_refused_at_construction() -> None:
    from dialogmem import Client, ConfigError

    with pytest.raises(ConfigError, match="lacks import_records, derived_id"):
        DialogmemStore(Client("http://127.0.0.1:9", api_key="x"))  # type: ignore[arg-type]


def test_a_filter_key_that_is_not_a_string_is_an_input_error(store: DialogmemStore) -> None:
    store.put(("dave", "x"), "k", {"n": {"1": 2}})
    with pytest.raises(InputError, match="filter keys are strings"):
        store.search(("dave",), filter={"n": {1: 2}})
