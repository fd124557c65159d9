"""The verdict of ``del-eval compare``: did the candidate beat the baseline, by how much, and how sure.

Two arms (one run each, or several seeds each) are paired problem by problem on the problems every run of both
scored (read from each report's ``generations.jsonl``). Per set: each arm's accuracy with its standard error and
95 % interval, the difference with a 95 % interval from the two-stage paired bootstrap of :mod:`.stats`, McNemar's
exact p on the discordant pairs (Holm-adjusted over the sets) and the smallest difference this sample detects;
then the same for the mean over sets (mACC over the paper's benchmarks), and one verdict line. A difference is
*resolved* when its interval excludes zero (and, for a set, its Holm-adjusted p is below 0.05): only then is a
side named better, in words or in bold. How the verdict reads (its line, its markdown section, its forest plot):
:mod:`.verdict_report`."""

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
from .verdict_report import plot_forest, verdict_line, verdict_markdown

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
    result = _untested_verdict(baseline, candidate, labels, scorer=scorer, resamples=resamples, seed=seed)
    runs = [*baseline, *candidate]
    try:
        tables, records = _verdicts_by_problem(runs, scorer)
    except FileNotFoundError as err:
        result["line"] = (
            f"{cand_label} - {base_label}: cannot be tested: {err} is missing, and without each problem's "
            "verdict the runs cannot be paired (del-eval writes generations.jsonl beside report.json: compare "
            "the folders it wrote)"
        )
        return result
    titles = _set_titles(runs)
    paired = _paired_sets(tables, runs, titles, result["notes"])
    if not paired:
        result["line"] = f"{cand_label} - {base_label}: cannot be tested: no set has problems that every run scored" + (
            f" ({'; '.join(result['notes'])})" if result["notes"] else ""
        )
        return result
    single = len(baseline) == 1 and len(candidate) == 1
    sets, boot = _set_differences(paired, tables, titles, len(baseline), single, resamples=resamples, seed=seed)
    _resolve(sets, labels)
    result["sets"] = sets
    result["summary"] = _summary(sets, boot, single, labels)
    result["line"] = verdict_line(result)
    # the cells the side-by-side tables may put in bold: two runs, differences the paired tests resolve
    result["winners"] = _winners(sets, result["summary"], records, labels) if single else {}
    for s in sets:
        s.pop("_se_null")
    return result


def _untested_verdict(
    baseline: Sequence[dict],
    candidate: Sequence[dict],
    labels: tuple[str, str],
    *,
    scorer: str,
    resamples: int,
    seed: int,
) -> dict:
    """The verdict before any set is compared: how it is made, the two arms' runs."""
    return {
        "method": METHOD.format(confidence=CONFIDENCE, resamples=resamples, seed=seed, power=POWER),
        "scorer": scorer,
        "confidence": CONFIDENCE,
        "power": POWER,
        "resamples": resamples,
        "seed": seed,
        "baseline": {"label": labels[0], "runs": [r.get("_path") for r in baseline]},
        "candidate": {"label": labels[1], "runs": [r.get("_path") for r in candidate]},
        "sets": [],
        "summary": None,
        "notes": [],
        "winners": {},
    }


def _verdicts_by_problem(runs: Sequence[dict], scorer: str) -> tuple[list[dict], list[dict]]:
    """Per run, ``{set name: {problem id: right under scorer}}`` and ``{set name: {problem id: record}}``, read from
    its generations.jsonl (FileNotFoundError naming the file when it is missing)."""
    tables, records = [], []
    for report in runs:
        by_set, path = _records(report)
        records.append(by_set)
        tables.append(
            {name: {i: problem_correct(r, scorer, path) for i, r in rows.items()} for name, rows in by_set.items()}
        )
    return tables, records


