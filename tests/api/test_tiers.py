"""Memory tiers through ``Memory``: bounded MTM with eviction, the shared de-identified LTM graph
(consolidated by ``sleep``), the ``ltm`` search route, ``graph`` and ``forget_user``. Real SQLite,
Qdrant Edge and MiniLM; the LLM consolidator is driven by a ScriptedLLM (a scripted fake)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from typer.testing import CliRunner

from dialogmem import Event, Memory, NotFoundError, ScriptedLLM
from seams import (
    desync_graph_index,
    fail_graph_commit_halfway,
    forbid_graph_node_scan,
    graph_links,
    graph_route_hits,
    graph_view,
    indexed_graph_nodes,
    journal,
    ltm_queued,
    set_ltm_since,
    user_points,
)

DAY = 86_400
# eight unrelated facts, one per day (LLM-free: one memory per turn)
FACTS = [
    "The Louvre is a museum in Paris.",
    "I planted tomatoes in the vegetable garden.",
    "My violin lesson moved to Thursday evenings.",
    "We adopted a grey kitten named Pepper.",
    "The quarterly budget review is due in March.",
    "I started reading a novel about volcanoes.",
    "Our team switched the database to PostgreSQL.",
    "My sister bought a red bicycle for commuting.",
]


def _add_facts(mem: Memory, user: str, facts: list[str], *, speaker: str = "Caroline Smith",
               start: float = 1_700_000_000.0) -> list[str]:
    """One turn per fact, one day apart; returns the memory ids, oldest first."""
    for i, text in enumerate(facts):
        mem.add([{"role": "user", "name": speaker, "content": text}], user, session_id="s1",
                timestamp=start + i * DAY)
    mem.flush(user)
    records = sorted(mem.get_all(user, limit=1000), key=lambda r: r.float_time_stamp)
    return [r.id for r in records]


def test_sleep_bounds_mtm_and_nothing_is_lost(make_memory: Callable[..., Memory]) -> None:
    mem = make_memory(sleep={"mtm_capacity": 4, "ltm": False}, write={"context_turns": 0})
    ids = _add_facts(mem, "alice", FACTS)
    assert len(ids) == 8
    report = mem.sleep("alice")
    assert report.evicted + report.compressed == 4 and report.ltm is None
    counts = mem.stats("alice")["counts"]
    assert counts["memories"] == 4 and counts["evicted"] == 4 and counts["turns"] == 8
    active = {r.id for r in mem.get_all("alice")}
    evicted = [i for i in ids if i not in active]
    assert evicted == ids[:4]  # same salience, never accessed, unrelated: the oldest go first
    assert {r.id for r in mem.get_all("alice", include_evicted=True)} == set(ids)
    for mid in evicted:
        record = mem.get(mid, "alice")  # still readable
        assert record.memory
        last = mem.history(mid, "alice")[-1]
        assert last.event is Event.EVICT and last.actor.startswith("sleep:mtm:evicted:utility=")
        hits = mem.search(record.memory, "alice", limit=10).hits
        assert mid not in {h.id for h in hits}  # never back in MTM search
    assert mem.sleep("alice").evicted == 0  # at capacity: nothing more to do


def test_accessed_items_survive_eviction(make_memory: Callable[..., Memory]) -> None:
    mem = make_memory(sleep={"mtm_capacity": 4, "ltm": False}, write={"context_turns": 0})
    ids = _add_facts(mem, "alice", FACTS)
    for _ in range(5):  # the oldest fact is retrieved again and again
        assert ids[0] in {h.id for h in mem.search("Which museum is in Paris? The Louvre", "alice", limit=3).hits}
    mem.sleep("alice")
    active = {r.id for r in mem.get_all("alice")}
    assert ids[0] in active and len(active) == 4


def test_eviction_is_per_user(make_memory: Callable[..., Memory]) -> None:
    mem = make_memory(sleep={"mtm_capacity": 5, "ltm": False})
    _add_facts(mem, "alice", FACTS)
    _add_facts(mem, "bob", FACTS[:3], speaker="Bob")
    report = mem.sleep()
    assert report.evicted + report.compressed == 3
    assert mem.stats("alice")["counts"]["memories"] == 5 and mem.stats("bob")["counts"]["memories"] == 3



def test_eviction_applied_in_small_parts_ends_where_one_part_does(make_memory: Callable[..., Memory],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A long history's eviction is read and applied a page at a time (``_evictor._PAGE``): with
    pages of 2 the store ends exactly as with one page (same survivors, same history rows)."""
    import dialogmem._sleep._evictor as evictor

    ends = []
    for page in (5000, 2):
        monkeypatch.setattr(evictor, "_PAGE", page)
        mem = make_memory(f"page{page}", sleep={"mtm_capacity": 3, "ltm": False}, write={"context_turns": 0})
        ids = _add_facts(mem, "alice", FACTS)
        report = mem.sleep("alice")
        kept = sorted(ids.index(r.id) for r in mem.get_all("alice"))
        why = [mem.history(i, "alice")[-1].actor for i in ids]
        ends.append((report.evicted, report.compressed, kept, why))
    assert ends[0] == ends[1] and len(ends[0][2]) == 3 and ends[0][0] == 5


