"""Numeric evaluation (``del-eval``): the DEL paper's seven benchmarks scored as the paper scores them, your own
JSONL sets, numeric and teacher-forced digit metrics, greedy generation, reports, tables and plots.

The Python API (documented in docs/evaluation.md):

* :func:`evaluate`: generate with a model and score, on ``data`` files and/or ``benchmarks``;
* :func:`score_predictions`: score generations made elsewhere against a benchmark, without a model;
* :func:`load_report`, :func:`compare_reports`: read reports, put them side by side.

Importing this package loads no model library; :func:`evaluate` and the CLI load transformers when they run.
"""

from __future__ import annotations

import importlib

# each public name and the module it lives in: imported on first use, so that importing one light module of the
# package (the set names config validation reads) loads neither the runner nor the generation nor the sandbox
_HOMES = {
    "ExtractedNumber": "benchmarks.answers",
    "extract_answer": "benchmarks.answers",
    "find_numbers": "benchmarks.answers",
    "format_decimal": "benchmarks.answers",
    "is_correct": "benchmarks.answers",
    "BENCHMARK_NAMES": "benchmarks",
    "BENCHMARKS": "benchmarks",
    "Verdict": "benchmarks",
    "load_benchmark": "benchmarks",
    "resolve_benchmark_names": "benchmarks",
    "DataIssue": "benchmarks.own_sets",
    "EvalExample": "benchmarks.own_sets",
    "EvalSet": "benchmarks.own_sets",
    "read_eval_set": "benchmarks.own_sets",
    "NumericMetrics": "scoring.metrics",
    "digits_by_place": "scoring.metrics",
    "log_transform": "scoring.metrics",
    "numeric_metrics": "scoring.metrics",
    "SCHEMA": "reports.files",
    "compare_reports": "compare.comparison",
    "load_report": "reports.files",
    "macc": "reports.summary",
    "EvalSettings": "run.runner",
    "evaluate": "run.runner",
    "read_generations": "run.runner",
    "score_predictions": "run.score",
    "benchmark_accuracies": "reports.tables",
}


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:  # a submodule (del_plugin.evaluation.cli), as a package that imports its modules eagerly would offer
        return importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as err:
        if err.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


__all__ = sorted(_HOMES)
