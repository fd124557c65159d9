"""The report of ``python -m experiments paper``: the paper's table layout (methods as rows, the evaluation sets
as columns, their mean accuracy last), paired differences against MLE on the same seeds with 95 % intervals, the
numeric and teacher-forced digit metrics, every run with its time and training throughput.

Nothing here trains or loads a model: the statistics are del-eval's
(:mod:`del_plugin.evaluation.scoring.stats`), through :mod:`.efficacy` and ``del-eval compare``'s verdict per setting.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

from del_plugin.evaluation.compare.verdict_report import verdict_markdown

from .efficacy import (
    PAIRED_LEGEND,
    Metric,
    aggregate,
    compare_verdicts,
    paired_comparisons,
    paired_table,
    per_setting_table,
    runs_table,
)
from .efficacy_plots import plot_paired
from .jobs import hms
from .paper_metrics import SET_TITLES, accuracy_metrics, digit_metrics
from .paper_plan import REFERENCE, REGIMES, Profile
from .paper_runs import run_dir
from .runs import read_record, run_state

__all__ = ["write_report"]


def _finished(out: Path, runs: list[dict]) -> tuple[dict[str, list[dict]], dict | None]:
    by_regime: dict[str, list[dict]] = {}
    base = None
    for run in runs:
        folder = run_dir(out, run["regime"], run["setting"], run["seed"])
        if run_state(folder, run["spec"], run["eval_spec"]) != "done":
            continue
        record = read_record(folder)
        record["generations"] = str(folder / record["generations"])
        if run["setting"] is None:
            base = record["metrics"]
        else:
            by_regime.setdefault(run["regime"], []).append(record)
    return by_regime, base


def _throughput_lines(runs: list[dict]) -> list[str]:
    lines = [
        "| regime | setting | seed | rows | steps | training tokens | train wall | tokens/s | eval wall |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        t = r.get("training") or {}
        timing = r.get("timing") or {}
        lines.append(
            f"| {r['regime']} | {r['setting']} | {r['seed']} | {t.get('rows', '-')} | {t.get('steps', '-')} | "
            f"{t.get('tokens', 0):,} | {hms(timing.get('train_s') or 0)} | {t.get('tokens_per_s', '-')} | "
            f"{hms(timing.get('eval_s') or 0)} |"
        )
    return lines


def write_report(out: Path, profile: Profile, runs: list[dict], argv: list[str], wall: float | None) -> list[Path]:
    """results.md, summary.json and runs.csv in ``out`` from the finished runs (and a plot of the paired
    differences); the files written ([] when no run has finished)."""
    by_regime, base = _finished(out, runs)
    if not by_regime:
        return []
    sets = runs[0]["eval_spec"]["sets"]
    accuracy, digits = accuracy_metrics(sets), digit_metrics(sets)
    every = [r for regime in by_regime.values() for r in regime]
    command = "python -m experiments paper" + ("" if not argv else " " + " ".join(argv))
    lines = _header(command, profile, runs, len(every), wall)
    summary: dict = {"command": command, "profile": profile.as_dict(), "base": base, "regimes": {}}
    plots: list[Path] = []
    for regime, regime_runs in by_regime.items():
        section, summary["regimes"][regime], plot = _regime_section(out, regime, regime_runs, accuracy, digits, base)
        lines += section
        plots += [plot] if plot is not None else []
    lines += ["## Paired tables: how to read them", "", PAIRED_LEGEND, ""]
    lines += ["## Time and training throughput", ""] + _throughput_lines(every) + [""]
    summary["runs"] = [
        {k: r.get(k) for k in ("regime", "setting", "seed", "metrics", "timing", "training")} for r in every
    ]
    _write_files(out, lines, summary, every, accuracy + digits)
    return [out / "results.md", out / "summary.json", out / "runs.csv", *plots]


def _header(command: str, profile: Profile, runs: list[dict], finished: int, wall: float | None) -> list[str]:
    """results.md's title and set-up: what wrote it, from how many runs, how they were trained and scored."""
    eval_spec = runs[0]["eval_spec"]
    return [
        f"# The paper's regime on {runs[0]['spec']['model']}: the {profile.name} profile",
        "",
        f"Written by `{command}` ({platform.machine()}, {os.cpu_count()} CPU cores) from {finished} of "
        f"{len(runs) - 1} runs finished"
        + (f"; this invocation's wall time {hms(wall)}" if wall is not None else "")
        + ".",
        "",
        f"Profile: {profile.description}. Training: {profile.train_rows or 7473} GSM8K training problems "
        f"(MathInstruct's form: 'The answer is N', calculator annotations dropped), alpaca prompt, "
        f"{profile.epochs} epoch{'s' * (profile.epochs != 1)}, "
        f"{profile.rows_per_step} rows per step, sequence length {profile.sequence_len}, "
        "cosine with 3 % warm-up, weight decay 0, float32 weights under bf16 autocast. Evaluation: "
        + ", ".join(SET_TITLES.get(s, s) for s in eval_spec["sets"])
        + f", {eval_spec['limit'] or 'all'} problems per set, greedy, at most {eval_spec['max_new_tokens']} new "
        "tokens, alpaca prompt. Intervals: 95 % Student t over seeds.",
        "",
    ]


