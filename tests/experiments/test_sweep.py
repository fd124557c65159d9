"""The efficacy sweep's bookkeeping and statistics (``python -m experiments sweep``), without training."""

from __future__ import annotations

import argparse
import json
import math

import pytest

from del_plugin.evaluation.compare.verdict import compare_arms
from del_plugin.evaluation.reports.files import load_report
from del_plugin.evaluation.scoring.stats import holm, sign_test_p
from experiments.efficacy import (
    METRICS,
    aggregate,
    paired_comparisons,
    results_markdown,
)
from experiments.efficacy_plots import plot_sweep
from experiments.runs import (
    Setting,
    SweepMismatch,
    parse_setting,
    run_state,
    write_once,
)
from experiments.seed_stats import mean_ci
from experiments.sweep_plan import DEFAULT_SETTINGS, plan

from scored_reports import gsm8k_reference_answers, seed_reports


def test_mean_ci_by_hand():
    stats = mean_ci([1.0, 2.0, 3.0])
    assert stats["mean"] == 2.0 and stats["sd"] == 1.0 and stats["n"] == 3
    half = 4.3027 / math.sqrt(3)  # t(0.975, 2 df) = 4.30265, from a printed table
    assert stats["low"] == pytest.approx(2 - half, abs=1e-4) and stats["high"] == pytest.approx(2 + half, abs=1e-4)
    from scipy.stats import t

    assert stats["low"] == pytest.approx(2 - t.ppf(0.975, 2) / math.sqrt(3))  # sd 1
    assert mean_ci([5.0]) == {"n": 1, "mean": 5.0, "sd": None, "low": None, "high": None}
    assert mean_ci([None, 4.0, None])["mean"] == 4.0
    assert mean_ci([])["mean"] is None


def test_holm_by_hand():
    # sorted p 0.01, 0.02, 0.04 -> 3 * 0.01, max(0.03, 2 * 0.02), max(0.04, 1 * 0.04); returned in the input order
    assert holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    assert holm([0.5, 0.9]) == [1.0, 1.0]
    assert holm([]) == []


def test_settings_and_plan():
    assert parse_setting("del:0.3") == Setting("del", 0.3)
    assert parse_setting("dist2:1.28").folder == "dist2-a1.28"
    assert parse_setting("ntl_number:0.3") == Setting("ntl_number", 0.3)  # every digit criterion, number level too
    assert [parse_setting(s).key for s in DEFAULT_SETTINGS] == list(DEFAULT_SETTINGS)
    for bad in ("del", "mixce:0.5", "del:-1", "del:x"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_setting(bad)
    a, b = Setting("del", 0.0), Setting("del", 1.0)
    # seed-major: a stopped sweep has every setting on its first seeds
    assert plan([a, b], [7, 8]) == [(a, 7), (b, 7), (a, 8), (b, 8)]


def _record(run_dir, spec, state):
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "run.json").write_text(json.dumps({"setting": "del:0", "seed": 1, "spec": spec, "state": state}))


def test_resume_states(tmp_path):
    spec = {"criterion": "del", "alpha": 0.0, "seed": 1, "train": {"steps": 100}}
    run = tmp_path / "del-a0" / "seed1"
    assert run_state(run, spec) == "new"  # nothing there
    _record(run, spec, "new")
    assert run_state(run, spec) == "new"  # planned, or stopped during training
    _record(run, spec, "trained")
    assert run_state(run, spec) == "new"  # says trained but the adapter is gone: train again
    (run / "adapter").mkdir()
    (run / "adapter" / "adapter_config.json").write_text("{}")
    assert run_state(run, spec) == "trained"  # evaluate only
    _record(run, spec, "done")
    assert run_state(run, spec) == "trained"  # report missing: evaluate again, keep the adapter
    (run / "eval").mkdir()
    (run / "eval" / "report.json").write_text("{}")
    assert run_state(run, spec) == "done"
    with pytest.raises(SweepMismatch, match=r"train: \{'steps': 100\} -> \{'steps': 300\}"):
        run_state(run, spec | {"train": {"steps": 300}})
    base = tmp_path / "base"
    base_spec = {"criterion": None, "train": None}
    _record(base, base_spec, "new")
    assert run_state(base, base_spec) == "new"


