"""The verdict of ``del-eval compare``: did the candidate beat the baseline, by how much, and how sure.

Two arms (one run each, or several seeds each) are paired problem by problem on the problems every run of both
scored (read strictly from each report's ``generations.jsonl``: :mod:`.verdict_inputs`); runs that scored
different problems are refused unless the intersection is asked for. The numbers: :mod:`.paired_verdict` (one run
an arm: Tango's interval and McNemar's exact test, two checkpoints compared; several runs: the run as the
replicate, Welch's t). How the verdict reads (its line, its markdown section, its forest plot):
:mod:`.verdict_report`."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..benchmarks.names import BENCHMARK_NAMES
from ..benchmarks.sets import BENCHMARKS
from ..errors import UsageError
from ..scoring.stats import CONFIDENCE, POWER
from .paired_verdict import ALPHA, SetOutcomes, outcome_verdict
from .verdict_inputs import SCORERS, problem_records, refuse_unpairable_runs
from .verdict_report import plot_forest, verdict_line, verdict_markdown

__all__ = ["SCORERS", "compare_arms", "outcome_verdict", "plot_forest", "verdict_markdown"]


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


# the --data tables' columns a paired test ranks: (column, per-problem value, higher is better, test)
PAIRED_TESTED = (
    ("MAE", lambda r: r.get("abs_error"), False, "t"),
    ("log-MAE", log_error, False, "t"),
    ("TF digit accuracy", tf_digit_accuracy, True, "sign"),
)


def _paired_t_p(differences: Sequence[float]) -> float:
    """Two-sided paired t test of a mean difference (scipy's ttest_1samp on the differences). Differences all the
    same have no variance for the t test: the exact sign test stands in (all n of one sign: p = 2^(1 - n), so two
    problems each 1 closer are not resolved; all 0: p 1)."""
    from scipy.stats import ttest_1samp

    from ..scoring.stats import sign_test_p

    if len(differences) < 2:
        return 1.0
    if len(set(differences)) == 1:
        return sign_test_p(len(differences), 0) if differences[0] != 0 else 1.0
    return float(ttest_1samp(differences, 0.0).pvalue)


def _own_mean(records: dict, value) -> float | None:
    """A run's mean of ``value`` over the problems it has one for: what its report shows (MAE over the problems it
    answered), which may be over more problems than the paired test's."""
    values = [float(v) for v in (value(record) for _, record in records.values()) if v is not None]
    return sum(values) / len(values) if values else None


def _paired_winners(base: dict, cand: dict, labels: tuple[str, str]) -> dict[str, str]:
    """``{column: label}`` of the --data columns on which one run is better by a paired test (p < 0.05): MAE and
    log-MAE by the paired t test on the errors themselves, and only where the values the tables show (each run's
    mean over its own answered problems) order the same way, so that only the lower mean error can be bold;
    teacher-forced digit accuracy by the exact sign test over the problems."""
    from ..scoring.stats import sign_test_p

    winners = {}
    for column, value, higher, test in PAIRED_TESTED:
        pairs = [(value(base[i][1]), value(cand[i][1])) for i in base.keys() & cand.keys()]
        pairs = [(float(b), float(c)) for b, c in pairs if b is not None and c is not None]
        if not pairs:
            continue
        if test == "t":
            gain = sum(c - b for b, c in pairs) * (1 if higher else -1)  # > 0: the candidate is better
            p = _paired_t_p([c - b for b, c in pairs])
            shown = _own_mean(base, value), _own_mean(cand, value)  # the values the tables put side by side
            shown_gain = (shown[1] - shown[0]) * (1 if higher else -1)
            if gain * shown_gain <= 0:  # the paired gain and the shown values disagree: bold would mislead
                continue
        else:
            cand_wins = sum((c > b) if higher else (c < b) for b, c in pairs)
            base_wins = sum((b > c) if higher else (b < c) for b, c in pairs)
            gain, p = cand_wins - base_wins, sign_test_p(cand_wins, base_wins)
        if p < ALPHA and gain != 0:
            winners[column] = labels[1] if gain > 0 else labels[0]
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


