"""del-eval compare's verdict and the statistics behind it (del_plugin/evaluation/scoring/stats.py, verdict.py).

Reports are made the way a user makes them: generations scored by ``del-eval score`` against GSM8K, right where the
output states the reference answer, wrong where it states another number. Intervals and p-values are checked
against references computed independently: a direct binomial sum for McNemar's exact test, the published value of
Tango's interval (Fagerland, Lydersen and Laake's worked example, Cavo et al. 2012), scipy's Wilson interval and
Welch t test, the sample standard deviation of 0/1 outcomes for lm-eval's standard error. Their error rates: the
simulation of test_compare_simulation.py."""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pytest
from scipy.stats import t as t_dist
from scipy.stats import ttest_1samp, ttest_ind

from del_plugin.evaluation import cli, load_benchmark, load_report, score_predictions
from del_plugin.evaluation.compare.paired_verdict import SetOutcomes, outcome_verdict
from del_plugin.evaluation.compare.verdict import compare_arms, log_error
from del_plugin.evaluation.errors import EXIT_USAGE, UsageError
from del_plugin.evaluation.scoring.stats import (
    accuracy_se,
    detectable_difference,
    holm,
    mover_mean,
    paired_difference,
    sign_test_p,
    tango_interval,
    wilson_interval,
)

from repo import REPO
from scored_reports import gsm8k_reference_answers, scored_report, seed_reports

Z = 1.959963984540054  # the normal 0.975 quantile


@pytest.fixture(scope="module")
def gsm8k_references():
    return gsm8k_reference_answers()


def _exact_two_sided(wins: int, losses: int) -> float:
    n, k = wins + losses, min(wins, losses)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)


# ---------------------------------------------------------------------------------------------- statistics


def test_accuracy_se_is_lm_evals_sample_standard_error():
    outcomes = [1] * 41 + [0] * 59
    assert accuracy_se(41, 100) == pytest.approx(statistics.stdev(outcomes) / math.sqrt(100))
    assert accuracy_se(0, 1) is None


def test_sign_test_against_direct_calculations():
    assert sign_test_p(0, 0) == 1.0
    assert sign_test_p(0, 6) == pytest.approx(2 / 64)
    assert sign_test_p(5, 1) == pytest.approx(2 * 7 / 64)  # (C(6,0) + C(6,1)) / 2^6, both tails
    assert sign_test_p(70, 20) == pytest.approx(_exact_two_sided(70, 20))
    assert holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    assert detectable_difference(1.0) == pytest.approx(Z + 0.8416212335729143)


def test_tango_interval_matches_the_published_example_and_holds_at_the_edges():
    # Cavo et al. 2012 as Fagerland, Lydersen and Laake work it (Statistical Analysis of Contingency Tables, ch. 8;
    # their R package's test): 59 both, 6 / 16 discordant, 80 neither: -0.0621 (95 % CI -0.1240 to -0.0054)
    low, high = tango_interval(6, 16, 161)
    assert (round(low, 4), round(high, 4)) == (-0.1240, -0.0054)
    for wins, losses, n in ((0, 0, 20), (20, 0, 20), (0, 20, 20), (0, 0, 1), (1, 0, 1), (3, 3, 6)):
        low, high = tango_interval(wins, losses, n)
        assert -1 <= low < high <= 1  # never zero-width, never beyond +/-100 points
        assert low <= (wins - losses) / n <= high
    assert tango_interval(0, 0, 20)[0] == pytest.approx(-tango_interval(0, 0, 20)[1])  # no discordance: symmetric
    assert tango_interval(20, 0, 20)[1] == 1.0


def test_the_interval_never_excludes_zero_beside_an_exact_p_that_does_not_reject():
    # 5 / 0 of 20: Tango's interval alone excludes 0, but McNemar's exact p is 2 / 32 = 0.0625: stretched to 0
    assert tango_interval(5, 0, 20)[0] > 0
    d = paired_difference(5, 0, 20)
    assert d["p"] == pytest.approx(0.0625) and d["stretched"] and d["low"] == 0.0
    assert d["high"] == tango_interval(5, 0, 20)[1]
    # 6 / 0: p = 2 / 64 rejects, and Tango's interval excludes 0 on its own
    d = paired_difference(6, 0, 20)
    assert d["p"] == pytest.approx(2 / 64) and not d["stretched"] and d["low"] > 0
    for wins in range(0, 21):  # every split of 20 discordant pairs: an interval excluding 0 has a rejecting p
        for n in (20, 40, 400):
            d = paired_difference(wins, 20 - wins, n)
            assert (d["low"] > 0 or d["high"] < 0) <= (d["p"] < 0.05)


