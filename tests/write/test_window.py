"""Sliding windows (write/_window.py) and the window extraction prompt (prompts/extract.py).

The window arithmetic is checked exhaustively for every window size and stride up to 10 turns. The
LLM in the last test is ``ScriptedLLM``: a scripted fake (NOT a model) whose answer goes through the
client's real repair / validation path.
"""

from __future__ import annotations

import json

import pytest

from dialogmem import ScriptedLLM
from dialogmem._prompts.extract import EXTRACT_WINDOW_SYSTEM
from dialogmem._write._extract import BufferedTurn, ExtractionOutput
from dialogmem._write._window import (
    Citation,
    Window,
    map_citation,
    map_window_citation,
    plan_windows,
    render_window,
)


def check_plan(turns: list[int], before: list[int], window: int, stride: int) -> list[Window[int]]:
    plan = plan_windows(turns, window=window, stride=stride, context_before=before)
    history = [*before, *turns]
    assert [t for w in plan for t in w.targets] == turns  # each turn a target exactly once, in order
    for w in plan:
        assert 1 <= len(w.targets) <= stride
        assert len(w.context) + len(w.targets) <= window
        assert turns[w.start:w.start + len(w.targets)] == list(w.targets)
        i = len(before) + w.start
        # context: exactly the turns just before the targets, as many as the window leaves room for
        assert list(w.context) == history[max(0, i - (window - stride)):i]
        assert not set(w.context) & set(w.targets)
        assert w.lines == (*w.context, *w.targets)
    return plan


