"""The numbers of the verdict from the runs' 0/1 outcomes on the paired problems (:func:`outcome_verdict`): what
:func:`.verdict.compare_arms` computes once the reports are read and paired, and what the simulation of its error
rates (tests/evaluation/test_compare_simulation.py, bench/compare_simulation.py) drives directly.

One run an arm compares two checkpoints: per set, each accuracy with lm-eval's standard error and Wilson's
interval, the difference with Tango's score interval and McNemar's exact test (made to agree:
:func:`..scoring.stats.paired_difference`), the mean over sets by MOVER. Several runs an arm compare two training
recipes: the run is the replicate (per-run accuracies, Welch's t; Student's t on the pooled seed variance when one
arm has a single run: :func:`..scoring.stats.seed_difference`), problems the second level (the variance that
sampling them adds to the difference, as the recipes' gain varies by problem: :func:`..scoring.stats.problem_term`).
Either way the sets' p are Holm-adjusted, and a set's interval that excludes 0 beside an adjusted p of 0.05 or
more is stretched to reach 0; a difference is resolved when its interval excludes 0 and (per set) its adjusted p
is below 0.05."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..scoring.stats import (
    CONFIDENCE,
    POWER,
    accuracy_se,
    detectable_difference,
    discordance_se,
    holm,
    mover_mean,
    paired_difference,
    problem_term,
    problems_to_resolve,
    seed_difference,
    seeds_to_resolve,
    wilson_interval,
)

__all__ = ["ALPHA", "METHOD_ONE_RUN", "METHOD_SEEDS", "SetOutcomes", "outcome_verdict"]

ALPHA = 1 - CONFIDENCE
METHOD_ONE_RUN = (
    "one run an arm: two checkpoints compared, the spread between training seeds is not in the interval; paired "
    "by problem id; per set: accuracy with lm-eval's standard error and Wilson's interval; the difference with "
    "Tango's score interval (Tango 1998) and McNemar's exact test on the discordant pairs (McNemar 1947; scipy "
    "binomtest), the interval stretched to reach 0 where the exact test does not reject; Holm-adjusted over the "
    "sets (an interval stretched to 0 where the adjusted p does not reject); the mean over sets by MOVER (Zou "
    "and Donner 2008) from the sets' intervals; detectable difference at "
    "{power:.0%} power: (z_0.975 + z_0.8) x sqrt(discordant pairs, at least 1) / problems"
)
METHOD_SEEDS = (
    "several runs an arm: the training run is the replicate and problems the second level (Bouthillier et al. "
    "2021; Miller 2024): each run's accuracy on the paired problems; the difference of the arms' mean run "
    "accuracies with {test}, each arm's seed variance at least 1 / problems^2 (a run is known to no better "
    "than one problem), plus the variance sampling the problems adds: V / problems, V the between-problem "
    "variance of the per-problem difference less the runs' own noise in it (Miller 2024), the degrees of freedom "
    "the seed variance's; Holm-adjusted over the sets (an interval stretched to reach 0 where the adjusted p does "
    "not reject); the mean over "
    "sets from each run's mean over sets; detectable difference at {power:.0%} power from the noncentral t"
)
_WELCH = "Welch's t interval and test (Satterthwaite's degrees of freedom)"
_POOLED = (
    "Student's t on the seed variance of the arm with several runs, the arm with one run assumed to spread alike "
    "(its own spread cannot be seen from one run)"
)


@dataclass(frozen=True)
class SetOutcomes:
    """One set's outcomes on its paired problems: ``baseline`` and ``candidate`` are runs x problems 0/1 arrays,
    their columns the same problems."""

    name: str
    title: str
    benchmark: bool
    baseline: np.ndarray
    candidate: np.ndarray

    @property
    def problems(self) -> int:
        return self.baseline.shape[1]


def _one_run_arm(row: np.ndarray) -> dict:
    correct, n = int(row.sum()), row.size
    low, high = wilson_interval(correct, n)
    return {"accuracy": correct / n, "se": accuracy_se(correct, n), "low": low, "high": high}


def _one_run_set(s: SetOutcomes) -> dict:
    base, cand, n = s.baseline[0], s.candidate[0], s.problems
    wins, losses = int(((cand == 1) & (base == 0)).sum()), int(((base == 1) & (cand == 0)).sum())
    diff = paired_difference(wins, losses, n)
    se = math.sqrt(max(wins + losses - (wins - losses) ** 2 / n, 0.0)) / n
    return {
        "baseline": _one_run_arm(base),
        "candidate": _one_run_arm(cand),
        "difference": {k: diff[k] for k in ("value", "low", "high")} | {"se": se, "stretched": diff["stretched"]},
        "discordant": {"candidate_only": wins, "baseline_only": losses},
        "p": diff["p"],
        "detectable": detectable_difference(discordance_se(wins, losses, n)),
    }


def _seed_arm(per_run: np.ndarray, variance: float, df: float) -> dict:
    from scipy.stats import t

    se = math.sqrt(variance / len(per_run))
    value = float(per_run.mean())
    half = float(t.ppf(0.5 + CONFIDENCE / 2, df)) * se
    return {"accuracy": value, "se": se, "low": max(0.0, value - half), "high": min(1.0, value + half)}


def _seed_stats(per_base: np.ndarray, per_cand: np.ndarray, problems: int, problem: float) -> dict:
    """The difference of per-run accuracies with the problems' term (:func:`..scoring.stats.seed_difference`) and each
    arm's accuracy."""
    d = seed_difference(per_base, per_cand, problems, problem=problem)
    arm_df = [len(per_base) - 1, len(per_cand) - 1]
    arm_df = [df if df >= 1 else max(arm_df) for df in arm_df]  # one run: the other arm's seed variance
    return {
        "baseline": _seed_arm(per_base, d["seed_variances"][0], arm_df[0]),
        "candidate": _seed_arm(per_cand, d["seed_variances"][1], arm_df[1]),
        "difference": {k: d[k] for k in ("value", "low", "high", "se", "df", "pooled")} | {"stretched": False},
        "discordant": None,
        "p": d["p"],
        "detectable": d["detectable"],
        "_seed_variances": d["seed_variances"],
        "_problem_variance": d["problem_variance"],
    }