PRIVATE = [
    "Paris is a capital city. Write to caroline.smith@example.com about it.",
    "Call Caroline on +1 (555) 123-4567 before visiting the Louvre, a museum in Paris.",
    "Caroline Smith joined a support group at Mercy Hospital; her user name is carol-77.",
    "Mel said the Golden Gate Bridge is a suspension bridge in San Francisco.",
]


def _all_graph_texts(mem: Memory) -> list[str]:
    view = graph_view(mem)  # live and dropped rows
    texts = [n.text for n in view.nodes.values()]
    texts += [f"{view.nodes[e.source].text} {e.type} {view.nodes[e.target].text}" for e in view.edges.values()]
    return texts


def test_ltm_graph_holds_no_personal_identifier(make_memory: Callable[..., Memory]) -> None:
    mem = make_memory()
    _add_facts(mem, "carol-77", PRIVATE, speaker="Caroline Smith")
    _add_facts(mem, "melanie-x", ["Melanie: the Golden Gate Bridge is in San Francisco."], speaker="Melanie")
    report = mem.sleep()
    assert report.ltm is not None and report.ltm.nodes_added > 0 and report.ltm.memories == 5
    texts = _all_graph_texts(mem)
    assert texts and any("Louvre" in t for t in texts) and any("Paris" in t for t in texts)
    banned = ["caroline", "smith", "melanie", "mel", "carol-77", "carol", "melanie-x", "example.com", "@",
              "555", "4567"]
    leaks = [(t, w) for t in texts for w in banned if re.search(rf"(?<!\w){re.escape(w)}(?!\w)", t, re.I)]
    assert leaks == []
    counts = mem.stats()["counts"]
    audit = mem.graph_audit().rows  # the admin view: graph() shows only what 3 users support
    assert counts["ltm_nodes"] == sum(r.kind == "node" for r in audit) > 0
    assert counts["ltm_edges"] == sum(r.kind == "edge" for r in audit) > 0


def test_forget_user_removes_evidence_and_unsupported_knowledge(make_memory: Callable[..., Memory]) -> None:
    mem = make_memory(write={"context_turns": 0})
    _add_facts(mem, "alice", ["Paris is a capital city.", "Mercy Hospital is a hospital."], speaker="Alice")
    _add_facts(mem, "bob", ["Paris is a capital city.", "The Louvre is a museum."], speaker="Bob")
    mem.sleep()
    before = _nodes(mem)  # two users: graph() (k-anonymous, 3 users) would show none of it
    assert {"Paris", "Mercy Hospital", "Louvre"} <= set(before)
    alice_graph = mem.graph("alice")
    assert "Mercy Hospital" in {n.text for n in alice_graph.nodes} and "Louvre" not in {
        n.text for n in alice_graph.nodes}
    assert mem.stats("alice")["counts"]["ltm_links"] > 0
    mem.forget_user("alice")
    view = graph_view(mem)
    texts = {n.text: n for n in view.nodes.values()}
    assert "Mercy Hospital" not in texts  # rested only on alice: deleted, not merely dropped
    assert before["Paris"].evidence == 2 and texts["Paris"].live and texts["Paris"].evidence == 1
    assert texts["Paris"].confidence == pytest.approx(before["Paris"].confidence / 2)
    assert texts["Louvre"].evidence == before["Louvre"].evidence
    assert graph_links(mem, "alice") == []
    assert mem.stats("alice")["counts"]["ltm_links"] == 0



