"""Report files: the JSON report (schema ``del-eval/1``, see ``docs/evaluation.md``), its markdown table and
plots, and the side-by-side comparison of several reports."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from .plots import plot_entropy_histograms, plot_place_accuracy

__all__ = [
    "SCHEMA",
    "compare_reports",
    "comparison_markdown",
    "load_report",
    "report_markdown",
    "write_json_atomic",
    "write_report_files",
]

SCHEMA = "del-eval/1"
OVERALL = "all sets"
_MAX_ISSUES_IN_MARKDOWN = 20


def write_json_atomic(path: Path, data: dict) -> None:
    """Write to a temporary file and rename, so an interrupted run never leaves half a report."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def load_report(path: str | Path) -> dict:
    path = Path(path)
    if path.is_dir():
        path = path / "report.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such report (give report.json files or the folders del-eval wrote)")
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from err
    if not isinstance(report, dict) or report.get("schema") != SCHEMA:
        found = report.get("schema") if isinstance(report, dict) else type(report).__name__
        raise ValueError(f"{path}: not a del-eval report (schema {found!r}, expected {SCHEMA!r})")
    report.setdefault("_path", str(path))
    return report


def _fmt(value, kind: str = "float") -> str:
    if value is None:
        return "–"
    if kind == "pct":
        return f"{100 * value:.1f}%"
    if kind == "int":
        return str(value)
    if abs(value) >= 1e6:
        return f"{value:.3g}"
    return f"{value:.3f}"


def _summary_cells(entry: dict) -> dict[str, str]:
    gen = entry.get("generation") or {}
    tf = entry.get("teacher_forced") or {}
    return {
        "problems": _fmt(gen.get("n", entry.get("evaluated")), "int"),
        "accuracy": _fmt(gen.get("accuracy"), "pct"),
        "answered": _fmt(gen.get("answered_rate"), "pct"),
        "MAE": _fmt(gen.get("mae")),
        "log-MAE": _fmt(gen.get("log_mae")),
        "TF digit accuracy": _fmt(tf.get("digit_accuracy"), "pct"),
        "TF digit entropy (nats)": _fmt(tf.get("mean_entropy")),
    }


_COLUMNS = ("problems", "accuracy", "answered", "MAE", "log-MAE", "TF digit accuracy", "TF digit entropy (nats)")
# (column, metric path, higher is better) for bolding the best model in a comparison
_RANKED = (
    ("accuracy", ("generation", "accuracy"), True),
    ("MAE", ("generation", "mae"), False),
    ("log-MAE", ("generation", "log_mae"), False),
    ("TF digit accuracy", ("teacher_forced", "digit_accuracy"), True),
)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _place_sections(entries, first_column: str, heading: str) -> list[str]:
    """The per-place digit-accuracy tables (generated answers, teacher-forced), those that have rows."""
    lines: list[str] = []
    for title, section, key in (
        ("Per-place digit accuracy, generated final answers", "generation", "place_accuracy"),
        ("Per-place teacher-forced digit accuracy", "teacher_forced", "places"),
    ):
        header, rows = _place_rows(entries, section, key)
        if rows:
            lines += ["", f"{heading} {title}", ""] + _table([first_column] + header, rows)
    return lines


def _place_rows(entries: Sequence[tuple[str, dict]], section: str, key: str) -> tuple[list[str], list[list[str]]]:
    places = sorted({int(p) for _, e in entries for p in ((e.get(section) or {}).get(key) or {})}, reverse=True)
    rows = []
    for label, e in entries:
        data = (e.get(section) or {}).get(key) or {}
        if not data:
            continue
        rows.append([label] + [_fmt(data[str(p)]["accuracy"], "pct") if str(p) in data else "–" for p in places])
    return [f"10^{p}" for p in places], rows


def _model_line(report: dict) -> str:
    model = report.get("model", {})
    what = model.get("base", "?") + (f" + adapter {model['adapter']}" if model.get("adapter") else "")
    return (
        f"Model: `{what}`; prompt format {model.get('prompt_format')}, {model.get('dtype')} on "
        f"{model.get('device')}; greedy, at most {report.get('settings', {}).get('max_new_tokens')} new tokens."
    )


def report_markdown(report: dict) -> str:
    lines = [f"# del-eval: {report.get('name')}", "", _model_line(report), ""]
    if report.get("status") != "complete":
        lines += [
            f"**Status: {report.get('status')}** ({report.get('error')}); the numbers cover the problems "
            "finished before the stop.",
            "",
        ]
    entries = [(d["name"], d) for d in report["datasets"]]
    if len(entries) > 1:
        entries.append((OVERALL, report["overall"]))
    lines += _table(["set"] + list(_COLUMNS), [[n] + [_summary_cells(e)[c] for c in _COLUMNS] for n, e in entries])
    lines += ["", "TF = teacher-forced on the reference solutions (digit targets only)."]
    lines += _place_sections(entries, "set", "##")
    issues = [i for d in report["datasets"] for i in d.get("issues", [])]
    if issues:
        lines += ["", f"## Skipped lines ({len(issues)})", ""]
        lines += [f"- `{i['file']}:{i['line']}`: {i['reason']}" for i in issues[:_MAX_ISSUES_IN_MARKDOWN]]
        if len(issues) > _MAX_ISSUES_IN_MARKDOWN:
            lines.append(f"- … {len(issues) - _MAX_ISSUES_IN_MARKDOWN} more in report.json")
    return "\n".join(lines) + "\n"


