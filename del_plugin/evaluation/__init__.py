"""Numeric evaluation (``del-eval``): answer extraction and scoring, numeric and teacher-forced digit metrics,
greedy generation, reports, tables and plots.

Importing this package loads no model library; :func:`evaluate` and the CLI load transformers when they run.
"""

from .answers import ExtractedNumber, extract_answer, find_numbers, format_decimal, is_correct
from .data import DataIssue, EvalExample, EvalSet, read_eval_set
from .metrics import NumericMetrics, digits_by_place, log_transform, numeric_metrics
from .report import SCHEMA, compare_reports, load_report
from .runner import EvalSettings, evaluate

__all__ = [
    "SCHEMA",
    "DataIssue",
    "EvalExample",
    "EvalSet",
    "EvalSettings",
    "ExtractedNumber",
    "NumericMetrics",
    "compare_reports",
    "digits_by_place",
    "evaluate",
    "extract_answer",
    "find_numbers",
    "format_decimal",
    "is_correct",
    "load_report",
    "log_transform",
    "numeric_metrics",
    "read_eval_set",
]