def test_every_turn_is_a_target_once_for_all_window_and_stride_up_to_10() -> None:
    cases = 0
    for n in range(11):
        turns = list(range(100, 100 + n))
        for window in range(1, 11):
            for stride in range(1, window + 1):
                for n_before in (0, 1, 3):
                    before = list(range(n_before))
                    plan = check_plan(turns, before, window, stride)
                    assert len(plan) == -(-n // stride)  # ceil(n / stride) windows
                    cases += 1
    assert cases == 11 * 55 * 3


def test_concrete_plan_w4_s2() -> None:
    plan = plan_windows(list("abcdefg"), window=4, stride=2, context_before=list("xyz"))
    assert [("".join(w.context), "".join(w.targets), w.start) for w in plan] == [
        ("yz", "ab", 0), ("ab", "cd", 2), ("cd", "ef", 4), ("ef", "g", 6)]
    # no overlap: only the previous batch gives context
    plan = plan_windows(list("abcd"), window=2, stride=2, context_before=list("xyz"))
    assert [("".join(w.context), "".join(w.targets)) for w in plan] == [("", "ab"), ("", "cd")]
    plan = plan_windows(list("abcd"), window=3, stride=2, context_before=list("xyz"))
    assert [("".join(w.context), "".join(w.targets)) for w in plan] == [("z", "ab"), ("b", "cd")]


def test_windows_never_cross_a_group() -> None:
    turns = ["s1:a", "s1:b", "s1:c", "s2:d", "s2:e", "s1:f"]
    before = ["s0:p", "s1:q", "s1:r"]

    def session(t: str) -> str:
        return t.split(":")[0]

    for window in range(1, 8):
        for stride in range(1, window + 1):
            plan = plan_windows(turns, window=window, stride=stride, context_before=before,
                                group=session)
            assert [t for w in plan for t in w.targets] == turns
            for w in plan:
                assert len({session(t) for t in w.lines}) == 1
    plan = plan_windows(turns, window=3, stride=2, context_before=before, group=session)
    assert [(w.context, w.targets, w.start) for w in plan] == [
        (("s1:r",), ("s1:a", "s1:b"), 0), (("s1:b",), ("s1:c",), 2),
        ((), ("s2:d", "s2:e"), 3), ((), ("s1:f",), 5)]


@pytest.mark.parametrize(("window", "stride"), [(0, 1), (3, 0), (2, 3)])
def test_bad_window_arguments(window: int, stride: int) -> None:
    with pytest.raises(ValueError, match="stride"):
        plan_windows([1, 2, 3], window=window, stride=stride)


def test_empty_batch_has_no_window() -> None:
    assert plan_windows([], window=4, stride=2, context_before=[1, 2]) == []


# ---------------------------------------------------------------- citations

CONTEXT = ["Melanie: How is your sister Anna doing?", "Caroline: She moved to Lisbon last month."]
TARGETS = ["Melanie: Does she like the bakery job there?", "Caroline: She loves the bakery job."]


def test_target_citations_are_kept_and_context_ids_stripped() -> None:
    assert map_citation([3], "Anna loves the bakery job.", context_texts=CONTEXT,
                        target_texts=TARGETS) == Citation((1,), "cited")
    assert map_citation([1, 3, 3], "Anna moved to Lisbon and loves her bakery job.",
                        context_texts=CONTEXT, target_texts=TARGETS) == Citation((1,), "context_stripped")


def test_context_only_fact_is_dropped_unless_its_words_point_at_a_target() -> None:
    # restates the context line: an earlier window wrote it, so it is dropped, not re-attributed
    assert map_citation([1], "Caroline's sister Anna moved to Lisbon.", context_texts=CONTEXT,
                        target_texts=TARGETS) == Citation((), "dropped")
    # cites a context number but says what the last target line says: the number was a slip
    assert map_citation([0], "Caroline loves the bakery job.", context_texts=CONTEXT,
                        target_texts=TARGETS) == Citation((1,), "reattributed")
    # an unknown id with words of no line at all
    assert map_citation([9], "Something else entirely.", context_texts=CONTEXT,
                        target_texts=TARGETS) == Citation((), "dropped")


def test_context_is_never_cited_whatever_the_ids() -> None:
    n = len(CONTEXT) + len(TARGETS)
    facts = ["Anna moved to Lisbon.", "Anna loves the bakery job.", "Nothing shared here."]
    for a in range(-1, n + 1):
        for b in range(-1, n + 1):
            for fact in facts:
                got = map_citation([a, b], fact, context_texts=CONTEXT, target_texts=TARGETS)
                assert all(0 <= p < len(TARGETS) for p in got.targets)
                assert (got.outcome == "dropped") == (not got.targets)


# ---------------------------------------------------------------- the window prompt, scripted LLM


def bt(tid: str, speaker: str, text: str, minute: int) -> BufferedTurn:
    return BufferedTurn(turn_id=tid, speaker=speaker, text=text, compressed=text,
                        time_stamp=f"2023-05-08T13:{minute:02d}:00",
                        float_time_stamp=1683550000.0 + minute * 60, weekday="Mon", session_id="s1")


def test_window_prompt_and_mapping_with_a_scripted_llm() -> None:
    turns = [bt(f"t{i}", *line.split(": ", 1), minute=i)
             for i, line in enumerate([*CONTEXT, *TARGETS])]
    (w,) = plan_windows(turns[2:], window=4, stride=2, context_before=turns[:2])
    messages = render_window(w)
    assert messages[0]["content"] == EXTRACT_WINDOW_SYSTEM
    user = messages[1]["content"].splitlines()
    assert user[0] == "Participants: Melanie, Caroline"
    assert user[1] == "--- Context ---" and user[4] == "--- New ---"
    assert user[2].endswith("0.Melanie: How is your sister Anna doing?")
    assert user[3].endswith("1.Caroline: She moved to Lisbon last month (April 2023).")
    assert user[5].endswith("2.Melanie: Does she like the bakery job there?")
    assert user[6].endswith("3.Caroline: She loves the bakery job.")

    llm = ScriptedLLM([json.dumps({"data": [
        {"source_id": 1, "fact": "Caroline's sister Anna moved to Lisbon in April 2023."},
        {"source_id": [1, 3], "fact": "Caroline's sister Anna loves her bakery job in Lisbon."},
        {"source_id": "id 0", "fact": "Anna loves the bakery job."},
    ]})])
    out = llm.complete_json(messages, ExtractionOutput, stage="add_memory")
    got = [(map_window_citation(w, item.ids(), item.fact), item.fact) for item in out.data]
    written = [(tuple(w.targets[p].turn_id for p in c.targets), c.outcome) for c, _ in got]
    assert written == [((), "dropped"), (("t3",), "context_stripped"), (("t3",), "reattributed")]
    assert llm.stages() == ["add_memory"]
