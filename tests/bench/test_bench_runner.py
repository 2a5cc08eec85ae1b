"""The benchmark runner end to end: real Qdrant Edge, real MiniLM embeddings, fixture datasets.

Only the LLM is a fake here (``ScriptedLLM``, a scripted stand-in, labelled as such): no capable
model runs in CI. Retrieval numbers, checkpoints, scratch directories and reports are all real.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import dialogmem
from dialogmem import Config, ConfigError, InputError, LLMConfig
from dialogmem._models import LocalEmbedder, ScriptedLLM
from dialogmem.bench import BenchSpec, NaiveRAG, bench_app, load_locomo, run_benchmark, summarise
from dialogmem.bench._loaders import BenchConversation
from dialogmem.bench._report import render_markdown
from dialogmem.bench._systems import IngestCost, count_tokens

FIXTURES = Path(__file__).parent.parent / "fixtures"
LOCOMO = FIXTURES / "locomo_mini.json"
LME = FIXTURES / "longmemeval_mini.json"


@pytest.fixture(scope="module")
def embedder() -> Iterator[LocalEmbedder]:
    yield LocalEmbedder()


def naive_factories(embedder: LocalEmbedder, calls: list[tuple[str, str]], reader: Any = None) -> dict:
    def make(mode: str):
        def factory(conv: BenchConversation, scratch: Path) -> NaiveRAG:
            calls.append((f"naive-{mode}", conv.id))
            return NaiveRAG(mode, scratch, embedder, reader=reader, answer_k=3)  # type: ignore[arg-type]
        return factory
    return {f"naive-{m}": make(m) for m in ("dense", "bm25", "hybrid")}


def spec(out: Path, **kw: Any) -> BenchSpec:
    base: dict[str, Any] = {"dataset": "locomo", "data": LOCOMO, "out": out, "ks": [1, 2, 5],
                            "systems": ["naive-dense", "naive-bm25"]}
    base.update(kw)
    return BenchSpec(**base)


def test_llm_free_run_writes_results_report_and_plots(tmp_path: Path, embedder: LocalEmbedder) -> None:
    calls: list[tuple[str, str]] = []
    events: list[Any] = []
    run_benchmark(spec(tmp_path), factories=naive_factories(embedder, calls), progress=events.append)
    assert calls == [("naive-dense", "conv-demo-1"), ("naive-bm25", "conv-demo-1"),
                     ("naive-dense", "conv-demo-2"), ("naive-bm25", "conv-demo-2")]
    assert events[-1].units_done == events[-1].units_total == 4
    for name in ("results.json", "report.md", "recall_at_k.png", "cost.png"):
        assert (tmp_path / name).stat().st_size > 0
    saved = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert saved["systems"].keys() == {"naive-dense", "naive-bm25"}
    bm25 = saved["systems"]["naive-bm25"]
    overall = bm25["retrieval"]["evidence"]["overall"]
    assert overall["n"] == 8  # 11 questions - 2 adversarial - 1 without usable evidence
    assert 0.0 < overall["1"] <= overall["2"] <= overall["5"] <= 1.0
    assert bm25["retrieval"]["evidence"]["adversarial"]["n"] == 2
    assert bm25["cost"]["total"]["turns"] == 16 and bm25["cost"]["total"]["memories"] == 16
    assert bm25["latency"]["searches"] == 10 and bm25["latency"]["search_p50_ms"] > 0
    assert saved["evidence"]["malformed"] == 2
    # only one turn mentions hiking: BM25 ranks it first for "Where did Wen go hiking?"
    unit = (tmp_path / "state" / "units" / "naive-bm25__conv-demo-2.jsonl").read_text().splitlines()
    first_q = json.loads(unit[1])
    assert first_q["qid"] == "conv-demo-2/q0" and first_q["retrieval"]["evidence"]["1"] == 1.0
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "| naive-bm25 |" in report and "## Retrieval: evidence recall@5 by category" in report
    assert "adversarial (n=2)" in report and "![recall](recall_at_k.png)" in report
    assert not any((tmp_path / "scratch").rglob("*.jsonl"))  # scratch removed after each unit


class _Interrupting:
    """A real NaiveRAG that is 'killed' (KeyboardInterrupt) halfway through its ingest."""

    def __init__(self, inner: NaiveRAG) -> None:
        self.inner = inner
        self.name = inner.name
        self.retrieval = True

    def ingest(self, conversation: BenchConversation) -> IngestCost:
        half = conversation.model_copy(update={"sessions": conversation.sessions[:1]})
        self.inner.ingest(half)
        raise KeyboardInterrupt

    def close(self) -> None:
        self.inner.close()


def test_resume_after_interruption_redoes_only_unfinished_units(tmp_path: Path, embedder: LocalEmbedder
                                                                ) -> None:
    calls: list[tuple[str, str]] = []
    factories = naive_factories(embedder, calls)
    real_bm25 = factories["naive-bm25"]
    failing = dict(factories)

    def bm25_killed_on_second_conversation(conv: BenchConversation, scratch: Path) -> Any:
        system = real_bm25(conv, scratch)
        return _Interrupting(system) if conv.id == "conv-demo-2" else system

    failing["naive-bm25"] = bm25_killed_on_second_conversation
    with pytest.raises(KeyboardInterrupt):
        run_benchmark(spec(tmp_path), factories=failing)
    units = tmp_path / "state" / "units"
    assert sorted(p.name for p in units.iterdir()) == [
        "naive-bm25__conv-demo-1.jsonl", "naive-dense__conv-demo-1.jsonl", "naive-dense__conv-demo-2.jsonl"]
    leftover = tmp_path / "scratch" / "naive-bm25" / "conv-demo-2"
    assert (leftover / "index").is_dir()  # the interrupted unit's half-built store

    calls.clear()
    results = run_benchmark(spec(tmp_path), factories=factories)
    assert calls == [("naive-bm25", "conv-demo-2")]
    assert not leftover.exists()
    assert results["run"]["resumed"] is True

    # the redone unit scores exactly like an uninterrupted run of it
    fresh_dir = tmp_path / "fresh"
    run_benchmark(spec(fresh_dir, systems=["naive-bm25"], conversations=["conv-demo-2"]),
                  factories=naive_factories(embedder, []))

    def scores(out: Path) -> list[Any]:
        lines = (out / "state" / "units" / "naive-bm25__conv-demo-2.jsonl").read_text().splitlines()
        keys = ("retrieval", "budget_retrieval", "budget_fill")
        return [{key: json.loads(line).get(key) for key in keys} for line in lines[1:]]

    assert scores(tmp_path) == scores(fresh_dir)
    assert all(rec["budget_fill"] for rec in scores(tmp_path)[:4])  # the budget numbers were checkpointed


def test_resume_refuses_other_settings_and_fresh_discards(tmp_path: Path, embedder: LocalEmbedder) -> None:
    calls: list[tuple[str, str]] = []
    one = {"systems": ["naive-bm25"], "conversations": ["conv-demo-2"]}
    run_benchmark(spec(tmp_path, **one), factories=naive_factories(embedder, calls))
    with pytest.raises(InputError, match="ks differ"):
        run_benchmark(spec(tmp_path, ks=[1, 10], **one), factories=naive_factories(embedder, calls))
    with pytest.raises(InputError, match="budgets differ"):
        run_benchmark(spec(tmp_path, budgets=[128], **one), factories=naive_factories(embedder, calls))
    # checkpoints of an older harness (no state_version: questions without budget or session numbers)
    # are refused, never combined with new ones
    run_json = tmp_path / "state" / "run.json"
    current = run_json.read_text()
    old = json.loads(current)
    del old["state_version"]
    run_json.write_text(json.dumps(old))
    with pytest.raises(InputError, match="state_version differ"):
        run_benchmark(spec(tmp_path, **one), factories=naive_factories(embedder, calls))
    run_json.write_text(current)
    assert calls == [("naive-bm25", "conv-demo-2")]
    calls.clear()
    run_benchmark(spec(tmp_path, ks=[1, 10], fresh=True, **one), factories=naive_factories(embedder, calls))
    assert calls == [("naive-bm25", "conv-demo-2")]
    (tmp_path / "state" / "lock").write_text(f"{os.getppid()}\n")  # a live process holds the directory
    with pytest.raises(InputError, match="in use"):
        run_benchmark(spec(tmp_path, ks=[1, 10], **one), factories=naive_factories(embedder, calls))
    with pytest.raises(InputError, match="full-context"):
        run_benchmark(spec(tmp_path / "x", systems=["full-context"]))
    with pytest.raises(ConfigError, match="needs an LLM"):
        run_benchmark(spec(tmp_path / "y", mode="llm", systems=["naive-bm25"]))


def _scripted_reader_and_judge() -> ScriptedLLM:
    """Scripted fake LLM (not a model): the reader echoes the first note's last word, the judge
    says yes when the response shares a word with the reference answer."""

    def script(stage: str, messages: list[dict[str, str]]) -> str:
        text = messages[-1]["content"]
        if stage == "reader":  # full-context: the judge module's reader prompt; naive: the plain prompt
            marker = "Notes:\n" if "Notes:\n" in text else "Lines:\n"
            notes = text.split(marker, 1)[1].split("\n\nQuestion:", 1)[0]
            return notes.splitlines()[0].split()[-1].strip(".!") if notes.strip() else "not mentioned"
        if "Reference answer:" in text:
            ref = text.split("Reference answer:", 1)[1].split("\n", 1)[0].lower().split()
            resp = text.split("Response:", 1)[1].split("\n", 1)[0].lower()
            return json.dumps({"verdict": "yes" if any(w in resp for w in ref) else "no"})
        return '{"verdict": "no"}'

    return ScriptedLLM(script)


def test_llm_mode_scores_answers_and_prints_judge_prompts(tmp_path: Path, embedder: LocalEmbedder) -> None:
    from dialogmem.bench import FullContext

    llm = _scripted_reader_and_judge()
    factories = naive_factories(embedder, [], reader=llm)
    factories["full-context"] = lambda conv, scratch: FullContext(llm, window_tokens=600, answer_tokens=32)
    s = spec(tmp_path, mode="llm", systems=["naive-bm25", "full-context"],
             config=Config(llm=LLMConfig(backend="none")))
    results = run_benchmark(s, factories=factories, reader=llm, judge=llm)
    bm25 = results["systems"]["naive-bm25"]
    qa = bm25["qa"]
    assert qa["overall"]["n"] == 9 and qa["adversarial"]["n"] == 2  # overall excludes category 5
    assert all(0.0 <= qa[c]["f1"] <= 1.0 for c in qa)
    assert qa["overall"]["judged"] == 9 and qa["overall"]["judge_failures"] == 0
    full = results["systems"]["full-context"]
    assert full["retrieval"] == {} and full["qa"]["overall"]["n"] == 9
    # window 600 - 32 - 256 leaves ~312 tokens: conversation 1 does not fit, conversation 2 does
    assert 0.0 < full["latency"]["truncated_fraction"] < 1.0
    assert bm25["cost"]["query_llm"]["calls"] == 11  # one reader call per question
    assert bm25["cost"]["judge_llm"]["calls"] == 11  # the judge is not billed to the system
    stages = llm.stages()
    assert stages.count("judge") == 2 * 11 and stages.count("reader") == 2 * 11
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "## QA: F1 by category" in report and "## QA: LLM judge accuracy by category" in report
    assert "### not-mentioned" in report and "Reference answer:" in report


def test_longmemeval_recall_any_all_per_session_and_turn(tmp_path: Path, embedder: LocalEmbedder) -> None:
    s = spec(tmp_path, dataset="longmemeval", data=LME, systems=["naive-bm25"], ks=[1, 3])
    results = run_benchmark(s, factories=naive_factories(embedder, []))
    retrieval = results["systems"]["naive-bm25"]["retrieval"]
    assert set(retrieval) == {"evidence", "session_all", "session_any", "turn_all", "turn_any"}
    assert set(results["systems"]["naive-bm25"]["budget"]) == set(retrieval)
    assert retrieval["session_any"]["overall"]["n"] == 2  # the abstention question is not retrieved for
    # demo-q1: its greyhound turn is the only one sharing words with "breed ... dog"? check bounds only
    for metric in retrieval.values():
        for cat, cell in metric.items():
            assert cell["1"] is None or 0.0 <= cell["1"] <= cell["3"] <= 1.0, cat
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "session_all recall@3 by category" in report


def test_summarise_excludes_adversarial_from_overall() -> None:
    def q(cat: str, value: float, adversarial: bool = False) -> dict[str, Any]:
        return {"category": cat, "adversarial": adversarial, "retrieval": {"evidence": {"1": value}},
                "search_ms": 1.0, "context_tokens": 10}

    unit = {"header": {"cost": {"wall_s": 2.0, "turns": 4, "memories": 4}, "unit_wall_s": 2.5},
            "questions": [q("single-hop", 1.0), q("temporal", 0.0), q("adversarial", 1.0, True)]}
    summary = summarise("locomo", [1], [unit, unit])
    ev = summary["retrieval"]["evidence"]
    assert ev["overall"] == {"1": 0.5, "n": 4}
    assert ev["adversarial"] == {"1": 1.0, "n": 2}
    assert summary["categories"] == ["temporal", "single-hop", "adversarial", "overall"]
    assert summary["cost"]["per_conversation"]["wall_s"] == 2.0
    results = {"run": {"dataset": "locomo", "data": "x.json", "data_sha256": "0" * 64, "conversations": ["a"],
                       "questions": 3, "mode": "llm-free", "ks": [1], "sleep": False, "generated_at": "now",
                       "machine": {"platform": "test", "python": "3"}},
               "evidence": {"entries": 3, "normalised": 0, "malformed": 0, "questions_without_evidence": 0},
               "systems": {"s": summary}, "judge_templates": {}}
    md = render_markdown(results, {})
    assert "| s | 0.000 | 1.000 | 0.500 | 1.000 |" in md  # temporal, single-hop, overall, adversarial


def test_cli_reports_errors_in_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    out = ["--out", str(tmp_path)]
    result = runner.invoke(bench_app, ["locomo", "--data", str(tmp_path / "none.json"), *out])
    assert result.exit_code == 1
    assert result.output.strip().startswith("Error:") and "not found" in result.output
    assert len(result.output.strip().splitlines()) == 1
    result = runner.invoke(bench_app, ["locomo", "--data", str(LOCOMO), *out, "--k", "0,5"])
    assert result.exit_code == 1 and "--k" in result.output
    result = runner.invoke(bench_app, ["locomo", "--data", str(LOCOMO), *out, "--mode", "x"])
    assert result.exit_code == 1 and "Error: invalid mode" in result.output
    result = runner.invoke(bench_app, ["longmemeval", "--data", str(LME), *out, "--llm", "bogus"])
    assert result.exit_code == 1 and "--llm" in result.output
    for bad in ("0,256", "256,many"):
        result = runner.invoke(bench_app, ["locomo", "--data", str(LOCOMO), *out, "--budgets", bad])
        assert result.exit_code == 1 and "Error: --budgets" in result.output, bad


@pytest.mark.slow
def test_killed_process_resumes(tmp_path: Path) -> None:
    """SIGKILL the CLI after its first unit is saved; the same command then finishes the rest."""
    src = Path(dialogmem.__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "dialogmem.bench", "locomo", "--data", str(LOCOMO), "--out", str(tmp_path),
           "--systems", "naive-dense,naive-bm25,naive-hybrid", "--k", "1,5", "--quiet"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    units = tmp_path / "state" / "units"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (units.is_dir() and any(units.glob("*.jsonl"))):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    saved = {p.name: p.read_bytes() for p in units.glob("*.jsonl")}
    assert 1 <= len(saved) < 6
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    after = {p.name: p.read_bytes() for p in units.glob("*.jsonl")}
    assert len(after) == 6
    assert all(after[name] == data for name, data in saved.items())  # finished units were not redone
    assert json.loads((tmp_path / "results.json").read_text())["run"]["resumed"] is True


def test_scratch_left_empty_by_a_kill_is_reused(tmp_path: Path) -> None:
    """A kill between a scratch directory's mkdir and its marker leaves an empty directory: the
    resumed run reuses it; a directory with content and no marker is still refused."""
    from dialogmem.bench._state import RunState

    state = RunState(tmp_path)
    (state.scratch_root / "naive-bm25" / "conv-1").mkdir(parents=True)
    fresh = state.fresh_scratch("naive-bm25", "conv-1")
    assert [p.name for p in fresh.iterdir()] == [".dialogmem-bench-scratch"]
    foreign = state.scratch_root / "naive-bm25" / "conv-2"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("not ours")
    with pytest.raises(InputError, match="not a benchmark scratch directory"):
        state.fresh_scratch("naive-bm25", "conv-2")
    assert (foreign / "keep.txt").read_text() == "not ours"


def test_dialogmem_system_through_the_facade(tmp_path: Path) -> None:
    """The real ``Memory`` (LLM-free), fed turn by turn; its hits must cite the dataset's dia_ids.

    The similarity segmenter keeps this test off the transformer import of the attention one; the
    harness does not depend on the write-path settings.
    """
    config = Config(data_dir=tmp_path / "unused", write={"segmenter": "similarity"})
    s = spec(tmp_path, systems=["dialogmem"], config=config, conversations=["conv-demo-2"])
    results = run_benchmark(s)
    dm = results["systems"]["dialogmem"]
    assert dm["cost"]["total"]["turns"] == 6 and dm["cost"]["total"]["memories"] > 0
    assert dm["cost"]["total"]["llm_calls"] == 0
    overall = dm["retrieval"]["evidence"]["overall"]
    assert overall["n"] == 3 and overall["5"] > 0.0
    # budgets on dialogmem's own rendering: every kept context fits, a larger budget keeps no fewer hits
    budget = dm["budget"]["evidence"]["overall"]
    assert budget["n"] == 3 and 0.0 <= budget["256"] <= budget["512"] <= budget["1024"] <= 1.0
    fill = dm["budget_fill"]
    assert [fill[b]["searches"] for b in ("256", "512", "1024")] == [4, 4, 4]
    assert fill["256"]["tokens_mean"] <= 256 and fill["256"]["hits_mean"] <= fill["1024"]["hits_mean"]
    assert dm["latency"]["searches"] == 4 and dm["latency"]["context_tokens_mean"] > 0
    assert not (tmp_path / "unused").exists()  # each unit used its own scratch store
    assert not any((tmp_path / "scratch").iterdir())
    # --keep-stores: the finished unit's store stays, and it opens with every memory in it
    kept = run_benchmark(s.model_copy(update={"out": tmp_path / "kept", "keep_stores": True}))
    store = tmp_path / "kept" / "scratch" / "dialogmem" / "conv-demo-2" / "store"
    with dialogmem.Memory(data_dir=store, write={"segmenter": "similarity"}) as mem:
        scope = load_locomo(LOCOMO, ["conv-demo-2"]).conversations[0].scope
        assert len(mem.get_all(scope)) == kept["systems"]["dialogmem"]["cost"]["total"]["memories"]


def test_session_and_budget_recall_on_the_fixture(tmp_path: Path, embedder: LocalEmbedder) -> None:
    """BM25 on conv-demo-2 (6 turns, 4 questions with evidence), budgets checked against an
    independent search and rendering of the same conversation."""
    budgets = [16, 64, 100_000]
    s = spec(tmp_path, systems=["naive-bm25"], conversations=["conv-demo-2"], ks=[1, 2, 10], budgets=budgets)
    results = run_benchmark(s, factories=naive_factories(embedder, []))
    assert results["run"]["budgets"] == budgets and results["run"]["budget_k"] == 50
    lines = (tmp_path / "state" / "units" / "naive-bm25__conv-demo-2.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines[1:] if "budget_fill" in json.loads(line)]
    assert [r["qid"] for r in records] == [f"conv-demo-2/q{i}" for i in range(4)]

    conv = load_locomo(LOCOMO, ["conv-demo-2"]).conversations[0]
    check = NaiveRAG("bm25", tmp_path / "check", embedder)
    check.ingest(conv)
    try:
        for rec, q in zip(records, conv.questions, strict=False):
            hits = check.search(q, 50).hits
            prefix = [count_tokens(check.render(hits[:n])) for n in range(1, len(hits) + 1)]
            for b in budgets:
                kept = next((n for n, t in enumerate(prefix) if t > b), len(prefix))
                assert rec["budget_fill"][str(b)]["hits"] == kept, (q.id, b)
                assert rec["budget_fill"][str(b)]["tokens"] == (prefix[kept - 1] if kept else 0)
    finally:
        check.close()

    for rec in records:
        for key, at in (("retrieval", "10"), ("budget_retrieval", "64")):
            r = {name: rec[key][name][at] for name in rec[key]}
            assert r["turn_all"] <= r["evidence"] <= r["turn_any"] <= r["session_any"], rec["qid"]
            assert r["turn_all"] <= r["session_all"] <= r["session_any"], rec["qid"]
        # every rendered turn line is longer than 16 tokens: the first hit overflows, nothing is kept
        assert rec["budget_fill"]["16"] == {"hits": 0, "tokens": 0, "ended": "budget"}
        assert all(rec["budget_retrieval"][name]["16"] == 0.0 for name in rec["budget_retrieval"])
        # 100,000 tokens hold every hit BM25 has; k=10 covers all 6 turns: the same numbers
        assert rec["budget_fill"]["100000"]["ended"] == "hits"
        assert all(rec["budget_retrieval"][name]["100000"] == rec["retrieval"][name]["10"]
                   for name in rec["retrieval"])
    # "Where did Wen go hiking?": the one hiking turn (D1:1) is BM25's first hit
    first = records[0]["retrieval"]
    assert first["evidence"]["1"] == first["session_all"]["1"] == 1.0
    # "What exam did Olu pass and when was it?": evidence D1:2, D1:4, D2:1 spans sessions 1 and 2
    assert conv.questions[2].evidence_sessions == ["session_1", "session_2"]

    bm25 = results["systems"]["naive-bm25"]
    assert bm25["budget_fill"]["16"] == {"searches": 4, "hits_mean": 0.0, "tokens_mean": 0.0,
                                         "ended_budget": 4, "ended_hits": 0, "ended_fetch": 0}
    for name, by_cat in bm25["budget"].items():
        assert by_cat["overall"]["100000"] == bm25["retrieval"][name]["overall"]["10"], name
        assert by_cat["overall"]["n"] == 3 and by_cat["adversarial"]["n"] == 1
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "- `session_any`: session level: at least one evidence session" in report
    assert "## Retrieval: session_all recall@10 by category" in report
    assert "## Retrieval at a fixed context budget" in report and "stop, not skip-and-continue" in report
    assert "| naive-bm25 | session_all | 0.000 |" in report  # overall at 16 tokens
    assert "### Budget: evidence recall by category" in report
    assert "| naive-bm25 | 16 | 4 | 0.00 | 0.0 | 4 | 0 | 0 |" in report  # how the 16-token budget was filled


def test_dialogmem_render_is_the_facade_context(tmp_path: Path) -> None:
    """``DialogmemSystem.render`` gives ``SearchResult.context()`` of any subset of its hits."""
    from dialogmem import NotFoundError, SearchResult
    from dialogmem.bench import DialogmemSystem, RetrievedHit

    conv = load_locomo(LOCOMO, ["conv-demo-2"]).conversations[0]
    system = DialogmemSystem(Config(write={"segmenter": "similarity"}), tmp_path, run_sleep=False)
    try:
        system.ingest(conv)
        out = system.search(conv.questions[2], 5)
        assert len(out.hits) >= 2
        assert count_tokens(system.render(out.hits)) == out.context_tokens
        mem = system._mem  # the same search through the facade: the rendering the system gives callers
        full = mem.search(conv.questions[2].question, conv.scope, limit=5,
                          reference_time=conv.last_time().isoformat())
        assert system.render(out.hits[:2]) == SearchResult(query="", hits=full.hits[:2]).context()
        with pytest.raises(NotFoundError, match="nope"):
            system.render([RetrievedHit(id="nope", text="x", score=0.0)])
    finally:
        system.close()


def test_llm_mode_answer_options_dialogmem_deep_ratio_and_the_plain_naive_prompt(
        tmp_path: Path, embedder: LocalEmbedder) -> None:
    """``--answer auto --no-judge --llm-free-memory``: dialogmem's memory is built without the LLM
    (the scripted fake fails on any other stage), questions mentioning "Tomas" are scripted as
    missing information in the light round (→ deep), and naive hybrid reads its top raw turns with
    the plain short-answer prompt. A scripted fake, not a model."""
    from dialogmem.bench import DialogmemSystem

    def script(stage: str, messages: list[dict[str, str]]) -> str:
        text = messages[-1]["content"]
        if stage == "answer.light":
            return "not mentioned" if "Tomas" in text.split("Question:")[-1] else "Paris [1]"
        if stage in ("answer.retrieve", "answer.deep", "answer.reflect", "reader"):
            return {"answer.retrieve": "[1, 2]", "answer.deep": "Lyon [1]", "answer.reflect": "DONE",
                    "reader": "Nice"}[stage]
        raise AssertionError(f"the reader is the only LLM role here, got {stage}")

    llm = ScriptedLLM(script)
    s = spec(tmp_path, mode="llm", systems=["dialogmem", "naive-hybrid"], answer="auto", judge=False,
             llm_free_memory=True, config=Config(llm=LLMConfig(backend="none")))
    cfg = s.dialogmem_config()
    assert (cfg.write.extractor, cfg.sleep.updater, cfg.answer.mode) == ("rules", "rules", "auto")
    factories = naive_factories(embedder, [], reader=llm)
    factories["dialogmem"] = lambda conv, scratch: DialogmemSystem(cfg, scratch, llm_client=llm)
    results = run_benchmark(s, factories=factories, reader=llm, judge=llm)
    stages = llm.stages()
    assert "judge" not in stages and "add_memory" not in stages
    dm = results["systems"]["dialogmem"]["qa"]["overall"]
    naive = results["systems"]["naive-hybrid"]["qa"]["overall"]
    units = [json.loads(line) for p in sorted((tmp_path / "state").rglob("*.jsonl"))
             for line in p.read_text(encoding="utf-8").splitlines()[1:]]
    dm_q = [q for q in units if q.get("answer_mode")]
    deep = [q for q in dm_q if q["answer_mode"] == "deep"]
    assert deep and len(deep) < len(dm_q) and all(q["prediction"] == "Lyon" for q in deep)
    assert 0.0 < dm["deep_ratio"] < 1.0 and dm["rounds"] > 0 and dm["reader_tokens"] > 0
    assert naive["deep_ratio"] is None and naive["reader_tokens"] > 0 and dm["judge"] is None
    reader_prompt = next(c for c in llm.calls if c.stage == "reader").messages
    assert "at most 6 words" in reader_prompt[0]["content"] and "JSON" not in reader_prompt[0]["content"]
    assert "deep ratio" in (tmp_path / "report.md").read_text(encoding="utf-8")
    # the light answer of every deep question is kept and scored on its own (the light-only F1)
    assert all(q["light_prediction"] == "not mentioned" for q in deep)
    assert all(q["light_prediction"] == q["prediction"] == "Paris" for q in dm_q if q not in deep)
    assert dm["f1_light"] is not None and naive["f1_light"] is None
    # the turns each dialogmem answer cites are recorded and scored against the evidence
    assert all("cited_turns" in q for q in dm_q) and not any("cited_turns" in q for q in units if q not in dm_q)
    assert dm["cited"] is not None and naive["cited"] is None and naive["cite_precision"] is None


def test_citation_scores_against_the_evidence() -> None:
    from dialogmem.bench._runner import citation_scores

    assert citation_scores(["D1:1", "D1:2", "D1:2"], ["D1:2", "D3:4"]) == {
        "cited_turns": ["D1:1", "D1:2", "D1:2"], "cite_precision": 0.5, "cite_hit": 1.0}
    assert citation_scores(["D1:1"], ["D1:2"]) == {"cited_turns": ["D1:1"], "cite_precision": 0.0, "cite_hit": 0.0}
    assert citation_scores([], ["D1:2"]) == {"cited_turns": []}  # no citation: nothing to score
    assert citation_scores(["D1:1"], []) == {"cited_turns": ["D1:1"]}  # no evidence: nothing to score


def test_bench_cli_refuses_an_unknown_answer_mode(tmp_path: Path) -> None:
    got = CliRunner().invoke(bench_app, ["locomo", "--data", str(LOCOMO), "--out", str(tmp_path),
                                         "--answer", "deepest", "--quiet"])
    assert got.exit_code == 1 and "answer" in got.output


def test_llm_write_mode_needs_dialogmem_llm_and_no_reader(tmp_path: Path) -> None:
    """``llm-write``: dialogmem writes with its configured LLM, only retrieval is scored (no reader)."""
    no_llm = Config(data_dir=tmp_path / "unused", llm=LLMConfig(backend="none"))
    with pytest.raises(ConfigError, match="llm-write needs an LLM"):
        run_benchmark(spec(tmp_path / "a", mode="llm-write", systems=["dialogmem"], config=no_llm))
    with pytest.raises(InputError, match="full-context"):
        run_benchmark(spec(tmp_path / "b", mode="llm-write", systems=["full-context"]))


def test_questions_answered_before_a_kill_are_not_asked_again(tmp_path: Path, embedder: LocalEmbedder) -> None:
    """Per-question checkpoints: the reader (a scripted fake, not a model) dies on the 4th call; the
    rerun asks only the questions without a saved answer."""
    llm = _scripted_reader_and_judge()
    calls = {"n": 0}

    class Dies(NaiveRAG):
        def answer(self, question: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == 4:
                raise KeyboardInterrupt
            return super().answer(question)

    def factory(conv: BenchConversation, scratch: Path) -> NaiveRAG:
        return Dies("bm25", scratch, embedder, reader=llm, answer_k=3)

    s = spec(tmp_path, mode="llm", systems=["naive-bm25"], judge=False, config=Config(llm=LLMConfig(backend="none")))
    with pytest.raises(KeyboardInterrupt):
        run_benchmark(s, factories={"naive-bm25": factory}, reader=llm, judge=llm)
    assert llm.stages().count("reader") == 3
    results = run_benchmark(s, factories={"naive-bm25": factory}, reader=llm, judge=llm)
    total = results["run"]["questions"]
    assert llm.stages().count("reader") == total  # 3 before the kill + the rest, none twice
    assert results["systems"]["naive-bm25"]["qa"]["overall"]["n"] + \
        results["systems"]["naive-bm25"]["qa"]["adversarial"]["n"] == total
    assert not list((tmp_path / "state" / "units").glob("*.partial"))


def test_naive_convex_is_naive_hybrid_with_the_read_paths_fusion(tmp_path: Path, embedder: LocalEmbedder) -> None:
    """The naive-convex baseline ranks the same raw turns as naive-hybrid, fused as dialogmem's read
    path fuses (read.dense_weight), so that the fusion's gain is not credited to dialogmem alone."""
    from dialogmem._settings import DENSE_WEIGHT
    from dialogmem._store._fusion import convex_fusion

    conv = load_locomo(LOCOMO, ["conv-demo-2"]).conversations[0]
    convex, rrf = NaiveRAG("convex", tmp_path / "c", embedder), NaiveRAG("hybrid", tmp_path / "h", embedder)
    assert convex.name == "naive-convex"
    for system in (convex, rrf):
        system.ingest(conv)
    try:
        for q in conv.questions:
            got = convex.search(q, 5).hits
            vector = embedder.embed_query(q.question)
            dense = convex._index.dense_search(conv.scope, vector, limit=50)  # the default prefetch
            lexical = convex._index.lexical_search(conv.scope, q.question, limit=50)
            expected = convex_fusion([(h.record.id, h.score) for h in dense],
                                     [(h.record.id, h.score) for h in lexical], dense_weight=DENSE_WEIGHT, limit=5)
            assert [h.id for h in got] == [i for i, _ in expected], q.id
            assert all(0.0 <= h.score <= 1.0 for h in got)
            assert all(h.score <= 2 / 60 + 1e-6 for h in rrf.search(q, 5).hits)  # RRF scores: the other fusion
    finally:
        convex.close()
        rrf.close()
    assert "naive-convex" in spec(tmp_path, systems=None).chosen_systems()  # a default retrieval baseline
    with pytest.raises(InputError, match="unknown system"):
        spec(tmp_path, systems=["naive-rrf"]).chosen_systems()
    # dialogmem on PostgreSQL is asked for by name, with the server to run it on
    assert "dialogmem-postgres" not in spec(tmp_path, systems=None).chosen_systems()
    with pytest.raises(InputError, match="--pg-url"):
        spec(tmp_path, systems=["dialogmem", "dialogmem-postgres"]).chosen_systems()
    assert spec(tmp_path, systems=["dialogmem-postgres"], pg_url="postgresql://x/y").chosen_systems() == [
        "dialogmem-postgres"]