def _seed_set(s: SetOutcomes) -> dict:
    return _seed_stats(
        s.baseline.mean(axis=1), s.candidate.mean(axis=1), s.problems, problem_term(s.baseline, s.candidate)
    )


def _resolve(entry: dict, adjusted_p: float | None, labels: tuple[str, str]) -> None:
    d = entry["difference"]
    if adjusted_p is not None and adjusted_p >= ALPHA and (d["low"] > 0 or d["high"] < 0):
        # Holm adjusts the p of several sets, not their intervals: an interval that excludes 0 beside an adjusted
        # p that does not reject is stretched to reach 0, as for the exact test, so the two never disagree
        d["low"], d["high"], d["stretched"] = min(d["low"], 0.0), max(d["high"], 0.0), True
    excludes_zero = d["low"] > 0 or d["high"] < 0
    entry["resolved"] = bool(excludes_zero and (adjusted_p is None or adjusted_p < ALPHA))
    entry["better"] = (labels[1] if d["value"] > 0 else labels[0]) if entry["resolved"] else None


def _summary_name(sets: Sequence[SetOutcomes]) -> str:
    from ..benchmarks.names import BENCHMARK_NAMES

    if len(sets) == 1:
        return sets[0].title
    if all(s.benchmark for s in sets):
        n = len(BENCHMARK_NAMES)
        return "mACC" if len(sets) == n else f"mACC ({len(sets)} of {n} sets)"
    return f"mean accuracy over {len(sets)} sets"


