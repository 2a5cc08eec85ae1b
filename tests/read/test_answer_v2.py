"""Answer prompt v2: line rendering, natural dates, and the tolerant reply parsers (pure functions)."""

from __future__ import annotations

from datetime import date, datetime

import pytest

from dialogmem._prompts import answer_v2 as v2
from dialogmem._prompts.answer_v2 import CitedAnswer, ContextLine
from dialogmem._text._timenorm import absolutize
from timing import assert_linear

LINES = [
    ContextLine(when=datetime(2023, 1, 20, 16, 4), speaker="Jon",
                text="Lost my job as a banker yesterday (2023-01-19)."),
    ContextLine(when=datetime(2023, 5, 7, 9, 0), speaker="Gina", text="Jon: How is the studio?\nGina: Busy!"),
    ContextLine(when=None, speaker="", text="a note without a date"),
]


@pytest.mark.parametrize(("raw", "n", "want"), [
    ("7 May 2023 [2, 5]", 5, CitedAnswer(text="7 May 2023", lines=[2, 5])),
    ("Answer: \"Lisbon\" [3]\n", 5, CitedAnswer(text="Lisbon", lines=[3])),
    ("[2] 7 May 2023", 5, CitedAnswer(text="7 May 2023", lines=[2])),
    ("7 May 2023\n[2]", 5, CitedAnswer(text="7 May 2023", lines=[2])),
    ("Lisbon (lines 2 and 4)", 5, CitedAnswer(text="Lisbon", lines=[2, 4])),
    ("painting, pottery [1-3; 9]", 10, CitedAnswer(text="painting, pottery", lines=[1, 2, 3, 9])),
    # prose around the answer and no numbers at all: still an answer, citing nothing
    ("The answer is Lisbon.", 5, CitedAnswer(text="The answer is Lisbon.", lines=[])),
    ("**Answer:** Lisbon []", 5, CitedAnswer(text="Lisbon", lines=[])),
    ("", 5, CitedAnswer(text="", lines=[])),
    # numbers outside 1..n are dropped, repeats kept once, order kept
    ("Jon [0, 11, 2, 2, 1]", 10, CitedAnswer(text="Jon", lines=[2, 1])),
    ("Jon [4, 5]", 3, CitedAnswer(text="Jon", lines=[])),
    # brackets holding words belong to the answer
    ("Lisbon [Portugal] [1]", 3, CitedAnswer(text="Lisbon [Portugal]", lines=[1])),
])
def test_parse_cited_answer(raw: str, n: int, want: CitedAnswer) -> None:
    assert v2.parse_cited_answer(raw, n) == want


def test_parse_cited_answer_never_cites_an_unseen_line() -> None:
    for n in range(4):
        got = v2.parse_cited_answer("x [0, 1, 2, 3, 4, 5, 99] (lines 7 and 1)", n)
        assert all(1 <= i <= n for i in got.lines)
        assert got.lines == list(range(1, n + 1))


def test_parse_cited_answer_huge_range_is_not_expanded() -> None:
    assert v2.parse_cited_answer("x [1-100000]", 3).lines == [1]


def test_parse_line_numbers_prefers_bracketed_groups_then_any_number() -> None:
    assert v2.parse_line_numbers("Lines 2 and 7 support it, see [3]", 10) == [3]
    assert v2.parse_line_numbers("2, 7, 44", 10) == [2, 7]
    assert v2.parse_line_numbers("[]", 10) == []
    assert v2.parse_line_numbers("none of them", 10) == []