def test_data_is_written_once(tmp_path):
    path = tmp_path / "data" / "train.jsonl"
    path.parent.mkdir()

    def writer(text):
        return lambda p: p.write_text(text)

    assert write_once(path, writer("a\n")) == path and path.read_text() == "a\n"
    assert write_once(path, writer("a\n")) == path  # the same problems: fine
    with pytest.raises(SweepMismatch, match="another --out"):
        write_once(path, writer("b\n"))
    assert path.read_text() == "a\n" and sorted(p.name for p in path.parent.iterdir()) == ["train.jsonl"]


def _generations(path, correct, abs_error, tf_correct, tf_entropy):
    with open(path, "w") as handle:
        for line, (c, e, k, h) in enumerate(zip(correct, abs_error, tf_correct, tf_entropy), 1):
            handle.write(
                json.dumps(
                    {
                        "dataset": "heldout",
                        "line": line,
                        "correct": c,
                        "abs_error": e,
                        "prediction": str(10 + e),
                        "reference": "10",
                        "tf_digits": 2,
                        "tf_digits_correct": k,
                        "tf_entropy_sum": h,
                    }
                )
                + "\n"
            )
    return str(path)


def _run(setting, seed, accuracy, entropy, generations=None):
    metrics = {m.key: 0.5 for m in METRICS} | {"accuracy": accuracy, "tf_entropy": entropy}
    return {
        "setting": setting,
        "seed": seed,
        "metrics": metrics,
        "generations": generations,
        "spec": {"criterion": "del", "alpha": float(setting.split(":")[1])},
        "timing": {"train_s": 60},
    }


def test_aggregate_and_paired_differences():
    runs = [_run("del:0", s, a, e) for s, a, e in ((1, 0.20, 1.4), (2, 0.22, 1.5), (3, 0.18, 1.3))]
    runs += [_run("del:1", s, a, e) for s, a, e in ((1, 0.25, 1.2), (2, 0.23, 1.3))]  # seed 3 not finished
    agg = aggregate(runs)
    assert list(agg) == ["del:0", "del:1"] and agg["del:1"]["seeds"] == [1, 2]
    assert agg["del:0"]["stats"]["accuracy"]["mean"] == pytest.approx(0.20)
    paired = paired_comparisons(runs, "del:0")
    assert list(paired) == ["del:1"] and paired["del:1"]["seeds"] == [1, 2]
    acc = paired["del:1"]["metrics"]["accuracy"]
    assert acc["per_seed"] == pytest.approx([0.05, 0.01])  # only the seeds both have
    assert acc["diff"]["mean"] == pytest.approx(0.03)
    half = 12.7062 * statistics_sd([0.05, 0.01]) / math.sqrt(2)
    assert acc["diff"]["low"] == pytest.approx(0.03 - half)
    assert "per_problem" not in acc  # no generations given


def statistics_sd(values):
    import statistics

    return statistics.stdev(values)


