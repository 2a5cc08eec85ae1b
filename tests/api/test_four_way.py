"""The public-API suite, run against all four implementations of the verbs: ``Memory``,
``AsyncMemory``, ``Client`` (a real uvicorn server) and ``AsyncClient``. One test body each; and a
check that the four expose exactly the protocol's verbs with the protocol's parameters."""

from __future__ import annotations

import inspect
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from apikit import IMPLEMENTATIONS, implementation, quarantined_file
from dialogmem import (
    AddResult,
    AsyncClient,
    AsyncMemory,
    Client,
    ExportReport,
    ImportReport,
    InputError,
    LTMGraph,
    Memory,
    MemoryRecord,
    NotFoundError,
    SearchResult,
    SleepReport,
)
from dialogmem._api import VERBS, AsyncMemoryAPI, MemoryAPI

WHEN = "2023-05-08T13:56:00"
#: verbs of Memory that act on a store's files or hand it numpy arrays: never remote
LOCAL_ONLY = {"repair", "rebuild_index", "verify_key", "import_records", "import_mem0", "import_chats",
              "derived_id"}  # derived_id: keyed by the store's secret, which no server serves


@pytest.fixture(scope="module", params=IMPLEMENTATIONS)
def api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with implementation(request.param, tmp_path_factory.mktemp(request.param) / "store") as impl:
        yield impl


@pytest.fixture
def user() -> str:
    """A user of this test only (the store is shared by the tests of one implementation)."""
    return f"u-{uuid.uuid4().hex[:10]}"


def remember(api: Any, user: str, *texts: str) -> list[str]:
    got = api.add(list(texts), user, timestamp=WHEN, flush=True)
    assert isinstance(got, AddResult) and len(got.turn_ids) == len(texts)
    return [m.id for m in got.memories]


def test_add_then_search_finds_it(api: Any, user: str) -> None:
    got = api.add([{"content": "My beagle is called Rex.", "id": f"{user}-1"}, "I live in Lyon."], user,
                  timestamp=WHEN, flush=True)
    assert got.turn_ids[0] == f"{user}-1" and got.turn_ids[1].startswith("t-")  # every turn has an id
    assert len(got.memories) == 2 and got.pending_turns == 0
    result = api.search("what is my dog called", user, limit=3)
    assert isinstance(result, SearchResult)
    assert "Rex" in result.hits[0].memory and f"{user}-1" in result.hits[0].source_turn_ids
    expanded = api.search("beagle", user, limit=1, expand=True).hits[0]
    assert [s.text for s in expanded.sources] == ["My beagle is called Rex."]


def test_a_repeated_message_id_adds_nothing(api: Any, user: str) -> None:
    message = {"content": "I play the cello on Sundays.", "id": "m-1"}
    first = api.add([message], user, timestamp=WHEN, flush=True)
    again = api.add([message], user, timestamp=WHEN, flush=True)
    assert len(first.memories) == 1
    assert again.memories == first.memories  # a retry answers as the first try did, and writes nothing
    assert api.stats(user)["counts"]["turns"] == 1 and len(api.get_all(user)) == 1


def test_get_update_history(api: Any, user: str) -> None:
    (mid,) = remember(api, user, "My favourite colour is green.")
    record = api.get(mid, user)
    assert isinstance(record, MemoryRecord) and record.memory.endswith("green.") and record.version == 1
    new = api.update(mid, "My favourite colour is blue.", user)
    assert new.version == 2 and api.get(mid, user).memory == "My favourite colour is blue."
    rows = api.history(mid, user)
    assert [r.event for r in rows] == ["ADD", "UPDATE"]
    assert rows[1].old_memory.endswith("green.") and rows[1].new_memory == "My favourite colour is blue."
    assert "blue" in api.search("favourite colour", user, limit=1).hits[0].memory


def test_delete_then_not_found(api: Any, user: str) -> None:
    mid, keep = remember(api, user, "I own a red bicycle.", "I own a blue kayak.")
    assert api.delete(mid, user) is None
    with pytest.raises(NotFoundError, match=mid):
        api.get(mid, user)
    with pytest.raises(NotFoundError):
        api.delete(mid, user)
    assert [r.id for r in api.get_all(user)] == [keep]
    assert mid not in [h.id for h in api.search("bicycle", user).hits]


