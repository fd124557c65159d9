"""The demo's and the sweeps' statistics over seeds: the mean of a few per-seed values with its Student-t
interval. del-eval's own statistics (standard errors, Tango's interval, McNemar's test, Welch's t, Holm) are
:mod:`del_plugin.evaluation.scoring.stats`."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from del_plugin.evaluation.scoring.stats import CONFIDENCE

__all__ = ["mean_ci", "t_quantile"]


def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    """The two-sided ``confidence`` quantile of Student's t with ``df`` degrees of freedom (scipy)."""
    from scipy.stats import t

    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    return float(t.ppf(0.5 + confidence / 2, df))


def mean_ci(values: Sequence[float | None], confidence: float = CONFIDENCE) -> dict:
    """Mean, sample standard deviation and Student-t interval of ``values`` (None values are left out); with one
    value the interval is None."""
    values = [float(v) for v in values if v is not None]
    n = len(values)
    if n == 0:
        return {"n": 0, "mean": None, "sd": None, "low": None, "high": None}
    mean = statistics.fmean(values)
    if n == 1:
        return {"n": 1, "mean": mean, "sd": None, "low": None, "high": None}
    sd = statistics.stdev(values)
    half = t_quantile(n - 1, confidence) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "low": mean - half, "high": mean + half}
