"""The reader's context of a set of hits (``_text._render``): time headers, chained runs, each line once."""

from __future__ import annotations

from dialogmem._text._render import chain_runs, covers, render_hits, shown_lines
from dialogmem._types import SearchHit, SearchResult, render_context


def hit(memory: str, stamp: str = "2023-05-08T13:56:00", weekday: str = "Mon", turns: tuple[str, ...] = ("t",),
        hid: str | None = None) -> SearchHit:
    return SearchHit(id=hid or memory[:20], memory=memory, score=1.0, time_stamp=stamp, weekday=weekday,
                     speaker_name="", source_turn_ids=list(turns))


def test_covers_same_text_and_clipped_prefix_only() -> None:
    assert covers("A: one two three", "A: one two three")
    assert covers("A: one two three four", "A: one two ...")
    assert not covers("A: one two ...", "A: one two three four")  # the full line is never covered by a clip
    assert not covers("A: one two three", "A: one three ...")
    assert not covers("A: one two", "A: one two three")
    assert not covers("A: x", " ...")


def test_chain_runs_joins_memories_that_continue_each_other_in_either_order() -> None:
    first = ["A: q1", "B: a1"]
    second = ["B: a1", "A: q2"]  # carries the first one's turn as context
    assert chain_runs([first, second]) == [["A: q1", "B: a1", "A: q2"]]
    assert chain_runs([second, first]) == [["A: q1", "B: a1", "A: q2"]]
    # a clipped context line matches the full line, and the run keeps the full one
    clipped = ["B: a1 long ...", "A: q2"]
    assert chain_runs([["A: q1", "B: a1 long answer"], clipped]) == [["A: q1", "B: a1 long answer", "A: q2"]]
    assert chain_runs([clipped, ["A: q1", "B: a1 long answer"]]) == [["A: q1", "B: a1 long answer", "A: q2"]]
    # two-line overlaps (windows of three turns), and unrelated memories stay apart
    assert chain_runs([["a", "b", "c"], ["b", "c", "d"], ["x"]]) == [["a", "b", "c", "d"], ["x"]]


def test_render_groups_by_time_oldest_first_with_short_headers_on_the_same_day() -> None:
    hits = [hit("B: later", "2023-05-08T15:02:00"), hit("A: second day", "2023-05-09T09:00:00", "Tue"),
            hit("A: first", "2023-05-08T13:56:00"), hit("B: also first", "2023-05-08T13:56:00")]
    assert render_hits(hits).splitlines() == [
        "[Mon 8 May 2023 13:56]", "A: first", "B: also first",
        "[15:02]", "B: later",
        "[Tue 9 May 2023 09:00]", "A: second day",
    ]


def test_render_shows_every_line_once_and_drops_only_clips_shown_in_full() -> None:
    hits = [
        hit("Mel: what kinda jobs are you thinking of? ...\nCaroline: counseling", hid="2"),
        hit("Caroline: gonna check out career options\nMel: what kinda jobs are you thinking of? Anything?",
            hid="1"),
        hit("Caroline: counseling", "2023-06-01T10:00:00", "Thu", hid="3"),  # said again, another day
        hit("Caroline: counseling", "2023-05-08T16:00:00", hid="5"),  # the same day, later: shown once
        hit("Mel: a clipped line with no full version ...\nCaroline: ok", "2023-06-02T10:00:00", "Fri", hid="4"),
    ]
    lines = render_hits(hits).splitlines()
    assert lines == [
        "[Mon 8 May 2023 13:56]",
        "Caroline: gonna check out career options",
        "Mel: what kinda jobs are you thinking of? Anything?",
        "Caroline: counseling",
        "[Thu 1 June 2023 10:00]",  # said again another day: shown again, under that day
        "Caroline: counseling",
        "[Fri 2 June 2023 10:00]",
        "Mel: a clipped line with no full version ...",
        "Caroline: ok",
    ]
    # every line of every hit is in the context, in full or as the full version of its clip
    shown = set(lines)
    for h in hits:
        for line in h.memory.splitlines():
            assert line in shown or any(covers(s, line) for s in shown)


def test_render_is_the_search_result_context_and_tolerates_odd_input() -> None:
    hits = [hit("A: x\n\n  B:   spaced  ", "not-a-date", "")]
    assert render_context(hits) == SearchResult(query="q", hits=hits).context() == "[not-a-date]\nA: x\nB: spaced"
    assert render_hits([]) == ""
    seconds = render_hits([hit("A: y", "2023-05-08T13:56:07")])
    assert seconds.splitlines()[0] == "[Mon 8 May 2023 13:56:07]"