def test_another_users_id_is_not_found(api: Any, user: str) -> None:
    (mid,) = remember(api, user, "My locker code is in the blue notebook.")
    other = f"{user}-other"
    for call in (lambda: api.get(mid, other), lambda: api.update(mid, "x", other), lambda: api.delete(mid, other),
                 lambda: api.history(mid, other), lambda: api.sources(mid, other)):
        with pytest.raises(NotFoundError):
            call()
    assert api.search("locker code notebook", other).hits == []
    assert api.get(mid, user).memory.endswith("notebook.")  # untouched


@pytest.mark.parametrize("bad", ["empty query", "limit 0", "no messages", "message without content", "bad mode",
                                 "bad filter", "bad timestamp"])
def test_bad_input_is_input_error(api: Any, user: str, bad: str) -> None:
    calls = {
        "empty query": lambda: api.search("   ", user),
        "limit 0": lambda: api.get_all(user, limit=0),
        "no messages": lambda: api.add([], user),
        "message without content": lambda: api.add([{"role": "user"}], user),
        "bad mode": lambda: api.answer("dog?", user, mode="bogus"),
        "bad filter": lambda: api.search("dog", user, filters={"colour": "red"}),
        "bad timestamp": lambda: api.add("hello", user, timestamp="not a time at all"),
    }
    with pytest.raises(InputError):
        calls[bad]()
    assert api.stats(user)["counts"]["turns"] == 0  # nothing was written


def test_get_all_pages_and_filters(api: Any, user: str) -> None:
    ids = remember(api, user, *(f"Fact number {n} is about the {w} garden." for n, w in
                                enumerate(("north", "south", "east", "west", "inner"))))
    pages, offset = [], None
    while page := api.get_all(user, limit=2, offset=offset):
        pages.append([r.id for r in page])
        offset = page[-1].id
    assert [len(p) for p in pages] == [2, 2, 1]
    assert [i for page in pages for i in page] == sorted(ids)
    api.add("The shed is painted yellow.", user, session_id="s-2", timestamp=WHEN, flush=True)
    only = api.get_all(user, filters={"session_id": "s-2"})
    assert len(only) == 1 and only[0].memory.endswith("The shed is painted yellow.")
    # contains: the text holds it, any case; LIKE's own wildcards are plain characters
    south = api.get_all(user, contains="SOUTH garden")
    assert ids[1] in [r.id for r in south] and ids[0] not in [r.id for r in south]
    assert all("south garden" in r.memory.lower() for r in south)
    assert len(api.get_all(user, contains="garden", limit=2)) == 2
    (sale,) = remember(api, user, "Discount: 50% off_season!")
    assert sale in [r.id for r in api.get_all(user, contains="50% off_")]
    assert api.get_all(user, contains="5_%") == [] and api.get_all(user, contains="off!") == []
    with pytest.raises(InputError):
        api.get_all(user, contains="  ")


def test_sources_cite_the_raw_turns(api: Any, user: str) -> None:
    got = api.add([{"content": "We moved to Porto in March.", "id": f"{user}-porto"}], user, timestamp=WHEN,
                  flush=True)
    turns = api.sources(got.memories[0].id, user)
    assert [(t.id, t.text) for t in turns] == [(f"{user}-porto", "We moved to Porto in March.")]


def test_stats_count_this_users_records(api: Any, user: str) -> None:
    remember(api, user, "I like tea.", "I like chess.")
    counts = api.stats(user)["counts"]
    assert (counts["memories"], counts["turns"], counts["pending_turns"]) == (2, 2, 0)
    assert "latency" in api.stats(user) or "llm" in api.stats(user) or "counts" in api.stats(user)


def test_sleep_merges_a_duplicate(api: Any, user: str) -> None:
    remember(api, user, "Yannick Brouard adopted a beagle named Rex in Lyon.")
    remember(api, user, "Yannick Brouard adopted a beagle named Rex in Lyon.")
    assert len(api.get_all(user)) == 2
    report = api.sleep(user)
    assert isinstance(report, SleepReport) and report.merged == 1 and report.users == 1
    assert len(api.get_all(user)) == 1


def test_quarantine_list_retry_drop(api: Any, user: str, tmp_path: Path) -> None:
    path = quarantined_file(tmp_path / "q.jsonl", user, [f"{user}-a", f"{user}-b"])
    assert api.import_(path).quarantined == 2
    listed = api.quarantined(user)
    assert sorted(q.turn.id for q in listed) == [f"{user}-a", f"{user}-b"] and listed[0].error == "extractor bug"
    assert api.drop_quarantined(user, [f"{user}-b"]) == 1
    retried = api.retry_quarantined(user)
    assert retried.turn_ids == [f"{user}-a"] and len(retried.memories) == 1 and retried.quarantined == []
    assert api.quarantined(user) == []
    assert "violin" in api.search("violin", user, limit=1).hits[0].memory


