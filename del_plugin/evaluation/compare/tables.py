"""comparison.md's tables: several reports side by side, the paper's benchmarks in the paper's column order with
mACC last, in bold only the differences the verdict's paired tests resolve (:mod:`.verdict`) and only where the
reports scored the same problems; the cells are :mod:`~del_plugin.evaluation.reports.tables`'."""

from __future__ import annotations

from collections.abc import Sequence

from ..benchmarks.names import BENCHMARK_NAMES
from ..benchmarks.sets import BENCHMARKS
from ..reports.tables import (
    BENCHMARK_COLUMNS,
    DATA_FILE_COLUMNS,
    OVERALL,
    TF_COLUMNS,
    benchmark_accuracies,
    benchmark_cells,
    benchmark_title,
    coverage_text,
    data_file_cells,
    fmt,
    has_teacher_forced,
    is_partial,
    markdown_table,
    model_line,
    place_sections,
    teacher_forced_cells,
    teacher_forced_note,
    teacher_forced_place_table,
    without_math_verify,
)

__all__ = ["comparison_markdown", "comparison_warnings", "dataset_entries"]


def dataset_entries(reports: Sequence[dict], labels: Sequence[str], benchmarks: bool) -> dict[str, list]:
    """``{set name: [(label, entry), ...]}`` over ``reports``: the benchmarks, or the other sets (with the pooled
    ``all sets`` when there are several)."""
    by_set: dict[str, list[tuple[str, dict]]] = {}
    for label, report in zip(labels, reports):
        for d in report["datasets"]:
            if bool(d.get("benchmark")) == benchmarks:
                by_set.setdefault(d["name"], []).append((label, d))
    if not benchmarks and len(by_set) > 1:
        by_set[OVERALL] = [(label, r["overall"]) for label, r in zip(labels, reports)]
    return by_set


def _benchmark_entry(report: dict, name: str) -> dict | None:
    return next(
        (
            d
            for d in report["datasets"]
            if d.get("benchmark") == name and (d.get("generation") or {}).get("accuracy") is not None
        ),
        None,
    )


def _problems_key(entry: dict, report: dict) -> tuple:
    """Which problems of its set ``entry`` scored: its coverage (size and ids), or for a report that does not record
    it (schema del-eval/1, older /2) its ``--limit``."""
    cover = entry.get("coverage")
    if cover:
        return (cover["total"], cover["ids_sha256"])
    return ("limit", (report.get("settings") or {}).get("limit"))


def _comparability(reports: Sequence[dict], labels: Sequence[str]) -> tuple[set[str], bool, list[str]]:
    """Which columns of the paper's table may be ranked: the benchmarks every report scored on the same problems,
    and mACC when every report averages the same sets, each so ranked; with the warnings that say why not, and
    which sets were scored in part."""
    present = [n for n in BENCHMARK_NAMES if any(n in benchmark_accuracies(r) for r in reports)]
    ranked: set[str] = set()
    warnings: list[str] = []
    partial = []
    for name in present:
        entries = [(label, r, e) for label, r in zip(labels, reports) if (e := _benchmark_entry(r, name))]
        if len({_problems_key(e, r) for _, r, e in entries}) > 1:
            scored = "; ".join(
                f"{label}: {coverage_text(e) if e.get('coverage') else 'limit ' + str(_problems_key(e, r)[1])}"
                for label, r, e in entries
            )
            warnings.append(f"{BENCHMARKS[name].title} is not ranked: the reports scored different problems ({scored})")
            continue
        ranked.add(name)
        if is_partial(entries[0][2]):
            partial.append(f"{BENCHMARKS[name].title} {coverage_text(entries[0][2])}")
    if partial:
        warnings.append(
            f"partial coverage: {', '.join(partial)} problems (the same in every report that has the set); "
            "mACC and the accuracies are over those problems only"
        )
    maccs = [(label, r["macc"]) for label, r in zip(labels, reports) if r.get("macc")]
    macc_ranked = True
    if len({tuple(m["sets"]) for _, m in maccs}) > 1:
        sets = "; ".join(f"{label}: {', '.join(m['sets'])}" for label, m in maccs)
        warnings.append(f"mACC is not ranked: the reports average different sets ({sets})")
        macc_ranked = False
    elif maccs and not set(maccs[0][1]["sets"]) <= ranked:
        warnings.append("mACC is not ranked: some of its sets were scored on different problems (above)")
        macc_ranked = False
    return ranked, macc_ranked, warnings


def comparison_warnings(reports: Sequence[dict], labels: Sequence[str]) -> list[str]:
    """What a reader of the side-by-side table must know: columns not ranked (different sets or problems) and
    partial coverage."""
    return _comparability(reports, labels)[2] if len(reports) > 1 else []


