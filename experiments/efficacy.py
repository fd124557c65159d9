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

The statistics are del-eval's (:mod:`del_plugin.evaluation.stats`, on scipy), the ones ``del-eval compare`` uses.
Nothing here trains or loads a model (the tests run it on hand-made results).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from del_plugin.evaluation.stats import holm, mean_ci, sign_test_p
from del_plugin.evaluation.verdict import log_error, tf_digit_accuracy, verdict_markdown

from .findings import paired_lower

__all__ = [
    "METRICS",
    "Metric",
    "aggregate",
    "compare_verdicts",
    "paired_comparisons",
    "plot_paired",
    "plot_sweep",
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
    reference's, paired problem by problem, the problems and the seeds resampled. A setting whose reports cannot be
    read gets the verdict's "cannot be tested" line; one whose runs record no generations is left out."""
    from del_plugin.evaluation.report import load_report
    from del_plugin.evaluation.verdict import compare_arms

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
        except (OSError, ValueError) as err:
            line = f"{setting} - {reference}: cannot be tested: {err}"
            labels = {"baseline": {"label": reference}, "candidate": {"label": setting}}
            out[setting] = {"line": line, "sets": [], "notes": [], **labels}
            continue
        out[setting] = compare_arms(reports[0], reports[1], (reference, setting))
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


def _yerr(stats: dict, scale: float):
    if stats["low"] is None:
        return None
    return [[scale * (stats["mean"] - stats["low"])], [scale * (stats["high"] - stats["mean"])]]


def plot_sweep(
    runs: Sequence[dict], settings: Sequence[dict], reference: str, path: Path, base: dict | None = None
) -> Path | None:
    """Two rows of panels, one column per metric. Top: every run (one line per seed, so the pairing shows) and the
    mean with its 95 % interval, against ``del_alpha`` for DEL (its values evenly spaced, 0 first) and at the
    right, apart, the other criteria. Bottom: setting minus reference on the same seed, mean and 95 % interval.
    ``settings``: dicts with ``label``, ``criterion`` and ``alpha``, in plotting order."""
    if not runs:
        return None
    from del_plugin.evaluation.plots import pyplot, save_figure

    plt = pyplot()

    agg = aggregate(runs)
    comparisons = paired_comparisons(runs, reference)
    dels = [s for s in settings if s["criterion"] == "del" and s["label"] in agg]
    others = [s for s in settings if s["criterion"] != "del" and s["label"] in agg]
    # x positions: DEL's alphas evenly spaced in increasing order (the sweep's are roughly log-spaced, 0 first),
    # then, after a gap, the other criteria
    alphas = sorted({s["alpha"] for s in dels})
    positions = {s["label"]: float(alphas.index(s["alpha"])) for s in dels}
    for k, s in enumerate(others):
        positions[s["label"]] = len(alphas) + 0.5 + 1.2 * k
    seeds = sorted({r["seed"] for r in runs})
    fig, axes = plt.subplots(2, len(METRICS), figsize=(4.2 * len(METRICS), 7.6), squeeze=False)
    for col, m in enumerate(METRICS):
        scale = 100 if m.percent else 1
        ax, dax = axes[0][col], axes[1][col]
        for k, seed in enumerate(seeds):
            points = sorted(
                (positions[r["setting"]], r["metrics"][m.key])
                for r in runs
                if r["seed"] == seed
                and r["setting"] in positions
                and r["metrics"].get(m.key) is not None
                and any(s["label"] == r["setting"] for s in dels)
            )
            if points:
                ax.plot(
                    [x for x, _ in points],
                    [scale * y for _, y in points],
                    color=f"C{k}",
                    alpha=0.45,
                    marker=".",
                    linewidth=1,
                    label=f"seed {seed}",
                )
            for s in others:
                for r in runs:
                    if r["seed"] == seed and r["setting"] == s["label"] and r["metrics"].get(m.key) is not None:
                        ax.plot(positions[s["label"]], scale * r["metrics"][m.key], ".", color=f"C{k}", alpha=0.45)
        for label, x in positions.items():
            st = agg[label]["stats"][m.key]
            if st["mean"] is None:
                continue
            ax.errorbar(
                [x],
                [scale * st["mean"]],
                yerr=_yerr(st, scale),
                fmt="o",
                color="black",
                capsize=4,
                markersize=5,
                label="mean, 95 % CI" if label == next(iter(positions)) else None,
            )
            d = comparisons.get(label, {}).get("metrics", {}).get(m.key, {}).get("diff")
            if d and d["mean"] is not None:
                dax.errorbar(
                    [x], [scale * d["mean"]], yerr=_yerr(d, scale), fmt="o", color="black", capsize=4, markersize=5
                )
        if base is not None and base.get(m.key) is not None:
            ax.axhline(scale * base[m.key], color="grey", linestyle=":", label="base model")
        dax.axhline(0, color="grey", linewidth=1)
        ticks = list(positions.values())
        names = [f"{s['alpha']:g}" for s in dels] + [f"{s['criterion']}\n{s['alpha']:g}" for s in others]
        for a in (ax, dax):
            a.set_xlim(-0.6, max(ticks) + 0.6)
            a.set_xticks(ticks)
            a.set_xticklabels(names, fontsize=8)
            a.grid(alpha=0.3)
            a.set_xlabel("del_alpha (DEL)  |  other criteria")
        ax.set_title(m.title)
        dax.set_title(f"{m.title}: minus {reference}", fontsize=9)
        if col == 0:
            ax.legend(fontsize=7)
    return save_figure(fig, path, dpi=90)


def load_runs(paths: Sequence[Path]) -> list[dict]:
    """The finished runs among ``run.json`` files written by the sweep (see :mod:`.sweep`)."""
    runs = []
    for path in paths:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
        if record.get("state") == "done":
            runs.append(record)
    return runs


def plot_paired(
    runs: Sequence[dict], reference: str, metrics: Sequence[Metric], path: Path, title: str = ""
) -> Path | None:
    """One panel per metric: for each setting, its difference to ``reference`` on every shared seed (dots) and
    their mean with its 95 % interval (a bar); zero marked. None when no setting shares a seed with the reference."""
    comparisons = paired_comparisons(runs, reference, metrics)
    if not comparisons:
        return None
    from del_plugin.evaluation.plots import pyplot, save_figure

    plt = pyplot()
    settings = list(comparisons)
    columns = min(len(metrics), 5)
    rows = math.ceil(len(metrics) / columns)
    height = 0.5 + 0.45 * len(settings) + 1.6 * rows
    fig, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, height), squeeze=False)
    for k, m in enumerate(metrics):
        ax = axes[k // columns][k % columns]
        scale = 100 if m.percent else 1
        for y, setting in enumerate(settings):
            r = comparisons[setting]["metrics"][m.key]
            ax.plot([scale * d for d in r["per_seed"]], [y] * len(r["per_seed"]), ".", color="C0", alpha=0.5)
            d = r["diff"]
            if d["mean"] is not None:
                xerr = _yerr(d, scale)  # the same bar, horizontal
                ax.errorbar([scale * d["mean"]], [y], xerr=xerr, fmt="o", color="black", capsize=3, markersize=4)
        ax.axvline(0, color="grey", linewidth=1)
        ax.set_yticks(range(len(settings)))
        ax.set_yticklabels(settings if k % columns == 0 else [""] * len(settings), fontsize=8)
        ax.set_ylim(-0.7, len(settings) - 0.3)
        ax.set_title(m.title.replace(" (%)", " (points)") if m.percent else m.title, fontsize=9)
        ax.grid(alpha=0.3)
    for k in range(len(metrics), rows * columns):
        axes[k // columns][k % columns].axis("off")
    fig.suptitle(title or f"minus {reference}, same seed: each seed (dots), mean and 95 % interval", fontsize=10)
    return save_figure(fig, path, dpi=90)