def test_graph_shows_a_users_own_knowledge_only(api: Any, user: str) -> None:
    name = "Ottoline " + "".join(chr(97 + int(c, 16)) for c in uuid.uuid4().hex[:7]).capitalize()
    remember(api, user, f"{name} plays the oboe in Grenoble.")
    api.sleep(user)
    own = api.graph(user)
    assert isinstance(own, LTMGraph) and name in {n.text for n in own.nodes}
    assert all(own.evidence[n.id] for n in own.nodes)  # each node cites this user's memories
    assert name not in {n.text for n in api.graph().nodes}  # one supporter: not public
    assert api.graph(f"{user}-other").nodes == []
    rows = [r for r in api.graph_audit().rows if r.text == name]
    assert len(rows) == 1 and rows[0].supporters == 1 and rows[0].visible_to != "everyone"
    assert name in [n.text for n in api.graph(user, query=name).nodes]


def test_export_import_round_trip(api: Any, user: str, tmp_path: Path) -> None:
    ids = remember(api, user, "Maya's dog is called Biscuit.", "Maya is allergic to peanuts.")
    api.update(ids[0], "Maya's dog is called Biscuit and he is three.", user)
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    report = api.export(first, user)
    assert isinstance(report, ExportReport)
    assert (report.users, report.turns, report.memories, report.history) == ([user], 2, 2, 3)
    before = api.search("Maya's dog", user, limit=2).hits
    assert api.forget_user(user) == {"turns": 2, "memories": 2}
    got = api.import_(first)
    assert isinstance(got, ImportReport) and (got.turns, got.memories, got.history) == (2, 2, 3)
    assert api.import_(first).skipped_memories == 2  # a second time adds nothing
    api.export(second, user)
    assert first.read_text().splitlines()[1:] == second.read_text().splitlines()[1:]
    assert [(h.id, h.memory) for h in api.search("Maya's dog", user, limit=2).hits] == [
        (h.id, h.memory) for h in before]
    assert json.loads(first.read_text().splitlines()[0])["users"] == [user]


def test_forget_user_removes_everything(api: Any, user: str) -> None:
    (mid,) = remember(api, user, "My passport number is in the drawer.")
    assert api.forget_user(user) == {"turns": 1, "memories": 1}
    assert api.get_all(user) == [] and api.stats(user)["counts"]["turns"] == 0
    with pytest.raises(NotFoundError):
        api.get(mid, user)


def test_answer_cites_the_memories(api: Any, user: str) -> None:
    remember(api, user, "My sister Ines lives in Porto.")
    got = api.answer("where does my sister live?", user, mode="light")
    assert got.text == "scripted answer" and got.used == "light" and got.context_tokens > 0  # memories were shown


# -- the four expose the same verbs ---------------------------------------------------------------
def _shape(fn: Any) -> list[tuple[str, Any, Any, Any]]:
    sig = inspect.signature(fn)
    params = [(p.name, p.kind, p.default, p.annotation) for p in sig.parameters.values()]
    return [*params, ("return", None, None, sig.return_annotation)]


@pytest.mark.parametrize("cls", [Memory, AsyncMemory, Client, AsyncClient], ids=lambda c: c.__name__)
def test_every_implementation_has_the_protocols_verbs(cls: type) -> None:
    protocol = MemoryAPI if cls in (Memory, Client) else AsyncMemoryAPI
    for verb in VERBS:
        ours, theirs = getattr(cls, verb), getattr(protocol, verb)
        assert _shape(ours) == _shape(theirs), verb
        assert inspect.iscoroutinefunction(ours) == (protocol is AsyncMemoryAPI), verb
    public = {n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n))}
    extra = {"open", "repair"} | LOCAL_ONLY  # AsyncMemory.open, Memory.repair: ways to open a local store
    assert public - set(VERBS) <= extra, public - set(VERBS)
    if cls in (Client, AsyncClient):
        assert public == set(VERBS)  # no local-only verb, and none inherited as an empty protocol body
        assert all(verb in vars(cls) for verb in VERBS)