def _one_run_set(name: str, wins: int, losses: int, n: int) -> SetOutcomes:
    """One run an arm on ``n`` problems: ``wins`` only the candidate got right, ``losses`` only the baseline, the
    rest right for both."""
    base = np.ones(n, dtype=np.int8)
    cand = np.ones(n, dtype=np.int8)
    cand[:losses] = 0
    base[losses : losses + wins] = 0
    return SetOutcomes(name, name, False, base[None], cand[None])


def test_a_sets_interval_never_excludes_zero_beside_a_holm_p_that_does_not_reject():
    """Holm adjusts the sets' p, not their intervals: set A, 13 v 3 discordant of 200, has an exact p of 0.021 and
    Tango's interval [+1.2, +9.5], but Holm over three sets makes its p 0.064. The interval is stretched to 0."""
    sets = [_one_run_set("A", 13, 3, 200), _one_run_set("B", 2, 2, 200), _one_run_set("C", 1, 1, 200)]
    entries, _, _ = outcome_verdict(sets, ("MLE", "DEL"))
    a = entries[0]
    exact_p = _exact_two_sided(13, 3)
    assert a["p"] == pytest.approx(exact_p) and exact_p < 0.05
    assert a["holm_p"] == pytest.approx(3 * exact_p) and a["holm_p"] >= 0.05  # the other two sets' p are 1
    low, high = tango_interval(13, 3, 200)
    assert low > 0  # unadjusted, the interval would say resolved
    assert (a["difference"]["low"], a["difference"]["high"]) == (0.0, pytest.approx(high))
    assert a["difference"]["stretched"] and not a["resolved"] and a["better"] is None


def test_wilson_and_mover_against_independent_references():
    from scipy.stats import binomtest

    for correct, n in ((7, 20), (0, 5), (20, 20), (123, 1000)):
        reference = binomtest(correct, n).proportion_ci(method="wilson")
        assert wilson_interval(correct, n) == pytest.approx((reference.low, reference.high), abs=1e-12)
    # MOVER of two independent differences: each side's distances added in quadrature, by hand
    low, high = mover_mean([0.1, -0.02], [0.04, -0.06], [0.15, 0.03])
    assert low == pytest.approx(0.04 - math.sqrt(0.06**2 + 0.04**2) / 2)
    assert high == pytest.approx(0.04 + math.sqrt(0.05**2 + 0.05**2) / 2)


# ---------------------------------------------------------------------------------------------- the verdict