def test_parsers_stay_fast_on_adversarial_replies() -> None:
    def nasty(n: int) -> str:
        return "lines " + "1 " * n + "x" + "[" * (n // 4) + "1," * n

    assert_linear(lambda text: (v2.parse_cited_answer(text, 5), v2.parse_line_numbers(text, 5)), nasty, 20_000)


def test_clean_short_answer_takes_the_first_line_without_label_or_quotes() -> None:
    assert v2.clean_short_answer("Answer: \"7 May 2023\"\nBecause Jon said so.") == "7 May 2023"
    assert v2.clean_short_answer("\n\n  Lisbon  ") == "Lisbon"
    assert v2.clean_short_answer("") == ""


def test_dates_are_written_the_way_people_write_them() -> None:
    assert v2.human_date(date(2023, 5, 7)) == "7 May 2023"
    assert v2.natural_dates("yesterday (2023-01-19), the week of 2023-05-01") == \
        "yesterday (19 January 2023), the week of 1 May 2023"
    assert v2.natural_dates("at 2023-01-20T16:04:00.000") == "at 20 January 2023"
    assert v2.natural_dates("code 2023-13-45 stays") == "code 2023-13-45 stays"


def test_render_line_dates_numbers_and_speakers() -> None:
    assert v2.render_line(1, LINES[0]) == \
        "[1] 20 January 2023, Jon: Lost my job as a banker yesterday (19 January 2023)."
    # a stored turn pair keeps its own speakers and becomes one line
    assert v2.render_line(2, LINES[1]) == "[2] 7 May 2023, Jon: How is the studio? / Gina: Busy!"
    assert v2.render_line(None, LINES[2]) == "a note without a date"


def test_render_line_re_says_week_phrases_from_the_line_date() -> None:
    said = datetime(2023, 6, 9, 13, 0)
    line = ContextLine(when=said, speaker="Caroline", text=absolutize("I spoke at a school last week", said))
    assert v2.render_line(3, line) == \
        "[3] 9 June 2023, Caroline: I spoke at a school the week before 9 June 2023"
    # without a date the stored bracket is shown as it is
    assert v2.render_line(None, line.model_copy(update={"when": None})) == \
        "Caroline: I spoke at a school last week (the week of 29 May 2023)"


def test_short_answer_messages() -> None:
    msgs = v2.build_short_answer_messages("When did Jon lose his job?", LINES[:2],
                                          reference_time=datetime(2023, 8, 1))
    system, user = msgs[0]["content"], msgs[1]["content"]
    assert "at most 6 words" in system and "7 May 2023" in system
    assert v2.NOT_MENTIONED not in system
    assert user.startswith("Today is 1 August 2023.\nLines:\n[1] 20 January 2023, Jon:")
    assert user.endswith("Question: When did Jon lose his job?\nAnswer:")
    plain = v2.build_short_answer_messages("q", LINES[:1], abstain=True, numbered=False)
    assert v2.NOT_MENTIONED in plain[0]["content"]
    assert "Lines:\n20 January 2023, Jon:" in plain[1]["content"]
    assert "(no lines)" in v2.build_short_answer_messages("q", [])[1]["content"]


def test_cited_and_citation_messages() -> None:
    cited = v2.build_cited_answer_messages("q?", LINES[:2])
    assert "Example reply: 7 May 2023 [2, 5]" in cited[0]["content"] and "[2] 7 May 2023" in cited[1]["content"]
    check = v2.build_citation_messages("q?", "7 May 2023", LINES[:2])
    assert "Answer: 7 May 2023" in check[1]["content"] and "[1] 20 January 2023" in check[1]["content"]


@pytest.mark.parametrize(("text", "abstains"), [
    ("not mentioned", True), ("Not mentioned in the lines.", True), ("", True), ("  ", True),
    ("unknown", True), ("Porto", False), ("7 May 2023", False), ("none of them mention it", False),
])
def test_is_abstention(text: str, abstains: bool) -> None:
    assert v2.is_abstention(text) is abstains


def test_cited_prompt_with_abstention_rule_and_earlier_answers() -> None:
    msgs = v2.build_cited_answer_messages("Where?", LINES[:1], abstain=True,
                                          notes=["When did Jon lose his job? → 2023-01-19"])
    assert v2.NOT_MENTIONED in msgs[0]["content"] and "square" in msgs[0]["content"]
    user = msgs[1]["content"]
    assert user.startswith("Found so far:\n- When did Jon lose his job? → 19 January 2023")
    assert "[1] 20 January 2023, Jon:" in user
    plain = v2.build_cited_answer_messages("Where?", LINES[:1])
    assert v2.NOT_MENTIONED not in plain[0]["content"] and "Found so far" not in plain[1]["content"]


# The flat system texts verbatim: the naive baseline's reader prompt, which the published ratios were
# measured against, must not drift when the excerpt layout changes.
FLAT_PLAIN = """You answer a question about a conversation between people, using only the numbered
lines you are given. Each line starts with the date it was said and who said it.

Rules:
- Reply with the answer only: a short phrase of at most 6 words, not a sentence.
- Write dates the way people do: "7 May 2023", "May 2023", "2022".
- A line that says "yesterday", "last week" or "two days ago" counts from that line's own date:
  give the date it points to.
- If the question asks for several things, name them all, separated by commas."""
ABSTAIN = "- If the lines do not contain the answer, reply exactly: not mentioned"


def test_flat_system_texts_are_unchanged() -> None:
    assert v2.system_text(excerpts=False, cited=False, abstain=False) == FLAT_PLAIN
    assert v2.system_text(excerpts=False, cited=False, abstain=True) == f"{FLAT_PLAIN}\n{ABSTAIN}"
    cited = v2.system_text(excerpts=False, cited=True, abstain=True)
    assert cited.startswith("You answer a question about a conversation between people, using only the numbered\n"
                            "lines you are given. Each line starts with its number, the date it was said and who")
    assert cited.endswith("brackets. Example reply: 7 May 2023 [2, 5]\n" + ABSTAIN)


EXCERPTS = [
    ContextLine(when=datetime(2023, 6, 9, 13, 0),
                text="Caroline: I spoke at a school last week (the week of 2023-05-29)", excerpt=0),
    ContextLine(when=datetime(2023, 6, 9, 13, 0), text="Melanie: How did it go?", excerpt=0),
    ContextLine(when=datetime(2023, 6, 9, 13, 0), text="Melanie: I adopted a dog", excerpt=1),
    ContextLine(when=datetime(2023, 7, 3, 8, 0), text="Caroline: Yesterday (2023-07-02) I read", excerpt=2),
]


def test_context_text_lays_excerpt_lines_out_under_their_date() -> None:
    assert v2.in_excerpts(EXCERPTS) and not v2.in_excerpts(LINES) and not v2.in_excerpts([])
    assert v2.context_text(EXCERPTS, numbered=False).split("\n") == [
        "On 9 June 2023:",
        "Caroline: I spoke at a school the week before 9 June 2023",  # re-said from the excerpt's date
        "Melanie: How did it go?",
        "",
        "On 9 June 2023:",  # another run of the same day is another excerpt
        "Melanie: I adopted a dog",
        "",
        "On 3 July 2023:",
        "Caroline: Yesterday (2 July 2023) I read",
    ]
    numbered = v2.context_text(EXCERPTS).split("\n")
    assert numbered[1].startswith("[1] Caroline:") and numbered[5] == "[3] Melanie: I adopted a dog"
    assert numbered[8].startswith("[4] Caroline:")  # numbers count lines, not headers
    # render_lines stays one dated line each (what citation matching and line numbers refer to)
    assert v2.render_lines(EXCERPTS, numbered=False)[2] == "9 June 2023, Melanie: I adopted a dog"
    # an excerpt line without a date gets no header
    undated = [ContextLine(text="Ann: hi", excerpt=0), ContextLine(text="Bo: yo", excerpt=1)]
    assert v2.context_text(undated, numbered=False) == "Ann: hi\n\nBo: yo"


def test_lines_without_excerpts_render_flat_as_before() -> None:
    assert v2.context_text(LINES) == "\n".join(v2.render_lines(LINES))
    mixed = [*LINES[:1], EXCERPTS[0]]  # one line without an excerpt: the flat layout for all
    assert v2.context_text(mixed) == "\n".join(v2.render_lines(mixed))


def test_excerpt_prompts_say_how_the_context_is_laid_out() -> None:
    system, user = (m["content"] for m in v2.build_short_answer_messages("q?", EXCERPTS, abstain=True,
                                                                         numbered=False))
    assert "Each excerpt starts with the date it was said; each line starts with who said it." in system
    assert "counts from the date of its excerpt" in system and system.endswith(ABSTAIN)
    assert "Lines:\nOn 9 June 2023:\nCaroline: I spoke" in user
    cited = v2.build_cited_answer_messages("q?", EXCERPTS)[0]["content"]
    assert "each line starts with its number\nand who said it" in cited and "Example reply" in cited
