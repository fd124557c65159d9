"""The statistics of del-eval's comparisons, on scipy.stats and numpy (no resampling: the same inputs give the
same intervals).

* :func:`accuracy_se`: the standard error of an accuracy, as lm-evaluation-harness prints it (sample standard
  deviation of the 0/1 outcomes over the square root of their count);
* :func:`sign_test_p`: the exact two-sided sign test on discordant pairs (McNemar's exact test), scipy's binomtest;
* :func:`holm`: Holm-Bonferroni adjusted p-values;
* :func:`detectable_difference`: the smallest difference a sample of this size and discordance detects with 80 %
  power at the 5 % level;
* the verdict, one run an arm: :func:`wilson_interval` for an accuracy, :func:`tango_interval` (Tango's score
  interval for a paired difference) reconciled with the exact test by :func:`paired_difference`, and
  :func:`mover_mean` for the mean of several sets' differences (Zou and Donner's MOVER);
* the verdict, several seeds an arm: :func:`seed_difference`, the training run as the replicate (per-seed
  accuracies, Welch's t with Satterthwaite's degrees of freedom; Student's t on the pooled seed variance when one
  arm has a single run) plus :func:`problem_term`, what sampling the problems adds (the problems the second
  level), and :func:`t_detectable`, its detectable difference from the noncentral t.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "accuracy_se",
    "detectable_difference",
    "holm",
    "mover_mean",
    "paired_difference",
    "problem_term",
    "problems_to_resolve",
    "seed_difference",
    "seeds_to_resolve",
    "sign_test_p",
    "t_detectable",
    "tango_interval",
    "wilson_interval",
    "z_quantile",
]

CONFIDENCE = 0.95
POWER = 0.80


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
    sqrt(wins + losses) / n, counting at least one discordant pair: a sample without any still says what one
    problem is worth (else its detectable difference would be 0, a claim that nothing can be missed)."""
    return math.sqrt(max(wins + losses, 1)) / n