def test_delete_removes_the_memorys_evidence_links(make_memory: Callable[..., Memory]) -> None:
    mem = make_memory(write={"context_turns": 0})
    ids = _add_facts(mem, "alice", ["Paris is a capital city.", "Mercy Hospital is a hospital."], speaker="Alice")
    _add_facts(mem, "bob", ["Paris is a capital city."], speaker="Bob")
    mem.sleep()
    before = _nodes(mem)
    assert before["Paris"].evidence == 2 and "Mercy Hospital" in before
    hospital = ids[1]
    assert any(link.memory_id == hospital for link in graph_links(mem, "alice"))
    mem.delete(hospital, "alice")
    links = graph_links(mem, "alice")
    assert links and all(link.memory_id != hospital for link in links)  # the other memory's links stay
    texts = {n.text: n for n in graph_view(mem).nodes.values()}
    assert "Mercy Hospital" not in texts  # rested only on the deleted memory
    assert texts["Paris"].evidence == 2 and texts["Paris"].live  # not supported by it
    assert mem.history(hospital, "alice")[-1].event == Event.DELETE
    mem.delete(ids[0], "alice")  # Paris keeps bob's support only
    after = {n.text: n for n in graph_view(mem).nodes.values()}
    assert after["Paris"].evidence == 1 and after["Paris"].live and graph_links(mem, "alice") == []


def test_delete_of_an_evicted_item_removes_its_evidence(make_memory: Callable[..., Memory]) -> None:
    mem = make_memory(write={"context_turns": 0}, sleep={"mtm_capacity": 1})
    _add_facts(mem, "alice", ["Mercy Hospital is a hospital.", "Paris is a capital city."], speaker="Alice")
    report = mem.sleep()
    assert report.evicted == 1 and report.ltm is not None and report.ltm.memories == 2
    active = {r.id for r in mem.get_all("alice")}
    (evicted,) = [r for r in mem.get_all("alice", include_evicted=True) if r.id not in active]
    assert any(link.memory_id == evicted.id for link in graph_links(mem, "alice"))
    mem.delete(evicted.id, "alice")
    assert all(link.memory_id != evicted.id for link in graph_links(mem, "alice"))
    with pytest.raises(NotFoundError):
        mem.get(evicted.id, "alice")



def test_evicted_items_are_handed_to_consolidation_whatever_the_clock(make_memory: Callable[..., Memory]) -> None:
    mem = make_memory("clock", write={"context_turns": 0}, sleep={"mtm_capacity": 1, "ltm": False})
    _add_facts(mem, "alice", ["Mercy Hospital is a hospital.", "Paris is a capital city."], speaker="Alice")
    assert mem.sleep().evicted == 1
    (queued,) = ltm_queued(mem)  # marked in the eviction's transaction
    mem.close()
    mem = make_memory("clock", write={"context_turns": 0}, sleep={"mtm_capacity": 1})
    set_ltm_since(mem, 1e12)  # a clock far ahead wrote the last cycle's time
    report = mem.sleep()
    assert report.ltm is not None and report.ltm.memories == 1 and report.ltm.evicted_in_batch == 1
    assert queued[1] in {link.memory_id for link in graph_links(mem, "alice")}
    assert ltm_queued(mem) == []