def test_llm_free_memories_carry_two_turns_of_context_and_render_each_turn_once(make_memory) -> None:
    mem = make_memory()
    turns = [("Ann", "I adopted a puppy."), ("Bob", "Oh nice, what is its name?"),
             ("Ann", "His name is Biscuit."), ("Bob", "Cute! Is he a golden retriever?")]
    for i, (who, text) in enumerate(turns, start=1):
        mem.add([{"content": text, "name": who, "id": f"T{i}"}], "ann", session_id="s1",
                timestamp="2023-05-08T13:56:00")
    mem.flush("ann")
    by_turn = {r.source_turn_ids[-1]: r for r in mem.get_all("ann", limit=100)}
    assert by_turn["T3"].source_turn_ids == ["T1", "T2", "T3"]  # the default: two turns before it
    assert by_turn["T3"].memory.splitlines() == ["Ann: I adopted a puppy.", "Bob: Oh nice, what is its name?",
                                                 "Ann: His name is Biscuit."]
    assert by_turn["T1"].source_turn_ids == ["T1"]
    result = mem.search("What is the name of Ann's puppy?", "ann", limit=4)
    context = result.context().splitlines()
    assert context[0] == "[Mon 8 May 2023 13:56]"
    assert sorted(context[1:]) == sorted(f"{who}: {text}" for who, text in turns)  # 4 hits, each turn shown once


def test_shown_lines_are_the_rendered_lines_and_name_every_memory_and_turn_behind_them() -> None:
    first = hit("A: q1\nB: a1 long ...\nA: q2", turns=("t1", "t2", "t3"), hid="m3")
    second = hit("B: a1 long answer\nA: q2\nB: a2", turns=("t2", "t3", "t4"), hid="m4")
    fact = hit("Anna likes tea", stamp="2023-05-09T09:00:00", weekday="Tue", turns=("t7", "t8"), hid="f")
    hits = [second, fact, first]
    shown = shown_lines(hits)
    assert [s.text for s in shown] == ["A: q1", "B: a1 long answer", "A: q2", "B: a2", "Anna likes tea"]
    assert render_hits(hits).splitlines() == ["[Mon 8 May 2023 13:56]", "A: q1", "B: a1 long answer", "A: q2",
                                              "B: a2", "[Tue 9 May 2023 09:00]", "Anna likes tea"]
    assert [s.excerpt for s in shown] == [0, 0, 0, 0, 1]  # the chained run, then the fact's own
    owners = {s.text: (set(s.memory_ids), s.turn_ids) for s in shown}
    assert owners["A: q1"] == ({"m3"}, ("t1",))
    assert owners["B: a1 long answer"] == ({"m3", "m4"}, ("t2",))  # the clipped copy counts for the full line
    assert owners["A: q2"] == ({"m3", "m4"}, ("t3",))
    assert owners["B: a2"] == ({"m4"}, ("t4",))
    assert owners["Anna likes tea"] == ({"f"}, ("t7", "t8"))  # one line citing two turns stands for both


def test_excerpts_number_the_runs_and_skip_runs_shown_elsewhere() -> None:
    one = hit("A: q1\nB: a1", turns=("t1", "t2"), hid="m1")
    apart = hit("A: q9\nB: a9", turns=("t9", "t10"), hid="m9")  # same session, does not chain with m1
    again = hit("A: q1\nB: a1", turns=("t1", "t2"), hid="m1b")  # every line already shown
    later = hit("C: hi", stamp="2023-05-09T09:00:00", weekday="Tue", turns=("t20",), hid="m20")
    shown = shown_lines([one, again, apart, later])
    assert [(s.text, s.excerpt) for s in shown] == [("A: q1", 0), ("B: a1", 0), ("A: q9", 1), ("B: a9", 1),
                                                    ("C: hi", 2)]


def test_the_context_says_until_when_a_superseded_memory_held_and_since_when_its_successor() -> None:
    old = hit("Tom: Things are quiet here in Denver.", stamp="2023-03-04T18:12:00", turns=("d1",), hid="old")
    old = old.model_copy(update={"invalid_at": "2023-07-02T10:05:00", "superseded_by": "new"})
    new = hit("Tom: I moved to Seattle last weekend.", stamp="2023-07-02T10:05:00", turns=("d3",), hid="new")
    new = new.model_copy(update={"valid_from": "2023-07-02T10:05:00"})
    text = render_context([new, old])
    assert "Tom: Things are quiet here in Denver. [until 2023-07-02; superseded]" in text
    assert "Tom: I moved to Seattle last weekend. [since 2023-07-02]" in text
    # a current memory whose predecessor is not among the hits says nothing extra
    assert render_context([new]) == render_hits([new])
