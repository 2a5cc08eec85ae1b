"""Benchmark harness: LoCoMo and LongMemEval, dialogmem against naive RAG and full context.

``run_benchmark(BenchSpec(...))`` runs (or resumes) a benchmark and writes ``results.json``,
``report.md`` and PNG plots; ``bench_app`` is the ``dialogmem bench`` command group.
"""

from ._baselines import FullContext, NaiveRAG
from ._cli import bench_app
from ._loaders import (
    BenchConversation,
    BenchDataset,
    BenchQuestion,
    BenchSession,
    BenchTurn,
    EvidenceReport,
    load_locomo,
    load_longmemeval,
    normalise_evidence,
)
from ._metrics import (
    bleu1,
    budget_cut,
    evidence_recall,
    locomo_f1,
    locomo_session,
    longmemeval_session,
    multi_answer_f1,
    normalize_answer,
    percentile,
    recall_all,
    recall_any,
    says_not_mentioned,
    sessions_of,
    token_f1,
)
from ._report import render_markdown, summarise, write_report
from ._retrieval import METRICS, budget_scores, retrieval_scores, score_hits
from ._runner import SYSTEMS, BenchSpec, Progress, run_benchmark
from ._systems import (
    AnswerOutcome,
    BenchSystem,
    DialogmemSystem,
    IngestCost,
    RetrievedHit,
    SearchOutcome,
    SystemFactory,
)

__all__ = [
    "METRICS",
    "SYSTEMS",
    "AnswerOutcome",
    "BenchConversation",
    "BenchDataset",
    "BenchQuestion",
    "BenchSession",
    "BenchSpec",
    "BenchSystem",
    "BenchTurn",
    "DialogmemSystem",
    "EvidenceReport",
    "FullContext",
    "IngestCost",
    "NaiveRAG",
    "Progress",
    "RetrievedHit",
    "SearchOutcome",
    "SystemFactory",
    "bench_app",
    "bleu1",
    "budget_cut",
    "budget_scores",
    "evidence_recall",
    "load_locomo",
    "load_longmemeval",
    "locomo_f1",
    "locomo_session",
    "longmemeval_session",
    "multi_answer_f1",
    "normalise_evidence",
    "normalize_answer",
    "percentile",
    "recall_all",
    "recall_any",
    "render_markdown",
    "retrieval_scores",
    "run_benchmark",
    "says_not_mentioned",
    "score_hits",
    "sessions_of",
    "summarise",
    "token_f1",
    "write_report",
]
