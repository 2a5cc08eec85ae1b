"""The LTM route's pure decisions (``_read._ltm``): whether a question is personal, how many of the
``limit`` slots graph hits may take, and which graph hits add something to the MTM hits.
Moved from tests/api/test_tiers.py, whose tests go through ``Memory``."""

from __future__ import annotations

from typing import Any

from dialogmem import SearchHit
from dialogmem._read._ltm import ltm_slots, personal_reference, useful_graph_hits
from dialogmem._read._plan import HypotheticalQuery, QueryPlan


def _hit(hid: str, turns: list[str], tier: str = "mtm") -> Any:
    return SearchHit(id=hid, memory=hid, score=1.0, time_stamp="", weekday="", speaker_name="",
                     source_turn_ids=turns, tier=tier)  # type: ignore[arg-type]


def test_routing_and_budget_split() -> None:
    assert personal_reference("What did Maya adopt?", ["Maya Lopez"])
    assert personal_reference("where do you work", [])
    assert not personal_reference("What is a capital city?", ["Maya"])
    general = QueryPlan(query="What is a capital city?", hqs=[HypotheticalQuery(text="capital city")])
    personal = QueryPlan(query="Which city did I visit?", hqs=[HypotheticalQuery(text="city visit")])
    routed = QueryPlan(query="Which city did I visit?", hqs=[HypotheticalQuery(text="city", route="ltm")])
    assert ltm_slots(general, 10, speakers=[], personal_hits=2) == 5
    assert ltm_slots(personal, 10, speakers=[], personal_hits=2) == 1
    assert ltm_slots(personal, 1, speakers=[], personal_hits=2) == 0  # the top hits stay the user's own
    assert ltm_slots(personal, 5, speakers=[], personal_hits=2) == 0
    assert ltm_slots(personal, 20, speakers=[], personal_hits=2) == 2
    assert ltm_slots(routed, 10, speakers=[], personal_hits=0) == 5  # the LLM planner routed a view to LTM
    mtm = [_hit("m1", ["t1"]), _hit("m2", ["t2"]), _hit("m3", ["t3"])]
    redundant, new, general_fact = _hit("g1", ["t1"], "ltm"), _hit("g2", ["t9"], "ltm"), _hit("g3", [], "ltm")
    assert [h.id for h in useful_graph_hits(mtm, [redundant, new, general_fact], 3)] == ["g2", "g3"]
    # t3 sits in the slot the graph hit would take: the hit brings it back, so it is kept
    assert [h.id for h in useful_graph_hits(mtm, [_hit("g4", ["t3"], "ltm")], 3)] == ["g4"]