def test_ltm_route_in_search(make_memory: Callable[..., Memory]) -> None:
    mem = make_memory(sleep={"mtm_capacity": 2}, write={"context_turns": 0})
    ids = _add_facts(mem, "alice", FACTS[:4], speaker="Alice")
    _add_facts(mem, "bob", ["I like tea."], speaker="Bob")
    report = mem.sleep()
    assert report.evicted + report.compressed == 2
    assert report.ltm is not None and report.ltm.evicted_in_batch == 2  # evicted items feed consolidation
    louvre = ids[0]  # evicted from alice's MTM, its knowledge lives on in LTM
    assert louvre not in {r.id for r in mem.get_all("alice")}
    res = mem.search("What is the Louvre?", "alice", limit=6)  # general question: up to K // 2 graph facts
    ltm = [h for h in res.hits if h.tier == "ltm"]
    assert ltm and any("Louvre" in h.memory for h in ltm) and len(ltm) <= 3 and len(res.hits) <= 6
    assert "ltm" in res.timings_ms
    own = mem.get(louvre, "alice")
    assert set(own.source_turn_ids) <= {t for h in ltm for t in h.source_turn_ids}  # cites alice's own turns
    # what alice alone said is hers: bob sees none of it (k-anonymity, sleep.ltm_min_users = 3)
    assert not [h for h in mem.search("What is the Louvre?", "bob", limit=6).hits if h.tier == "ltm"]
    for user in ("carol", "dave"):
        _add_facts(mem, user, FACTS[:1], speaker=user.title(), start=1_800_000_000.0)
    mem.sleep()  # three users now support the Louvre fact: it is everyone's
    other = mem.search("What is the Louvre?", "bob", limit=6)
    bob_ltm = [h for h in other.hits if h.tier == "ltm"]
    assert bob_ltm and all(h.source_turn_ids == [] for h in bob_ltm)  # shared fact, none of the others' turns
    assert all(h.id != louvre for h in other.hits)


def test_ltm_budget_for_personal_questions_and_switch_off(make_memory: Callable[..., Memory]) -> None:
    mem = make_memory(sleep={"ltm_search_hits": 0})
    _add_facts(mem, "alice", FACTS[:3], speaker="Alice")
    mem.sleep()
    assert mem.stats()["counts"]["ltm_nodes"] > 0
    personal = mem.search("Which museum did I talk about, the Louvre?", "alice", limit=5)
    assert all(h.tier == "mtm" for h in personal.hits)  # a personal question gets ltm_search_hits = 0
    mem.close()
    off = make_memory("off", sleep={"ltm": False})
    _add_facts(off, "alice", FACTS[:3], speaker="Alice")
    assert off.sleep().ltm is None and off.stats()["counts"]["ltm_nodes"] == 0
    assert all(h.tier == "mtm" for h in off.search("What is the Louvre?", "alice").hits)


def _consolidate_script(answer: dict[str, Any] | Exception) -> Callable[[str, list[dict[str, str]]], str]:
    def script(stage: str, messages: list[dict[str, str]]) -> str:
        assert stage == "consolidate", stage
        assert "Caroline" not in messages[-1]["content"]  # the model only sees de-identified text
        if isinstance(answer, Exception):
            raise answer
        return json.dumps(answer)

    return script


def test_llm_consolidator_with_scripted_model(make_memory: Callable[..., Memory]) -> None:
    answer = {"units": [{"sources": [1], "nodes": [{"text": "Louvre", "type": "Entity"},
                                                   {"text": "art museum", "type": "Concept"},
                                                   {"text": "Caroline", "type": "Entity"}],
                         "edges": [{"source": "Louvre", "relation": "IsA", "target": "art museum"},
                                   {"source": "Caroline", "relation": "RelatedTo", "target": "Louvre"}]}]}
    llm = ScriptedLLM(_consolidate_script(answer))
    mem = make_memory(llm_client=llm, write={"extractor": "rules"},
                      sleep={"updater": "rules", "consolidator": "llm"})
    _add_facts(mem, "carol", ["Caroline visited the Louvre, an art museum."], speaker="Caroline")
    report = mem.sleep()
    assert report.ltm is not None and report.ltm.method == "llm" and report.ltm.fallbacks == 0
    g = mem.graph("carol")
    assert {n.text for n in g.nodes} == {"Louvre", "art museum"}  # the model's name is dropped
    assert [(e.type) for e in g.edges] == ["IsA"]
    assert llm.stages() == ["consolidate"]