def _regime_section(
    out: Path, regime: str, runs: list[dict], accuracy: list[Metric], digits: list[Metric], base: dict | None
) -> tuple[list[str], dict, Path | None]:
    """One regime's part of the report: its tables, del-eval compare's verdict per setting, the plot of the paired
    differences; its part of summary.json; the plot (None when no setting shares a seed with MLE)."""
    lines = [f"## {REGIMES[regime].title}", "", "### Accuracy: mean over seeds [95 % interval]", ""]
    lines += per_setting_table(runs, accuracy, base)
    paired = paired_table(runs, REFERENCE, accuracy)
    if paired:
        lines += ["", f"### Accuracy, paired against {REFERENCE} (MLE) on the same seeds", ""] + paired
    lines += ["", "### Numbers and digits: mean over seeds [95 % interval]", ""]
    lines += per_setting_table(runs, digits, base)
    paired = paired_table(runs, REFERENCE, digits)
    if paired:
        lines += ["", f"### Numbers and digits, paired against {REFERENCE}", ""] + paired
    verdicts = compare_verdicts(runs, REFERENCE)
    for setting, verdict in verdicts.items():
        lines += ["", f"### Accuracy, {setting} against {REFERENCE}: `del-eval compare --baseline --candidate`", ""]
        lines += verdict_markdown(verdict)[2:]  # without its own heading
    plot = plot_paired(
        runs,
        REFERENCE,
        accuracy + digits,
        out / f"paired_{regime}.png",
        f"{REGIMES[regime].title}: minus {REFERENCE} (MLE) on the same seed",
    )
    if plot is not None:
        lines += ["", f"![Each setting minus MLE, per set and digit metric]({plot.name})"]
    lines += ["", "### Every run", ""] + runs_table(runs, accuracy + digits) + [""]
    summary = {
        "aggregate": {
            k: {"seeds": v["seeds"], "stats": v["stats"]} for k, v in aggregate(runs, accuracy + digits).items()
        },
        "paired": paired_comparisons(runs, REFERENCE, accuracy + digits),
        "verdict": verdicts,
    }
    return lines, summary, plot


def _write_files(out: Path, lines: list[str], summary: dict, runs: list[dict], metrics: list[Metric]) -> None:
    from del_plugin.evaluation.output import (  # (the plots import that package)
        write_json_atomic,
        write_text_atomic,
    )

    # by rename: a run killed while the report is written leaves the previous one whole
    write_text_atomic(out / "results.md", "\n".join(lines))
    write_json_atomic(out / "summary.json", summary)
    keys = [m.key for m in metrics]
    rows = [",".join(["regime", "setting", "seed", *keys, "train_s", "eval_s", "tokens", "tokens_per_s"])]
    for r in runs:
        values = [r["regime"], r["setting"], str(r["seed"])]
        values += ["" if r["metrics"].get(k) is None else repr(r["metrics"][k]) for k in keys]
        values += [str((r.get("timing") or {}).get(k, "")) for k in ("train_s", "eval_s")]
        values += [str((r.get("training") or {}).get(k, "")) for k in ("tokens", "tokens_per_s")]
        rows.append(",".join(values))
    write_text_atomic(out / "runs.csv", "\n".join(rows) + "\n")