def _one_run_summary(entries: Sequence[dict]) -> dict:
    """The mean over sets of one run an arm: MOVER from the sets' intervals (the sets are independent samples)."""
    k = len(entries)

    def arm(side: str) -> dict:
        values = [e[side]["accuracy"] for e in entries]
        low, high = mover_mean(values, [e[side]["low"] for e in entries], [e[side]["high"] for e in entries])
        ses = [e[side]["se"] or 0.0 for e in entries]
        return {"accuracy": sum(values) / k, "se": math.sqrt(sum(x * x for x in ses)) / k, "low": low, "high": high}

    diffs = [e["difference"] for e in entries]
    values = [d["value"] for d in diffs]
    low, high = mover_mean(values, [d["low"] for d in diffs], [d["high"] for d in diffs])
    se_null = math.sqrt(sum((e["detectable"] / detectable_difference(1.0)) ** 2 for e in entries)) / k
    se = math.sqrt(sum(d["se"] ** 2 for d in diffs)) / k
    return {
        "baseline": arm("baseline"),
        "candidate": arm("candidate"),
        "difference": {"value": sum(values) / k, "low": low, "high": high, "se": se},
        "p": None,
        "detectable": detectable_difference(se_null),
    }


def _seed_summary(sets: Sequence[SetOutcomes]) -> dict:
    """The mean over sets of several runs an arm: each run's mean over sets, the run as the replicate; the sets'
    problem terms (independent samples) added, each weighted by 1 / sets^2."""
    k = len(sets)
    per_base = sum(s.baseline.mean(axis=1) for s in sets) / k
    per_cand = sum(s.candidate.mean(axis=1) for s in sets) / k
    problem = sum(problem_term(s.baseline, s.candidate) for s in sets) / k**2
    return _seed_stats(per_base, per_cand, _problems(sets), problem)


def outcome_verdict(sets: Sequence[SetOutcomes], labels: tuple[str, str]) -> tuple[list[dict], dict, str]:
    """Per set and for the mean over sets, the verdict's numbers (the dicts ``comparison.json`` holds under
    ``sets`` and ``summary``), and the method in words."""
    single = all(s.baseline.shape[0] == 1 and s.candidate.shape[0] == 1 for s in sets)
    entries = []
    for s in sets:
        numbers = _one_run_set(s) if single else _seed_set(s)
        entries.append({"name": s.name, "title": s.title, "benchmark": s.benchmark, "problems": s.problems} | numbers)
    for entry, adjusted in zip(entries, holm([e["p"] for e in entries])):
        entry["holm_p"] = adjusted
        _resolve(entry, adjusted, labels)
    if len(entries) == 1:
        summary = {k: v for k, v in entries[0].items() if k not in ("title", "benchmark", "problems", "holm_p")}
    else:
        summary = _one_run_summary(entries) if single else _seed_summary(sets)
        _resolve(summary, None, labels)
    summary |= {"name": _summary_name(sets), "sets": [s.name for s in sets]}
    if single:
        d = summary["difference"]
        summary["problems_to_resolve"] = problems_to_resolve(d["value"], summary["detectable"], _problems(sets))
        method = METHOD_ONE_RUN.format(power=POWER)
    else:
        if not summary["resolved"]:  # what would resolve the difference seen
            summary["seeds_to_resolve"] = seeds_to_resolve(
                summary["difference"]["value"], summary["_seed_variances"], summary["_problem_variance"]
            )
        for entry in (*entries, summary):
            entry.pop("_seed_variances", None)
            entry.pop("_problem_variance", None)
        pooled = any(e["difference"]["pooled"] for e in entries)
        method = METHOD_SEEDS.format(test=_POOLED if pooled else _WELCH, power=POWER)
    return entries, summary, method


def _problems(sets: Sequence[SetOutcomes]) -> int:
    """The problems paired over all sets (scaled alike, their detectable difference goes as 1 / sqrt of it)."""
    return sum(s.problems for s in sets)