def _paired_sets(
    tables: Sequence[dict], runs: Sequence[dict], titles: dict[str, tuple[str, bool]], notes: list[str]
) -> list[tuple[str, list[int]]]:
    """``(set name, problem ids)`` of the sets every run scored, on the problems every run scored; what is left out
    goes to ``notes``."""
    paired: list[tuple[str, list[int]]] = []
    for name in sorted(set().union(*tables), key=_order):
        title = titles.get(name, (name, False))[0]
        present = [name in t for t in tables]
        if not all(present):
            missing = [r.get("name") or r.get("_path") for r, p in zip(runs, present) if not p]
            notes.append(f"{title}: not in every run ({', '.join(map(str, missing))} lack it); not compared")
            continue
        ids = sorted(set.intersection(*(set(t[name]) for t in tables)))
        union = set().union(*(t[name] for t in tables))
        if not ids:
            notes.append(f"{title}: the runs scored no problem in common; not compared")
            continue
        if len(union) > len(ids):
            notes.append(
                f"{title}: paired on the {len(ids):,} problems every run scored; {len(union) - len(ids):,} scored by "
                "some runs only are left out"
            )
        paired.append((name, ids))
    return paired


def _set_differences(
    paired: Sequence[tuple[str, list[int]]],
    tables: Sequence[dict],
    titles: dict[str, tuple[str, bool]],
    n_baseline: int,
    single: bool,
    *,
    resamples: int,
    seed: int,
) -> tuple[list[dict], Bootstrap]:
    """Per paired set, each arm's accuracy and the difference with its interval, McNemar's p and the detectable
    difference (the Holm adjustment and the resolution come after: :func:`_resolve`); and the bootstrap."""
    arms = []
    for name, ids in paired:
        matrix = np.array([[t[name][i] for i in ids] for t in tables], dtype=np.float64)
        arms.append(ArmOutcomes(matrix[:n_baseline], matrix[n_baseline:]))
    boot = paired_bootstrap(arms, resamples=resamples, seed=seed)
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
    return sets, boot


def _resolve(sets: list[dict], labels: tuple[str, str]) -> None:
    """Holm-adjust the sets' McNemar p; a set's difference is resolved when its interval excludes zero and its
    adjusted p (where there is one) is below 0.05, and then the better arm is named."""
    tested = [s for s in sets if s["p"] is not None]
    for s, adjusted in zip(tested, holm([s["p"] for s in tested])):
        s["holm_p"] = adjusted
    for s in sets:
        s.setdefault("holm_p", None)
        d = s["difference"]
        excludes_zero = d["low"] > 0 or d["high"] < 0
        s["resolved"] = bool(excludes_zero and (s["holm_p"] is None or s["holm_p"] < ALPHA))
        s["better"] = (labels[1] if d["value"] > 0 else labels[0]) if s["resolved"] else None


def _winners(sets: Sequence[dict], summary: dict, records: Sequence[dict], labels: tuple[str, str]) -> dict:
    """Of two runs, ``{set name or "macc": {column: label}}``: the cells the side-by-side tables may put in bold,
    the differences the paired tests resolve."""
    winners: dict[str, dict[str, str]] = {}
    for s in sets:
        winners[s["name"]] = _sign_tested_winners(records[0][s["name"]], records[1][s["name"]], labels)
        if s["better"]:
            winners[s["name"]]["accuracy"] = s["better"]
    if summary["better"] and all(s["benchmark"] for s in sets):  # the reports' mACC column
        winners["macc"] = {"accuracy": summary["better"]}
    return winners


def _summary_name(sets: Sequence[dict]) -> str:
    if len(sets) == 1:
        return sets[0]["title"]
    if all(s["benchmark"] for s in sets):
        return "mACC" if len(sets) == len(BENCHMARK_NAMES) else f"mACC ({len(sets)} of {len(BENCHMARK_NAMES)} sets)"
    return f"mean accuracy over {len(sets)} sets"


def _summary(sets: list[dict], boot: Bootstrap, single: bool, labels: tuple[str, str]) -> dict:
    """The mean over the sets (mACC when they are the paper's benchmarks), its difference bootstrapped stratified
    by set, and the better arm where it is resolved."""
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

    resolved = bool(low > 0 or high < 0)
    return {
        "name": _summary_name(sets),
        "sets": [s["name"] for s in sets],
        "baseline": arm("baseline", boot.mean_baseline),
        "candidate": arm("candidate", boot.mean_candidate),
        "difference": {"value": diff, "low": low, "high": high, "se": float(boot.mean_difference.std(ddof=1))},
        "detectable": detectable_difference(se_null),
        "resolved": resolved,
        "better": (labels[1] if diff > 0 else labels[0]) if resolved else None,
    }