def test_1000_problems_5_vs_10_percent_is_resolved(tmp_path, gsm8k_references, capsys):
    # MLE right on 0..49, DEL on 30..129: both 20, only DEL 80, only MLE 30... (5 % and 10 %: 50 and 100 of 1,000)
    mle = scored_report(tmp_path, gsm8k_references, "MLE", set(range(50)), 1000)
    dels = scored_report(tmp_path, gsm8k_references, "DEL", set(range(30, 130)), 1000)
    capsys.readouterr()
    out = tmp_path / "compare"
    assert cli.main(["compare", str(mle), str(dels), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    verdict = json.loads((out / "comparison.json").read_text())["verdict"]
    (gsm8k,) = verdict["sets"]
    only_del, only_mle = 80, 30
    assert gsm8k["discordant"] == {"candidate_only": only_del, "baseline_only": only_mle}
    assert gsm8k["p"] == pytest.approx(_exact_two_sided(only_del, only_mle), rel=1e-9)
    assert gsm8k["holm_p"] == gsm8k["p"]  # one set: nothing to adjust
    diff, n = 0.05, 1000
    half = Z * math.sqrt(only_del + only_mle - (only_del - only_mle) ** 2 / n) / n
    assert gsm8k["difference"]["value"] == pytest.approx(diff)
    # Tango's score interval; at 1,000 problems within a few tenths of a point of the normal approximation's
    assert (gsm8k["difference"]["low"], gsm8k["difference"]["high"]) == tango_interval(only_del, only_mle, n)
    assert gsm8k["difference"]["low"] == pytest.approx(diff - half, abs=0.004)
    assert gsm8k["difference"]["high"] == pytest.approx(diff + half, abs=0.004)
    for arm, p in (("baseline", 0.05), ("candidate", 0.10)):
        assert gsm8k[arm]["accuracy"] == pytest.approx(p)
        assert gsm8k[arm]["se"] == pytest.approx(math.sqrt(p * (1 - p) / (n - 1)))
        assert gsm8k[arm]["low"] == pytest.approx(p - Z * math.sqrt(p * (1 - p) / n), abs=0.004)  # Wilson's
    assert gsm8k["detectable"] == pytest.approx((Z + 0.8416212335729143) * math.sqrt(110) / n)
    assert gsm8k["resolved"] and gsm8k["better"] == "DEL"
    assert verdict["line"].startswith("DEL - MLE: +5.0 GSM8K points [+3.")
    assert "resolved: DEL is better" in verdict["line"]
    assert "Tango's score interval" in verdict["method"] and "McNemar" in verdict["method"]
    assert "one run an arm compares two checkpoints, not two training recipes" in verdict["line"]
    # the verdict comes first; the resolved difference is the only thing in bold, in the winner's row
    assert printed.index(verdict["line"]) < printed.index("## The paper's benchmarks: accuracy")
    table = printed.split("## The paper's benchmarks: accuracy")[1].split("\n\n")[1]
    assert "| DEL | **10.0%** | **10.0%** |" in table and "| MLE | 5.0% | 5.0% |" in table
    assert (out / "difference_forest.png").read_bytes()[:4] == b"\x89PNG"


def test_200_problems_1_vs_2_percent_is_not_resolved_and_nothing_is_bold(tmp_path, gsm8k_references, capsys):
    mle = scored_report(tmp_path, gsm8k_references, "MLE", {0, 1}, 200)
    dels = scored_report(tmp_path, gsm8k_references, "DEL", {0, 2, 3, 4}, 200)
    capsys.readouterr()
    out = tmp_path / "compare"
    assert cli.main(["compare", str(mle), str(dels), "--out", str(out), "--labels", "MLE", "DEL"]) == 0
    printed = capsys.readouterr().out
    verdict = json.loads((out / "comparison.json").read_text())["verdict"]
    (gsm8k,) = verdict["sets"]
    assert gsm8k["p"] == pytest.approx(_exact_two_sided(3, 1)) == pytest.approx(0.625)
    assert gsm8k["difference"]["low"] < 0 < gsm8k["difference"]["high"]
    assert not gsm8k["resolved"] and gsm8k["better"] is None
    detectable = (Z + 0.8416212335729143) * math.sqrt(4) / 200
    needed = math.ceil(200 * (detectable / 0.01) ** 2)  # the detectable difference goes as 1 / sqrt(problems)
    assert verdict["line"] == (
        f"DEL - MLE: +1.0 GSM8K points [{100 * gsm8k['difference']['low']:+.1f}, "
        f"{100 * gsm8k['difference']['high']:+.1f}], not resolved: this sample resolves about "
        f"+/-{100 * detectable:.1f}; about {needed:,} problems would resolve +1.0; one run an arm compares two "
        "checkpoints, not two training recipes: the spread between training seeds is not in this interval (train "
        "seeds and give --baseline/--candidate)"
    )
    side_by_side = printed.split("## The paper's benchmarks: accuracy")[1]
    assert "**" not in side_by_side.split("\n\n")[1]  # nothing bold inside the noise
    assert "**" not in printed.split("## Verdict")[1].split("## The runs")[0]


def test_several_seeds_take_the_run_as_the_replicate_welch_as_scipy(tmp_path, gsm8k_references):
    n = 100
    # per-run accuracies: MLE 25, 40, 55 %; DEL 35, 50, 62 % (the runs disagree by 15 points)
    mle = seed_reports(tmp_path, gsm8k_references, "MLE", [set(range(k)) for k in (25, 40, 55)], n)
    dels = seed_reports(tmp_path, gsm8k_references, "DEL", [set(range(k)) for k in (35, 50, 62)], n)
    verdict = compare_arms([load_report(p) for p in mle], [load_report(p) for p in dels], ("MLE", "DEL"))
    (s,) = verdict["sets"]
    reference = ttest_ind([0.35, 0.50, 0.62], [0.25, 0.40, 0.55], equal_var=False)
    interval = reference.confidence_interval(0.95)
    assert s["p"] == pytest.approx(reference.pvalue, rel=1e-9)
    assert s["difference"]["df"] == pytest.approx(reference.df, rel=1e-9)
    assert (s["difference"]["low"], s["difference"]["high"]) == pytest.approx((interval.low, interval.high))
    assert s["discordant"] is None and not s["resolved"]
    # the same problems right run after run would give a far narrower interval: the seed spread is in this one
    assert s["difference"]["high"] - s["difference"]["low"] > 0.3
    assert "Welch's t" in verdict["method"] and "the training run as the replicate" in verdict["line"]
    assert "runs an arm would resolve" in verdict["line"]
    assert "spread alike" not in verdict["line"]  # both arms' spreads measured: no assumption to state


def test_one_run_against_three_is_tested_on_the_pooled_seed_variance(tmp_path, gsm8k_references):
    n = 100
    mle = seed_reports(tmp_path, gsm8k_references, "MLE", [set(range(40))], n)
    dels = seed_reports(tmp_path, gsm8k_references, "DEL", [set(range(k)) for k in (45, 50, 58)], n)
    verdict = compare_arms([load_report(p) for p in mle], [load_report(p) for p in dels], ("MLE", "DEL"))
    (s,) = verdict["sets"]
    # Student's t: DEL's variance stands for both arms (one run shows no spread of its own), 1 + 3 runs, df 2
    per_run = [0.45, 0.50, 0.58]
    seed_se2 = statistics.variance(per_run) * (1 / 1 + 1 / 3)
    # plus the problems' term, by hand: per-problem differences of the arms' mean outcomes, less the runs' own
    # noise in them (each problem's variance over DEL's three runs, standing for MLE's single run too)
    d = [0] * 40 + [1] * 5 + [2 / 3] * 5 + [1 / 3] * 8 + [0] * 42
    s2 = [0] * 45 + [1 / 3] * 13 + [0] * 42
    term = max(0.0, statistics.variance(d) - statistics.mean(s2) * (1 / 3 + 1 / 1)) / n
    assert term > 0
    se = math.sqrt(seed_se2 + term)
    df = 2  # the seed variance's (1 + 3 runs, DEL's three): the problems' term does not raise them
    diff = statistics.mean(per_run) - 0.40
    assert s["difference"]["se"] == pytest.approx(se) and s["difference"]["df"] == pytest.approx(df)
    assert s["p"] == pytest.approx(2 * t_dist.sf(diff / se, df))
    assert s["difference"]["high"] == pytest.approx(diff + t_dist.ppf(0.975, df) * se)
    assert "pooled" in json.dumps(s) and "assumed to spread alike" in verdict["method"]
    # the assumption and its cost are in the line itself, not only in the method
    assert "1 v 3 runs" in verdict["line"] and "assumes both recipes spread alike" in verdict["line"]
    assert "train 2+ runs of each" in verdict["line"]


def test_baseline_and_candidate_arms_from_the_command_line(tmp_path, gsm8k_references, capsys):
    mle = seed_reports(tmp_path, gsm8k_references, "MLE", [set(range(20)), set(range(22))], 60)
    dels = seed_reports(tmp_path, gsm8k_references, "DEL", [set(range(30)), set(range(31))], 60)
    out = tmp_path / "arms"
    argv = ["compare", "--baseline", *map(str, mle), "--candidate", *map(str, dels), "--out", str(out)]
    assert cli.main([*argv, "--labels", "MLE", "DEL"]) == 0
    printed = capsys.readouterr().out
    comparison = json.loads((out / "comparison.json").read_text())
    assert [m["label"] for m in comparison["models"]] == ["MLE 1", "MLE 2", "DEL 1", "DEL 2"]
    assert comparison["verdict"]["line"].startswith("DEL - MLE: +")
    assert len(comparison["verdict"]["baseline"]["runs"]) == 2
    assert "## Verdict" in printed
    assert cli.main(["compare", str(mle[0]), "--baseline", str(mle[1]), "--out", str(out)]) == EXIT_USAGE
    assert cli.main(["compare", "--baseline", str(mle[0]), "--out", str(out)]) == EXIT_USAGE


def test_different_problems_are_refused_unless_the_intersection_is_asked_for(tmp_path, capsys):
    for name, ids in (("a", range(0, 6)), ("b", range(4, 10)), ("c", range(20, 22))):
        score_predictions("gsm8k", [{"id": i, "output": "The answer is 1"} for i in ids], tmp_path / name)
    a, b, c = (load_report(tmp_path / name) for name in "abc")
    with pytest.raises(UsageError, match=r"GSM8K: the runs scored different problems \(2 in common; the baseline's"):
        compare_arms([a], [b], ("A", "B"))
    argv = ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "out")]
    assert cli.main(argv) == EXIT_USAGE and not (tmp_path / "out").exists()
    assert "give --intersection" in capsys.readouterr().err
    verdict = compare_arms([a], [b], ("A", "B"), intersection=True)
    assert verdict["sets"][0]["problems"] == 2 and verdict["dropped"] == {"baseline": 4, "candidate": 4}
    assert verdict["notes"] == [
        "GSM8K: paired on the 2 problems every run scored (--intersection); the baseline's runs dropped 4, the "
        "candidate's 4"
    ]
    assert verdict["line"].endswith("--intersection: the baseline's runs dropped 4 problems, the candidate's 4")
    apart = compare_arms([a], [c], ("A", "C"), intersection=True)
    assert apart["sets"] == [] and apart["summary"] is None
    assert apart["line"].startswith("C - A: cannot be tested: no set has problems that every run scored")
    assert "GSM8K: the runs scored no problem in common" in apart["line"]


