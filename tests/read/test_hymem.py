"""HyMem answering (seed 004 §3.1-3.4) through the facade: light, deep, reflection, L1 → L2.

Every LLM here is ``ScriptedLLM``, a SCRIPTED FAKE (not a model): each test scripts the reply per
stage (``answer.light``, ``answer.retrieve``, ``answer.deep``, ``answer.reflect``). Memories are
written LLM-free (rules), so the fake answers only the answering stages.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from dialogmem import LLMTimeoutError, Memory, NotFoundError, ScriptedLLM
from dialogmem._read._hymem_steps import match_lines

RULES = {"write": {"extractor": "rules", "segmenter": "none"}, "sleep": {"updater": "rules"}}
TURNS = [
    ("Anna", "I grew up in Lisbon, near the river."),
    ("Ben", "Did you ever leave Lisbon?"),
    ("Anna", "Yes, I moved to Porto for my new job at the bakery."),
    ("Ben", "I adopted a dog called Rex last week."),
    ("Anna", "My sister Clara studies painting in Madrid."),
]
Script = Callable[[str, list[dict[str, str]]], "str | BaseException"]


def store(make_memory: Any, script: Script, user: str = "u", **answer: Any) -> tuple[Memory, ScriptedLLM]:
    """A store of ``TURNS``; the scripts here reply in the inline format (``answer [2, 5]``), so
    ``answer.citations`` is "inline" unless a test says otherwise."""
    llm = ScriptedLLM(script)
    mem = make_memory(f"store-{user}", llm_client=llm, answer={"citations": "inline", **answer}, **RULES)
    for i, (who, text) in enumerate(TURNS):
        mem.add([{"content": text, "name": who, "id": f"{user}-t{i}"}], user, session_id="s1",
                timestamp=f"2023-05-0{i + 1}T10:00:00")
    mem.flush(user)
    return mem, llm


def shown_lines(messages: list[dict[str, str]]) -> int:
    return len(re.findall(r"^\[\d+\] ", messages[-1]["content"], re.M))


def question_of(messages: list[dict[str, str]]) -> str:
    return re.findall(r"^Question: (.*)$", messages[-1]["content"], re.M)[-1]


def test_sufficient_light_answer_makes_one_call_and_cites_shown_memories(make_memory: Any) -> None:
    mem, llm = store(make_memory, lambda stage, m: "Porto [1, 2, 99, 0]")
    got = mem.answer("Where does Anna live now?", "u")
    assert llm.stages() == ["answer.light"]
    assert (got.text, got.mode, got.used, got.rounds, got.garbage) == ("Porto", "light", "light", 0, 0)
    hits = {h.id: h for h in mem.search("Where does Anna live now?", "u").hits}
    assert got.memory_ids and set(got.memory_ids) <= set(hits)  # 99 and 0 were never shown
    # a shown line is one turn (a memory's context turns, then its own); citing lines 1 and 2 cites
    # the turns they show and the memories that carry those lines
    prompt = llm.calls[0].messages[-1]["content"]
    cited = [re.search(rf"^\[{n}\] (.*)$", prompt, re.M)[1] for n in (1, 2)]
    shown_turns = {f"u-t{i}" for i, (_, text) in enumerate(TURNS) if any(text in line for line in cited)}
    assert shown_turns and set(got.turn_ids) == shown_turns
    assert all(shown_turns & set(hits[mid].source_turn_ids) for mid in got.memory_ids)
    assert got.context_tokens > 0 and got.prompt_tokens > got.context_tokens
    assert "7 May" not in llm.calls[0].messages[-1]["content"]  # dates written "1 May 2023", not ISO
    assert "May 2023" in llm.calls[0].messages[-1]["content"]


def test_default_plain_answer_cites_the_lines_that_share_its_words(make_memory: Any) -> None:
    """``answer.citations = "match"`` (the default): the plain short-answer prompt, unnumbered lines,
    and the cited lines are those sharing the most words with the answer: only lines that were
    shown, none for an abstention."""
    mem, llm = store(make_memory, lambda stage, m: "Porto, for a bakery job", citations="match")
    got = mem.answer("Where does Anna live now?", "u")
    prompt = llm.calls[0].messages[-1]["content"]
    assert llm.stages() == ["answer.light"] and got.text == "Porto, for a bakery job"
    assert not re.search(r"^\[\d+\] ", prompt, re.M) and "square brackets" not in llm.calls[0].messages[0]["content"]
    assert got.turn_ids == ["u-t2"]  # the one line with "Porto" and "bakery"
    hits = {h.id: h for h in mem.search("Where does Anna live now?", "u").hits}
    assert got.memory_ids and all("u-t2" in hits[m].source_turn_ids for m in got.memory_ids)
    # an answer sharing no word with the lines cites nothing; an abstention goes deep (auto)
    mem2, _ = store(make_memory, lambda stage, m: "Zanzibar", user="v", citations="match")
    assert mem2.answer("Where does Anna live now?", "v", mode="light").turn_ids == []
    def deep(stage: str, messages: list[dict[str, str]]) -> str:
        return {"answer.light": "not mentioned", "answer.retrieve": "[1, 2, 3, 4, 5]", "answer.deep": "Porto",
                "answer.reflect": "DONE"}[stage]

    mem3, llm3 = store(make_memory, deep, user="w", citations="match")
    got3 = mem3.answer("Where does Anna live now?", "w", max_rounds=1)
    assert got3.used == "deep" and got3.text == "Porto" and got3.turn_ids == ["w-t2"]
    assert "answer.deep" in llm3.stages()


@pytest.mark.parametrize(("answer", "expected"), [
    ("Porto", [2]), ("7 May 2023", [3]), ("not mentioned", []), ("", []), ("Zanzibar", []),
    ("Lisbon", [1, 4]),
])
def test_match_lines(answer: str, expected: list[int]) -> None:
    rendered = ["1 May 2023, Anna: I grew up in Lisbon.", "2 May 2023, Anna: I moved to Porto.",
                "8 May 2023, Ben: We met yesterday (7 May 2023).", "9 May 2023, Ben: Lisbon again?"]
    assert match_lines(answer, rendered) == expected


def deep_script(reflect: str = "DONE", deep: str = "Porto [2]") -> Script:
    def script(stage: str, messages: list[dict[str, str]]) -> str:
        return {"answer.light": "not mentioned", "answer.retrieve": "[1, 40]", "answer.deep": deep,
                "answer.reflect": reflect}[stage]
    return script


def test_missing_information_runs_deep_over_raw_turns_in_parallel_batches(make_memory: Any) -> None:
    mem, llm = store(make_memory, deep_script(), batch_size=2, max_workers=3)
    got = mem.answer("Where does Anna live now?", "u", max_rounds=2)
    stages = llm.stages()
    assert stages[0] == "answer.light" and stages[-2:] == ["answer.deep", "answer.reflect"]  # reflect: DONE
    retrieve = [c for c in llm.calls if c.stage == "answer.retrieve"]
    n_mem = len(mem.get_all("u"))
    assert len(retrieve) == -(-n_mem // 2) and all(shown_lines(c.messages) <= 2 for c in retrieve)
    deep_call = next(c for c in llm.calls if c.stage == "answer.deep")
    assert question_of(deep_call.messages) == "Where does Anna live now?"  # the original question
    # the deep generator sees raw turns (L2), oldest first, each once
    body = deep_call.messages[-1]["content"]
    dates = [int(d) for d in re.findall(r"^\[\d+\] (\d) May 2023", body, re.M)]
    assert dates == sorted(set(dates)) and dates
    assert (got.text, got.mode, got.used, got.rounds) == ("Porto", "deep", "deep", 1)
    shown = {f"u-t{d - 1}" for d in dates}
    assert len(got.turn_ids) == 1 and set(got.turn_ids) <= shown
    assert all(set(mem.get(m, "u").source_turn_ids) & set(got.turn_ids) for m in got.memory_ids)
    answers = mem.stats("u")["answers"]
    assert answers["answers"] == 1 and answers["deep"] == 1 and answers["deep_rate"] == 1.0


def test_deep_mode_skips_the_light_module(make_memory: Any) -> None:
    mem, llm = store(make_memory, deep_script())
    got = mem.answer("Where does Anna live now?", "u", mode="deep", max_rounds=1)
    assert "answer.light" not in llm.stages() and "answer.reflect" not in llm.stages()
    assert got.mode == "deep" and got.rounds == 1


def test_reflection_rewrites_the_question_and_stops_at_max_rounds(make_memory: Any) -> None:
    mem, llm = store(make_memory, deep_script(reflect="ASK: Which city did Anna move to?"))
    got = mem.answer("Where does Anna live now?", "u", max_rounds=3)
    assert llm.stages().count("answer.deep") == 3 and llm.stages().count("answer.reflect") == 2
    assert got.rounds == 3
    retrieve_questions = [question_of(c.messages) for c in llm.calls if c.stage == "answer.retrieve"]
    assert retrieve_questions[0] == "Where does Anna live now?"
    assert set(retrieve_questions[1:]) == {"Which city did Anna move to?"}
    last_deep = [c for c in llm.calls if c.stage == "answer.deep"][-1]
    assert "Found so far:" in last_deep.messages[-1]["content"]  # the memory pool of earlier rounds
    # T = 2: one reflection between two rounds; the default T is 1: one deep round, no reflection
    mem2, llm2 = store(make_memory, deep_script(reflect="ASK: Which city did Anna move to?"), user="v")
    assert mem2.answer("Where does Anna live now?", "v", max_rounds=2).rounds == 2
    assert llm2.stages().count("answer.reflect") == 1
    mem3, llm3 = store(make_memory, deep_script(reflect="ASK: Which city did Anna move to?"), user="w")
    assert mem3.answer("Where does Anna live now?", "w").rounds == 1
    assert llm3.stages().count("answer.reflect") == 0


def test_reflection_done_stops_after_one_round(make_memory: Any) -> None:
    mem, llm = store(make_memory, deep_script(reflect="DONE"))
    assert mem.answer("Where does Anna live now?", "u", max_rounds=3).rounds == 1
    assert llm.stages().count("answer.reflect") == 1


@pytest.mark.parametrize("case", ["empty deep reply", "deep timeout", "garbage everywhere"])
def test_garbage_keeps_the_light_answer_counts_it_and_never_raises(make_memory: Any, case: str) -> None:
    def script(stage: str, messages: list[dict[str, str]]) -> str | BaseException:
        if stage == "answer.light":
            return "not mentioned"
        if case == "deep timeout" and stage == "answer.deep":
            return LLMTimeoutError("scripted timeout")
        if case == "empty deep reply":
            return {"answer.retrieve": "[1]", "answer.deep": "  [3]\n", "answer.reflect": "DONE"}[stage]
        return "%%% ??? %%%" if stage != "answer.deep" else "[]"

    mem, _ = store(make_memory, script)
    got = mem.answer("Where does Clara study?", "u")
    assert got.text == "not mentioned" and got.used == "light" and got.mode == "deep"
    assert got.garbage >= 1 or case == "garbage everywhere"
    llm_stats = mem.stats("u")["llm"]
    fallbacks = sum(int(s.get("fallbacks", 0)) for name, s in llm_stats.items() if name.startswith("answer."))
    assert fallbacks >= 1


def test_garbage_retriever_falls_back_to_the_top_candidates(make_memory: Any) -> None:
    script = deep_script()

    def garbled(stage: str, messages: list[dict[str, str]]) -> str:
        return "I think none of these." if stage == "answer.retrieve" else str(script(stage, messages))

    mem, _ = store(make_memory, garbled, rules_keep=2)
    got = mem.answer("Where does Anna live now?", "u", max_rounds=1)
    assert got.text == "Porto" and got.used == "deep"
    assert mem.stats("u")["llm"]["answer.retrieve"]["fallbacks"] >= 1


def test_rule_retriever_and_reflection_settings_make_no_calls(make_memory: Any) -> None:
    mem, llm = store(make_memory, deep_script(reflect="ASK: again?"), retriever="rules", reflection="rules")
    got = mem.answer("Where does Anna live now?", "u", max_rounds=2)
    assert llm.stages() == ["answer.light", "answer.deep"] and got.rounds == 1


def test_sources_and_expand_stay_within_the_user(make_memory: Any) -> None:
    mem, _ = store(make_memory, lambda stage, m: "x")
    for i, (who, text) in enumerate(TURNS[:2]):
        mem.add([{"content": f"{text} (b)", "name": who, "id": f"b-t{i}"}], "b", timestamp="2023-06-01T10:00:00")
    mem.flush("b")
    mine = mem.get_all("u")[0]
    turns = mem.sources(mine.id, "u")
    assert [t.id for t in turns] == sorted(mine.source_turn_ids, key=lambda t: int(t.rsplit("t", 1)[1]))
    assert all(t.text in [x for _, x in TURNS] and t.session_id == "s1" for t in turns)
    with pytest.raises(NotFoundError):
        mem.sources(mine.id, "b")
    hits = mem.search("Lisbon", "b", expand=True).hits
    assert hits and all(h.sources is not None and {t.id for t in h.sources} == set(h.source_turn_ids) for h in hits)
    assert all(t.id.startswith("b-") for h in hits for t in h.sources or [])
    assert mem.search("Lisbon", "u").hits[0].sources is None  # only on request


def test_answer_arguments_are_checked(make_memory: Any) -> None:
    from dialogmem import InputError

    mem, _ = store(make_memory, lambda stage, m: "x")
    with pytest.raises(InputError):
        mem.answer("q?", "u", mode="deepest")  # type: ignore[arg-type]
    with pytest.raises(InputError):
        mem.answer("q?", "u", max_rounds=0)


def test_real_gguf_plumbing_every_module_runs_and_cites_only_shown_ids(make_memory: Any) -> None:
    """The real SmolLM2-135M GGUF (llama.cpp) through light, deep and reflection: whatever a tiny
    model replies, the answer comes back, nothing raises, and every cited id was shown."""
    import importlib.util

    from modelkit import smollm2_path

    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama_cpp cannot be imported: pip install llama-cpp-python")
    llm = {"backend": "llama_cpp", "model_path": str(smollm2_path()), "n_ctx": 2048, "n_threads": 2,
           "max_tokens": 48, "timeout_s": 600}  # generous: a loaded CI machine is slow, not wrong
    mem = make_memory("gguf", llm=llm, answer={"batch_size": 5, "max_rounds": 1}, **RULES)
    for i, (who, text) in enumerate(TURNS):
        mem.add([{"content": text, "name": who, "id": f"t{i}"}], "u", timestamp=f"2023-05-0{i + 1}T10:00:00")
    mem.flush("u")
    for mode in ("light", "deep"):
        got = mem.answer("Where did Anna move for her job?", "u", mode=mode)  # type: ignore[arg-type]
        assert isinstance(got.text, str) and got.prompt_tokens > 0
        assert set(got.memory_ids) <= {m.id for m in mem.get_all("u")}
        assert set(got.turn_ids) <= {f"t{i}" for i in range(len(TURNS))}
    stages = mem.stats("u")["llm"]
    assert stages["answer.light"]["calls"] >= 1 and stages["answer.deep"]["calls"] >= 1
    assert stages["answer.retrieve"]["calls"] >= 1


@pytest.mark.parametrize(("raw", "done", "question", "usable"), [
    ("DONE", True, "", True),
    ("  done.", True, "", True),
    ("ASK: When did Anna move to Porto?", False, "When did Anna move to Porto?", True),
    ("The part missing is the date.\nask: \"Which year?\"", False, "Which year?", True),
    ("ASK:", False, "", False),
    ("I am not sure what you mean", False, "", False),
])
def test_parse_reflection(raw: str, done: bool, question: str, usable: bool) -> None:
    from dialogmem._prompts.hymem import parse_reflection

    got = parse_reflection(raw)
    assert (got.done, got.question, got.usable) == (done, question, usable)


def test_choose_prefers_the_last_deep_answer_that_is_not_an_abstention() -> None:
    from dialogmem._prompts.answer_v2 import CitedAnswer
    from dialogmem._read._hymem_steps import choose

    def a(text: str) -> CitedAnswer:
        return CitedAnswer(text=text)

    assert choose(["light", "deep", "deep"], [a("not mentioned"), a("Porto"), a("not mentioned")]) == 1
    assert choose(["light", "deep"], [a("Lisbon"), a("Not mentioned.")]) == 0
    assert choose(["light", "deep"], [a("not mentioned"), a("")]) == 0  # empty deep reply: keep light
    assert choose(["deep"], [a("")]) == 0 and choose([], []) == -1


def _one_time_store(make_memory: Any, script: Script, name: str = "one-time", **answer: Any
                    ) -> tuple[Memory, ScriptedLLM]:
    """The turns of ``TURNS`` said at one time (one LoCoMo session has one date)."""
    llm = ScriptedLLM(script)
    mem = make_memory(f"store-{name}", llm_client=llm, answer={"citations": "inline", **answer}, **RULES)
    mem.add([{"content": text, "name": who, "id": f"u-t{i}"} for i, (who, text) in enumerate(TURNS)], "u",
            session_id="s1", timestamp="2023-05-01T10:00:00", flush=True)
    return mem, llm


def test_light_context_shows_each_turn_once_and_a_cited_line_cites_its_memories(make_memory: Any) -> None:
    mem, llm = _one_time_store(make_memory, lambda stage, m: "Porto [3]", light_tokens=None)
    got = mem.answer("Where does Anna live now?", "u")
    prompt = llm.calls[0].messages[-1]["content"]
    for _, text in TURNS:  # memories carry the turns before them: each turn still shows once
        assert prompt.count(text[:20]) == 1  # (time normalisation may annotate the rest)
    third = re.search(r"^\[3\] (.*)$", prompt, re.M)[1]
    turn = next(f"u-t{i}" for i, (_, text) in enumerate(TURNS) if text[:20] in third)
    assert got.turn_ids == [turn]
    hits = {h.id: h for h in mem.search("Where does Anna live now?", "u").hits}
    assert got.memory_ids and all(turn in hits[m].source_turn_ids for m in got.memory_ids)
    assert set(got.memory_ids) == {m for m, h in hits.items() if turn in h.source_turn_ids}


def test_light_tokens_bounds_the_context_in_rank_order(make_memory: Any) -> None:
    wide, llm_wide = _one_time_store(make_memory, lambda stage, m: "Porto", light_tokens=None)
    wide.answer("Where does Anna live now?", "u")
    all_lines = shown_lines(llm_wide.calls[0].messages)
    top = wide.search("Where does Anna live now?", "u", limit=10).hits[0]
    wide.close()
    narrow, llm_narrow = _one_time_store(make_memory, lambda stage, m: "Porto", "narrow", light_tokens=32)
    got = narrow.answer("Where does Anna live now?", "u")
    prompt = llm_narrow.calls[0].messages[-1]["content"]
    # 32 tokens hold no memory of three lines: the best-ranked one is shown anyway, and only it
    assert shown_lines(llm_narrow.calls[0].messages) == len(top.memory.splitlines()) < all_lines
    assert all(line.split(": ", 1)[-1] in prompt for line in top.memory.splitlines())
    assert got.context_tokens < 100