def test_llm_consolidator_falls_back_to_rules(make_memory: Callable[..., Memory]) -> None:
    from dialogmem import LLMUnavailableError

    llm = ScriptedLLM(_consolidate_script(LLMUnavailableError("down")), max_retries=0)
    mem = make_memory(llm_client=llm, write={"extractor": "rules"},
                      sleep={"updater": "rules", "consolidator": "auto"})
    _add_facts(mem, "carol", ["The Louvre is a museum in Paris."], speaker="Caroline")
    report = mem.sleep()
    assert report.ltm is not None and report.ltm.fallbacks == 1 and report.ltm.method == "rule"
    assert "Louvre" in {n.text for n in mem.graph("carol").nodes}
    assert mem.stats()["llm"]["consolidate"]["fallbacks"] == 1


def test_consolidation_is_incremental(make_memory: Callable[..., Memory]) -> None:
    mem = make_memory()
    _add_facts(mem, "alice", ["The Louvre is a museum in Paris."], speaker="Alice")
    first = mem.sleep().ltm
    assert first is not None and first.memories == 1
    again = mem.sleep().ltm
    assert again is not None and again.memories == 0 and again.nodes_added == 0  # nothing new: no cycle
    paris = _nodes(mem)["Paris"]
    _add_facts(mem, "bob", ["Paris is a capital city."], speaker="Bob", start=1_800_000_000.0)
    third = mem.sleep().ltm
    assert third is not None and third.memories == 1
    assert _nodes(mem)["Paris"].evidence == paris.evidence + 1


def test_graph_query_cli_and_async(make_memory: Callable[..., Memory], tmp_path: Any) -> None:
    import asyncio

    from dialogmem import AsyncMemory
    from dialogmem.cli import app

    mem = make_memory("g")
    _add_facts(mem, "alice", ["The Louvre is a museum in Paris.", "Paris is a capital city."], speaker="Alice")
    mem.sleep()
    near = mem.graph("alice", query="Louvre", limit=5)  # one user: graph() alone shows 3 users' knowledge
    assert "Louvre" in {n.text for n in near.nodes} and len(near.nodes) <= 5
    ids = {n.id for n in near.nodes}
    assert all(e.source in ids and e.target in ids for e in near.edges)
    mem.close()
    runner = CliRunner()
    out = runner.invoke(app, ["graph", "--data-dir", str(tmp_path / "g"), "--user", "alice", "--format", "json"])
    assert out.exit_code == 0, out.output
    assert "Louvre" in {n["text"] for n in json.loads(out.output)["nodes"]}
    target = tmp_path / "g.graphml"
    out = runner.invoke(app, ["graph", "--data-dir", str(tmp_path / "g"), "-u", "alice", "-f", "graphml",
                              "-o", str(target)])
    assert out.exit_code == 0 and "<graphml" in target.read_text()

    async def read() -> int:
        async with AsyncMemory(data_dir=tmp_path / "g") as amem:
            return len((await amem.graph("alice")).nodes)

    assert asyncio.run(read()) > 0


@pytest.mark.parametrize("bad", [0, 10_001])
def test_graph_rejects_bad_limit(make_memory: Callable[..., Memory], bad: int) -> None:
    from dialogmem import InputError

    with pytest.raises(InputError):
        make_memory().graph(limit=bad)