def compare_arms(
    baseline: Sequence[dict],
    candidate: Sequence[dict],
    labels: tuple[str, str] = ("baseline", "candidate"),
    *,
    scorer: str = "paper",
    intersection: bool = False,
) -> dict:
    """The verdict of ``candidate`` (reports, one per seed) against ``baseline``: the dict ``comparison.json``
    holds under ``verdict`` (see docs/evaluation.md). Raises UsageError for a scorer's verdicts the reports lack,
    the same run given twice, or runs that scored different problems (without ``intersection``); UnusableInput for
    a generations file that is not del-eval's or sets scored on different files."""
    if scorer not in SCORERS:
        raise UsageError(f"--scorer {scorer}: choose one of {', '.join(SCORERS)}")
    result = _untested_verdict(baseline, candidate, labels, scorer)
    runs = [*baseline, *candidate]
    try:
        read = [problem_records(report, scorer) for report in runs]
    except FileNotFoundError as err:
        result["line"] = (
            f"{labels[1]} - {labels[0]}: cannot be tested: {err} is missing, and without each problem's "
            "verdict the runs cannot be paired (del-eval writes generations.jsonl beside report.json: compare "
            "the folders it wrote)"
        )
        return result
    refuse_unpairable_runs(runs, [path for _, path in read])
    tables = [by_set for by_set, _ in read]
    titles = _set_titles(runs)
    paired = _paired_sets(tables, runs, titles, result, len(baseline), intersection)
    if not paired:
        result["line"] = f"{labels[1]} - {labels[0]}: cannot be tested: no set has problems that every run scored" + (
            f" ({'; '.join(result['notes'])})" if result["notes"] else ""
        )
        return result
    sets = [_set_outcomes(name, ids, tables, titles, len(baseline)) for name, ids in paired]
    result["sets"], result["summary"], result["method"] = outcome_verdict(sets, labels)
    result["line"] = verdict_line(result)
    if len(runs) == 2:  # the cells the side-by-side tables may put in bold: two runs, what the paired tests resolve
        result["winners"] = _winners(result, tables, labels)
    return result


def _set_outcomes(name: str, ids: list, tables: Sequence[dict], titles: dict, n_baseline: int) -> SetOutcomes:
    matrix = np.array([[t[name][i][0] for i in ids] for t in tables], dtype=np.int8)
    title, benchmark = titles.get(name, (name, False))
    return SetOutcomes(name, title, benchmark, matrix[:n_baseline], matrix[n_baseline:])


def _untested_verdict(baseline: Sequence[dict], candidate: Sequence[dict], labels: tuple, scorer: str) -> dict:
    """The verdict before any set is compared: the two arms' runs."""
    return {
        "method": None,
        "scorer": scorer,
        "confidence": CONFIDENCE,
        "power": POWER,
        "baseline": {"label": labels[0], "runs": [r.get("_path") for r in baseline]},
        "candidate": {"label": labels[1], "runs": [r.get("_path") for r in candidate]},
        "sets": [],
        "summary": None,
        "notes": [],
        "dropped": None,
        "winners": {},
    }


def _paired_sets(
    tables: Sequence[dict],
    runs: Sequence[dict],
    titles: dict[str, tuple[str, bool]],
    result: dict,
    n_baseline: int,
    intersection: bool,
) -> list[tuple[str, list]]:
    """``(set name, problem ids)`` of the sets every run scored, on the problems every run scored (runs that scored
    different problems: a UsageError, unless ``intersection``, which counts what each arm dropped); what is left
    out goes to ``result["notes"]``."""
    notes, dropped = result["notes"], [0, 0]
    paired: list[tuple[str, list]] = []
    for name in sorted(set().union(*tables), key=_order):
        title = titles.get(name, (name, False))[0]
        present = [name in t for t in tables]
        if not all(present):
            missing = [r.get("name") or r.get("_path") for r, p in zip(runs, present) if not p]
            notes.append(f"{title}: not in every run ({', '.join(map(str, missing))} lack it); not compared")
            continue
        ids = sorted(set.intersection(*(set(t[name]) for t in tables)))
        arms = (tables[:n_baseline], tables[n_baseline:])
        left_out = [len(set().union(*(t[name] for t in arm)) - set(ids)) for arm in arms]
        if any(left_out) and not intersection:
            raise UsageError(
                f"{title}: the runs scored different problems ({len(ids):,} in common; the baseline's runs scored "
                f"{left_out[0]:,} more, the candidate's {left_out[1]:,}): pairing on the common ones may hide which "
                "were dropped; score the same problems, or give --intersection to pair on those"
            )
        dropped = [d + x for d, x in zip(dropped, left_out)]
        if not ids:
            notes.append(f"{title}: the runs scored no problem in common; not compared")
            continue
        if any(left_out):
            notes.append(
                f"{title}: paired on the {len(ids):,} problems every run scored (--intersection); the baseline's "
                f"runs dropped {left_out[0]:,}, the candidate's {left_out[1]:,}"
            )
        paired.append((name, ids))
    result["dropped"] = {"baseline": dropped[0], "candidate": dropped[1]} if intersection else None
    return paired


def _winners(result: dict, tables: Sequence[dict], labels: tuple[str, str]) -> dict:
    """Of two runs, ``{set name or "macc": {column: label}}``: the cells the side-by-side tables may put in bold,
    the differences the paired tests resolve."""
    winners: dict[str, dict[str, str]] = {}
    for s in result["sets"]:
        winners[s["name"]] = _paired_winners(tables[0][s["name"]], tables[1][s["name"]], labels)
        if s["better"]:
            winners[s["name"]]["accuracy"] = s["better"]
    summary = result["summary"]
    if summary["better"] and all(s["benchmark"] for s in result["sets"]):  # the reports' mACC column
        winners["macc"] = {"accuracy": summary["better"]}
    return winners
