"""Markdown tables of one run (``report.md``), and the cells and columns they share with the side-by-side tables
of several (``comparison.md``, :mod:`..compare.tables`).

The paper's benchmarks get their own table, in the paper's column order with mACC last; ``--data`` files keep
the detailed table (accuracy, MAE, teacher-forced digit metrics) and the per-place tables."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..benchmarks.names import BENCHMARK_NAMES
from ..benchmarks.sets import BENCHMARKS
from ..scoring.stats import accuracy_se

__all__ = [
    "BENCHMARK_COLUMNS",
    "DATA_FILE_COLUMNS",
    "OVERALL",
    "TF_COLUMNS",
    "benchmark_accuracies",
    "benchmark_cells",
    "benchmark_title",
    "coverage_text",
    "data_file_cells",
    "fmt",
    "has_teacher_forced",
    "is_partial",
    "markdown_table",
    "model_line",
    "place_sections",
    "report_markdown",
    "teacher_forced_cells",
    "teacher_forced_note",
    "teacher_forced_place_table",
    "without_math_verify",
]

OVERALL = "all sets"
MATH_VERIFY_COLUMN = "math-verify"
SE_LEGEND = (
    "± SE: the accuracy's standard error, in points, as lm-evaluation-harness prints it (the 0/1 outcomes' sample "
    "standard deviation over the square root of their count; mACC's from the sets' as independent samples); "
    "`del-eval compare` tells whether a difference between two runs is more than that noise."
)
_MAX_ISSUES_IN_MARKDOWN = 20


def fmt(value, kind: str = "float") -> str:
    if value is None:
        return "–"
    if kind == "pct":
        return f"{100 * value:.1f}%"
    if kind == "int":
        return str(value)
    if abs(value) >= 1e6:
        return f"{value:.3g}"
    return f"{value:.3f}"


def fmt_se(generation: dict) -> str:
    """The standard error of an accuracy in points, as lm-evaluation-harness prints it beside the score."""
    se = accuracy_se(generation.get("correct") or 0, generation.get("n") or 0) if generation else None
    return "–" if se is None else f"{100 * se:.1f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A markdown table's lines."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def is_partial(entry: dict) -> bool:
    """Whether a benchmark's entry scored part of its problems only (``coverage``: ``--limit``, or ``score`` given
    some ids)."""
    cover = entry.get("coverage")
    return bool(cover) and cover["problems"] < cover["total"]


def coverage_text(entry: dict) -> str:
    """``problems of total`` a benchmark's entry scored."""
    cover = entry.get("coverage") or {}
    return f"{cover.get('problems', 0):,} of {cover.get('total', 0):,}"


def benchmark_title(entry: dict) -> str:
    benchmark = entry.get("benchmark")
    title = BENCHMARKS[benchmark].title if benchmark in BENCHMARKS else entry["name"]
    source = entry.get("source") or {}
    return title + ("†" if source.get("verified") is False else "")


# ---------------------------------------------------------------------------------------------- --data files

DATA_FILE_COLUMNS = (
    "problems",
    "accuracy",
    "± SE",
    MATH_VERIFY_COLUMN,
    "answered",
    "MAE",
    "log-MAE",
    "TF digit accuracy",
    "TF digit entropy (nats)",
)


def data_file_cells(entry: dict) -> dict[str, str]:
    """A ``--data`` file's cells (or the pooled sets'), by column of :data:`DATA_FILE_COLUMNS`."""
    gen = entry.get("generation") or {}
    tf = entry.get("teacher_forced") or {}
    return {
        "problems": fmt(gen.get("n", entry.get("evaluated")), "int"),
        "accuracy": fmt(gen.get("accuracy"), "pct"),
        "± SE": fmt_se(gen),
        MATH_VERIFY_COLUMN: fmt((entry.get("math_verify") or {}).get("accuracy"), "pct"),
        "answered": fmt(gen.get("answered_rate"), "pct"),
        "MAE": fmt(gen.get("mae")),
        "log-MAE": fmt(gen.get("log_mae")),
        "TF digit accuracy": fmt(tf.get("digit_accuracy"), "pct"),
        "TF digit entropy (nats)": fmt(tf.get("mean_entropy")),
    }