def test_per_problem_counts_pool_over_seeds(tmp_path):
    # reference and setting on two seeds, four problems each; lower is better for errors and entropy
    ref = [
        _generations(
            tmp_path / f"ref{s}.jsonl", [True, False, False, True], [0, 3, 5, 0], [2, 1, 0, 2], [1.0, 1.0, 1.0, 1.0]
        )
        for s in (1, 2)
    ]
    new = [
        _generations(
            tmp_path / "new1.jsonl", [True, True, False, False], [0, 0, 7, 1], [2, 2, 1, 1], [0.5, 1.0, 0.8, 1.2]
        ),
        _generations(
            tmp_path / "new2.jsonl", [True, True, True, True], [0, 0, 0, 0], [2, 2, 2, 2], [0.5, 0.5, 0.5, 0.5]
        ),
    ]
    runs = [_run("del:0", s, 0.5, 1.0, ref[s - 1]) for s in (1, 2)]
    runs += [_run("del:0.1", 1, 0.5, 0.875, new[0]), _run("del:0.1", 2, 1.0, 0.5, new[1])]
    paired = paired_comparisons(runs, "del:0")["del:0.1"]["metrics"]
    acc = paired["accuracy"]["per_problem"]
    # seed 1: setting alone right on problem 2, reference alone on 4; seed 2: setting alone right on 2 and 3
    assert (acc["problems"], acc["better"], acc["worse"], acc["tied"]) == (8, 3, 1, 4)
    assert acc["p"] == pytest.approx(sign_test_p(3, 1))
    mae = paired["mae"]["per_problem"]
    assert (mae["better"], mae["worse"], mae["tied"]) == (3, 2, 3)
    ent = paired["tf_entropy"]["per_problem"]
    assert (ent["better"], ent["worse"], ent["tied"]) == (6, 1, 1)
    tf = paired["tf_digit_accuracy"]["per_problem"]
    assert (tf["better"], tf["worse"], tf["tied"]) == (4, 1, 3)
    # Holm over the five tests of the table: never below the raw p
    assert all(r["per_problem"]["holm_p"] >= r["per_problem"]["p"] for r in paired.values())


def test_markdown_and_plot(tmp_path):
    runs = [
        _run(setting, s, 0.2 + 0.01 * s, 1.4 - 0.01 * s)
        for setting in ("del:0", "del:0.3", "ntl_was:0.3")
        for s in (1, 2, 3)
    ]
    for r in runs[-3:]:
        r["spec"]["criterion"] = "ntl_was"
    text = results_markdown(runs, "del:0", base={m.key: 0.1 for m in METRICS})
    assert "| del:0.3 | 3 | 22.0 [" in text and "| base model (no fine-tune) | - | 10.0 |" in text
    assert "## Paired against del:0, same seeds" in text and "| ntl_was:0.3 | 3 | +0.0 [+0.0, +0.0] |" in text
    assert text.count("| ntl_was:0.3 |") == 1 + 1 + 3  # per setting, paired, one row per run
    settings = [
        {"label": k, "criterion": k.split(":")[0], "alpha": float(k.split(":")[1])}
        for k in ("del:0", "del:0.3", "ntl_was:0.3")
    ]
    path = plot_sweep(runs, settings, "del:0", tmp_path / "plot.png", base=None)
    assert path.is_file() and path.stat().st_size > 10_000


