"""Numeric evaluation (``del-eval``): the DEL paper's seven benchmarks scored as the paper scores them, your own
JSONL sets, numeric and teacher-forced digit metrics, greedy generation, reports, tables and plots.

The Python API (documented in docs/evaluation.md):

* :func:`evaluate`: generate with a model and score, on ``data`` files and/or ``benchmarks``;
* :func:`score_predictions`: score generations made elsewhere against a benchmark, without a model;
* :func:`load_report`, :func:`compare_reports`: read reports, put them side by side.

Importing this package loads no model library; :func:`evaluate` and the CLI load transformers when they run.
"""

from .answers import ExtractedNumber, extract_answer, find_numbers, format_decimal, is_correct
from .benchmarks import BENCHMARK_NAMES, BENCHMARKS, Verdict, load_benchmark, resolve_benchmark_names
from .comparison import compare_reports
from .data import DataIssue, EvalExample, EvalSet, read_eval_set
from .metrics import NumericMetrics, digits_by_place, log_transform, numeric_metrics
from .report_files import SCHEMA, load_report
from .report_summary import macc
from .runner import EvalSettings, evaluate, read_generations
from .score import score_predictions
from .tables import benchmark_accuracies

__all__ = [
    "BENCHMARKS",
    "BENCHMARK_NAMES",
    "SCHEMA",
    "DataIssue",
    "EvalExample",
    "EvalSet",
    "EvalSettings",
    "ExtractedNumber",
    "NumericMetrics",
    "Verdict",
    "benchmark_accuracies",
    "compare_reports",
    "digits_by_place",
    "evaluate",
    "extract_answer",
    "find_numbers",
    "format_decimal",
    "is_correct",
    "load_benchmark",
    "load_report",
    "log_transform",
    "macc",
    "numeric_metrics",
    "read_eval_set",
    "read_generations",
    "resolve_benchmark_names",
    "score_predictions",
]