def _place_rows(entries: Sequence[tuple[str, dict]], section: str, key: str) -> tuple[list[str], list[list[str]]]:
    places = sorted({int(p) for _, e in entries for p in ((e.get(section) or {}).get(key) or {})}, reverse=True)
    rows = []
    for label, e in entries:
        data = (e.get(section) or {}).get(key) or {}
        if not data:
            continue
        rows.append([label] + [fmt(data[str(p)]["accuracy"], "pct") if str(p) in data else "–" for p in places])
    return [f"10^{p}" for p in places], rows


def place_sections(entries, first_column: str, heading: str) -> list[str]:
    """The per-place digit-accuracy tables (generated answers, teacher-forced), those that have rows."""
    lines: list[str] = []
    for title, section, key in (
        ("Per-place digit accuracy, generated final answers", "generation", "place_accuracy"),
        ("Per-place teacher-forced digit accuracy", "teacher_forced", "places"),
    ):
        header, rows = _place_rows(entries, section, key)
        if rows:
            lines += ["", f"{heading} {title}", ""] + markdown_table([first_column] + header, rows)
    return lines


# ---------------------------------------------------------------------------------------------- benchmarks

BENCHMARK_COLUMNS = (
    "problems",
    "accuracy",
    "± SE",
    MATH_VERIFY_COLUMN,
    "no answer",
    "MAE",
    "log-MAE",
    "accuracy without the default",
)


def without_math_verify(entries: Sequence[dict], header: Sequence[str], rows: list[list[str]]):
    """``(header, rows)`` without the math-verify column when no entry has math-verify's verdicts (not installed:
    the report's warnings say so in one line)."""
    if any(e.get("math_verify") for e in entries):
        return list(header), rows
    col = list(header).index(MATH_VERIFY_COLUMN)
    return [h for i, h in enumerate(header) if i != col], [[c for i, c in enumerate(r) if i != col] for r in rows]


def benchmark_cells(entry: dict) -> list[str]:
    """A benchmark's cells, in the order of :data:`BENCHMARK_COLUMNS`."""
    gen = entry.get("generation") or {}
    problems = fmt(gen.get("n", 0), "int")
    if is_partial(entry):
        problems += f" of {entry['coverage']['total']:,}"
    return [
        problems,
        fmt(gen.get("accuracy"), "pct"),
        fmt_se(gen),
        fmt((entry.get("math_verify") or {}).get("accuracy"), "pct"),
        fmt(gen.get("no_answer"), "int"),
        fmt(gen.get("mae")),
        fmt(gen.get("log_mae")),
        fmt(gen.get("accuracy_without_default"), "pct"),
    ]


def _program_lines(entries: Sequence[dict]) -> list[str]:
    rows = []
    for e in entries:
        pot = (e.get("generation") or {}).get("program_of_thought")
        if pot:
            rows.append(
                [benchmark_title(e)] + [str(pot[k]) for k in ("asked", "programs", "ran", "answered", "cot_fallback")]
            )
    if not rows:
        return []
    header = ["set", "asked", "wrote a program", "program ran", "answered", "chain-of-thought fallback"]
    return ["", "Program-of-thought:", ""] + markdown_table(header, rows)


MATH_VERIFY_NOTE = (
    "math-verify: the accuracy by Hugging Face's math-verify (symbolic and numeric equivalence) on the same outputs, "
    "beside the default scorer's (accuracy: the paper's rules, with a 4% tolerance for --data files); report.json "
    "lists the problems on which they differ."
)