def _paper_table(reports: Sequence[dict], labels: Sequence[str], winners: dict[str, str]) -> list[str]:
    """Models x benchmarks accuracy, the paper's column order, mACC last, in bold the better of two models where the
    paired test resolves the difference (``winners``: ``{set name or "macc": label}``) and the column is comparable
    (:func:`_comparability`), the warnings below."""
    present = [n for n in BENCHMARK_NAMES if any(n in benchmark_accuracies(r) for r in reports)]
    if not present:
        return []
    columns = [BENCHMARKS[n].title for n in present]
    maccs = [r.get("macc") or {} for r in reports]
    macc_labels = {m.get("label") for m in maccs if m.get("label")}
    macc_title = macc_labels.pop() if len(macc_labels) == 1 else "mACC"
    values = [[benchmark_accuracies(r).get(n) for n in present] + [m.get("value")] for r, m in zip(reports, maccs)]
    rows = [[label] + [fmt(v, "pct") for v in row] for label, row in zip(labels, values)]
    warnings: list[str] = []
    if len(reports) > 1:
        ranked, macc_ranked, warnings = _comparability(reports, labels)
        comparable = [n in ranked for n in present] + [macc_ranked]
        for col, name in enumerate([*present, "macc"]):
            for label, row, cells in zip(labels, values, rows):
                if comparable[col] and row[col] is not None and winners.get(name) == label:
                    cells[col + 1] = f"**{cells[col + 1]}**"
    lines = ["", "## The paper's benchmarks: accuracy", ""] + markdown_table(["model", *columns, macc_title], rows)
    if warnings:
        lines += [""] + [f"**{w}**" for w in warnings]
    return lines


def _benchmark_teacher_forced_comparison(reports: Sequence[dict], labels: Sequence[str]) -> list[str]:
    """comparison.md: per benchmark, each model's teacher-forced digit accuracy and entropy."""
    lines: list[str] = []
    every = dataset_entries(reports, labels, benchmarks=True).values()
    for entries in every:
        entries = [(label, e) for label, e in entries if has_teacher_forced(e)]
        if entries:
            rows = [[label] + teacher_forced_cells(e) for label, e in entries]
            lines += ["", f"### {benchmark_title(entries[0][1])}", ""] + markdown_table(["model", *TF_COLUMNS], rows)
            lines += teacher_forced_place_table(entries, "model")
    if not lines:
        return []
    note = teacher_forced_note([e for entries in every for _, e in entries])
    return ["", "## The paper's benchmarks: teacher-forced digit metrics", "", note] + lines


def _bold_resolved(entries: list[tuple[str, dict]], rows: list[list[str]], winners: dict[str, str]) -> None:
    """Bold the cells of ``winners`` (``{column: label}``): the differences the paired tests resolve."""
    for column, label in winners.items():
        col = 1 + DATA_FILE_COLUMNS.index(column)
        for row, (row_label, _) in zip(rows, entries):
            if row_label == label and row[col] != fmt(None):
                row[col] = f"**{row[col]}**"


def comparison_markdown(
    reports: Sequence[dict],
    labels: Sequence[str],
    verdict_lines: Sequence[str] = (),
    winners: dict[str, dict[str, str]] | None = None,
) -> str:
    """comparison.md: the verdict (``verdict_lines``) first, then the reports side by side; ``winners``: per set
    (and ``macc``), ``{column: label}`` of the differences the paired tests resolve, the only cells in bold."""
    winners = winners or {}
    lines = ["# del-eval: side by side", "", *verdict_lines]
    if verdict_lines:
        lines += ["## The runs", ""]
    for label, report in zip(labels, reports):
        status = "" if report.get("status") == "complete" else f" **({report.get('status')})**"
        lines.append(f"- **{label}**{status}: {model_line(report)}")
    paper_winners = {name: w["accuracy"] for name, w in winners.items() if "accuracy" in w}
    lines += _paper_table(reports, labels, paper_winners)
    for entries in dataset_entries(reports, labels, benchmarks=True).values():
        rows = [[label] + benchmark_cells(e) for label, e in entries]
        header, rows = without_math_verify([e for _, e in entries], ["model", *BENCHMARK_COLUMNS], rows)
        lines += ["", f"### {benchmark_title(entries[0][1])}", ""] + markdown_table(header, rows)
    lines += _benchmark_teacher_forced_comparison(reports, labels)
    data = dataset_entries(reports, labels, benchmarks=False)
    for set_name, entries in data.items():
        rows = [[label] + [data_file_cells(e)[c] for c in DATA_FILE_COLUMNS] for label, e in entries]
        _bold_resolved(entries, rows, winners.get(set_name, {}))
        header, rows = without_math_verify([e for _, e in entries], ["model", *DATA_FILE_COLUMNS], rows)
        lines += ["", f"## {set_name}", ""] + markdown_table(header, rows)
        lines += place_sections(entries, "model", "###")
    if data:
        lines += [
            "",
            "In bold: the better of two models where a paired test resolves the difference (accuracy: the verdict's "
            "interval and test, Tango's and McNemar's with one run an arm, Welch's t over the runs with several; "
            "MAE, log-MAE: the paired t test on the errors, only the lower mean error bold; TF digit accuracy: the "
            "exact sign test over the problems; p < 0.05); nothing is bold inside the noise. TF = teacher-forced on "
            "the reference solutions. Entropy is not ranked: lower means more confident, not more correct.",
        ]
    return "\n".join(lines) + "\n"
