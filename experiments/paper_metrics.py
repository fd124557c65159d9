"""What ``python -m experiments paper`` measures on a run: accuracy on each evaluation set and their mean (mACC),
then the sweep's numeric and teacher-forced digit metrics, read from a del-eval report."""

from __future__ import annotations

from collections.abc import Sequence

from .efficacy import METRICS, Metric

__all__ = ["SET_TITLES", "accuracy_metrics", "digit_metrics", "metrics_for"]

SET_TITLES = {
    "gsm8k": "GSM8K",
    "math": "MATH",
    "svamp": "SVAMP",
    "simuleq": "SimulEq",
    "aqua": "AQuA",
    "sat": "SAT",
    "mmlu_math": "MMLU-math",
}


def _dataset(report: dict, name: str) -> dict:
    return next((d for d in report.get("datasets") or [] if d.get("benchmark") == name), {})


def _set_value(name: str, section: str, key: str):
    return lambda report: (_dataset(report, name).get(section) or {}).get(key)


def _in_set(name: str, value):
    return lambda row: value(row) if row.get("dataset") == name else None


def _macc(report: dict) -> float | None:
    return (report.get("macc") or {}).get("value")


def accuracy_metrics(sets: Sequence[str]) -> list[Metric]:
    """Accuracy on each set, then mACC (their mean; no per-problem test, a mean over sets of unequal size)."""
    metrics = [
        Metric(
            f"acc_{name}",
            f"{SET_TITLES.get(name, name)} (%)",
            _set_value(name, "generation", "accuracy"),
            True,
            True,
            _in_set(name, lambda r: -float(bool(r["correct"]))),
        )
        for name in sets
    ]
    title = "mACC (%)" if len(sets) == 7 else f"mACC, {len(sets)} of 7 sets (%)"
    return metrics + [Metric("macc", title, _macc, True, True, None)]


def digit_metrics(sets: Sequence[str]) -> list[Metric]:
    """MAE and log-MAE of the numeric answers, teacher-forced digit accuracy and entropy, over all ``sets``: the
    sweep's metrics but its accuracy."""
    return [m for m in METRICS if m.key != "accuracy"]


def metrics_for(sets: Sequence[str]) -> list[Metric]:
    return accuracy_metrics(sets) + digit_metrics(sets)