def benchmark_notes(entries: Sequence[dict]) -> list[str]:
    notes = [MATH_VERIFY_NOTE] if any(e.get("math_verify") for e in entries) else []
    if any(e.get("benchmark") and BENCHMARKS[e["benchmark"]].scoring == "choice" for e in entries):
        notes.append(
            'Option sets (AQuA, SAT, MMLU-math): an output without an option letter is scored as "A", as the '
            "paper's harness does (accuracy; counted in no answer); the last column counts it wrong."
        )
    unverified = [e for e in entries if (e.get("source") or {}).get("verified") is False]
    if unverified:
        notes.append(
            "† not the authors' file (its sha256 differs): "
            + ", ".join(f"`{e['source']['path']}`" for e in unverified)
            + "; not comparable with the paper's numbers."
        )
    return notes


def _benchmark_section(report: dict) -> list[str]:
    entries = [e for e in report["datasets"] if e.get("benchmark")]
    if not entries:
        return []
    entries.sort(key=lambda e: BENCHMARK_NAMES.index(e["benchmark"]))
    rows = [[benchmark_title(e)] + benchmark_cells(e) for e in entries]
    macc = report.get("macc")
    if macc and macc.get("value") is not None:
        ses = [
            accuracy_se(e["generation"]["correct"], e["generation"]["n"]) for e in entries if e["name"] in macc["sets"]
        ]
        # the sets are independent samples: the variance of their mean is the sum of theirs over k^2
        se = math.sqrt(sum(x**2 for x in ses)) / len(ses) if ses and None not in ses else None
        se_cell = "–" if se is None else f"{100 * se:.1f}"
        equivalent = f"**{fmt(macc['math_verify'], 'pct')}**" if macc.get("math_verify") is not None else ""
        rows.append(
            [f"**{macc['label']}**", "", f"**{fmt(macc['value'], 'pct')}**", se_cell, equivalent, "", "", "", ""]
        )
    limit = (report.get("settings") or {}).get("limit")
    lines = ["", "## The paper's benchmarks", ""]
    if limit:
        lines += [f"The first {limit} problems of each set.", ""]
    lines += markdown_table(*without_math_verify(entries, ["set", *BENCHMARK_COLUMNS], rows))
    notes = [SE_LEGEND, *benchmark_notes(entries)]
    if notes:
        lines += [""] + notes
    return lines + _program_lines(entries)


# ------------------------------------------------------------------------------ benchmarks, teacher-forced

TF_COLUMNS = ("digits", "TF digit accuracy", "TF digit entropy (nats)")


def _paper_order(entry: dict) -> int:
    return BENCHMARK_NAMES.index(entry["benchmark"])


def teacher_forced_note(entries: Sequence[dict]) -> str:
    """What TF means, and which of the benchmarks have no solutions to score."""
    without = sorted({e["benchmark"] for e in entries if not has_teacher_forced(e)}, key=BENCHMARK_NAMES.index)
    none = f"; {', '.join(BENCHMARKS[n].title for n in without)}: no solutions to score" if without else ""
    return f"TF = teacher-forced on the sets' reference solutions (digit targets only){none}."


def has_teacher_forced(entry: dict) -> bool:
    """Whether an entry has teacher-forced digit metrics."""
    return bool((entry.get("teacher_forced") or {}).get("digits"))


def teacher_forced_cells(entry: dict) -> list[str]:
    """An entry's teacher-forced cells, in the order of :data:`TF_COLUMNS`."""
    tf = entry.get("teacher_forced") or {}
    return [fmt(tf.get("digits"), "int"), fmt(tf.get("digit_accuracy"), "pct"), fmt(tf.get("mean_entropy"))]


def teacher_forced_place_table(entries: Sequence[tuple[str, dict]], first_column: str) -> list[str]:
    """The per-place teacher-forced digit accuracy of ``(label, entry)`` pairs; none without data."""
    header, rows = _place_rows(entries, "teacher_forced", "places")
    if not rows:
        return []
    return ["", "Per-place teacher-forced digit accuracy:", ""] + markdown_table([first_column] + header, rows)


