"""The verdict's error rates, by a seeded simulation that drives its own code (tests/helpers/verdict_simulation.py:
datasets from a known truth put through ``outcome_verdict``, what ``compare_arms`` runs once reports are paired).

Small, for the suite, but held to the issue's targets: with no true difference "resolved" at most 6 % and coverage
93-97 % (400 datasets a row), power at the stated detectable difference 75-85 % (200 datasets a row), each widened
by one binomial standard error of the suite's size only (1.1 points at 5 % and 400 datasets; 2.8 at 80 % and 200):
the seeds are fixed, so the numbers are the same every run, never flaky. The exceptions are named per row below,
each conservative (wider, fewer "resolved"), never liberal. The larger run, against the bare targets, is
bench/compare_simulation.py, its table in docs/evaluation.md."""

from __future__ import annotations

import pytest

from verdict_simulation import Row, binomial_margin, simulate

DATASETS = 400  # no true difference
POWER_DATASETS = 200
ONE_RUN = [Row((1, 1), n, discordance=q) for q in (0.2, 0.48) for n in (20, 200, 1000)]
SEEDED = [Row(runs, 1000, spread=s) for runs in ((3, 3), (1, 3)) for s in (0.0, 0.017, 0.042)]
# the recipe's gain varying by problem (effects N(0, 1) on the logit scale, none on average): the problems' term
PROBLEM_EFFECTS = [Row((3, 3), 1000, tau=1.0), Row((3, 3), 1000, spread=0.017, tau=1.0)]


def _name(row: Row) -> str:
    if row.runs == (1, 1):
        return f"1v1-n{row.problems}-q{row.discordance}"
    return f"{row.runs[0]}v{row.runs[1]}-spread{100 * row.spread:.1f}" + (f"-tau{row.tau}" if row.tau else "")


# conservative rows, the exact test's or the floor's doing: coverage may exceed 97 %, "resolved" then stays rare
CONSERVATIVE = {
    "1v1-n20-q0.2": "about 4 discordant pairs: the exact test can seldom reject (0 of 6 is its least p under 0.05)",
    "1v1-n20-q0.48": "about 10 discordant pairs: the exact test's steps are coarse, the interval made to agree",
    "1v1-n200-q0.2": "about 40 discordant pairs: the exact test is still discrete (97.0 % at 2,000 datasets)",
    "3v3-spread0.0": "no seed spread: the problems' term, clipped at 0, and the 1 / problems^2 floor err wide",
}


@pytest.mark.parametrize("row", ONE_RUN + SEEDED + PROBLEM_EFFECTS, ids=_name)
def test_no_true_difference_is_rarely_resolved_and_the_interval_covers_zero(row):
    result = simulate(row, DATASETS, seed=11)
    margin = binomial_margin(0.05, DATASETS, sds=1)
    assert result["resolved"] <= 0.06 + margin
    assert result["coverage"] >= 0.93 - margin
    if _name(row) in CONSERVATIVE:
        assert result["resolved"] <= 0.03
    else:
        assert result["coverage"] <= 0.97 + margin
    # the interval can only cover 0 where nothing is resolved: the two never disagree
    assert result["coverage"] >= 1 - result["resolved"]


@pytest.mark.parametrize("row", SEEDED[:3] + PROBLEM_EFFECTS, ids=_name)
def test_the_standard_error_knows_the_spread_of_the_estimate(row):
    """With no seed spread the old bootstrap's standard error was 1.5 times the estimate's actual spread; the run
    as the replicate gets it right (the sd of 200 estimates is itself known to about 5 %, so within 20 %)."""
    result = simulate(row, POWER_DATASETS, seed=12)
    assert 0.8 <= result["se"] / result["sd"] <= 1.2


POWER_ROWS = [Row((1, 1), 200, discordance=0.2), Row((1, 1), 1000, discordance=0.48)] + SEEDED[1:2] + SEEDED[5:6]
# 1 v 3 at 4.2 points of spread: the stated difference rests on a seed variance of two degrees of freedom and errs
# large, so power runs high (86-87 % in bench/compare_simulation.py): generous, never short
GENEROUS_POWER = {"1v3-spread4.2": 0.90}


@pytest.mark.parametrize("row", POWER_ROWS, ids=_name)
def test_the_stated_detectable_difference_is_found_80_percent_of_the_time(row):
    stated = simulate(row, POWER_DATASETS, seed=13)["detectable"]  # what the verdict says, over null datasets
    at_stated = simulate(row, POWER_DATASETS, seed=14, difference=stated)
    margin = binomial_margin(0.8, POWER_DATASETS, sds=1)
    assert 0.75 - margin <= at_stated["resolved"] <= GENEROUS_POWER.get(_name(row), 0.85 + margin)
    assert abs(at_stated["coverage"] - 0.95) <= binomial_margin(0.05, POWER_DATASETS, sds=3)


def test_one_run_against_three_when_the_single_run_spreads_more_is_liberal_as_its_line_says():
    """1 v 3 rests on the two recipes spreading alike (the single run's spread cannot be seen). When the single
    run's recipe spreads 4.2 points and the other's not at all, a null difference is resolved far more often than
    5 % (about 25 % in bench/compare_simulation.py): the cost the verdict line states beside every 1 v k test."""
    result = simulate(Row((1, 3), 1000, base_spread=0.042), POWER_DATASETS, seed=15)
    assert result["resolved"] >= 0.15
