"""The demo's problem generator, its files, its Axolotl config, and the arithmetic of its findings."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import pytest

from del_plugin.evaluation.benchmarks.answers import extract_answer, find_numbers, is_correct
from del_plugin.evaluation.benchmarks.own_sets import read_eval_set
from del_plugin.evaluation.scoring.stats import sign_test_p, tango_interval
from experiments.findings import accuracy_difference_interval, findings_text, paired_lower, paired_outcomes
from experiments.problems import (
    TEMPLATES,
    format_number,
    generate_problems,
    make_splits,
    write_chat_jsonl,
    write_eval_jsonl,
)

# The arithmetic of each template, recomputed from the numbers as they appear in the question text.
ORACLES = {
    "add_items": lambda a, b: a + b,
    "spend_money": lambda have, spend: have - spend,
    "unit_price": lambda price, count: price * count,
    "share_equally": lambda total, friends: total / friends,
    "travel_distance": lambda speed, hours: speed * hours,
    "change": lambda count, price, bill: bill - count * price,
    "weekly_savings": lambda per_week, weeks: per_week * weeks,
}


@pytest.fixture(scope="module")
def splits():
    return make_splits(700, 300, seed=42)


def test_every_template_has_an_oracle():
    assert set(TEMPLATES) == set(ORACLES)


def test_answers_follow_from_the_question_text(splits):
    for problem in splits[0] + splits[1]:
        numbers = [value for value, _ in find_numbers(problem.question)]
        assert ORACLES[problem.kind](*numbers) == problem.answer, problem.question


def test_answer_text_is_read_back_and_scored_correct(splits):
    for problem in splits[0] + splits[1]:
        assert re.fullmatch(r"The answer is -?\d+(\.\d+)?", problem.answer_text)
        found = extract_answer(problem.answer_text)
        assert found.source == "marker" and found.value == problem.answer
        assert is_correct(found.value, problem.answer)


def test_mix_of_integer_and_decimal_answers_and_of_templates(splits):
    train = splits[0]
    decimals = sum("." in format_number(p.answer) for p in train)
    assert 0.25 * len(train) < decimals < 0.75 * len(train)
    assert {p.kind for p in train} == set(TEMPLATES)
    assert all(p.answer >= 0 for p in train)


def test_format_number():
    assert format_number(Decimal("12.50")) == "12.5"
    assert format_number(Decimal("1E+2")) == "100"
    assert format_number(Decimal("0.00")) == "0"
    assert format_number(Decimal("-3.10")) == "-3.1"


def test_seeded_and_distinct():
    assert generate_problems(50, seed=7) == generate_problems(50, seed=7)
    assert generate_problems(50, seed=7) != generate_problems(50, seed=8)
    problems = generate_problems(500, seed=3)
    assert len({p.key for p in problems}) == 500


def test_held_out_set_shares_no_problem_with_training(splits):
    train, held_out = splits
    assert len(train) == 700 and len(held_out) == 300
    assert not {p.key for p in train} & {p.key for p in held_out}
    assert not {p.question for p in train} & {p.question for p in held_out}


def test_files(tmp_path, splits):
    train, held_out = splits
    chat = write_chat_jsonl(tmp_path / "train.jsonl", train[:5])
    first = json.loads(chat.read_text().splitlines()[0])
    assert first == {
        "messages": [
            {"role": "user", "content": train[0].question},
            {"role": "assistant", "content": train[0].answer_text},
        ]
    }
    eval_set = read_eval_set(write_eval_jsonl(tmp_path / "heldout.jsonl", held_out))
    assert not eval_set.issues
    assert [e.reference for e in eval_set.examples] == [p.answer for p in held_out]
    assert [e.solution for e in eval_set.examples] == [p.answer_text for p in held_out]


def test_axolotl_accepts_the_demo_configs(tmp_path):
    from experiments.training import TrainSettings, axolotl_config
    from tools.assets import smollm2_dir

    from axolotl_helpers import load_config

    train_file = write_chat_jsonl(tmp_path / "train.jsonl", generate_problems(8, seed=0))
    settings = TrainSettings(steps=2, micro_batch_size=2)
    mle = axolotl_config(smollm2_dir(), train_file, tmp_path / "run", 0.0, settings)
    dele = axolotl_config(smollm2_dir(), train_file, tmp_path / "run", 0.1, settings)
    # the two runs differ in del_alpha only: same seed, data, order and everything else
    assert {k for k in mle if mle[k] != dele[k]} == {"del_alpha"}
    cfg = load_config(mle)  # Axolotl's own validation (MLE = the plugin listed with del_alpha 0)
    assert cfg.del_alpha == 0.0 and "del_plugin.DELPlugin" in cfg.plugins
    assert cfg.adapter == "lora" and cfg.max_steps == 2 and cfg.seed == settings.seed
    assert cfg.datasets[0]["type"] == "chat_template"


def test_sign_test_against_hand_worked_values():
    assert sign_test_p(0, 0) == 1.0
    assert sign_test_p(0, 6) == pytest.approx(2 / 64)
    assert sign_test_p(5, 1) == pytest.approx(2 * 7 / 64)  # (C(6,0) + C(6,1)) / 2^6, both tails
    assert sign_test_p(3, 3) == 1.0


def test_paired_outcomes(tmp_path):
    def write(name, outcomes):
        path = tmp_path / name
        path.write_text(
            "".join(json.dumps({"dataset": "d", "line": i + 1, "correct": c}) + "\n" for i, c in enumerate(outcomes))
        )
        return path

    a = write("a.jsonl", [True, True, False, False, True])
    b = write("b.jsonl", [True, False, True, False, True])
    assert paired_outcomes(a, b) == {"problems": 5, "both": 2, "only_a": 1, "only_b": 1, "neither": 1}


def _generations(path, correct, abs_error, tf_entropy):
    path.write_text(
        "".join(
            json.dumps(
                {"dataset": "d", "line": i + 1, "correct": c, "abs_error": e, "tf_digits": 2, "tf_entropy_sum": 2 * h}
            )
            + "\n"
            for i, (c, e, h) in enumerate(zip(correct, abs_error, tf_entropy))
        )
    )
    return path


def _report(correct, n, mae, entropy):
    return {
        "overall": {
            "generation": {"n": n, "accuracy": correct / n, "mae": mae, "log_mae": mae / 10},
            "teacher_forced": {"mean_entropy": entropy, "digit_accuracy": 0.5},
        }
    }


def test_paired_lower(tmp_path):
    a = _generations(tmp_path / "a.jsonl", [True] * 4, [1.0, 2.0, None, 3.0], [1.0, 1.0, 1.0, 1.0])
    b = _generations(tmp_path / "b.jsonl", [True] * 4, [2.0, 2.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0])
    assert paired_lower(a, b, lambda r: r["abs_error"]) == {"problems": 3, "a_lower": 1, "b_lower": 1, "equal": 1}


@pytest.mark.parametrize("del_right", [12, 1])
def test_findings_follow_the_numbers(tmp_path, del_right):
    n = 20
    mle_correct = [i < 1 for i in range(n)]  # MLE right on problem 1 only
    del_correct = [i < del_right for i in range(n)]
    generations = {
        "base": _generations(tmp_path / "base.jsonl", [False] * n, [9.0] * n, [2.0] * n),
        "MLE": _generations(tmp_path / "mle.jsonl", mle_correct, [5.0] * n, [1.5] * n),
        "DEL": _generations(tmp_path / "del.jsonl", del_correct, [4.0] * n, [1.0] * n),
    }
    reports = {"base": _report(0, n, 9.0, 2.0), "MLE": _report(1, n, 5.0, 1.5), "DEL": _report(del_right, n, 4.0, 1.0)}
    text = " ".join(findings_text(reports, generations, alpha=0.1))
    if del_right == 12:  # 11 problems only DEL got right, none only MLE: p = 2 / 2^11
        # compare's interval for one run an arm (Tango's, tested against its published example in
        # tests/evaluation/test_compare_verdict.py), which excludes 0 as the exact test rejects
        interval = accuracy_difference_interval(generations["MLE"], generations["DEL"])
        assert interval == tango_interval(11, 0, n)
        low, high = (100 * x for x in interval)
        assert 0 < low < 55 < high
        assert f"DEL is better than MLE on accuracy (+55.0 points, 95 % interval [{low:+.1f}, {high:+.1f}])" in text
        assert f"p = {2 / 2**11:.3f}" in text
    else:
        assert "no significant difference" in text and "DEL is better" not in text
    assert "DEL's error is smaller on 20, MLE's on 0" in text
    assert "DEL's is lower than MLE's" in text and "lower on 20 of 20" in text


def test_the_demo_report_from_its_run(tmp_path, monkeypatch):
    """results.md and summary.json from a hand-made run: the set-up from the settings, the findings as computed from
    the reports, del-eval compare's table less its title with this machine's paths hidden, the plots that exist."""
    import argparse
    from dataclasses import asdict
    from pathlib import Path

    from experiments.demo_report import DemoRun, write_results
    from experiments.training import TrainSettings

    cache = tmp_path / "cache"
    monkeypatch.setenv("DEL_PLUGIN_CACHE", str(cache))
    out = tmp_path / "demo"
    comparison = out / "comparison"
    comparison.mkdir(parents=True)
    (comparison / "comparison.md").write_text(
        "# del-eval compare\n\n| model | path |\n|---|---|\n"
        f"| base | {cache}/smollm2 |\n| DEL | {Path.home()}/adapter |\n"
    )
    (comparison / "place_accuracy.png").write_bytes(b"png")
    n = 4
    generations = {
        "base": _generations(tmp_path / "base.jsonl", [False] * n, [9.0] * n, [2.0] * n),
        "MLE": _generations(tmp_path / "mle.jsonl", [True, False, False, False], [5.0] * n, [1.5] * n),
        "DEL": _generations(tmp_path / "del.jsonl", [True, True, False, False], [4.0] * n, [1.0] * n),
    }
    reports = {"base": _report(0, n, 9.0, 2.0), "MLE": _report(1, n, 5.0, 1.5), "DEL": _report(2, n, 4.0, 1.0)}
    reports["DEL"]["overall"]["teacher_forced"]["entropy_histogram"] = [1, 2]
    args = argparse.Namespace(alpha=0.1, eval_size=n, max_new_tokens=16)
    train = TrainSettings(steps=2, micro_batch_size=4, seed=7)
    timing = {"data": 0.5, "train MLE": 61.0}
    run = DemoRun(
        args, ["--steps", "2"], train, reports, generations, {"MLE": [], "DEL": []}, timing, 125.0, 99.0, (0.5, 0, 0)
    )

    findings, files = write_results(out, run)

    assert findings == findings_text(reports, generations, 0.1)
    assert files == [comparison / "results.md", comparison / "summary.json", comparison / "place_accuracy.png"]
    text = (comparison / "results.md").read_text()
    assert text.startswith(
        "# DEL demo: MLE vs DEL on SmolLM2-135M-Instruct\n\nMade by `python -m experiments --steps 2`"
    )
    assert "Wall time 2 min 05.0 s (model set-up excluded), CPU time 1 min 39.0 s" in text
    assert "Stages: data 0 min 00.5 s, train MLE 1 min 01.0 s." in text
    assert "- Data: 8 generated arithmetic word problems for training" in text and f"{n} held-out problems" in text
    assert "2 steps x 4 problems, lr 0.001 (cosine), seed 7" in text and "`del_alpha: 0.1`" in text
    assert "\n".join(f"- {line}" for line in findings) in text
    assert "| base | $DEL_PLUGIN_CACHE/smollm2 |\n| DEL | ~/adapter |" in text and "del-eval compare" not in text
    assert text.endswith("## Plots\n\n![Per-place digit accuracy](place_accuracy.png)\n")
    summary = json.loads((comparison / "summary.json").read_text())
    assert summary["command"] == "python -m experiments --steps 2" and summary["stages_s"] == timing
    assert (summary["wall_s"], summary["cpu_s"]) == (125.0, 99.0)
    assert summary["settings"] == {"train": asdict(train), "alpha": 0.1, "eval_size": n, "max_new_tokens": 16}
    assert summary["findings"] == findings and list(summary["models"]) == ["base", "MLE", "DEL"]
    assert summary["models"]["DEL"]["teacher_forced"] == {"mean_entropy": 1.0, "digit_accuracy": 0.5}


@pytest.fixture(scope="module")
def gsm8k_references():
    from del_plugin.evaluation import load_benchmark

    return [p.reference for p in load_benchmark("gsm8k").problems]


def _scored_run(folder, references, right: int, ids=range(20)) -> dict:
    """A run del-eval scored on GSM8K's problems ``ids``, right on the first ``right`` of them, with its path as the
    demo records it (compare finds the generations beside it)."""
    from del_plugin.evaluation import score_predictions

    outputs = [{"id": i, "output": f"The answer is {references[i] if i < right else references[i] + '1'}"} for i in ids]
    report = score_predictions("gsm8k", outputs, folder, name=folder.name)
    report["_path"] = str(folder / "report.json")
    return report


@pytest.mark.parametrize("refusal", ["same generations", "other problems"])
def test_the_demo_says_when_compare_refuses_to_pair_mle_and_del(tmp_path, gsm8k_references, refusal):
    """The real del-eval compare refuses to pair the demo's two fine-tunes (DEL's generations MLE's word for word, as a
    DEL weight too small to change a greedy answer gives; or DEL scored on other problems): the demo still writes
    compare's side-by-side tables, without a verdict, and says why in compare's own "cannot be tested" line, in
    results.md and summary.json. Where compare can pair them, the verdict is there and no line."""
    import argparse

    from experiments.demo_report import DemoRun, write_results
    from experiments.pipeline import compare_demo_runs
    from experiments.training import TrainSettings

    runs = tmp_path / "eval"
    reports = {
        "base": _scored_run(runs / "base", gsm8k_references, 3),
        "MLE": _scored_run(runs / "MLE", gsm8k_references, 8),
        "DEL": _scored_run(runs / "DEL", gsm8k_references, 12),
    }
    paired, line = compare_demo_runs(reports, tmp_path / "paired")
    assert line is None and "DEL - MLE: " in paired.read_text() and "cannot be tested" not in paired.read_text()
    assert json.loads((tmp_path / "paired" / "comparison.json").read_text())["verdict"]["sets"]

    ids = range(20) if refusal == "same generations" else range(1, 21)
    reports["DEL"] = _scored_run(runs / "DEL again", gsm8k_references, 8, ids)
    out = tmp_path / "demo"
    comparison, line = compare_demo_runs(reports, out / "comparison")
    assert line.startswith("DEL - MLE: cannot be tested: ")
    if refusal == "same generations":
        assert f"{runs / 'DEL again' / 'report.json'}: the same run as {runs / 'MLE' / 'report.json'}" in line
    else:
        assert "--intersection" in line
    text = comparison.read_text()
    assert "No verdict" in text and "| MLE | 40.0% |" in text and "| DEL | " in text
    assert json.loads((out / "comparison" / "comparison.json").read_text()).get("verdict") is None

    generations = {k: Path(r["_path"]).parent / "generations.jsonl" for k, r in reports.items()}
    args = argparse.Namespace(alpha=0.1, eval_size=20, max_new_tokens=16)
    histories = {"MLE": [], "DEL": []}
    run = DemoRun(args, [], TrainSettings(steps=2), reports, generations, histories, {}, 1.0, 1.0, (0, 0, 0), line)
    write_results(out, run)
    assert f"\n{line}\n\n" in (out / "comparison" / "results.md").read_text()
    assert json.loads((out / "comparison" / "summary.json").read_text())["verdict_refused"] == line
