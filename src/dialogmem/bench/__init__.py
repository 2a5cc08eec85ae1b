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
    evidence_recall,
    locomo_f1,
    multi_answer_f1,
    normalize_answer,
    percentile,
    recall_all,
    recall_any,
    says_not_mentioned,
    token_f1,
)
from ._report import render_markdown, summarise, write_report
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
    "evidence_recall",
    "load_locomo",
    "load_longmemeval",
    "locomo_f1",
    "multi_answer_f1",
    "normalise_evidence",
    "normalize_answer",
    "percentile",
    "recall_all",
    "recall_any",
    "render_markdown",
    "run_benchmark",
    "says_not_mentioned",
    "summarise",
    "token_f1",
    "write_report",
]
