"""Issue 27: nothing one user said reaches another user through the shared LTM graph.

The rule (``_sleep._visibility``): a node or edge is shown to a user only when that user's own
memories support it or at least ``sleep.ltm_min_users`` (3) distinct users' do; secrets, id-like
numbers, health conditions and amounts never become node text (``_sleep._sensitive``). Checked on
real parts: SQLite, Qdrant Edge, MiniLM, a uvicorn server with an HTTP client (REST) and the
``mcp`` SDK's client (MCP over streamable HTTP).
The rules themselves, without I/O: tests/sleep/test_privacy_rules.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from typer.testing import CliRunner

from dialogmem import Memory
from seams import graph_view
from serverkit import bearer, rest_server

DAY = 86_400.0
T0 = 1_700_000_000.0

# -- the repro of the issue --------------------------------------------------------------------

REPRO = ["My bank PIN is 4711.", "My password for the bank is hunter2zebra.",
         "I was diagnosed with diabetes type 2 last March.", "Zanzibar Quokka Holdings pays my salary.",
         "My social security number is 078-05-1120."]
REPRO_MARKS = ["4711", "hunter2zebra", "diabetes", "zanzibar", "quokka", "078-05-1120", "1120"]


def _say(mem: Memory, user: str, texts: Sequence[str], *, start: float = T0) -> None:
    for i, text in enumerate(texts):
        mem.add([{"role": "user", "content": text}], user, session_id="s1", timestamp=start + i * DAY, flush=True)


def _graph_texts(g: Any) -> str:
    return (g.to_graphml() + json.dumps([n.text for n in g.nodes])).lower()


def test_repro_bob_never_sees_what_alice_said(make_memory: Callable[..., Memory]) -> None:
    mem = make_memory(write={"context_turns": 0})
    _say(mem, "alice", REPRO)
    _say(mem, "bob", ["I like tea in the morning."])
    assert mem.sleep().ltm is not None
    stored = graph_view(mem)
    all_text = " ".join(n.text.lower() for n in stored.nodes.values())
    # secrets never become node text at all: not even alice's own view could show them
    assert all(m not in all_text for m in ["4711", "hunter2zebra", "diabetes", "078-05-1120", "1120"])
    assert "zanzibar quokka holdings" in all_text  # the rare name is learnt, but it is alice's alone
    for query in ["What is the bank PIN?", "What is the password for the bank?", "Who pays the salary?",
                  "What is Zanzibar Quokka Holdings?", "Who was diagnosed with diabetes?"]:
        hits = mem.search(query, "bob", limit=10).hits
        shown = " ".join(h.memory.lower() for h in hits)
        assert not any(m in shown for m in REPRO_MARKS), (query, shown)
        assert not any(h.tier == "ltm" and "bank" in h.memory.lower() for h in hits)  # one user's "bank" too
    for g in (mem.graph(limit=10_000), mem.graph("bob"), mem.graph(query="Zanzibar Quokka Holdings bank PIN")):
        assert not any(m in _graph_texts(g) for m in REPRO_MARKS)
    assert "zanzibar" in _graph_texts(mem.graph("alice"))


# -- the leak table: >= 50 sensitive statements, several users, every route ------------------------

SPEAKERS = ["alice", "bob", "carol", "dave"]
OBSERVER = "eve"  # a user with memories of her own and no evidence for any statement
# (statement, marker that must never reach another user, probe question): each said by one user
ONE_USER: list[tuple[str, str, str]] = [
    ("My bank PIN is 4711.", "4711", "What is the bank PIN?"),
    ("My password for the bank is hunter2zebra.", "hunter2zebra", "What is the bank password?"),
    ("I was diagnosed with diabetes type 2 last March.", "diabetes", "What is diabetes?"),
    ("Zanzibar Quokka Holdings pays my salary.", "quokka", "What is Zanzibar Quokka Holdings?"),
    ("My social security number is 078-05-1120.", "1120", "What is the social security number?"),
    ("The wifi password at the office is plumtree88.", "plumtree88", "What is the wifi password?"),
    ("My laptop login is kestrel-owl-42.", "kestrel", "What is the laptop login?"),
    ("The API key for the billing service is sk-live-9f8e7d6c5b.", "9f8e7d6c5b", "What is the billing API key?"),
    ("The garage door code is 5583.", "5583", "What is the garage door code?"),
    ("My credit card number is 4111 1111 1111 1111.", "4111", "What is the credit card number?"),
    ("The CVV on my card is 823.", "823", "What is the card CVV?"),
    ("My passport number is X4829173.", "x4829173", "What is the passport number?"),
    ("The safe combination is 12-34-56.", "12-34-56", "What is the safe combination?"),
    ("My IBAN is DE89370400440532013000.", "de8937", "What is the IBAN?"),
    ("The backup passphrase is velvet marmot sunrise.", "marmot", "What is the backup passphrase?"),
    ("My online banking username is quietfalcon77.", "quietfalcon", "What is the online banking username?"),
    ("My PayPal password is mango-tiger-19.", "mango-tiger", "What is the PayPal password?"),
    ("The alarm code at the flat is 9904.", "9904", "What is the alarm code at the flat?"),
    ("My chemotherapy for lymphoma starts next week.", "lymphoma", "What is lymphoma chemotherapy?"),
    ("I take lithium for bipolar disorder.", "lithium", "What is lithium for?"),
    ("My psychiatrist says the anxiety medication is working.", "psychiatrist", "What does a psychiatrist say?"),
    ("I tested positive for hepatitis C in April.", "hepatitis", "What is hepatitis C?"),
    ("My HIV test came back positive.", "hiv", "What is an HIV test?"),
    ("I had a miscarriage in the spring.", "miscarriage", "What is a miscarriage?"),
    ("I have been in rehab for alcoholism twice.", "rehab", "What is rehab?"),
    ("The epilepsy seizures started when I was twelve.", "epilepsy", "What is epilepsy?"),
    ("My father has early onset Alzheimer's.", "alzheimer", "What is early onset Alzheimer's?"),
    ("My blood pressure medication is lisinopril.", "lisinopril", "What is lisinopril?"),
    ("My salary is $184,500 a year.", "184,500", "What is the salary?"),
    ("I owe 23,750 euros on my student loan.", "23,750", "What is the student loan?"),
    ("I paid £640 for the fertility clinic.", "640", "What is the fertility clinic?"),
    ("My rent is 2150 dollars a month.", "2150", "What is the rent?"),
    ("Grandma left me 95000 USD.", "95000", "What did grandma leave?"),
    ("I earn 71000 euros before tax.", "71000", "What are the earnings before tax?"),
    ("My employee number at the plant is 5521907.", "5521907", "What is the employee number?"),
    ("My locker at the gym is number 8841.", "8841", "What is the gym locker number?"),
    ("Our licence plate is KZ 4471 B.", "4471", "What is the licence plate?"),
    ("The tracking code for my parcel is 1Z999AA10123456784.", "1z999aa", "What is the parcel tracking code?"),
    ("I live next to the Vellmoor Tannery.", "vellmoor", "What is the Vellmoor Tannery?"),
    ("My boss at the Brightwater Kelp Farm is strict.", "brightwater", "What is the Brightwater Kelp Farm?"),
    ("I volunteer at the Oskarsgate Hedgehog Rescue.", "oskarsgate", "What is the Oskarsgate Hedgehog Rescue?"),
    ("My daughter attends the Pinecrest Wyvern Academy.", "wyvern", "What is the Pinecrest Wyvern Academy?"),
    ("We bought a cabin on Lake Tsarnaby.", "tsarnaby", "What is Lake Tsarnaby?"),
    ("I am the only beekeeper in Hollowmere Village.", "hollowmere", "What is Hollowmere Village?"),
    ("The Grimsdottir Bakery is my second job.", "grimsdottir", "What is the Grimsdottir Bakery?"),
    ("I race pigeons for the Faldenbrook Club.", "faldenbrook", "What is the Faldenbrook Club?"),
    ("My ex works at Quillon Robotics.", "quillon", "What is Quillon Robotics?"),
    ("My therapist in Kettleby says I have PTSD.", "kettleby", "What is Kettleby?"),
]
# said by alice, bob and carol: sensitive ones stay out of the graph whatever their support
THREE_SENSITIVE: list[tuple[str, str, str]] = [
    ("My gym PIN is 2468.", "2468", "What is the gym PIN?"),
    ("I was diagnosed with asthma as a child.", "asthma", "What is asthma?"),
    ("My monthly rent is $1,900.", "1,900", "What is the monthly rent?"),
    ("The office door code is 7310.", "7310", "What is the office door code?"),
    ("I take insulin every morning.", "insulin", "What is insulin?"),
]
# said by alice, bob and carol: general knowledge, k-anonymous, so every user may see it
THREE_GENERAL: list[tuple[str, str, str]] = [
    ("The Louvre is a museum in Paris.", "louvre", "What is the Louvre?"),
    ("The Golden Gate Bridge is a suspension bridge.", "golden gate", "What is the Golden Gate Bridge?"),
    ("The Marlowe Street Market is a farmers market.", "marlowe", "What is the Marlowe Street Market?"),
]
THREE = ["alice", "bob", "carol"]
GENERAL = {s for s, _m, _p in THREE_GENERAL}


def _statements() -> list[tuple[str, str, str, list[str]]]:
    """(statement, marker, probe, speakers) of the whole table."""
    rows = [(s, m, p, [SPEAKERS[i % len(SPEAKERS)]]) for i, (s, m, p) in enumerate(ONE_USER)]
    rows += [(s, m, p, THREE) for s, m, p in THREE_SENSITIVE + THREE_GENERAL]
    return rows


def _fill(mem: Memory) -> None:
    said: dict[str, list[str]] = {}
    for statement, _m, _p, speakers in _statements():
        for user in speakers:
            said.setdefault(user, []).append(statement)
    said[OBSERVER] = ["I like tea in the morning.", "My cat sleeps on the sofa."]
    for user, texts in said.items():
        _say(mem, user, texts)
    report = mem.sleep()
    assert report.ltm is not None and report.ltm.nodes_added > 0


def _shown(hits: Sequence[dict[str, Any]], *, ltm_only: bool) -> str:
    return " ".join(h["memory"].lower() for h in hits if not ltm_only or h["tier"] == "ltm")


async def _mcp_search(url: str, key: str, probes: list[str]) -> list[list[dict[str, Any]]]:
    out = []
    async with httpx2.AsyncClient(headers=bearer(key), timeout=120) as client, \
            streamable_http_client(f"{url}/mcp", http_client=client) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        for probe in probes:
            result = await session.call_tool("search_memory", {"query": probe, "limit": 10})
            assert not result.is_error, result.content
            data = result.structured_content or json.loads(result.content[0].text)
            data = data.get("result", data)
            out.append([*data["hits"], {"memory": data["context"], "tier": "context"}])
    return out


def leak_table(tmp_path: Path) -> list[dict[str, Any]]:
    """One row per (statement, viewer, route): whether the statement's marker was shown to the viewer.
    Routes: library search, REST search, MCP search (the viewer's key), graph() (public view),
    graph(viewer), graph(query=probe) and its GraphML export."""
    rows: list[dict[str, Any]] = []
    statements = _statements()
    users = [*SPEAKERS, OBSERVER]
    with rest_server(tmp_path / "store", users, write={"extractor": "rules", "segmenter": "none",
                                                       "context_turns": 0}) as (url, keys, mem):
        _fill(mem)
        public = _graph_texts(mem.graph(limit=10_000))
        own_graph = {u: _graph_texts(mem.graph(u, limit=10_000)) for u in users}
        mcp = {u: anyio.run(_mcp_search, url, keys[u], [p for _s, _m, p, _sp in statements]) for u in users}
        with httpx.Client(timeout=120) as http:
            for i, (statement, marker, probe, speakers) in enumerate(statements):
                query_graph = _graph_texts(mem.graph(query=probe, limit=50))
                for user in users:
                    own = user in speakers
                    lib = [h.model_dump() for h in mem.search(probe, user, limit=10).hits]
                    rest = http.post(f"{url}/v1/search", json={"query": probe, "limit": 10},
                                     headers=bearer(keys[user]))
                    assert rest.status_code == 200, rest.text
                    seen = {"search": _shown(lib, ltm_only=own), "rest": _shown(rest.json()["hits"], ltm_only=own),
                            "mcp": _shown(mcp[user][i], ltm_only=own), "graph(user)": own_graph[user],
                            "graph()": public, "graph(query)+graphml": query_graph}
                    for route, text in seen.items():
                        rows.append({"statement": statement, "speakers": len(speakers), "viewer": user,
                                     "own": own, "route": route, "visible": marker in text})
    return rows


def _expected(row: dict[str, Any]) -> bool | None:
    """Whether the row's marker should be shown (None: not checked — a speaker's own search also
    shows their own memory, and a graph hit their MTM hits already cite gives its slot back)."""
    statement, own, route = row["statement"], row["own"], row["route"]
    if own and route in ("search", "rest", "mcp"):
        return None
    if statement in GENERAL:
        return own or route != "graph(user)"  # graph(user) holds what the user's memories support
    if statement in RARE_NAMES:
        return own and route == "graph(user)"  # learnt, and alice's alone
    return False  # a secret, an id number, a health condition or an amount: never node text


def test_no_one_user_statement_reaches_another_user(tmp_path: Path) -> None:
    rows = leak_table(tmp_path)
    assert len({r["statement"] for r in rows} - GENERAL) >= 50
    wrong = [r for r in rows if _expected(r) is not None and r["visible"] != _expected(r)]
    assert wrong == []
    assert [r for r in rows if r["speakers"] == 1 and not r["own"] and r["visible"]] == []
    print(_summary(rows))


RARE_NAMES = {s for s, m, _p in ONE_USER if m in {
    "quokka", "vellmoor", "brightwater", "oskarsgate", "wyvern", "tsarnaby", "hollowmere", "grimsdottir",
    "faldenbrook", "quillon"}}


def _summary(rows: list[dict[str, Any]]) -> str:
    """statements x viewers x route -> visible count, in groups."""
    groups: dict[tuple[str, str, str], list[bool]] = {}
    for r in rows:
        kind = ("3 users, general" if r["statement"] in GENERAL
                else "3 users, sensitive" if r["speakers"] == 3
                else "1 user, rare name" if r["statement"] in RARE_NAMES else "1 user, sensitive")
        groups.setdefault((kind, "speaker" if r["own"] else "other user", r["route"]), []).append(r["visible"])
    lines = ["kind | viewer | route | visible / checked"]
    lines += [f"{k} | {v} | {route} | {sum(x)} / {len(x)}" for (k, v, route), x in sorted(groups.items())]
    return "\n".join(lines)


# -- the admin audit ---------------------------------------------------------------------------

def test_graph_audit_lists_supporters_and_why(make_memory: Callable[..., Memory], tmp_path: Path) -> None:
    from dialogmem.cli import app

    mem = make_memory("audit", write={"context_turns": 0})
    for user in THREE:
        _say(mem, user, ["The Louvre is a museum in Paris."])
    _say(mem, "dave", ["I volunteer at the Oskarsgate Hedgehog Rescue."])
    mem.sleep()
    report = mem.graph_audit()
    rows = {r.text: r for r in report.rows if r.kind == "node"}
    assert rows["Louvre"].supporters == 3 and rows["Louvre"].visible_to == "everyone"
    assert rows["Louvre"].reason == "3 users >= 3"
    rescue = next(r for t, r in rows.items() if "Oskarsgate" in t)
    assert rescue.supporters == 1 and rescue.visible_to == "its supporters"
    assert rescue.reason == "1 user < 3: only visible to its supporters"
    assert {r.id for r in report.rows if r.visible_to == "everyone"} == (
        {n.id for n in mem.graph(limit=10_000).nodes} | {e.id for e in mem.graph(limit=10_000).edges})
    mem.close()
    runner = CliRunner()
    out = runner.invoke(app, ["graph", "--audit", "--data-dir", str(tmp_path / "audit"), "-f", "json"])
    assert out.exit_code == 0, out.output
    assert any(r["text"] == "Louvre" and r["supporters"] == 3 for r in json.loads(out.output)["rows"])
    table = runner.invoke(app, ["graph", "--audit", "--data-dir", str(tmp_path / "audit")])
    public = sum(r.visible_to == "everyone" for r in report.rows)
    assert table.exit_code == 0 and f"{len(report.rows)} rows, {public} visible to everyone" in table.output
    bad = runner.invoke(app, ["graph", "--audit", "--user", "alice", "--data-dir", str(tmp_path / "audit")])
    assert bad.exit_code == 1 and "takes no --user" in bad.output


def test_min_users_setting_is_used(make_memory: Callable[..., Memory]) -> None:
    from dialogmem import DialogmemError

    mem = make_memory("two", write={"context_turns": 0}, sleep={"ltm_min_users": 2})
    for user in ("alice", "bob"):
        _say(mem, user, ["The Louvre is a museum in Paris."])
    mem.sleep()
    assert "Louvre" in {n.text for n in mem.graph().nodes}  # 2 users >= 2
    assert any(h.tier == "ltm" and "Louvre" in h.memory for h in mem.search("What is the Louvre?", "eve").hits)
    mem.close()
    three = make_memory("two", write={"context_turns": 0})  # the same store read with the default 3
    assert "Louvre" not in {n.text for n in three.graph().nodes}
    assert not any(h.tier == "ltm" for h in three.search("What is the Louvre?", "eve").hits)
    with pytest.raises(DialogmemError):
        make_memory("bad", sleep={"ltm_min_users": 1})  # 1 would share everything anyone said
