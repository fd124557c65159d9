"""The verdict of ``del-eval compare``: did the candidate beat the baseline, by how much, and how sure.

Two arms (one run each, or several seeds each) are paired problem by problem on the problems every run of both
scored (read from each report's ``generations.jsonl``). Per set: each arm's accuracy with its standard error and
95 % interval, the difference with a 95 % interval from the two-stage paired bootstrap of :mod:`.stats`, McNemar's
exact p on the discordant pairs (Holm-adjusted over the sets) and the smallest difference this sample detects;
then the same for the mean over sets (mACC over the paper's benchmarks), and one verdict line. A difference is
*resolved* when its interval excludes zero (and, for a set, its Holm-adjusted p is below 0.05): only then is a
side named better, in words or in bold."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .benchmarks.sets import BENCHMARK_NAMES, BENCHMARKS
from .errors import UsageError
from .output import read_jsonl
from .stats import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    CONFIDENCE,
    POWER,
    ArmOutcomes,
    Bootstrap,
    accuracy_se,
    detectable_difference,
    discordance_se,
    holm,
    paired_bootstrap,
    sign_test_p,
)

__all__ = ["SCORERS", "compare_arms", "plot_forest", "problem_correct", "verdict_markdown"]

# the scorer of --scorer -> the field of a generations.jsonl record that holds its verdict
SCORERS = {"paper": "correct", "math-verify": "math_verify_correct"}
ALPHA = 1 - CONFIDENCE
METHOD = (
    "paired by problem id on the problems every run of both arms scored; per set: accuracy with lm-eval's standard "
    "error; the difference's {confidence:.0%} interval from a {resamples:,}-resample two-stage paired bootstrap "
    "(problems resampled, the same draw for both arms; each arm's seeds resampled, so that seed-to-seed spread "
    "widens it; seed {seed}), McNemar's exact test on the discordant pairs (scipy binomtest; several seeds: seed "
    "i against seed i, pooled), Holm-adjusted over the sets; the mean over sets bootstrapped stratified by set; "
    "smallest detectable difference at {power:.0%} power: (z_0.975 + z_0.8) x its standard error, from the "
    "discordant pairs for one run an arm, from the bootstrap for several seeds"
)


def problem_correct(record: dict, scorer: str, source: str) -> bool:
    """Whether the problem of one ``generations.jsonl`` record is right under ``scorer`` (``paper``: the paper's
    exact rules, ``math-verify``: math-verify's equivalence); ``source`` names the file for the error a report
    scored before math-verify gets."""
    field = SCORERS[scorer]
    if field not in record:
        raise UsageError(
            f"{source}: its problems carry no {scorer} verdict ({field!r}): the report was written by an older "
            f"del-eval; re-score it with the current del-eval (run the same del-eval run or score command again, "
            f"with --overwrite), or compare with --scorer paper"
        )
    return bool(record[field])


def _generations_path(report: dict) -> Path | None:
    path = report.get("_path")
    if not path:
        return None
    return Path(path).parent / ((report.get("files") or {}).get("generations") or "generations.jsonl")


def _records(report: dict) -> tuple[dict[str, dict[int, dict]], str]:
    """``{set name: {problem id: generations.jsonl record}}`` of one report, and the file's path."""
    path = _generations_path(report)
    if path is None or not path.is_file():
        raise FileNotFoundError(str(path or report.get("name")))
    out: dict[str, dict[int, dict]] = {}
    for record in read_jsonl(path):
        out.setdefault(record["dataset"], {})[record["id"]] = record
    return out, str(path)


def log_error(record: dict) -> float | None:
    """A problem's |s(p) - s(r)| with s(x) = sign(x) log(|x| + 1), log-MAE's term; None without a numeric answer."""
    if record.get("prediction") is None or record.get("abs_error") is None:  # no number, or a LaTeX / option answer
        return None

    def s(x: float) -> float:
        return math.copysign(math.log1p(abs(x)), x)

    return abs(s(float(record["prediction"])) - s(float(record["reference"])))


def tf_digit_accuracy(record: dict) -> float | None:
    """A problem's teacher-forced digit accuracy; None without digit targets."""
    return record["tf_digits_correct"] / record["tf_digits"] if record.get("tf_digits") else None


# the --data tables' columns a sign test ranks: (column, per-problem value, higher is better)
SIGN_TESTED = (
    ("MAE", lambda r: r.get("abs_error"), False),
    ("log-MAE", log_error, False),
    ("TF digit accuracy", tf_digit_accuracy, True),
)


def _sign_tested_winners(base: dict[int, dict], cand: dict[int, dict], labels: tuple[str, str]) -> dict[str, str]:
    """``{column: label}`` of the metrics on which one run is better on significantly more problems (exact sign
    test, p < 0.05)."""
    winners = {}
    for column, value, higher in SIGN_TESTED:
        pairs = [(value(base[i]), value(cand[i])) for i in base.keys() & cand.keys()]
        pairs = [(b, c) for b, c in pairs if b is not None and c is not None]
        cand_wins = sum((c > b) if higher else (c < b) for b, c in pairs)
        base_wins = sum((b > c) if higher else (b < c) for b, c in pairs)
        if sign_test_p(cand_wins, base_wins) < ALPHA:
            winners[column] = labels[1] if cand_wins > base_wins else labels[0]
    return winners


def _set_titles(reports: Sequence[dict]) -> dict[str, tuple[str, bool]]:
    """``{set name: (title, is one of the paper's benchmarks)}`` over ``reports``."""
    titles = {}
    for report in reports:
        for d in report["datasets"]:
            benchmark = d.get("benchmark")
            titles[d["name"]] = (BENCHMARKS[benchmark].title if benchmark in BENCHMARKS else d["name"], bool(benchmark))
    return titles


def _order(name: str) -> tuple:
    return (BENCHMARK_NAMES.index(name) if name in BENCHMARK_NAMES else len(BENCHMARK_NAMES), name)


def _arm_stats(outcomes: np.ndarray, resampled: np.ndarray) -> dict:
    """An arm's accuracy on the paired problems: the value, its standard error (one run: lm-eval's; several seeds:
    the bootstrap's) and the bootstrap's interval."""
    runs, n = outcomes.shape
    value = float(outcomes.mean())
    se = accuracy_se(int(outcomes.sum()), n) if runs == 1 else float(resampled.std(ddof=1))
    low, high = Bootstrap.interval(resampled)
    return {"accuracy": value, "se": se, "low": low, "high": high}


def _discordant(base: np.ndarray, cand: np.ndarray) -> dict | None:
    """The discordant pairs, seed i against seed i and pooled (None when the arms have different numbers of
    seeds: then no McNemar test, the bootstrap interval alone)."""
    if base.shape[0] != cand.shape[0]:
        return None
    return {
        "candidate_only": int(((cand == 1) & (base == 0)).sum()),
        "baseline_only": int(((base == 1) & (cand == 0)).sum()),
    }


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _signed(x: float) -> str:
    return f"{100 * x:+.1f}"


def compare_arms(
    baseline: Sequence[dict],
    candidate: Sequence[dict],
    labels: tuple[str, str] = ("baseline", "candidate"),
    *,
    scorer: str = "paper",
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> dict:
    """The verdict of ``candidate`` (reports, one per seed) against ``baseline``: the dict ``comparison.json``
    holds under ``verdict`` (see docs/evaluation.md). Raises UsageError for ``--scorer math-verify`` on a report
    scored before math-verify."""
    if scorer not in SCORERS:
        raise UsageError(f"--scorer {scorer}: choose one of {', '.join(SCORERS)}")
    base_label, cand_label = labels
    result: dict = {
        "method": METHOD.format(confidence=CONFIDENCE, resamples=resamples, seed=seed, power=POWER),
        "scorer": scorer,
        "confidence": CONFIDENCE,
        "power": POWER,
        "resamples": resamples,
        "seed": seed,
        "baseline": {"label": base_label, "runs": [r.get("_path") for r in baseline]},
        "candidate": {"label": cand_label, "runs": [r.get("_path") for r in candidate]},
        "sets": [],
        "summary": None,
        "notes": [],
        "winners": {},
    }
    runs = [*baseline, *candidate]
    tables, records = [], []
    for report in runs:
        try:
            by_set, path = _records(report)
            records.append(by_set)
            tables.append(
                {name: {i: problem_correct(r, scorer, path) for i, r in rows.items()} for name, rows in by_set.items()}
            )
        except FileNotFoundError as err:
            result["line"] = (
                f"{cand_label} - {base_label}: cannot be tested: {err} is missing, and without each problem's "
                "verdict the runs cannot be paired (del-eval writes generations.jsonl beside report.json: compare "
                "the folders it wrote)"
            )
            return result
    titles = _set_titles(runs)
    names = sorted(set().union(*tables), key=_order)
    paired: list[tuple[str, list[int]]] = []
    for name in names:
        title = titles.get(name, (name, False))[0]
        present = [name in t for t in tables]
        if not all(present):
            missing = [r.get("name") or r.get("_path") for r, p in zip(runs, present) if not p]
            result["notes"].append(f"{title}: not in every run ({', '.join(map(str, missing))} lack it); not compared")
            continue
        ids = sorted(set.intersection(*(set(t[name]) for t in tables)))
        union = set().union(*(t[name] for t in tables))
        if not ids:
            result["notes"].append(f"{title}: the runs scored no problem in common; not compared")
            continue
        if len(union) > len(ids):
            result["notes"].append(
                f"{title}: paired on the {len(ids):,} problems every run scored; {len(union) - len(ids):,} scored by "
                "some runs only are left out"
            )
        paired.append((name, ids))
    if not paired:
        result["line"] = f"{cand_label} - {base_label}: cannot be tested: no set has problems that every run scored" + (
            f" ({'; '.join(result['notes'])})" if result["notes"] else ""
        )
        return result

    arms = []
    for name, ids in paired:
        matrix = np.array([[t[name][i] for i in ids] for t in tables], dtype=np.float64)
        arms.append(ArmOutcomes(matrix[: len(baseline)], matrix[len(baseline) :]))
    boot = paired_bootstrap(arms, resamples=resamples, seed=seed)
    single = len(baseline) == 1 and len(candidate) == 1
    sets = []
    for k, ((name, ids), outcomes) in enumerate(zip(paired, arms)):
        diff = float(outcomes.candidate.mean() - outcomes.baseline.mean())
        low, high = Bootstrap.interval(boot.difference[k])
        discordant = _discordant(outcomes.baseline, outcomes.candidate)
        se_null = float(boot.difference[k].std(ddof=1))
        if discordant is not None:  # from the discordant pairs, averaged over the seed pairs (at least one pair)
            pairs = outcomes.baseline.shape[0]
            from_discordance = discordance_se(
                discordant["candidate_only"], discordant["baseline_only"], len(ids) * pairs
            )
            se_null = from_discordance if single else max(se_null, from_discordance)
        sets.append(
            {
                "name": name,
                "title": titles.get(name, (name, False))[0],
                "benchmark": titles.get(name, (name, False))[1],
                "problems": len(ids),
                "baseline": _arm_stats(outcomes.baseline, boot.baseline[k]),
                "candidate": _arm_stats(outcomes.candidate, boot.candidate[k]),
                "difference": {"value": diff, "low": low, "high": high, "se": float(boot.difference[k].std(ddof=1))},
                "discordant": discordant,
                "p": None
                if discordant is None
                else sign_test_p(discordant["candidate_only"], discordant["baseline_only"]),
                "detectable": detectable_difference(se_null),
                "_se_null": se_null,
            }
        )
    tested = [s for s in sets if s["p"] is not None]
    for s, adjusted in zip(tested, holm([s["p"] for s in tested])):
        s["holm_p"] = adjusted
    for s in sets:
        s.setdefault("holm_p", None)
        d = s["difference"]
        excludes_zero = d["low"] > 0 or d["high"] < 0
        s["resolved"] = bool(excludes_zero and (s["holm_p"] is None or s["holm_p"] < ALPHA))
        s["better"] = (cand_label if d["value"] > 0 else base_label) if s["resolved"] else None
    result["sets"] = sets
    result["summary"] = _summary(sets, boot, single)
    result["line"] = _verdict_line(result, base_label, cand_label)
    # the cells the side-by-side tables may put in bold: two runs, differences the paired tests resolve
    winners: dict[str, dict[str, str]] = {}
    if single:
        for s in sets:
            winners[s["name"]] = _sign_tested_winners(records[0][s["name"]], records[1][s["name"]], labels)
            if s["better"]:
                winners[s["name"]]["accuracy"] = s["better"]
        if result["summary"]["better"] and all(s["benchmark"] for s in sets):  # the reports' mACC column
            winners["macc"] = {"accuracy": result["summary"]["better"]}
    result["winners"] = winners
    for s in sets:
        s.pop("_se_null")
    return result


def _summary_name(sets: Sequence[dict]) -> str:
    if len(sets) == 1:
        return sets[0]["title"]
    if all(s["benchmark"] for s in sets):
        return "mACC" if len(sets) == len(BENCHMARK_NAMES) else f"mACC ({len(sets)} of {len(BENCHMARK_NAMES)} sets)"
    return f"mean accuracy over {len(sets)} sets"


def _summary(sets: list[dict], boot: Bootstrap, single: bool) -> dict:
    """The mean over the sets (mACC when they are the paper's benchmarks), its difference bootstrapped stratified
    by set."""
    if len(sets) == 1:
        only = sets[0]
        return {
            "name": _summary_name(sets),
            "sets": [only["name"]],
            "baseline": only["baseline"],
            "candidate": only["candidate"],
            "difference": only["difference"],
            "detectable": only["detectable"],
            "resolved": only["resolved"],
            "better": only["better"],
        }
    k = len(sets)
    diff = sum(s["difference"]["value"] for s in sets) / k
    low, high = Bootstrap.interval(boot.mean_difference)
    if single:  # the sets are independent samples: the variances add
        se_null = float(np.sqrt(sum(s["_se_null"] ** 2 for s in sets)) / k)
    else:
        se_null = float(boot.mean_difference.std(ddof=1))

    def arm(side: str, resampled: np.ndarray) -> dict:
        b_low, b_high = Bootstrap.interval(resampled)
        if single:
            se = float(np.sqrt(sum(s[side]["se"] ** 2 for s in sets)) / k)
        else:
            se = float(resampled.std(ddof=1))
        return {"accuracy": sum(s[side]["accuracy"] for s in sets) / k, "se": se, "low": b_low, "high": b_high}

    resolved = low > 0 or high < 0
    return {
        "name": _summary_name(sets),
        "sets": [s["name"] for s in sets],
        "baseline": arm("baseline", boot.mean_baseline),
        "candidate": arm("candidate", boot.mean_candidate),
        "difference": {"value": diff, "low": low, "high": high, "se": float(boot.mean_difference.std(ddof=1))},
        "detectable": detectable_difference(se_null),
        "resolved": bool(resolved),
        "better": None,
    }


def _verdict_line(result: dict, base_label: str, cand_label: str) -> str:
    summary = result["summary"]
    d = summary["difference"]
    if len(result["sets"]) > 1:
        summary["better"] = (cand_label if d["value"] > 0 else base_label) if summary["resolved"] else None
    head = (
        f"{cand_label} - {base_label}: {_signed(d['value'])} {summary['name']} points "
        f"[{_signed(d['low'])}, {_signed(d['high'])}]"
    )
    if summary["resolved"]:
        line = f"{head}, resolved: {summary['better']} is better"
        if len(result["sets"]) > 1:
            won = [f"{s['title']} for {s['better']}" for s in result["sets"] if s["resolved"]]
            line += f" (sets resolved on their own: {', '.join(won)})" if won else " (no set resolved on its own)"
        return line
    return (
        f"{head}, not resolved: this sample resolves about +/-{100 * summary['detectable']:.1f}; score more "
        "problems (a larger --limit, or none) or more seeds"
    )


# ---------------------------------------------------------------------------------------------- markdown, plot


def _arm_cell(arm: dict) -> str:
    se = "" if arm["se"] is None else f" ± {_pct(arm['se'])}"
    return f"{_pct(arm['accuracy'])}{se}"


def _p_cell(s: dict) -> str:
    if s.get("p") is None:
        return "–"

    def fmt(p: float) -> str:
        return f"{p:.3f}" if p >= 0.001 else f"{p:.0e}"

    c = s["discordant"]
    return f"{fmt(s['p'])} ({fmt(s['holm_p'])}); {c['candidate_only']}/{c['baseline_only']}"


def verdict_markdown(verdict: dict, forest: str | None = None) -> list[str]:
    """The verdict section of comparison.md: the line, the table per set and the summary, the method, the notes."""
    lines = ["## Verdict", "", verdict["line"], ""]
    base, cand = verdict["baseline"]["label"], verdict["candidate"]["label"]
    if verdict["sets"]:
        header = [
            "set",
            "problems paired",
            f"{base} (%, ± SE)",
            f"{cand} (%, ± SE)",
            f"{cand} - {base} [95 % CI]",
            "McNemar p (Holm); discordant +/-",
            "detectable ±",
            "resolved",
        ]
        rows = []
        entries = list(verdict["sets"])
        if len(entries) > 1:
            entries.append(verdict["summary"] | {"title": verdict["summary"]["name"], "problems": None})
        for s in entries:
            d = s["difference"]
            diff = f"{_signed(d['value'])} [{_signed(d['low'])}, {_signed(d['high'])}]"
            if s["resolved"]:
                diff = f"**{diff}**"
            rows.append(
                [
                    s["title"],
                    "–" if s["problems"] is None else f"{s['problems']:,}",
                    _arm_cell(s["baseline"]),
                    _arm_cell(s["candidate"]),
                    diff,
                    _p_cell(s),
                    f"{100 * s['detectable']:.1f}",
                    f"yes: {s['better']}" if s["resolved"] else "no",
                ]
            )
        lines += ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        lines += [
            "",
            f"Scorer: {verdict['scorer']}. Differences in accuracy points; bold: resolved (the interval excludes "
            "0 and, per set, Holm-adjusted p < 0.05). Discordant +/-: problems only "
            f"{cand} got right / only {base}. Detectable ±: the smallest difference this sample finds 80 % of "
            f"the time. Method: {verdict['method']}.",
        ]
        if forest:
            lines += ["", f"![{cand} - {base} per set, 95 % intervals]({forest})"]
    if verdict["notes"]:
        lines += [""] + [f"- {note}" for note in verdict["notes"]]
    return lines + [""]


def plot_forest(verdict: dict, path: Path) -> Path | None:
    """A forest plot: per set (and the mean over sets) the difference with its 95 % interval, zero marked, the
    detectable difference shaded; None when nothing was compared."""
    if not verdict["sets"]:
        return None
    from .plots import pyplot, save_figure

    plt = pyplot()
    entries = list(verdict["sets"])
    if len(entries) > 1:
        entries.append(verdict["summary"] | {"title": verdict["summary"]["name"]})
    fig, ax = plt.subplots(figsize=(7, 0.9 + 0.45 * len(entries)))
    for y, s in enumerate(reversed(entries)):
        d = s["difference"]
        color = "C0" if s["resolved"] else "grey"
        marker = "D" if s is entries[-1] and len(entries) > 1 else "o"
        ax.errorbar(
            [100 * d["value"]],
            [y],
            xerr=[[100 * (d["value"] - d["low"])], [100 * (d["high"] - d["value"])]],
            fmt=marker,
            color=color,
            capsize=4,
        )
        ax.plot(
            [-100 * s["detectable"], 100 * s["detectable"]],
            [y, y],
            color="C1",
            alpha=0.25,
            linewidth=8,
            solid_capstyle="butt",
        )
    ax.axvline(0, color="black", linewidth=1)
    ax.set_yticks(range(len(entries)))
    ax.set_yticklabels([s["title"] for s in reversed(entries)])
    ax.set_ylim(-0.7, len(entries) - 0.3)
    base, cand = verdict["baseline"]["label"], verdict["candidate"]["label"]
    ax.set_xlabel(f"{cand} - {base}, accuracy points (95 % interval; shaded: ± detectable difference)")
    ax.set_title(f"{cand} - {base}: blue where resolved, grey inside the noise ({verdict['scorer']} scorer)")
    ax.grid(alpha=0.3, axis="x")
    return save_figure(fig, path)