def test_status_lists_the_plan_and_refuses_other_settings(tmp_path, capsys):
    from experiments.sweep import main

    args = ["--out", str(tmp_path), "--settings", "del:0.1", "--seeds", "1", "2", "--steps", "2", "--eval-size", "3"]
    assert main(args + ["--status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "new      base model",
        "new      del:0 seed 1",
        "new      del:0.1 seed 1",
        "new      del:0 seed 2",
        "new      del:0.1 seed 2",
    ]
    assert len((tmp_path / "data" / "train.jsonl").read_text().splitlines()) == 8  # steps x micro-batch
    assert len((tmp_path / "data" / "heldout.jsonl").read_text().splitlines()) == 3
    with pytest.raises(SystemExit, match="another --out"):
        main(args[:-2] + ["--eval-size", "4", "--status"])


def test_the_sweeps_files_from_its_finished_runs(tmp_path):
    """results.md, summary.json and runs.csv from hand-made finished runs: only the finished ones count, the base
    model's metrics kept apart, the times summed, the csv one row per run with the values as recorded."""
    from experiments.runs import write_record
    from experiments.sweep_plan import run_dir
    from experiments.sweep_report import write_results

    args = argparse.Namespace(
        threads=1, steps=2, micro_batch_size=4, learning_rate=1e-3, eval_size=3, max_new_tokens=8, data_seed=5
    )
    args.seeds, args.no_base, args.publish = [1], False, str(tmp_path / "published")
    reference, setting = parse_setting("del:0"), parse_setting("del:0.3")
    planned = [(None, None, {"train": None})]
    planned += [
        (s, 1, {"train": {"steps": 2}, "criterion": s.criterion, "alpha": s.alpha}) for s in (reference, setting)
    ]
    values = {"base": 0.1, "del:0": 0.25, "del:0.3": None}  # del:0.3: planned, not finished
    for s, seed, spec in planned:
        folder = run_dir(tmp_path, s, seed)
        label = "base" if s is None else s.key
        record = {"setting": label, "seed": seed, "spec": spec}
        if values[label] is None:
            write_record(folder, record | {"state": "new"})
            continue
        (folder / "adapter").mkdir(parents=True)
        (folder / "eval").mkdir()
        (folder / "eval" / "report.json").write_text("{}")
        metrics = {m.key: values[label] for m in METRICS}
        timing = {"train_s": 90.0, "eval_s": 30.5}
        write_record(folder, record | {"state": "done", "metrics": metrics, "timing": timing, "generations": "g"})

    files = write_results(tmp_path, args, ["--seeds", "1"], [reference, setting], planned, None)

    assert [f.name for f in files] == ["results.md", "summary.json", "runs.csv", "metrics_vs_alpha.png"]
    assert all(f.parent == tmp_path / "published" and f.is_file() for f in files)
    text = (tmp_path / "results.md").read_text()
    assert text.startswith("# Efficacy sweep on SmolLM2-135M-Instruct: del:0, del:0.3\n\nWritten by ")
    assert "`python -m experiments sweep --seeds 1` (" in text and "torch threads 1) from 1 of 2 runs finished" in text
    assert "their fine-tunes took 1 min 30 s and their evaluations 0 min 30 s" in text  # 30.5 s rounds to even
    assert "2 steps x 4 problems, lr 0.001 cosine, 3 held-out problems" in text and "seed 5;" in text
    assert "| base model (no fine-tune) | - | 10.0 |" in text and "| del:0 | 1 | 25.0 |" in text
    assert "| del:0.3 |" not in text
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["base"]["accuracy"] == 0.1 and summary["seeds"] == [1] and summary["paired"] == {}
    assert [r["setting"] for r in summary["runs"]] == ["del:0"]
    rows = (tmp_path / "runs.csv").read_text().splitlines()
    assert rows[0] == "setting,criterion,alpha,seed," + ",".join(m.key for m in METRICS) + ",train_s,eval_s"
    assert rows[1:] == ["del:0,del,0,1," + ",".join(["0.25"] * len(METRICS)) + ",90.0,30.5"]


def test_the_sweeps_report_the_same_verdict_per_setting(tmp_path):
    """The demo's sweep and paper-regime report: each setting's runs (one per seed) against the reference's, as
    ``del-eval compare --baseline --candidate`` puts them; a setting whose runs kept no generations is left out."""
    from experiments.efficacy import compare_verdicts

    gsm8k_references = gsm8k_reference_answers()

    mle = seed_reports(tmp_path, gsm8k_references, "MLE", [set(range(10)), set(range(12))], 40)
    dels = seed_reports(tmp_path, gsm8k_references, "DEL", [set(range(20)), set(range(25))], 40)
    runs = [{"setting": "del:0", "seed": s, "generations": str(p / "generations.jsonl")} for s, p in enumerate(mle)]
    runs += [{"setting": "del:0.1", "seed": s, "generations": str(p / "generations.jsonl")} for s, p in enumerate(dels)]
    runs += [{"setting": "ntl_was:0.3", "seed": 0}]
    verdicts = compare_verdicts(runs, "del:0")
    assert list(verdicts) == ["del:0.1"]
    direct = compare_arms([load_report(p) for p in mle], [load_report(p) for p in dels], ("del:0", "del:0.1"))
    assert verdicts["del:0.1"]["line"] == direct["line"]
    pooled = 100 * ((20 + 25) / 80 - (10 + 12) / 80)  # each arm's accuracy pooled over its two seeds
    assert verdicts["del:0.1"]["line"].startswith(f"del:0.1 - del:0: {pooled:+.1f} GSM8K points [")
