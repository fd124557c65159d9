"""A seeded simulation of ``del-eval compare``'s error rates: datasets drawn from a known truth, each put through the
verdict's own code from the paired outcomes on (:func:`del_plugin.evaluation.compare.paired_verdict.outcome_verdict`,
what :func:`~del_plugin.evaluation.compare.verdict.compare_arms` calls once the reports are read and paired), and
counted: how often a difference is called resolved, how often the interval covers the true difference, the stated
detectable difference. Shared by tests/evaluation/test_compare_simulation.py (small) and bench/compare_simulation.py
(the docs' table).

Two models:

* one run an arm: each problem is discordant with probability ``discordance``, the candidate-only share of those
  (discordance + difference) / 2; the concordant ones right or wrong at 50 %;
* several runs an arm: each problem has a difficulty p ~ Beta(2, 2) (the same problems for both arms); a run of a
  recipe adds a seed effect u ~ N(0, sigma) on the logit scale (sigma set so that the runs' accuracies spread by
  ``spread`` points), the candidate's recipe a shift c; a run gets problem j right with probability
  expit(logit p_j + c + u). With ``tau`` the candidate's recipe also has an effect c_j ~ N(0, tau) of its own on
  each problem (it helps on some, hurts on others: the problems' second level), drawn afresh with each dataset's
  problems. ``base_spread``, when given, is the baseline recipe's own seed spread (else both spread alike). The
  true difference is the recipe's expected accuracy gain over the population of problems, averaged over seeds
  and problem effects (Gauss-Hermite); with no shift asked for it is exactly 0 (Beta(2, 2) and the effects are
  symmetric about 0 on the logit scale)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from del_plugin.evaluation.compare.paired_verdict import SetOutcomes, outcome_verdict

LABELS = ("baseline", "candidate")


@dataclass(frozen=True)
class Row:
    """One row of the simulation: the model and its size."""

    runs: tuple[int, int]  # baseline, candidate
    problems: int
    discordance: float = 0.0  # one run an arm
    spread: float = 0.0  # several runs an arm: the runs' accuracy spread, in accuracy (0.017 = 1.7 points)
    tau: float = 0.0  # several runs an arm: the sd of the candidate recipe's per-problem effects, on the logit scale
    base_spread: float | None = None  # the baseline recipe's own seed spread, if not ``spread``


def _expit(x):
    return 1 / (1 + np.exp(-x))


def _one_run(rng: np.random.Generator, row: Row, difference: float) -> tuple[SetOutcomes, float]:
    q, d = row.discordance, difference
    cells = rng.choice(4, size=row.problems, p=[(q + d) / 2, (q - d) / 2, (1 - q) / 2, (1 - q) / 2])
    cand = (cells == 0) | (cells == 2)
    base = (cells == 1) | (cells == 2)
    return SetOutcomes("sim", "sim", False, base[None].astype(np.int8), cand[None].astype(np.int8)), d


_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(24)  # E over u ~ N(0, 1) of f(u): sum(w f(nodes)) / sqrt(2 pi)


def _recipe_accuracy(logits: np.ndarray, sigma: float) -> float:
    values = _expit(logits[:, None] + sigma * _NODES[None, :]) @ _WEIGHTS / math.sqrt(2 * math.pi)
    return float(values.mean())


def _seeded(rng: np.random.Generator, row: Row, difference: float) -> tuple[SetOutcomes, float]:
    p = rng.beta(2, 2, size=row.problems)
    logits = np.log(p / (1 - p))
    slope = float(np.mean(p * (1 - p)))  # d accuracy / d logit shift
    sigma = row.spread / slope
    sigma_b = sigma if row.base_spread is None else row.base_spread / slope
    wide = math.hypot(sigma, row.tau)  # the candidate's seed and problem effects, integrated together
    shift = 0.0
    if difference:
        shift = difference / slope
        for _ in range(3):  # Newton steps: the shift whose expected gain is the difference asked for
            gain = _recipe_accuracy(logits + shift, wide) - _recipe_accuracy(logits, sigma_b)
            shift += (difference - gain) / slope
        truth = _recipe_accuracy(logits + shift, wide) - _recipe_accuracy(logits, sigma_b)
    else:
        truth = 0.0  # over the population of problems, by symmetry (on these problems it is only about 0)
    effects = rng.normal(0.0, row.tau, size=row.problems) if row.tau else 0.0

    def arm(runs: int, offset, spread: float) -> np.ndarray:
        seeds = rng.normal(0.0, spread, size=(runs, 1))
        return (rng.random((runs, row.problems)) < _expit(logits[None, :] + offset + seeds)).astype(np.int8)

    base, cand = arm(row.runs[0], 0.0, sigma_b), arm(row.runs[1], shift + effects, sigma)
    return SetOutcomes("sim", "sim", False, base, cand), truth


def simulate(row: Row, datasets: int, seed: int, difference: float = 0.0) -> dict:
    """``datasets`` datasets of ``row`` with a true ``difference``: the share called resolved, the share whose
    interval covers the truth, the mean stated detectable difference, the mean standard error and the actual
    standard deviation of the estimate (how well the standard error knows it)."""
    rng = np.random.default_rng(seed)
    draw = _one_run if row.runs == (1, 1) else _seeded
    resolved = covered = 0
    detectable, ses, estimates = [], [], []
    for _ in range(datasets):
        outcomes, truth = draw(rng, row, difference)
        (entry,), _, _ = outcome_verdict([outcomes], LABELS)
        d = entry["difference"]
        resolved += entry["resolved"]
        covered += d["low"] <= truth <= d["high"]
        detectable.append(entry["detectable"])
        ses.append(d["se"])
        estimates.append(d["value"] - truth)
    return {
        "datasets": datasets,
        "resolved": resolved / datasets,
        "coverage": covered / datasets,
        "detectable": float(np.mean(detectable)),
        "se": float(np.mean(ses)),
        "sd": float(np.std(estimates, ddof=1)),
    }


def binomial_margin(rate: float, datasets: int, sds: float = 3.0) -> float:
    """``sds`` binomial standard errors of a rate estimated from ``datasets`` draws: the tolerance a seeded
    simulation of this size honestly has around its target."""
    return sds * math.sqrt(rate * (1 - rate) / datasets)