def wilson_interval(correct: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson's score interval of an accuracy ``correct / n`` (never zero-width, never outside [0, 1])."""
    z = z_quantile(0.5 + confidence / 2)
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _tango_z(delta: float, wins: int, losses: int, n: int) -> float:
    """Tango's score statistic for a paired difference ``delta`` (wins: problems only the candidate got right,
    losses: only the baseline), with the discordance's maximum likelihood estimate constrained to ``delta``."""
    a = 2 * n
    b = -wins - losses + (2 * n - wins + losses) * delta
    c = -losses * delta * (1 - delta)
    q = (math.sqrt(max(b * b - 4 * a * c, 0.0)) - b) / (2 * a)
    variance = n * (2 * q + delta * (1 - delta))
    numerator = wins - losses - n * delta
    if variance <= 0:
        return math.copysign(math.inf, numerator) if numerator else 0.0
    return numerator / math.sqrt(variance)


def tango_interval(wins: int, losses: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Tango's (1998) asymptotic score interval for a paired difference of proportions, (wins - losses) / n: the
    differences its score test does not reject. Inside [-1, 1], never zero-width, good coverage at small n."""
    from scipy.optimize import brentq

    z = z_quantile(0.5 + confidence / 2)
    estimate = (wins - losses) / n
    edge = 1 - 1e-12
    low = -1.0 if estimate <= -edge else brentq(lambda d: _tango_z(d, wins, losses, n) - z, -edge, estimate)
    high = 1.0 if estimate >= edge else brentq(lambda d: _tango_z(d, wins, losses, n) + z, estimate, edge)
    return float(low), float(high)


def paired_difference(wins: int, losses: int, n: int, confidence: float = CONFIDENCE) -> dict:
    """One run an arm: the paired difference (wins - losses) / n, Tango's interval, McNemar's exact p, and the two
    made to agree: where the exact test does not reject, the interval is stretched to reach 0 (``stretched``), so
    that an interval never excludes 0 beside a p that says the difference is not resolved."""
    low, high = tango_interval(wins, losses, n, confidence)
    p = sign_test_p(wins, losses)
    stretched = p >= 1 - confidence and (low > 0 or high < 0)
    if stretched:
        low, high = min(low, 0.0), max(high, 0.0)
    return {"value": (wins - losses) / n, "low": low, "high": high, "p": p, "stretched": bool(stretched)}


def mover_mean(values: Sequence[float], lows: Sequence[float], highs: Sequence[float]) -> tuple[float, float]:
    """The interval of the mean of independent differences from each one's interval (MOVER, Zou and Donner 2008:
    each side's distances to the bounds added in quadrature), kept inside [-1, 1]."""
    k = len(values)
    mean = sum(values) / k
    below = math.sqrt(sum((v - lo) ** 2 for v, lo in zip(values, lows))) / k
    above = math.sqrt(sum((hi - v) ** 2 for v, hi in zip(values, highs))) / k
    return max(-1.0, mean - below), min(1.0, mean + above)


def t_detectable(se: float, df: float, confidence: float = CONFIDENCE, power: float = POWER) -> float:
    """The smallest true difference a two-sided t test at ``1 - confidence`` with ``df`` degrees of freedom detects
    with ``power``, for standard error ``se``: the noncentrality at which the noncentral t clears the critical
    value ``power`` of the time, times ``se``."""
    return se * _t_noncentrality(round(float(df), 6), confidence, power)


@functools.lru_cache(maxsize=1024)
def _t_noncentrality(df: float, confidence: float, power: float) -> float:
    """The noncentrality of :func:`t_detectable`. The noncentral t's power is averaged over 512 quantiles of its
    chi-square (T = (Z + ncp) / sqrt(V / df)): within 1e-4 of scipy's nct in power, and a hundred times faster."""
    from scipy.optimize import brentq
    from scipy.stats import chi2, norm, t

    critical = float(t.ppf(0.5 + confidence / 2, df))
    scale = critical * np.sqrt(chi2.ppf((np.arange(512) + 0.5) / 512, df) / df)

    def shortfall(ncp: float) -> float:
        return float(np.mean(norm.cdf(ncp - scale) + norm.cdf(-ncp - scale))) - power

    return float(brentq(shortfall, 0.0, 100.0, xtol=1e-6))


def _seed_variance(per_seed: np.ndarray, problems: int) -> float:
    """An arm's between-run variance of the accuracy (its runs' sample variance), at least 1 / problems^2: runs
    that agree to the problem are still known to no better than one problem (else two runs right on all of three
    problems would be "+100 [+100, +100], resolved"); far below any real spread at a real set's size (1e-6 at
    1,000 problems, where 1.7 points of seed spread is 3e-4)."""
    return max(float(np.var(per_seed, ddof=1)), 1 / (problems * problems))


def problem_term(baseline: np.ndarray, candidate: np.ndarray) -> float:
    """Several runs an arm, the second level: how much sampling the problems adds to the variance of the arms'
    mean accuracy difference. ``baseline``, ``candidate``:
    runs x problems 0/1 arrays. A recipe's gain varies by problem (it helps on some, hurts on others); with
    d_j the per-problem difference of the arms' mean outcomes over their runs, its between-problem variance
    V = max(0, var_j d_j - mean_j(s2_c,j / m + s2_b,j / k)) is var_j d_j less what the runs' own noise puts in it
    (s2_.,j: a problem's sample variance over an arm's runs; an arm with one run takes the other arm's), and the
    term is V / n: the population of problems is what a set samples, as the one-run interval's Tango score
    interval also assumes."""
    k, m, n = baseline.shape[0], candidate.shape[0], baseline.shape[1]
    if n < 2 or max(k, m) < 2:
        return 0.0
    d = candidate.mean(axis=0) - baseline.mean(axis=0)
    s2_b = baseline.var(axis=0, ddof=1) if k >= 2 else None
    s2_c = candidate.var(axis=0, ddof=1) if m >= 2 else None
    s2_b, s2_c = (s2_c if s2_b is None else s2_b), (s2_b if s2_c is None else s2_c)
    between = max(0.0, float(np.var(d, ddof=1) - np.mean(s2_c / m + s2_b / k)))
    return between / n


def seed_difference(
    baseline: np.ndarray,
    candidate: np.ndarray,
    problems: int,
    confidence: float = CONFIDENCE,
    problem: float = 0.0,
) -> dict:
    """Several seeds an arm: the difference of the arms' mean per-seed accuracies (``baseline``, ``candidate``: one
    accuracy per training run), the run as the replicate and the problems as the second level (``problem``: the
    variance that sampling the problems adds, :func:`problem_term`). Both arms with two or more runs: Welch's t,
    Satterthwaite's degrees of freedom; one arm with a single run: the seed variance of the other for both
    (``pooled``, the assumption that both recipes spread alike). The degrees of freedom are the seed variance's
    alone: the problems' term is known far better (n - 1 of them), but letting it raise them, as Satterthwaite's
    formula would, raises them most where the seed variance came out small by chance (1 v 3 runs, 4.2 points of
    spread: coverage 87 %). ``problems``: how many problems each accuracy is over."""
    from scipy.stats import t

    k, m = len(baseline), len(candidate)
    value = float(np.mean(candidate) - np.mean(baseline))
    if k >= 2 and m >= 2:
        var_b, var_c = _seed_variance(baseline, problems), _seed_variance(candidate, problems)
        seed_shares = (var_b / k) ** 2 / (k - 1) + (var_c / m) ** 2 / (m - 1)
        seed_se2, pooled = var_b / k + var_c / m, False
    else:
        arm = candidate if m >= 2 else baseline
        var_b = var_c = _seed_variance(arm, problems)
        seed_se2, pooled = var_b * (1 / k + 1 / m), True
        seed_shares = seed_se2**2 / (len(arm) - 1)
    se2 = seed_se2 + problem
    df = seed_se2**2 / seed_shares
    se = math.sqrt(se2)
    half = float(t.ppf(0.5 + confidence / 2, df)) * se
    p = float(2 * t.sf(abs(value) / se, df)) if se > 0 else float(value == 0)
    return {
        "value": value,
        "low": max(-1.0, value - half),
        "high": min(1.0, value + half),
        "se": se,
        "df": float(df),
        "p": p,
        "pooled": pooled,
        "detectable": t_detectable(se, df, confidence),
        "seed_variances": [var_b, var_c],
        "problem_variance": problem,
    }


def seeds_to_resolve(
    difference: float, seed_variances: Sequence[float], problem_variance: float = 0.0, limit: int = 100
) -> int | None:
    """How many runs an arm (the same number in both) would resolve ``difference`` at 80 % power, given each arm's
    seed variance and the variance the problems add (which more runs do not shrink); None when none up to
    ``limit`` would (or the difference is 0). The detectable difference falls as runs are added: a bisection."""
    total = sum(seed_variances)

    def resolves(runs: int) -> bool:
        return t_detectable(math.sqrt(total / runs + problem_variance), 2 * runs - 2) <= abs(difference)

    if difference == 0 or not resolves(limit):
        return None
    low, high = 1, limit  # resolves(high); not resolves(low) (one run an arm has no t test)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if resolves(middle) else (middle, high)
    return high


def problems_to_resolve(difference: float, detectable: float, problems: int) -> int | None:
    """How many problems, at this sample's discordance, would resolve ``difference`` at 80 % power (the
    detectable difference shrinks as 1 / sqrt(problems)); None for a difference of 0."""
    if difference == 0:
        return None
    return math.ceil(problems * (detectable / abs(difference)) ** 2)
