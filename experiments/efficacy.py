"""The statistics, tables and plots of the efficacy sweep (``python -m experiments sweep``).

Every run of the sweep is one (setting, seed): a setting is a criterion and its ``del_alpha``, a seed sets the LoRA
initialisation and the order of the training rows, the same for every setting. All runs are evaluated on the same
held-out problems. The comparisons use that pairing twice:

* **per seed**: the difference ``setting - reference`` of a metric on the same seed, then the mean of the
  differences and a 95 % t-interval over seeds (``n - 1`` degrees of freedom; with 3 seeds the t factor is 4.30);
* **per problem**: on each (seed, held-out problem), which of the two runs did better; the counts are pooled over
  the seeds and put through the exact two-sided sign test. Pooling treats the (seed, problem) pairs as
  independent, which they are not quite (the same problem recurs once per seed), so read those p-values as a
  screen; the seed-level interval is the conservative one.

The statistics are del-eval's (:mod:`del_plugin.evaluation.scoring.stats`, on scipy), the ones ``del-eval compare``
uses.
Nothing here trains or loads a model (the tests run it on hand-made results).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from del_plugin.evaluation.compare.verdict import log_error, tf_digit_accuracy
from del_plugin.evaluation.compare.verdict_report import verdict_markdown
from del_plugin.evaluation.scoring.stats import holm, sign_test_p

from .findings import paired_lower
from .seed_stats import mean_ci

__all__ = [
    "METRICS",
    "Metric",
    "aggregate",
    "compare_verdicts",
    "paired_comparisons",
    "paired_table",
    "per_setting_table",
    "results_markdown",
    "runs_table",
    "run_metrics",
]


def _tf_entropy(row: dict) -> float | None:
    return row["tf_entropy_sum"] / row["tf_digits"] if row.get("tf_digits") else None


@dataclass(frozen=True)
class Metric:
    key: str
    title: str
    value: Callable[[dict], float | None]  # from a del-eval report
    higher_is_better: bool | None  # None: a direction, not a quality (entropy)
    percent: bool
    # from a generations.jsonl row, None for rows it does not count (another set, no answer); lower wins the
    # per-problem count; None: no per-problem test (a mean over sets)
    per_problem: Callable[[dict], float | None] | None

    def fmt(self, x: float | None, signed: bool = False) -> str:
        if x is None:
            return "n/a"
        if self.percent:
            return f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}"
        return f"{x:+.3f}" if signed else f"{x:.3f}"


def overall(section: str, key: str) -> Callable[[dict], float | None]:
    """Reads ``report["overall"][section][key]`` (None where a part is missing)."""
    return lambda report: ((report.get("overall") or {}).get(section) or {}).get(key)


def tf_digit_accuracy_won(row: dict) -> float | None:
    """Per problem: minus its teacher-forced digit accuracy (lower wins, so higher accuracy wins)."""
    value = tf_digit_accuracy(row)
    return None if value is None else -value


METRICS: tuple[Metric, ...] = (
    Metric(
        "accuracy", "accuracy (%)", overall("generation", "accuracy"), True, True, lambda r: -float(bool(r["correct"]))
    ),
    Metric("mae", "MAE", overall("generation", "mae"), False, False, lambda r: r.get("abs_error")),
    Metric("log_mae", "log-MAE", overall("generation", "log_mae"), False, False, log_error),
    Metric(
        "tf_digit_accuracy",
        "TF digit accuracy (%)",
        overall("teacher_forced", "digit_accuracy"),
        True,
        True,
        tf_digit_accuracy_won,
    ),
    Metric(
        "tf_entropy", "TF digit entropy (nats)", overall("teacher_forced", "mean_entropy"), None, False, _tf_entropy
    ),
)


def run_metrics(report: dict, metrics: Sequence[Metric] = METRICS) -> dict[str, float | None]:
    """The numbers of ``metrics`` (default: the sweep's five) from a del-eval report."""
    return {m.key: m.value(report) for m in metrics}


def aggregate(runs: Sequence[dict], metrics: Sequence[Metric] = METRICS) -> dict[str, dict]:
    """``runs``: dicts with ``setting`` (a label), ``seed`` and ``metrics`` (:func:`run_metrics`). Returns, per
    setting in first-seen order, its seeds and the :func:`mean_ci` of every metric over them."""
    out: dict[str, dict] = {}
    for run in runs:
        entry = out.setdefault(run["setting"], {"seeds": [], "values": {m.key: [] for m in metrics}})
        entry["seeds"].append(run["seed"])
        for m in metrics:
            entry["values"][m.key].append(run["metrics"].get(m.key))
    for entry in out.values():
        entry["stats"] = {key: mean_ci(values) for key, values in entry["values"].items()}
    return out


def paired_comparisons(runs: Sequence[dict], reference: str, metrics: Sequence[Metric] = METRICS) -> dict[str, dict]:
    """Every setting against ``reference`` on the seeds both have: per metric, the per-seed differences with their
    mean and 95 % t-interval, and, when the runs carry ``generations`` (a generations.jsonl path), the per-problem
    counts pooled over those seeds (``better``: the setting did better, ``worse``, ``tied``) and the sign test's p.
    ``holm_p`` adjusts the p-values over every (setting, metric) test of the table."""
    by_setting: dict[str, dict[int, dict]] = {}
    for run in runs:
        by_setting.setdefault(run["setting"], {})[run["seed"]] = run
    ref = by_setting.get(reference, {})
    out: dict[str, dict] = {}
    for setting, seeds in by_setting.items():
        if setting == reference:
            continue
        shared = sorted(seeds.keys() & ref.keys())
        if not shared:
            continue
        entry = {"seeds": shared, "metrics": {}}
        for m in metrics:
            diffs = [
                seeds[s]["metrics"][m.key] - ref[s]["metrics"][m.key]
                for s in shared
                if seeds[s]["metrics"].get(m.key) is not None and ref[s]["metrics"].get(m.key) is not None
            ]
            result = {"per_seed": diffs, "diff": mean_ci(diffs)}
            if m.per_problem is not None and all(
                seeds[s].get("generations") and ref[s].get("generations") for s in shared
            ):
                counts = {"problems": 0, "better": 0, "worse": 0, "tied": 0}
                for s in shared:
                    c = paired_lower(Path(seeds[s]["generations"]), Path(ref[s]["generations"]), m.per_problem)
                    counts["problems"] += c["problems"]
                    counts["better"] += c["a_lower"]
                    counts["worse"] += c["b_lower"]
                    counts["tied"] += c["equal"]
                counts["p"] = sign_test_p(counts["better"], counts["worse"])
                result["per_problem"] = counts
            entry["metrics"][m.key] = result
        out[setting] = entry
    tests = [(s, k) for s, e in out.items() for k, r in e["metrics"].items() if "per_problem" in r]
    for (s, k), p in zip(tests, holm([out[s]["metrics"][k]["per_problem"]["p"] for s, k in tests])):
        out[s]["metrics"][k]["per_problem"]["holm_p"] = p
    return out


def compare_verdicts(runs: Sequence[dict], reference: str) -> dict[str, dict]:
    """Per setting, ``del-eval compare``'s verdict against ``reference``: its runs (one per seed) against the
    reference's, paired problem by problem, the training run the replicate (Welch's t on the runs' accuracies). A
    setting whose reports cannot be read or paired gets the verdict's "cannot be tested" line; one whose runs record
    no generations is left out."""
    from del_plugin.evaluation.compare.verdict import compare_arms
    from del_plugin.evaluation.reports.files import load_report

    by_setting: dict[str, list[dict]] = {}
    for run in runs:
        by_setting.setdefault(run["setting"], []).append(run)
    out: dict[str, dict] = {}
    for setting, group in by_setting.items():
        if setting == reference or reference not in by_setting:
            continue
        if not all(r.get("generations") for r in (*by_setting[reference], *group)):
            continue  # runs recorded without their generations: nothing to pair
        try:
            reports = [
                [load_report(Path(r["generations"]).parent / "report.json") for r in arm]
                for arm in (by_setting[reference], group)
            ]
            # runs compare refuses to pair (other problems, the same run twice, a bad record): said in the line
            out[setting] = compare_arms(reports[0], reports[1], (reference, setting))
        except (OSError, ValueError) as err:
            line = f"{setting} - {reference}: cannot be tested: {err}"
            labels = {"baseline": {"label": reference}, "candidate": {"label": setting}}
            out[setting] = {"line": line, "sets": [], "notes": [], **labels}
    return out


def _interval(m: Metric, stats: dict, signed: bool = False) -> str:
    if stats["mean"] is None:
        return "n/a"
    if stats["low"] is None:
        return m.fmt(stats["mean"], signed)
    return f"{m.fmt(stats['mean'], signed)} [{m.fmt(stats['low'], signed)}, {m.fmt(stats['high'], signed)}]"


def _p(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 else f"{p:.0e}"


def per_setting_table(runs: Sequence[dict], metrics: Sequence[Metric] = METRICS, base: dict | None = None) -> list[str]:
    """Markdown rows: per setting the mean over seeds [95 % t-interval] of each metric (a row for the base model
    first when given)."""
    lines = [
        "| setting | seeds | " + " | ".join(m.title for m in metrics) + " |",
        "|---|---|" + "---|" * len(metrics),
    ]
    if base is not None:
        lines.append("| base model (no fine-tune) | - | " + " | ".join(m.fmt(base.get(m.key)) for m in metrics) + " |")
    for setting, entry in aggregate(runs, metrics).items():
        lines.append(
            f"| {setting} | {len(entry['seeds'])} | "
            + " | ".join(_interval(m, entry["stats"][m.key]) for m in metrics)
            + " |"
        )
    return lines


def paired_table(runs: Sequence[dict], reference: str, metrics: Sequence[Metric] = METRICS) -> list[str]:
    """Markdown rows: each setting minus ``reference`` on the same seeds [95 % t-interval], with the pooled
    per-problem counts and sign test where the metric has one (Holm over this table's tests); [] when no setting
    shares a seed with the reference."""
    comparisons = paired_comparisons(runs, reference, metrics)
    if not comparisons:
        return []
    lines = [
        "| setting | seeds | " + " | ".join(m.title for m in metrics) + " |",
        "|---|---|" + "---|" * len(metrics),
    ]
    for setting, entry in comparisons.items():
        cells = []
        for m in metrics:
            r = entry["metrics"][m.key]
            cell = _interval(m, r["diff"], signed=True)
            if "per_problem" in r:
                c = r["per_problem"]
                cell += f"<br>{c['better']}/{c['worse']}, p {_p(c['p'])} ({_p(c['holm_p'])})"
            cells.append(cell)
        lines.append(f"| {setting} | {len(entry['seeds'])} | " + " | ".join(cells) + " |")
    return lines


def runs_table(runs: Sequence[dict], metrics: Sequence[Metric] = METRICS) -> list[str]:
    """Markdown rows: every run's numbers and its training and evaluation times."""
    lines = [
        "| setting | seed | " + " | ".join(m.title for m in metrics) + " | train | eval |",
        "|---|---|" + "---|" * (len(metrics) + 2),
    ]
    for run in runs:
        timing = run.get("timing") or {}
        lines.append(
            f"| {run['setting']} | {run['seed']} | "
            + " | ".join(m.fmt(run["metrics"].get(m.key)) for m in metrics)
            + f" | {_short_minutes(timing.get('train_s'))} | {_short_minutes(timing.get('eval_s'))} |"
        )
    return lines


PAIRED_LEGEND = (
    "Per metric: the mean over seeds of (setting - reference) [95 % t-interval over the per-seed differences]; "
    "then, pooled over the seeds, on how many held-out problems the setting did better / worse than the reference "
    "(ties left out) and the exact sign test's p (Holm-adjusted over the whole table in brackets). Accuracy and TF "
    "digit accuracy: higher is better; MAE and log-MAE: lower; entropy: lower means sharper digit distributions "
    "(counted as 'better' below), not more correct."
)


def results_markdown(
    runs: Sequence[dict], reference: str, base: dict | None = None, metrics: Sequence[Metric] = METRICS
) -> str:
    """The sweep's tables: per setting the mean and 95 % interval over seeds; each setting minus the reference on
    the same seeds, with the pooled per-problem sign tests; every run."""
    lines = ["## Per setting: mean over seeds [95 % t-interval]", ""] + per_setting_table(runs, metrics, base)
    paired = paired_table(runs, reference, metrics)
    if paired:
        lines += ["", f"## Paired against {reference}, same seeds", "", PAIRED_LEGEND, ""] + paired
    for setting, verdict in compare_verdicts(runs, reference).items():
        lines += ["", f"## Accuracy, {setting} against {reference}: `del-eval compare --baseline --candidate`", ""]
        lines += verdict_markdown(verdict)[2:]  # without its own heading
    lines += ["", "## Every run", ""] + runs_table(runs, metrics)
    return "\n".join(lines) + "\n"


def _short_minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f} min"
