"""Knowledge that changes, end to end on the LLM-free defaults (real SQLite, Qdrant Edge, MiniLM):
sleep finds that a later statement replaced an earlier one and closes the earlier one's validity
(kept, never deleted); reading puts the current statement first for a present-state question and
still reaches the old one for a past-state question; every surface carries the fields."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dialogmem import Event, Memory
from dialogmem._sleep._supersede import find_supersessions
from dialogmem._types import MemoryRecord

USER = "u"

#: the LLM-free detector at sleep time is opt-in (``sleep.supersede_rules``)
RULE_SUPERSESSION = {"sleep": {"supersede_rules": True}}


def turn(mem: Memory, text: str, speaker: str, when: str, session: str, user: str = USER) -> MemoryRecord:
    got = mem.add([{"content": text, "name": speaker}], user, session_id=session, timestamp=when, flush=True)
    [record] = [r for r in mem.get_all(user, limit=1000) if r.source_turn_ids[-1] == got.turn_ids[-1]]
    return record


def story(mem: Memory, user: str = USER) -> dict[str, MemoryRecord]:
    out = {
        "denver": turn(mem, "Things are quiet here in Denver, still snowing every other day.", "Tom",
                       "2023-03-04T18:12:00", "s1", user),
        "sister": turn(mem, "My sister Elena just moved to Lisbon for work.", "Tom", "2023-03-04T18:13:00", "s1",
                       user),
        "maya": turn(mem, "I live in a tiny flat near the hospital.", "Maya", "2023-03-04T18:14:00", "s1", user),
        "if": turn(mem, "If I moved to Austin I would miss the mountains.", "Tom", "2023-04-21T20:40:00", "s2",
                   user),
        "seattle": turn(mem, "Already left. I moved to Seattle last weekend.", "Tom", "2023-07-02T10:05:00", "s3",
                        user),
    }
    return out


def test_sleep_supersedes_the_old_home_and_keeps_it(make_memory: Any) -> None:
    mem = make_memory(**RULE_SUPERSESSION)
    s = story(mem)
    report = mem.sleep(USER)
    assert report.superseded == 1 and report.deleted == 0
    old = mem.get(s["denver"].id, USER)
    assert old.memory == s["denver"].memory  # kept, text unchanged
    assert old.superseded_by == s["seattle"].id and old.invalid_at == s["seattle"].time_stamp
    assert old.valid_from == s["denver"].time_stamp and old.version == s["denver"].version + 1
    # not changes: a relative's move, someone else's home, a hypothetical
    for name in ("sister", "maya", "if", "seattle"):
        got = mem.get(s[name].id, USER)
        assert got.superseded_by is None and got.invalid_at is None, name
    hist = mem.history(old.id, USER)
    assert [h.event for h in hist] == [Event.ADD, Event.UPDATE]
    assert hist[-1].actor == f"sleep:rule:superseded-by:{s['seattle'].id}"
    assert old.id in {r.id for r in mem.get_all(USER, limit=100)}
    assert mem.sleep(USER).superseded == 0  # nothing new: nothing decided again


def test_present_question_gets_the_new_home_first_and_past_question_reaches_the_old(make_memory: Any) -> None:
    mem = make_memory(**RULE_SUPERSESSION)
    s = story(mem)
    mem.sleep(USER)
    now = mem.search("Where does Tom live now?", USER, limit=5)
    assert now.hits[0].id == s["seattle"].id
    ranks = [h.id for h in now.hits]
    assert s["denver"].id not in ranks or ranks.index(s["denver"].id) > ranks.index(s["seattle"].id)
    before = mem.search("Where did Tom live before he moved?", USER, limit=5)
    denver_turn = s["denver"].source_turn_ids[-1]
    assert any(denver_turn in h.source_turn_ids for h in before.hits[:3])  # cited in the top 3
    old = next(h for h in before.hits if h.id == s["denver"].id)  # and the statement itself reached
    assert old.superseded_by == s["seattle"].id and old.invalid_at == s["seattle"].time_stamp
    context = before.context()
    assert "[until 2023-07-02; superseded]" in context and "[since 2023-07-02]" in context


def test_a_present_question_demotes_a_replaced_statement_before_any_sleep(make_memory: Any) -> None:
    """Reading checks the candidates' claims itself, so a change said since the last sleep counts."""
    mem = make_memory(**RULE_SUPERSESSION)
    s = story(mem)
    hits = mem.search("Where does Tom live now?", USER, limit=5).hits
    assert hits[0].id == s["seattle"].id


def test_a_chain_keeps_both_links(make_memory: Any) -> None:
    mem = make_memory(**RULE_SUPERSESSION)
    a = turn(mem, "I drive an old Honda Civic.", "Lu", "2023-01-05T10:00:00", "s1")
    b = turn(mem, "I sold the Honda and bought a Prius.", "Lu", "2023-03-05T10:00:00", "s2")
    mem.sleep(USER)
    c = turn(mem, "I switched to a new electric Kia last week.", "Lu", "2023-08-05T10:00:00", "s3")
    mem.sleep(USER)
    got = {r.id: r for r in mem.get_all(USER, limit=10)}
    assert got[a.id].superseded_by == b.id and got[b.id].superseded_by == c.id and got[c.id].is_current
    # within one pass too: oldest first, each replaced by the next
    records = [a.model_copy(update={"superseded_by": None, "invalid_at": None}), b, c]
    pairs = [(x.target_id, x.successor_id) for x in find_supersessions(records, [])]
    assert pairs == [(a.id, b.id), (b.id, c.id)]


def test_validity_travels_through_export_and_import(make_memory: Any, tmp_path: Path) -> None:
    mem = make_memory("a", **RULE_SUPERSESSION)
    s = story(mem)
    mem.sleep(USER)
    path = tmp_path / "out.jsonl"
    mem.export(path, USER)
    other = make_memory("b", **RULE_SUPERSESSION)
    other.import_(path)
    old = other.get(s["denver"].id, USER)
    assert old.superseded_by == s["seattle"].id and old.invalid_at == s["seattle"].time_stamp
    assert old.valid_from == s["denver"].time_stamp


def test_another_users_statements_never_supersede(make_memory: Any) -> None:
    mem = make_memory(**RULE_SUPERSESSION)
    turn(mem, "Things are quiet here in Denver.", "Tom", "2023-03-04T18:12:00", "s1", user="a")
    turn(mem, "I moved to Seattle last weekend.", "Tom", "2023-07-02T10:05:00", "s3", user="b")
    assert mem.sleep("a").superseded == 0 and mem.sleep("b").superseded == 0
    assert all(r.is_current for r in mem.get_all("a"))
