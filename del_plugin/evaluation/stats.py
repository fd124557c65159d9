"""The statistics of del-eval's comparisons, on scipy.stats and vectorised numpy.

* :func:`accuracy_se`: the standard error of an accuracy, as lm-evaluation-harness prints it (sample standard
  deviation of the 0/1 outcomes over the square root of their count);
* :func:`sign_test_p`: the exact two-sided sign test on discordant pairs (McNemar's exact test), scipy's binomtest;
* :func:`holm`: Holm-Bonferroni adjusted p-values;
* :func:`paired_bootstrap`: the paired accuracy difference of two arms (one run each, or several seeds each) over
  the problems both scored, with a two-stage bootstrap: problems resampled (the same for both arms: they are
  paired) and, within each arm, its seeds resampled, so that seed-to-seed spread widens the interval; several sets
  resampled each within itself (stratified), for the mean over sets (mACC);
* :func:`detectable_difference`: the smallest difference a sample of this size and discordance detects with 80 %
  power at the 5 % level.

Every resampling is seeded: the same inputs give the same intervals.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "ArmOutcomes",
    "Bootstrap",
    "accuracy_se",
    "detectable_difference",
    "holm",
    "paired_bootstrap",
    "sign_test_p",
    "z_quantile",
]

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
CONFIDENCE = 0.95
POWER = 0.80
# resamples per block: bounds the memory of a large set (MATH's 5,000 problems) to a few MB per block
_BLOCK = 256


def z_quantile(q: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(q))


def accuracy_se(correct: int, n: int) -> float | None:
    """Standard error of an accuracy ``correct / n``, as lm-evaluation-harness computes it (``mean_stderr``: the
    sample standard deviation of the 0/1 outcomes, n - 1 in its denominator, over sqrt(n)); None below 2 problems."""
    if n < 2:
        return None
    p = correct / n
    return math.sqrt(p * (1 - p) / (n - 1))


def sign_test_p(wins: int, losses: int) -> float:
    """Two-sided exact sign test on the discordant pairs (McNemar's exact test): the probability, were both sides
    equally good, of a split at least this uneven (ties left out); 1.0 without discordant pairs."""
    from scipy.stats import binomtest

    n = wins + losses
    return 1.0 if n == 0 else float(binomtest(wins, n, 0.5).pvalue)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (same order as given): controls the chance of any false positive among
    all the tests at once."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [1.0] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def detectable_difference(se: float, confidence: float = CONFIDENCE, power: float = POWER) -> float:
    """The smallest true difference a two-sided test at ``1 - confidence`` detects with ``power``, for an
    estimate of standard error ``se``: (z_(1-a/2) + z_power) * se (2.80 se at 95 % and 80 %)."""
    return (z_quantile(0.5 + confidence / 2) + z_quantile(power)) * se


def discordance_se(wins: int, losses: int, n: int) -> float:
    """Standard error of a paired accuracy difference from its discordant pairs, under no difference:
    sqrt(wins + losses) / n (at least one discordant pair, so that a sample without any still says what one
    problem is worth)."""
    return math.sqrt(max(wins + losses, 1)) / n


@dataclass(frozen=True)
class ArmOutcomes:
    """One set, two arms, on the problems both scored: 0/1 matrices ``baseline`` (seeds x problems) and
    ``candidate`` (seeds x problems), columns in the same problem order."""

    baseline: np.ndarray
    candidate: np.ndarray

    def __post_init__(self):
        for name in ("baseline", "candidate"):
            value = np.atleast_2d(np.asarray(getattr(self, name), dtype=np.float64))
            object.__setattr__(self, name, value)
        if self.baseline.shape[1] != self.candidate.shape[1]:
            raise ValueError("both arms must hold the same problems (columns)")

    @property
    def n(self) -> int:
        return self.baseline.shape[1]


@dataclass(frozen=True)
class Bootstrap:
    """Resampled statistics, one value per resample: per set the baseline's accuracy, the candidate's and their
    difference; and the mean difference over the sets (stratified: each set resampled within itself)."""

    baseline: np.ndarray  # sets x resamples
    candidate: np.ndarray
    difference: np.ndarray
    mean_difference: np.ndarray  # resamples
    mean_baseline: np.ndarray
    mean_candidate: np.ndarray

    @staticmethod
    def interval(values: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
        """The percentile interval of resampled ``values``."""
        tail = 100 * (1 - confidence) / 2
        low, high = np.percentile(values, [tail, 100 - tail])
        return float(low), float(high)


def _resampled_means(outcomes: np.ndarray, seed_weights: np.ndarray, problems: np.ndarray) -> np.ndarray:
    """Per resample, the mean of ``outcomes`` (seeds x problems, 0/1) over the resampled seeds (``seed_weights``:
    resamples x seeds, how often each seed is drawn) and problems (``problems``: resamples x n indices)."""
    n = problems.shape[1]
    if outcomes.shape[0] == 1:  # one run: no seed to resample
        return outcomes[0][problems].sum(axis=1, dtype=np.int64) / n
    per_seed = np.stack([row[problems].sum(axis=1, dtype=np.int64) for row in outcomes], axis=1)  # right ones
    return (seed_weights * per_seed).sum(axis=1) / (seed_weights.sum(axis=1) * n)


def paired_bootstrap(
    sets: Sequence[ArmOutcomes], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> Bootstrap:
    """The two-stage paired bootstrap over ``sets`` (each with both arms' outcomes on the same problems).

    Each resample draws, with replacement, every arm's seeds (the same draw for every set: a seed is one model,
    scored on every set) and, within each set, its problems (the same draw for both arms: the arms are paired by
    problem). A set's statistic is the mean over the drawn seeds and problems; the mean over sets is stratified by
    set (each keeps its size). With one run an arm, it is the ordinary paired bootstrap over problems."""
    if not sets:
        raise ValueError("nothing to resample: no set has problems both arms scored")
    rng = np.random.default_rng(seed)
    seeds_a, seeds_b = sets[0].baseline.shape[0], sets[0].candidate.shape[0]
    # 0/1 outcomes as bytes: gathering them is the bootstrap's work, and bytes move fastest
    small = [(s.baseline.astype(np.int8), s.candidate.astype(np.int8)) for s in sets]
    base = np.empty((len(sets), resamples))
    cand = np.empty((len(sets), resamples))
    for start in range(0, resamples, _BLOCK):
        size = min(_BLOCK, resamples - start)
        weights_a = rng.multinomial(seeds_a, [1 / seeds_a] * seeds_a, size=size).astype(np.float64)
        weights_b = rng.multinomial(seeds_b, [1 / seeds_b] * seeds_b, size=size).astype(np.float64)
        for k, outcomes in enumerate(sets):
            problems = rng.integers(0, outcomes.n, size=(size, outcomes.n))
            base[k, start : start + size] = _resampled_means(small[k][0], weights_a, problems)
            cand[k, start : start + size] = _resampled_means(small[k][1], weights_b, problems)
    return Bootstrap(
        baseline=base,
        candidate=cand,
        difference=cand - base,
        mean_difference=(cand - base).mean(axis=0),
        mean_baseline=base.mean(axis=0),
        mean_candidate=cand.mean(axis=0),
    )