def test_math_verify_needs_reports_that_carry_it(tmp_path, gsm8k_references, capsys):
    a = scored_report(tmp_path, gsm8k_references, "A", {0}, 3)
    b = scored_report(tmp_path, gsm8k_references, "B", {1}, 3)
    argv = ["compare", str(a), str(b), "--out", str(tmp_path / "c"), "--scorer", "math-verify"]
    # reports of a del-eval that did not record math-verify's verdicts (before it, or without the package)
    for folder in (a, b):
        lines = [json.loads(x) for x in (folder / "generations.jsonl").read_text().splitlines()]
        assert all("math_verify_correct" in record for record in lines)
        for record in lines:
            del record["math_verify_correct"]
        (folder / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert cli.main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "no math-verify verdict ('math_verify_correct')" in err and "re-score it with the current del-eval" in err
    assert not (tmp_path / "c").exists()
    # scored where math-verify was not installed: null, never counted as wrong
    for folder in (a, b):
        lines = [
            json.loads(x) | {"math_verify_correct": None}
            for x in (folder / "generations.jsonl").read_text().splitlines()
        ]
        (folder / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert cli.main(argv) == EXIT_USAGE
    assert "was scored without math-verify installed" in capsys.readouterr().err
    # the scorer is read from that field: a report carrying it is compared on it
    for folder, right in ((a, {0, 1}), (b, {1})):
        lines = [json.loads(x) for x in (folder / "generations.jsonl").read_text().splitlines()]
        for record in lines:
            record["math_verify_correct"] = record["id"] in right
        (folder / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert cli.main(argv) == 0
    verdict = json.loads((tmp_path / "c" / "comparison.json").read_text())["verdict"]
    assert verdict["scorer"] == "math-verify"
    assert verdict["sets"][0]["discordant"] == {"candidate_only": 0, "baseline_only": 1}


def _two_sets(tmp_path, name: str, right: dict[str, set[int]], n: int):
    """One report of GSM8K's and SVAMP's first ``n`` problems (two del-eval score reports merged into one folder, as
    one run of two sets writes it), right exactly on ``right[set]``."""
    parts = {}
    for benchmark in ("gsm8k", "svamp"):
        refs = [p.reference for p in load_benchmark(benchmark).problems]
        outputs = [
            {"id": i, "output": f"The answer is {refs[i] if i in right[benchmark] else refs[i] + '1'}"}
            for i in range(n)
        ]
        parts[benchmark] = tmp_path / f"{name}-{benchmark}"
        score_predictions(benchmark, outputs, parts[benchmark], name=name)
    out = tmp_path / name
    out.mkdir()
    report = load_report(parts["gsm8k"])
    report["datasets"] += load_report(parts["svamp"])["datasets"]
    report.pop("_path")
    (out / "report.json").write_text(json.dumps(report))
    generations = "".join((parts[b] / "generations.jsonl").read_text() for b in parts)
    (out / "generations.jsonl").write_text(generations)
    return out


def test_the_mean_over_sets_and_holm_across_them(tmp_path):
    n = 400
    mle = _two_sets(tmp_path, "MLE", {"gsm8k": set(range(100)), "svamp": set(range(200))}, n)
    dels = _two_sets(tmp_path, "DEL", {"gsm8k": set(range(40, 180)), "svamp": set(range(190))}, n)
    verdict = compare_arms([load_report(mle)], [load_report(dels)], ("MLE", "DEL"))
    gsm8k, svamp = verdict["sets"]
    assert (gsm8k["title"], svamp["title"]) == ("GSM8K", "SVAMP")  # the paper's order
    assert gsm8k["discordant"] == {"candidate_only": 80, "baseline_only": 40}
    assert svamp["discordant"] == {"candidate_only": 0, "baseline_only": 10}
    raw = [_exact_two_sided(80, 40), _exact_two_sided(0, 10)]
    assert [gsm8k["p"], svamp["p"]] == pytest.approx(raw)
    assert [gsm8k["holm_p"], svamp["holm_p"]] == pytest.approx([2 * min(raw), max(raw)])  # Holm with two tests
    summary = verdict["summary"]
    assert summary["name"] == "mACC (2 of 7 sets)"
    assert summary["difference"]["value"] == pytest.approx((0.10 - 0.025) / 2)
    se = math.sqrt((120 - 40**2 / n) + (10 - 10**2 / n)) / n / 2  # the two sets' paired variances, added
    # MOVER from the two sets' intervals: close to the normal interval with the sets' variances added
    values = [x["difference"]["value"] for x in (gsm8k, svamp)]
    lows, highs = [x["difference"]["low"] for x in (gsm8k, svamp)], [x["difference"]["high"] for x in (gsm8k, svamp)]
    assert summary["difference"]["low"] == pytest.approx(
        sum(values) / 2 - math.hypot(values[0] - lows[0], values[1] - lows[1]) / 2
    )
    assert summary["difference"]["high"] == pytest.approx(
        sum(values) / 2 + math.hypot(highs[0] - values[0], highs[1] - values[1]) / 2
    )
    assert summary["difference"]["low"] == pytest.approx(summary["difference"]["value"] - Z * se, abs=0.004)
    assert summary["difference"]["high"] == pytest.approx(summary["difference"]["value"] + Z * se, abs=0.004)
    assert summary["detectable"] == pytest.approx((Z + 0.8416212335729143) * math.sqrt(120 + 10) / n / 2)
    assert verdict["line"].startswith(
        f"DEL - MLE: {100 * summary['difference']['value']:+.1f} mACC (2 of 7 sets) points [+"
    )
    # each set resolved on its own, in opposite directions: the line says which way each went
    assert "resolved: DEL is better (sets resolved on their own: GSM8K for DEL, SVAMP for MLE)" in verdict["line"]


def test_a_report_without_its_generations_cannot_be_paired(tmp_path, gsm8k_references):
    a = scored_report(tmp_path, gsm8k_references, "A", {0}, 3)
    b = scored_report(tmp_path, gsm8k_references, "B", {1}, 3)
    (b / "generations.jsonl").unlink()
    verdict = compare_arms([load_report(a)], [load_report(b)], ("A", "B"))
    assert verdict["sets"] == [] and verdict["line"].startswith("B - A: cannot be tested: ")
    assert (
        "generations.jsonl is missing, and without each problem's verdict the runs cannot be paired" in verdict["line"]
    )


def _data_report(folder, name: str, rows: list[dict]):
    """A run's report on one --data set, written as del-eval writes it (report.json beside generations.jsonl)."""
    from del_plugin.evaluation.reports.files import SCHEMA

    folder.mkdir(parents=True)
    right = sum(r["correct"] for r in rows)
    errors = [r["abs_error"] for r in rows if r["abs_error"] is not None]  # over the problems answered
    logs = [e for e in map(log_error, rows) if e is not None]
    entry = {
        "name": "heldout",
        "benchmark": None,
        "scoring": "numeric-tolerance",
        "status": "complete",
        "evaluated": len(rows),
        "issues": [],
        "coverage": None,
        "generation": {
            "n": len(rows),
            "correct": right,
            "accuracy": right / len(rows),
            "mae": sum(errors) / len(errors),
        }
        | {"log_mae": sum(logs) / len(logs)},
        "teacher_forced": None,
    }
    report = {"schema": SCHEMA, "name": name, "status": "complete", "model": {}, "settings": {}, "datasets": [entry]}
    report |= {"macc": None, "overall": {"generation": None, "teacher_forced": None}}
    (folder / "report.json").write_text(json.dumps(report))
    lines = [json.dumps({"dataset": "heldout", "id": i} | r) for i, r in enumerate(rows)]
    (folder / "generations.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_a_data_set_bolds_only_what_a_paired_test_resolves(tmp_path, capsys):
    # the same problems right (accuracy tied), DEL's numbers closer on all 12 by the same amount: MAE and log-MAE
    # resolved by the paired t test on the errors (differences all the same and not 0: certain)
    rows = lambda error: [  # noqa: E731
        {"correct": i < 3, "prediction": str(10 + error), "reference": "10", "abs_error": float(error)}
        for i in range(12)
    ]
    mle = _data_report(tmp_path / "mle", "MLE", rows(2))
    dels = _data_report(tmp_path / "del", "DEL", rows(1))
    assert cli.main(["compare", str(mle), str(dels), "--out", str(tmp_path / "c")]) == 0
    table = capsys.readouterr().out.split("## heldout")[1]
    se = 100 * math.sqrt(0.25 * 0.75 / 11)  # 13.1
    log_mle, log_del = math.log(13) - math.log(11), math.log(12) - math.log(11)  # |s(p) - s(10)|, by hand
    assert f"| MLE | 12 | 25.0% | {se:.1f} | – | 2.000 | {log_mle:.3f} | – | – |" in table
    assert f"| DEL | 12 | 25.0% | {se:.1f} | – | **1.000** | **{log_del:.3f}** | – | – |" in table
    assert table.count("**") == 4  # MAE and log-MAE
    # the note under the table names the tests that made the bold, not the bootstrap the verdict no longer uses
    assert "MAE, log-MAE: the paired t test on the errors, only the lower mean error bold" in table
    assert "Tango's and McNemar's with one run an arm" in table and "bootstrap" not in table


def test_the_higher_mean_error_is_never_bold(tmp_path, capsys):
    # DEL closer on 11 of 12 problems by one, 2,400 off on the last: MAE 200.8 against MLE's 2.0. A sign test on
    # counts (11 to 1, p 0.006) would bold DEL's MAE; the paired t test on the errors cannot bold the higher mean
    mle_rows = [{"correct": False, "prediction": "12", "reference": "10", "abs_error": 2.0} for _ in range(12)]
    del_rows = [{"correct": False, "prediction": "11", "reference": "10", "abs_error": 1.0} for _ in range(11)]
    del_rows.append({"correct": False, "prediction": "2410", "reference": "10", "abs_error": 2400.0})
    mle = _data_report(tmp_path / "mle", "MLE", mle_rows)
    dels = _data_report(tmp_path / "del", "DEL", del_rows)
    assert sign_test_p(11, 1) < 0.05
    assert cli.main(["compare", str(mle), str(dels), "--out", str(tmp_path / "c")]) == 0
    table = capsys.readouterr().out.split("## heldout")[1]
    del_row = next(line for line in table.splitlines() if line.startswith("| DEL |"))
    assert "| 200.917 |" in del_row or "200.9" in del_row
    assert "**200" not in del_row
    differences = [d["abs_error"] - m["abs_error"] for d, m in zip(del_rows, mle_rows)]
    assert ttest_1samp(differences, 0.0).pvalue > 0.05  # the errors' own test: not resolved, nothing bold
    assert "**2.000**" not in table


def test_the_detectable_difference_counts_at_least_one_discordant_pair():
    """No discordant pair (the runs right on the same problems): the detectable difference is that of one pair,
    2.80 / n, as docs/evaluation.md states, not 0 (which would claim the sample misses nothing)."""
    from del_plugin.evaluation.compare.paired_verdict import SetOutcomes, outcome_verdict

    same = np.array([[1] * 30 + [0] * 70], dtype=np.int8)
    (entry,), summary, _ = outcome_verdict([SetOutcomes("s", "s", False, same, same.copy())], ("A", "B"))
    assert entry["discordant"] == {"candidate_only": 0, "baseline_only": 0}
    assert entry["detectable"] == pytest.approx((Z + 0.8416212335729143) * 1 / 100)
    assert entry["difference"]["low"] < 0 < entry["difference"]["high"]  # Tango's: not [0, 0]
    assert summary["problems_to_resolve"] is None  # a difference of 0 is resolved by no sample
    docs = (REPO / "docs" / "evaluation.md").read_text()
    assert "counting **at least one discordant pair**" in docs


def _error_rows(errors: list[float | None]) -> list[dict]:
    """--data rows with these absolute errors (None: no answer), reference 10, none right."""
    return [
        {"correct": False, "prediction": None if e is None else str(10 + e), "reference": "10", "abs_error": e}
        for e in errors
    ]


def test_errors_all_closer_by_the_same_amount_on_two_problems_are_not_bold(tmp_path, capsys):
    # every difference the same: no variance for the t test, so the exact sign test stands in: 2 of 2 closer,
    # p = 2 x 0.5^2 = 0.5, not resolved (it once read as certain, p 0)
    mle = _data_report(tmp_path / "mle", "MLE", _error_rows([2.0, 2.0]))
    dels = _data_report(tmp_path / "del", "DEL", _error_rows([1.0, 1.0]))
    assert cli.main(["compare", str(mle), str(dels), "--out", str(tmp_path / "c")]) == 0
    rows = [line for line in capsys.readouterr().out.split("## heldout")[1].splitlines() if line.startswith("| ")]
    mle_row, del_row = (next(r for r in rows if r.startswith(f"| {name} |")) for name in ("MLE", "DEL"))
    assert "| 2.000 |" in mle_row and "| 1.000 |" in del_row
    assert "**" not in mle_row + del_row


def test_bold_never_lands_on_the_higher_mae_the_table_shows(tmp_path, capsys):
    # DEL 1 closer on the 10 problems both answered (the paired t test: certain), but DEL also answered 5 that MLE
    # did not, each 1,000 off: its MAE as shown, (10 x 1 + 5 x 1,000) / 15 = 334.0, against MLE's 2.0
    mle = _data_report(tmp_path / "mle", "MLE", _error_rows([2.0] * 10 + [None] * 5))
    dels = _data_report(tmp_path / "del", "DEL", _error_rows([1.0] * 10 + [1000.0] * 5))
    assert cli.main(["compare", str(mle), str(dels), "--out", str(tmp_path / "c")]) == 0
    rows = [line for line in capsys.readouterr().out.split("## heldout")[1].splitlines() if line.startswith("| ")]
    mle_row, del_row = (next(r for r in rows if r.startswith(f"| {name} |")) for name in ("MLE", "DEL"))
    assert "| 2.000 |" in mle_row and "| 334.000 |" in del_row
    assert "**" not in mle_row + del_row