def write_report_files(report: dict, out_dir: Path) -> dict:
    """report.json, report.md and the plots of one report; returns the report with its file list filled in."""
    out_dir.mkdir(parents=True, exist_ok=True)
    entry = report["overall"]
    title = f"{report.get('name')}"
    plots = [
        plot_entropy_histograms(
            [(report["name"], entry.get("teacher_forced"))],
            out_dir / "entropy_histogram.png",
            f"Teacher-forced digit entropy: {title}",
        ),
        plot_place_accuracy(
            [(report["name"], entry.get("generation"), entry.get("teacher_forced"))],
            out_dir / "place_accuracy.png",
            f"Per-place digit accuracy: {title}",
        ),
    ]
    report["files"]["plots"] = [p.name for p in plots if p is not None]
    report["files"]["markdown"] = "report.md"
    (out_dir / "report.md").write_text(report_markdown(report), encoding="utf-8")
    write_json_atomic(out_dir / "report.json", report)
    return report


def _dataset_entries(reports: Sequence[dict], labels: Sequence[str]) -> dict[str, list[tuple[str, dict]]]:
    by_set: dict[str, list[tuple[str, dict]]] = {}
    for label, report in zip(labels, reports):
        for d in report["datasets"]:
            by_set.setdefault(d["name"], []).append((label, d))
    if len(by_set) > 1:
        by_set[OVERALL] = [(label, r["overall"]) for label, r in zip(labels, reports)]
    return by_set


def _bold_best(entries: list[tuple[str, dict]], rows: list[list[str]]) -> None:
    if len(entries) < 2:
        return
    for column, (section, metric), higher in _RANKED:
        values = [((e.get(section) or {}).get(metric)) for _, e in entries]
        known = [v for v in values if v is not None]
        if len(known) < 2 or len(set(known)) == 1:
            continue  # nothing to single out when the models tie
        best = max(known) if higher else min(known)
        col = 1 + _COLUMNS.index(column)
        for row, v in zip(rows, values):
            if v is not None and v == best:
                row[col] = f"**{row[col]}**"


def comparison_markdown(reports: Sequence[dict], labels: Sequence[str]) -> str:
    lines = ["# del-eval: side by side", ""]
    for label, report in zip(labels, reports):
        status = "" if report.get("status") == "complete" else f" **({report.get('status')})**"
        lines.append(f"- **{label}**{status}: {_model_line(report)}")
    for set_name, entries in _dataset_entries(reports, labels).items():
        rows = [[label] + [_summary_cells(e)[c] for c in _COLUMNS] for label, e in entries]
        _bold_best(entries, rows)
        lines += ["", f"## {set_name}", ""] + _table(["model"] + list(_COLUMNS), rows)
        lines += _place_sections(entries, "model", "###")
    lines += [
        "",
        "Best value per column in bold (accuracy, MAE, log-MAE, TF digit accuracy). TF = teacher-forced "
        "on the reference solutions. Entropy is not ranked: lower means more confident, not more correct.",
    ]
    return "\n".join(lines) + "\n"


def compare_reports(reports: Sequence[dict], out_dir: Path, labels: Sequence[str] | None = None) -> dict[str, Path]:
    """comparison.md, comparison.json and overlaid plots for ``reports``; returns the written paths by kind."""
    if not reports:
        raise ValueError("compare needs at least one report")
    labels = list(labels) if labels else [r.get("name") or f"model {i + 1}" for i, r in enumerate(reports)]
    if len(labels) != len(reports):
        raise ValueError(f"{len(labels)} labels for {len(reports)} reports")
    if len(set(labels)) != len(labels):
        labels = [f"{label} ({i + 1})" for i, label in enumerate(labels)]
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {"markdown": out_dir / "comparison.md", "json": out_dir / "comparison.json"}
    written["markdown"].write_text(comparison_markdown(reports, labels), encoding="utf-8")
    by_set = _dataset_entries(reports, labels)
    plot_set = OVERALL if OVERALL in by_set else next(iter(by_set))
    entries = by_set[plot_set]
    histogram = plot_entropy_histograms(
        [(label, e.get("teacher_forced")) for label, e in entries],
        out_dir / "entropy_histogram.png",
        f"Teacher-forced digit entropy ({plot_set})",
    )
    places = plot_place_accuracy(
        [(label, e.get("generation"), e.get("teacher_forced")) for label, e in entries],
        out_dir / "place_accuracy.png",
        f"Per-place digit accuracy ({plot_set})",
    )
    for kind, path in (("entropy_histogram", histogram), ("place_accuracy", places)):
        if path is not None:
            written[kind] = path
    summary = {
        "schema": SCHEMA + "/comparison",
        "models": [
            {
                "label": label,
                "report": r.get("_path"),
                "status": r.get("status"),
                "model": r.get("model"),
                "datasets": {
                    d["name"]: {"generation": d.get("generation"), "teacher_forced": d.get("teacher_forced")}
                    for d in r["datasets"]
                },
            }
            for label, r in zip(labels, reports)
        ],
    }
    write_json_atomic(written["json"], summary)
    return written
