"""``del-eval compare``'s files: ``comparison.md`` (the verdict of :mod:`.verdict` first, then the reports side by
side), ``comparison.json`` and the overlaid plots, written by :func:`compare_reports`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from ..output import prepare_output_dir, write_json_atomic, write_text_atomic
from ..reports.files import FOREST_PLOT, PLOT_FILES, SCHEMA
from ..reports.tables import OVERALL, benchmark_accuracies
from .tables import comparison_markdown, comparison_warnings, dataset_entries

LOG = logging.getLogger(__name__)

__all__ = ["compare_reports"]


def compare_reports(
    reports: Sequence[dict],
    out_dir: Path,
    labels: Sequence[str] | None = None,
    *,
    arms: tuple[Sequence[int], Sequence[int]] | None = None,
    arm_labels: Sequence[str] | None = None,
    scorer: str = "paper",
    intersection: bool = False,
) -> dict[str, Path]:
    """comparison.md, comparison.json and overlaid plots for ``reports``; returns the written paths by kind.

    With two reports (baseline first), or ``arms`` (the indices of the baseline's runs and of the candidate's, one
    run per seed), the verdict comes first (:func:`.verdict.compare_arms`, with its forest plot); ``arm_labels``
    names the two arms (default: the reports' labels with one run an arm, else the name the arm's runs share);
    ``intersection`` pairs runs that scored different problems on those they share. Every report is checked
    (:func:`.verdict_inputs.checked_report`) and the verdict made before anything is written."""
    from .verdict_inputs import checked_report

    if not reports:
        raise ValueError("compare needs at least one report")
    reports = [checked_report(r) for r in reports]
    labels = _unique_labels(reports, labels)
    if arms is None and len(reports) == 2:
        arms = ([0], [1])
    verdict = None
    if arms is not None:
        verdict = _verdict(reports, labels, arms, arm_labels, scorer=scorer, intersection=intersection)
    out_dir = prepare_output_dir(out_dir)
    warnings = comparison_warnings(reports, labels)
    for warning in warnings:
        LOG.warning(warning)
    written = {"markdown": out_dir / "comparison.md", "json": out_dir / "comparison.json"}
    verdict_lines, forest = _verdict_section(verdict, len(reports), out_dir)
    if forest is not None:
        written["forest"] = forest
    winners = (verdict or {}).get("winners", {})
    write_text_atomic(written["markdown"], comparison_markdown(reports, labels, verdict_lines, winners))
    written.update(_plots(reports, labels, out_dir))
    for name in (*PLOT_FILES, FOREST_PLOT):  # an earlier comparison's plot this one does not have
        if out_dir / name not in written.values():
            (out_dir / name).unlink(missing_ok=True)
    # strict JSON: a NaN would be a token no JSON reader takes (the reports were checked for them)
    write_json_atomic(written["json"], _comparison_json(reports, labels, warnings, verdict), allow_nan=False)
    return written


def _unique_labels(reports: Sequence[dict], labels: Sequence[str] | None) -> list[str]:
    """One label per report (default: the reports' names), numbered where two are the same."""
    labels = list(labels) if labels else [r.get("name") or f"model {i + 1}" for i, r in enumerate(reports)]
    if len(labels) != len(reports):
        raise ValueError(f"{len(labels)} labels for {len(reports)} reports")
    if len(set(labels)) != len(labels):
        labels = [f"{label} ({i + 1})" for i, label in enumerate(labels)]
    return labels


def _verdict(
    reports: Sequence[dict],
    labels: Sequence[str],
    arms: tuple[Sequence[int], Sequence[int]],
    arm_labels: Sequence[str] | None,
    *,
    scorer: str,
    intersection: bool,
) -> dict:
    """The verdict of the candidate's runs against the baseline's (:func:`.verdict.compare_arms`)."""
    from .verdict import compare_arms

    baseline, candidate = ([reports[i] for i in arm] for arm in arms)
    if not (baseline and candidate):
        raise ValueError("a verdict needs at least one baseline run and one candidate run")
    if arm_labels is None:
        single = len(baseline) == len(candidate) == 1
        arm_labels = (
            (labels[arms[0][0]], labels[arms[1][0]])
            if single
            else (_arm_name(baseline, "baseline"), _arm_name(candidate, "candidate"))
        )
    verdict = compare_arms(
        baseline,
        candidate,
        tuple(arm_labels),
        scorer=scorer,
        intersection=intersection,
    )
    LOG.info("verdict: %s", verdict["line"])
    return verdict


def _arm_name(reports: Sequence[dict], fallback: str) -> str:
    """An arm's label: the name its runs share, else ``fallback``."""
    names = {r.get("name") for r in reports}
    return names.pop() if len(names) == 1 and None not in names else fallback


def _verdict_section(verdict: dict | None, n_reports: int, out_dir: Path) -> tuple[list[str], Path | None]:
    """comparison.md's first lines (the verdict, or why there is none) and the verdict's forest plot."""
    from .verdict_report import plot_forest, verdict_markdown

    if verdict is not None:
        forest = plot_forest(verdict, out_dir / FOREST_PLOT)
        return verdict_markdown(verdict, forest.name if forest is not None else None), forest
    if n_reports > 2:
        no_verdict = (
            "No verdict: give two reports, or two arms (--baseline RUN ... --candidate RUN ...), for the paired "
            "test; nothing below is in bold."
        )
        return [no_verdict, ""], None
    return [], None


def _plots(reports: Sequence[dict], labels: Sequence[str], out_dir: Path) -> dict[str, Path]:
    """The overlaid plots (of the pooled sets, else the first set), by kind; those that have data."""
    from ..reports.plots import plot_benchmark_accuracy, plot_entropy_histograms, plot_place_accuracy

    data_sets = dataset_entries(reports, labels, benchmarks=False)
    plot_set = OVERALL if OVERALL in data_sets else next(iter(data_sets), None)
    entries = data_sets[plot_set] if plot_set else [(label, r["overall"]) for label, r in zip(labels, reports)]
    plot_name = plot_set or OVERALL
    plots = {
        "entropy_histogram": plot_entropy_histograms(
            [(label, e.get("teacher_forced")) for label, e in entries],
            out_dir / "entropy_histogram.png",
            f"Teacher-forced digit entropy ({plot_name})",
        ),
        "place_accuracy": plot_place_accuracy(
            [(label, e.get("generation"), e.get("teacher_forced")) for label, e in entries],
            out_dir / "place_accuracy.png",
            f"Per-place digit accuracy ({plot_name})",
        ),
    }
    if any(benchmark_accuracies(r) for r in reports):
        plots["benchmark_accuracy"] = plot_benchmark_accuracy(
            [(label, benchmark_accuracies(r), (r.get("macc") or {}).get("value")) for label, r in zip(labels, reports)],
            out_dir / "benchmark_accuracy.png",
            "The paper's benchmarks: accuracy",
        )
    return {kind: path for kind, path in plots.items() if path is not None}


def _comparison_json(reports: Sequence[dict], labels: Sequence[str], warnings: list[str], verdict: dict | None) -> dict:
    """comparison.json: the warnings, the verdict and each report's numbers per set."""
    return {
        "schema": SCHEMA + "/comparison",
        "warnings": warnings,
        "verdict": verdict,
        "models": [
            {
                "label": label,
                "report": r.get("_path"),
                "status": r.get("status"),
                "model": r.get("model"),
                "macc": r.get("macc"),
                "datasets": {
                    d["name"]: {
                        "benchmark": d.get("benchmark"),
                        "coverage": d.get("coverage"),
                        "generation": d.get("generation"),
                        "teacher_forced": d.get("teacher_forced"),
                    }
                    for d in r["datasets"]
                },
            }
            for label, r in zip(labels, reports)
        ],
    }