def _benchmark_teacher_forced_section(report: dict) -> list[str]:
    """report.md: the teacher-forced digit accuracy and entropy of the benchmarks scored on their solutions."""
    benchmarks = sorted((e for e in report["datasets"] if e.get("benchmark")), key=_paper_order)
    entries = [(benchmark_title(e), e) for e in benchmarks if has_teacher_forced(e)]
    if not entries:
        return []
    rows = [[label] + teacher_forced_cells(e) for label, e in entries]
    lines = ["", "### Teacher-forced digit metrics", ""] + markdown_table(["set", *TF_COLUMNS], rows)
    return lines + ["", teacher_forced_note(benchmarks)] + teacher_forced_place_table(entries, "set")


# ---------------------------------------------------------------------------------------------- one report


def _sandbox_clause(settings: dict) -> str:
    sandbox = settings.get("program_sandbox")
    if not sandbox:
        return ""
    return " Programs ran without a sandbox." if sandbox == "none" else f" Programs ran in the {sandbox} sandbox."


def model_line(report: dict) -> str:
    """What a report scored: the model with its prompt format, dtype and device, or the generations file."""
    model = report.get("model") or {}
    settings = report.get("settings") or {}
    what = (model.get("base") or model.get("path") or "?") + (
        f" + adapter {model['adapter']}" if model.get("adapter") else ""
    )
    if report.get("command") == "score":
        made = f"generations of `{what}` made elsewhere" if model.get("path") else "generations made elsewhere"
        return f"Scored from `{model.get('predictions')}` ({made}).{_sandbox_clause(settings)}"
    source = f" ({model['prompt_format_source']})" if model.get("prompt_format_source") else ""
    pot = "; program-of-thought, chain-of-thought fallback" if settings.get("program_of_thought") else ""
    return (
        f"Model: `{what}`; prompt format {model.get('prompt_format')}{source}, {model.get('dtype')} on "
        f"{model.get('device')}; greedy, at most {settings.get('max_new_tokens')} new tokens{pot}."
        + _sandbox_clause(settings)
    )


def report_markdown(report: dict) -> str:
    lines = [f"# del-eval: {report.get('name')}", "", model_line(report)]
    if report.get("status") != "complete":
        lines += [
            "",
            f"**Status: {report.get('status')}** ({report.get('error')}); the numbers cover the problems "
            "finished before the stop.",
        ]
    lines += _benchmark_section(report)
    lines += _benchmark_teacher_forced_section(report)
    data_entries = [(d["name"], d) for d in report["datasets"] if not d.get("benchmark")]
    if data_entries:
        with_benchmarks = len(data_entries) < len(report["datasets"])
        if len(data_entries) > 1 and not with_benchmarks:
            data_entries.append((OVERALL, report["overall"]))
        lines += ["", "## Data files", ""] if with_benchmarks else [""]
        rows = [[n] + [data_file_cells(e)[c] for c in DATA_FILE_COLUMNS] for n, e in data_entries]
        lines += markdown_table(*without_math_verify([e for _, e in data_entries], ["set", *DATA_FILE_COLUMNS], rows))
        lines += ["", f"TF = teacher-forced on the reference solutions (digit targets only). {SE_LEGEND}"]
        if any(e.get("math_verify") for _, e in data_entries):
            lines += ["", MATH_VERIFY_NOTE]
        lines += place_sections(data_entries, "set", "##")
    warnings = report.get("warnings") or []
    if warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in warnings]
    issues = [i for d in report["datasets"] for i in d.get("issues", [])]
    if issues:
        lines += ["", f"## Skipped lines ({len(issues)})", ""]
        lines += [f"- `{i['file']}:{i['line']}`: {i['reason']}" for i in issues[:_MAX_ISSUES_IN_MARKDOWN]]
        if len(issues) > _MAX_ISSUES_IN_MARKDOWN:
            lines.append(f"- … {len(issues) - _MAX_ISSUES_IN_MARKDOWN} more in report.json")
    return "\n".join(lines) + "\n"


def benchmark_accuracies(report: dict) -> dict[str, float]:
    """``{benchmark name: accuracy}`` of a report's benchmarks that have one."""
    return {
        d["benchmark"]: d["generation"]["accuracy"]
        for d in report["datasets"]
        if d.get("benchmark") and (d.get("generation") or {}).get("accuracy") is not None
    }
