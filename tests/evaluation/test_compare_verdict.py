"""del-eval compare's verdict and the statistics behind it (del_plugin/evaluation/stats.py, verdict.py).

Reports are made the way a user makes them: generations scored by ``del-eval score`` against GSM8K, right where the
output states the reference answer, wrong where it states another number. Intervals and p-values are checked
against calculations written out here: a direct binomial sum for McNemar's exact test, the normal approximation of
a paired proportion difference for the bootstrap interval (which it should match to within the resampling error),
the sample standard deviation of 0/1 outcomes for lm-eval's standard error."""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pytest

from del_plugin.evaluation import cli, load_benchmark, load_report, score_predictions
from del_plugin.evaluation.errors import EXIT_USAGE
from del_plugin.evaluation.stats import (
    ArmOutcomes,
    accuracy_se,
    detectable_difference,
    holm,
    paired_bootstrap,
    sign_test_p,
)
from del_plugin.evaluation.verdict import compare_arms, log_error

Z = 1.959963984540054  # the normal 0.975 quantile


@pytest.fixture(scope="module")
def gsm8k_references():
    return [p.reference for p in load_benchmark("gsm8k").problems]


def _scored(tmp_path, references, name: str, right: set[int], n: int):
    """A del-eval score report of GSM8K's first ``n`` problems, right exactly on ``right``."""
    outputs = [
        {"id": i, "output": f"The answer is {references[i] if i in right else references[i] + '1'}"} for i in range(n)
    ]
    out = tmp_path / name
    report = score_predictions("gsm8k", outputs, out, name=name)
    assert report["datasets"][0]["generation"]["correct"] == len(right)
    return out


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


def test_the_bootstrap_is_seeded_and_matches_the_paired_normal_interval():
    rng = np.random.default_rng(3)
    base = rng.random(2000) < 0.3
    cand = np.where(rng.random(2000) < 0.15, ~base, base)
    outcomes = ArmOutcomes(base, cand)
    first, again = paired_bootstrap([outcomes]), paired_bootstrap([outcomes])
    assert np.array_equal(first.difference, again.difference)  # seeded: the same inputs, the same interval
    b, c, n = int((cand & ~base).sum()), int((base & ~cand).sum()), 2000
    se = math.sqrt(b + c - (b - c) ** 2 / n) / n
    assert first.difference[0].std(ddof=1) == pytest.approx(se, rel=0.08)


# ---------------------------------------------------------------------------------------------- the verdict


def test_1000_problems_5_vs_10_percent_is_resolved(tmp_path, gsm8k_references, capsys):
    # MLE right on 0..49, DEL on 30..129: both 20, only DEL 80, only MLE 30... (5 % and 10 %: 50 and 100 of 1,000)
    mle = _scored(tmp_path, gsm8k_references, "MLE", set(range(50)), 1000)
    dels = _scored(tmp_path, gsm8k_references, "DEL", set(range(30, 130)), 1000)
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
    assert gsm8k["difference"]["low"] == pytest.approx(diff - half, abs=0.004)
    assert gsm8k["difference"]["high"] == pytest.approx(diff + half, abs=0.004)
    for arm, p in (("baseline", 0.05), ("candidate", 0.10)):
        assert gsm8k[arm]["accuracy"] == pytest.approx(p)
        assert gsm8k[arm]["se"] == pytest.approx(math.sqrt(p * (1 - p) / (n - 1)))
        assert gsm8k[arm]["low"] == pytest.approx(p - Z * math.sqrt(p * (1 - p) / n), abs=0.004)
    assert gsm8k["detectable"] == pytest.approx((Z + 0.8416212335729143) * math.sqrt(110) / n)
    assert gsm8k["resolved"] and gsm8k["better"] == "DEL"
    assert verdict["line"].startswith("DEL - MLE: +5.0 GSM8K points [+3.")
    assert "resolved: DEL is better" in verdict["line"]
    assert "paired bootstrap" in verdict["method"] and "McNemar" in verdict["method"]
    # the verdict comes first; the resolved difference is the only thing in bold, in the winner's row
    assert printed.index(verdict["line"]) < printed.index("## The paper's benchmarks: accuracy")
    table = printed.split("## The paper's benchmarks: accuracy")[1].split("\n\n")[1]
    assert "| DEL | **10.0%** | **10.0%** |" in table and "| MLE | 5.0% | 5.0% |" in table
    assert (out / "difference_forest.png").read_bytes()[:4] == b"\x89PNG"