def test_a_failed_graph_commit_leaves_no_trace_and_is_retried(make_memory: Callable[..., Memory],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from dialogmem import StoreError

    mem = make_memory()
    _add_facts(mem, "alice", ["The Louvre is a museum in Paris."], speaker="Alice")
    # every graph row written inside the transaction, then the commit fails
    fixed = fail_graph_commit_halfway(monkeypatch, StoreError("disk full"))
    with pytest.raises(StoreError):
        mem.sleep()
    stored = journal(mem)
    assert stored.graph_counts() == {"ltm_nodes": 0, "ltm_edges": 0, "ltm_links": 0} and stored.ltm_since() == 0.0
    fixed()
    report = mem.sleep().ltm
    assert report is not None and report.memories == 1 and report.nodes_added > 0  # the same batch again


def test_read_only_store_reads_the_graph(make_memory: Callable[..., Memory], tmp_path: Any) -> None:
    mem = make_memory("ro")
    for user in ("alice", "carol", "dave"):  # three users: the fact is everyone's (sleep.ltm_min_users)
        _add_facts(mem, user, ["The Louvre is a museum in Paris."], speaker=user.title())
    mem.sleep()
    nodes = {n.text for n in mem.graph().nodes}
    assert "Louvre" in nodes
    mem.close()
    with Memory(data_dir=tmp_path / "ro", read_only=True) as ro:
        assert {n.text for n in ro.graph().nodes} == nodes
        # bob has no evidence: the shared fact is his to read (alice's own MTM hit already says it for her)
        assert any(h.tier == "ltm" and "Louvre" in h.memory for h in ro.search("What is the Louvre?", "bob",
                                                                                limit=4).hits)


def _indexed_nodes(mem: Memory) -> dict[str, str]:
    return indexed_graph_nodes(mem)


def _nodes(mem: Memory) -> dict[str, Any]:
    """Every live node by text, whoever may see it (what consolidation wrote)."""
    return {n.text: n for n in graph_view(mem, with_links=False).live_nodes()}


def _graph_hits(mem: Memory, user: str, query: str) -> list[Any]:
    """The graph route's hits for ``user`` as such (no MTM hit beside them to make one redundant)."""
    return graph_route_hits(mem, user, query)


def _live_nodes(mem: Memory) -> dict[str, str]:
    return {n.id: n.text for n in graph_view(mem, with_links=False).live_nodes()}


def test_graph_nodes_are_indexed_under_tier_ltm(make_memory: Callable[..., Memory],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    mem = make_memory()
    _add_facts(mem, "alice", FACTS[:3], speaker="Alice")
    mem.sleep()
    live = _live_nodes(mem)
    assert live and _indexed_nodes(mem) == live  # every live node, with its text, and nothing else
    assert mem.stats()["counts"]["memories"] == 3  # a user's counts and reads never see the nodes
    assert all(h.tier == "mtm" for h in user_points(mem, "alice"))
    forbid_graph_node_scan(monkeypatch)  # the search route must not read every node
    hits = _graph_hits(mem, "alice", "What is the Louvre?")  # alice's own knowledge (bob sees none of it)
    assert hits and any("Louvre" in h.memory for h in hits)
    monkeypatch.undo()
    # forgetting the only supporter deletes the unsupported knowledge: its points leave the index too
    mem.forget_user("alice")
    assert _indexed_nodes(mem) == _live_nodes(mem) == {}
    assert not _graph_hits(mem, "alice", "What is the Louvre?")


def test_graph_index_catches_up_after_a_crash_and_a_rebuild(make_memory: Callable[..., Memory],
                                                           tmp_path: Any) -> None:
    mem = make_memory("crash")
    _add_facts(mem, "alice", FACTS[:3], speaker="Alice")
    mem.sleep()
    live = _live_nodes(mem)
    # a crash after the journal commit: the index lost some node points and holds one the journal
    # dropped meanwhile, and the synced mark is behind the journal's generation
    lost = sorted(live)[:2]
    dropped = sorted(live)[2]
    desync_graph_index(mem, lost, dropped)
    mem.close()
    again = make_memory("crash")
    now = _live_nodes(again)
    assert dropped not in now and set(lost) <= set(now)
    assert _indexed_nodes(again) == now
    # `dialogmem repair` rebuilds the index from the journal, nodes included
    again.rebuild_index()
    assert _indexed_nodes(again) == now
    assert _graph_hits(again, "alice", "What is the Louvre?")