def test_200_problems_1_vs_2_percent_is_not_resolved_and_nothing_is_bold(tmp_path, gsm8k_references, capsys):
    mle = _scored(tmp_path, gsm8k_references, "MLE", {0, 1}, 200)
    dels = _scored(tmp_path, gsm8k_references, "DEL", {0, 2, 3, 4}, 200)
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
    assert verdict["line"] == (
        f"DEL - MLE: +1.0 GSM8K points [{100 * gsm8k['difference']['low']:+.1f}, "
        f"{100 * gsm8k['difference']['high']:+.1f}], not resolved: this sample resolves about "
        f"+/-{100 * detectable:.1f}; score more problems (a larger --limit, or none) or more seeds"
    )
    side_by_side = printed.split("## The paper's benchmarks: accuracy")[1]
    assert "**" not in side_by_side.split("\n\n")[1]  # nothing bold inside the noise
    assert "**" not in printed.split("## Verdict")[1].split("## The runs")[0]


def _matrix_reports(tmp_path, references, name: str, rights: list[set[int]], n: int):
    return [_scored(tmp_path, references, f"{name}-s{k}", right, n) for k, right in enumerate(rights)]


def test_disagreeing_seeds_widen_the_interval(tmp_path, gsm8k_references):
    n = 100
    # pooled: MLE 40 %, DEL 50 % in both cases; agreeing seeds score the same problems, disagreeing ones differ
    agree_mle = _matrix_reports(tmp_path / "a", gsm8k_references, "MLE", [set(range(40))] * 3, n)
    agree_del = _matrix_reports(tmp_path / "a", gsm8k_references, "DEL", [set(range(50))] * 3, n)
    spread_mle = _matrix_reports(tmp_path / "d", gsm8k_references, "MLE", [set(range(k)) for k in (25, 40, 55)], n)
    spread_del = _matrix_reports(tmp_path / "d", gsm8k_references, "DEL", [set(range(k)) for k in (35, 50, 65)], n)

    def width(mle, dels):
        verdict = compare_arms([load_report(p) for p in mle], [load_report(p) for p in dels], ("MLE", "DEL"))
        (s,) = verdict["sets"]
        assert s["baseline"]["accuracy"] == pytest.approx(0.40) and s["candidate"]["accuracy"] == pytest.approx(0.5)
        return s["difference"]["high"] - s["difference"]["low"], verdict

    agreeing, agreed = width(agree_mle, agree_del)
    disagreeing, _ = width(spread_mle, spread_del)
    assert disagreeing > 1.5 * agreeing
    # agreeing seeds add nothing: the interval of one run an arm
    single = compare_arms([load_report(agree_mle[0])], [load_report(agree_del[0])], ("MLE", "DEL"))
    assert agreeing == pytest.approx(single["sets"][0]["difference"]["high"] - single["sets"][0]["difference"]["low"])
    assert agreed["sets"][0]["discordant"] == {"candidate_only": 30, "baseline_only": 0}  # seed i vs seed i, pooled


def test_baseline_and_candidate_arms_from_the_command_line(tmp_path, gsm8k_references, capsys):
    mle = _matrix_reports(tmp_path, gsm8k_references, "MLE", [set(range(20)), set(range(22))], 60)
    dels = _matrix_reports(tmp_path, gsm8k_references, "DEL", [set(range(30)), set(range(31))], 60)
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


def test_different_problems_pair_on_the_intersection_and_no_common_problem_is_said(tmp_path, gsm8k_references):
    a = score_predictions("gsm8k", [{"id": i, "output": "The answer is 1"} for i in range(0, 6)], tmp_path / "a")
    b = score_predictions("gsm8k", [{"id": i, "output": "The answer is 1"} for i in range(4, 10)], tmp_path / "b")
    c = score_predictions("gsm8k", [{"id": i, "output": "The answer is 1"} for i in range(20, 22)], tmp_path / "c")
    verdict = compare_arms([load_report(tmp_path / "a")], [load_report(tmp_path / "b")], ("A", "B"))
    assert verdict["sets"][0]["problems"] == 2
    assert verdict["notes"] == [
        "GSM8K: paired on the 2 problems every run scored; 8 scored by some runs only are left out"
    ]
    apart = compare_arms([load_report(tmp_path / "a")], [load_report(tmp_path / "c")], ("A", "C"))
    assert apart["sets"] == [] and apart["summary"] is None
    assert apart["line"].startswith("C - A: cannot be tested: no set has problems that every run scored")
    assert "GSM8K: the runs scored no problem in common" in apart["line"]
    assert a and b and c


def test_math_verify_needs_reports_that_carry_it(tmp_path, gsm8k_references, capsys):
    a = _scored(tmp_path, gsm8k_references, "A", {0}, 3)
    b = _scored(tmp_path, gsm8k_references, "B", {1}, 3)
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


def test_seven_sets_mean_is_stratified(tmp_path):
    """mACC's difference: the mean of the sets' differences, its interval from resampling each set within itself;
    checked against the normal interval with the sets' variances added."""
    rng = np.random.default_rng(0)
    sizes = (1319, 500, 1000, 514, 254, 220, 974)
    sets = []
    for n in sizes:
        base = rng.random(n) < 0.4
        sets.append(ArmOutcomes(base, np.where(rng.random(n) < 0.2, ~base, base)))
    boot = paired_bootstrap(sets)
    var = 0.0
    for s in sets:
        b, c = s.baseline[0], s.candidate[0]
        d = c - b
        var += d.var() / len(d)
    assert boot.mean_difference.std(ddof=1) == pytest.approx(math.sqrt(var) / len(sizes), rel=0.08)


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
    assert summary["difference"]["low"] == pytest.approx(summary["difference"]["value"] - Z * se, abs=0.004)
    assert summary["difference"]["high"] == pytest.approx(summary["difference"]["value"] + Z * se, abs=0.004)
    assert summary["detectable"] == pytest.approx((Z + 0.8416212335729143) * math.sqrt(120 + 10) / n / 2)
    assert verdict["line"].startswith(
        f"DEL - MLE: {100 * summary['difference']['value']:+.1f} mACC (2 of 7 sets) points [+"
    )
    # each set resolved on its own, in opposite directions: the line says which way each went
    assert "resolved: DEL is better (sets resolved on their own: GSM8K for DEL, SVAMP for MLE)" in verdict["line"]


def test_a_report_without_its_generations_cannot_be_paired(tmp_path, gsm8k_references):
    a = _scored(tmp_path, gsm8k_references, "A", {0}, 3)
    b = _scored(tmp_path, gsm8k_references, "B", {1}, 3)
    (b / "generations.jsonl").unlink()
    verdict = compare_arms([load_report(a)], [load_report(b)], ("A", "B"))
    assert verdict["sets"] == [] and verdict["line"].startswith("B - A: cannot be tested: ")
    assert (
        "generations.jsonl is missing, and without each problem's verdict the runs cannot be paired" in verdict["line"]
    )


def _data_report(folder, name: str, rows: list[dict]):
    """A run's report on one --data set, written as del-eval writes it (report.json beside generations.jsonl)."""
    from del_plugin.evaluation.report import SCHEMA

    folder.mkdir(parents=True)
    right = sum(r["correct"] for r in rows)
    errors = [r["abs_error"] for r in rows]
    entry = {
        "name": "heldout",
        "benchmark": None,
        "scoring": "numeric-tolerance",
        "status": "complete",
        "evaluated": len(rows),
        "issues": [],
        "coverage": None,
        "generation": {"n": len(rows), "correct": right, "accuracy": right / len(rows), "mae": sum(errors) / len(rows)}
        | {"log_mae": sum(map(log_error, rows)) / len(rows)},
        "teacher_forced": None,
    }
    report = {"schema": SCHEMA, "name": name, "status": "complete", "model": {}, "settings": {}, "datasets": [entry]}
    report |= {"macc": None, "overall": {"generation": None, "teacher_forced": None}}
    (folder / "report.json").write_text(json.dumps(report))
    lines = [json.dumps({"dataset": "heldout", "id": i} | r) for i, r in enumerate(rows)]
    (folder / "generations.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def test_a_data_set_bolds_only_what_a_paired_test_resolves(tmp_path, capsys):
    # the same problems right (accuracy tied), DEL's numbers closer on all 12: MAE resolved by the sign test
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
    assert sign_test_p(12, 0) < 0.05 and table.count("**") == 4  # MAE and log-MAE, both 12 to 0


def test_the_sweeps_report_the_same_verdict_per_setting(tmp_path, gsm8k_references):
    """The demo's sweep and paper-regime report: each setting's runs (one per seed) against the reference's, as
    ``del-eval compare --baseline --candidate`` puts them; a setting whose runs kept no generations is left out."""
    from experiments.efficacy import compare_verdicts

    mle = _matrix_reports(tmp_path, gsm8k_references, "MLE", [set(range(10)), set(range(12))], 40)
    dels = _matrix_reports(tmp_path, gsm8k_references, "DEL", [set(range(20)), set(range(25))], 40)
    runs = [{"setting": "del:0", "seed": s, "generations": str(p / "generations.jsonl")} for s, p in enumerate(mle)]
    runs += [{"setting": "del:0.1", "seed": s, "generations": str(p / "generations.jsonl")} for s, p in enumerate(dels)]
    runs += [{"setting": "ntl_was:0.3", "seed": 0}]
    verdicts = compare_verdicts(runs, "del:0")
    assert list(verdicts) == ["del:0.1"]
    direct = compare_arms([load_report(p) for p in mle], [load_report(p) for p in dels], ("del:0", "del:0.1"))
    assert verdicts["del:0.1"]["line"] == direct["line"]
    pooled = 100 * ((20 + 25) / 80 - (10 + 12) / 80)  # each arm's accuracy pooled over its two seeds
    assert verdicts["del:0.1"]["line"].startswith(f"del:0.1 - del:0: {pooled:+.1f} GSM8K points [")
