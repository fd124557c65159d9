"""``python -m experiments paper``: its plan and time estimate (arithmetic by hand), the Axolotl configs of its
regimes, its resumable bookkeeping and report on hand-made runs, and the whole path end to end on a tiny model."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from experiments.paper_data import mathinstruct_answer
from experiments.paper_plan import (
    CPU_RATES,
    CPU_TOKENS_PER_ROW,
    GPU_RATES,
    PAPER_DEL_WEIGHT,
    PROFILES,
    REGIMES,
    SMOLLM2_TOKENS_PER_ROW,
    Rates,
    estimate,
    planned_runs,
    smoke_profile,
)
from experiments.paper_runs import eval_sets
from experiments.paper_worker import axolotl_config
from experiments.runs import run_state, write_record

from repo import REPO


def test_gsm8k_solutions_in_mathinstruct_form():
    answer = (
        "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
        "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"
    )
    assert mathinstruct_answer(answer) == (
        "Natalia sold 48/2 = 24 clips in May.\n"
        "Natalia sold 48+24 = 72 clips altogether in April and May.\nThe answer is 72"
    )
    assert mathinstruct_answer("5 + 5 = 10\n#### 1,080") == "5 + 5 = 10\nThe answer is 1,080"
    with pytest.raises(ValueError, match="no '####'"):
        mathinstruct_answer("The answer is 3")


def test_the_paper_weight_is_train_qwen_converted():
    assert PAPER_DEL_WEIGHT == pytest.approx(0.01 * 32 * 4)  # alpha x accumulation x GPUs (docs/examples.md)


def test_runs_are_planned_regime_by_regime_and_seed_by_seed():
    profile = PROFILES["cpu"]
    runs = planned_runs(profile)
    assert runs[:4] == [
        ("paper", "del:0", 42),
        ("paper", f"del:{PAPER_DEL_WEIGHT:g}", 42),
        ("paper", "del:0", 43),
        ("paper", f"del:{PAPER_DEL_WEIGHT:g}", 43),
    ]
    assert runs[6:8] == [("users", "del:0", 42), ("users", "del_centered:0.1", 42)]
    assert len(runs) == 12
    for name, p in PROFILES.items():  # every profile starts each regime with MLE, and the paper's DEL first
        assert p.settings["paper"][:2] == ("del:0", f"del:{PAPER_DEL_WEIGHT:g}"), name


def test_the_estimate_by_hand():
    profile = replace(
        smoke_profile(PROFILES["cpu"]),
        train_rows=100,
        epochs=2,
        settings={"paper": ("del:0", "del:1.28"), "users": ("del:0", "del_centered:0.1")},
        seeds=(42,),
        eval_limit=5,
        eval_batch_size=4,
        max_new_tokens=100,
        budget_s=None,
    )
    rates = Rates(
        full_tokens_per_s=1000,
        adapter_tokens_per_s=500,
        decode_step_s=0.01,
        teacher_forced_problems_per_s=4,
        process_start_s=2,
    )
    result = estimate(profile, rates, tokens_per_row=50, sets={"a": 10, "b": 3})
    # 100 rows x 2 epochs x 50 tokens = 10,000 tokens: 10 s full, 20 s adapter; 2 runs of each
    assert result["tokens_per_run"] == 10_000
    assert result["train_full_s"] == 10 and result["train_adapter_s"] == 20
    # per evaluation: sets of min(10, 5) + min(3, 5) = 8 problems in ceil(5/4) + ceil(3/4) = 3 batches:
    # 3 x 100 steps x 0.01 s = 3 s decoding, 8 / 4 = 2 s teacher-forced
    assert result["evaluation_s"] == pytest.approx(5)
    # 2 x 10 + 2 x 20 training, 5 evaluations (4 runs and the base model) x 5 s, 5 process starts x 2 s
    assert result["total_s"] == pytest.approx(20 + 40 + 25 + 10)
    assert result["lines"][-1] == "total: 95 s = 1.6 min"


def test_the_gpu_profile_fits_its_budget():
    gpu = PROFILES["gpu"]
    result = estimate(gpu, GPU_RATES, tokens_per_row=SMOLLM2_TOKENS_PER_ROW)
    assert result["total_s"] <= gpu.budget_s
    assert result["runs"] == len(planned_runs(gpu)) >= 6  # MLE and the paper's DEL on three seeds at least
    assert set(GPU_RATES.source) == {
        "full_tokens_per_s",
        "adapter_tokens_per_s",
        "decode_step_s",
        "teacher_forced_problems_per_s",
        "process_start_s",
    }


def test_tokens_per_row_is_smollm2s_count_of_the_formatted_rows():
    """The constant the GPU estimate uses: the mean tokens of a GSM8K training row as the paper command writes it
    (alpaca prompt, question, MathInstruct-form answer, EOS), counted by SmolLM2's tokenizer on all 7,473 rows."""
    from transformers import AutoTokenizer

    from experiments.paper_data import training_rows
    from tools.assets import smollm2_dir

    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_dir()))
    rows = training_rows(replace(PROFILES["gpu"], train_rows=None, sequence_len=4096), tokenizer, data_seed=42)
    assert len(rows) == 7473
    from del_plugin.evaluation.run.generation import ALPACA_PROMPT

    texts = [ALPACA_PROMPT.format(question=r["instruction"]) + r["output"] for r in rows]
    lengths = [len(ids) + 1 for ids in tokenizer(texts).input_ids]  # + EOS
    assert sum(lengths) / len(lengths) == pytest.approx(SMOLLM2_TOKENS_PER_ROW, abs=0.05)


def test_the_smoke_path_of_the_gpu_profile():
    smoke = smoke_profile(PROFILES["gpu"])
    assert smoke.device == "cpu" and smoke.seeds == (42,) and smoke.train_rows == 8 and smoke.epochs == 1
    assert smoke.settings == {k: v[:2] for k, v in PROFILES["gpu"].settings.items()}
    assert [run[2] for run in planned_runs(smoke)] == [42] * 4
    assert REGIMES["users"].on("cpu").adapter == "lora" and REGIMES["users"].on("cuda").adapter == "qlora"


def test_one_way_to_a_smoke_run_the_profiles_path_shrunk():
    """`--smoke` shrinks any profile; there is no separate smoke profile to drift from it."""
    from experiments.paper import build_parser

    assert sorted(PROFILES) == ["cpu", "gpu"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--profile", "smoke"])
    for name, profile in PROFILES.items():
        smoke = smoke_profile(profile)
        assert (smoke.name, smoke.train_rows, smoke.epochs, smoke.eval_limit) == (f"{name}-smoke", 8, 1, 2)
        assert smoke.settings == {k: v[:2] for k, v in profile.settings.items()}


def test_the_estimate_names_the_machine_it_is_for(capsys):
    from experiments.paper import main

    for argv, profile in ((["--profile", "cpu"], PROFILES["cpu"]), (["--profile", "gpu", "--smoke"], None)):
        assert main([*argv, "--estimate"]) == 0
        out = capsys.readouterr().out
        name = "cpu" if profile else "gpu-smoke"
        description = profile.description if profile else smoke_profile(PROFILES["gpu"]).description
        assert out.startswith(f"{name} profile, on this machine's CPU: {description}. At the rates measured on a")
        assert "profile on one H200" not in out and "H200" not in out
        # the CPU estimate, worked out at the CPU's rates: the same lines as estimate() gives
        cpu_profile = profile or smoke_profile(PROFILES["gpu"])
        lines = estimate(cpu_profile, CPU_RATES, tokens_per_row=CPU_TOKENS_PER_ROW)["lines"]
        assert out.splitlines()[1:] == ["  " + line for line in lines]
    assert main(["--profile", "gpu", "--estimate"]) == 0
    assert capsys.readouterr().out.startswith("gpu profile on one H200 (GPU_RATES")


def test_sets_that_are_not_the_authors_are_refused_before_training(tmp_path):
    from experiments.paper import main

    from paper_sets import write_benchmark_dir

    sets = write_benchmark_dir(tmp_path / "sets")  # the tests' stand-ins, not the authors' files
    with pytest.raises(SystemExit) as stopped:
        main(["--smoke", "--benchmark-dir", str(sets), "--out", str(tmp_path / "out")])
    message = str(stopped.value)
    assert message.startswith(f"error: simuleq: {sets}/simuleq/simuleq.json is not the authors' file (sha256 ")
    assert message.endswith("comparable with the paper's; this demo scores the authors' files only")
    assert not (tmp_path / "out").exists()  # nothing trained or written


def test_every_demo_command_and_option_is_in_its_help(capsys):
    """`python -m experiments --help` names the paper and sweep commands; every option of the three commands
    has a help text."""
    from experiments import paper, pipeline, sweep

    for parser in (pipeline.build_parser(), sweep.build_parser(), paper.build_parser()):
        for action in parser._actions:
            assert action.help, (parser.prog, action.option_strings)
    with pytest.raises(SystemExit) as stop:
        pipeline.main(["--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m experiments [sweep | paper] [options]")
    for name in ("sweep", "paper"):
        assert f"python -m experiments {name} [--help]" in out


def _spec(regime: str, device: str, criterion: str = "del", alpha: float = 1.28) -> dict:
    return {
        "regime": regime,
        "criterion": criterion,
        "alpha": alpha,
        "seed": 43,
        "train": {
            "device": device,
            "epochs": 2,
            "sequence_len": 512,
            "micro_batch_size": 4,
            "gradient_accumulation_steps": 2,
        },
    }


def test_axolotl_configs_of_the_regimes(tmp_path):
    full = axolotl_config(tmp_path / "m", tmp_path / "t.jsonl", tmp_path / "run", _spec("paper", "cpu"))
    assert "adapter" not in full and full["learning_rate"] == 5e-6 and full["num_epochs"] == 2
    assert (full["lr_scheduler"], full["warmup_ratio"], full["weight_decay"]) == ("cosine", 0.03, 0.0)
    assert full["train_on_inputs"] is False and full["sample_packing"] is False and full["bf16"] is True
    assert full["plugins"] == ["del_plugin.DELPlugin", "experiments.precision.Float32MasterWeightsPlugin"]
    assert (full["del_alpha"], full["seed"], full["gradient_accumulation_steps"]) == (1.28, 43, 2)
    assert full["optimizer"] == "adamw_torch" and "del_criterion" not in full  # CPU keys
    assert full["datasets"][0]["type"] == "alpaca"

    qlora = axolotl_config(
        tmp_path / "m", tmp_path / "t.jsonl", tmp_path / "run", _spec("users", "cuda", "del_centered", 0.1)
    )
    assert qlora["adapter"] == "qlora" and qlora["load_in_4bit"] is True and qlora["learning_rate"] == 2e-4
    assert qlora["bnb_config_kwargs"] == {"bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True}
    assert (qlora["lora_r"], qlora["lora_alpha"], qlora["lora_dropout"]) == (32, 16, 0.0)
    assert qlora["optimizer"] == "paged_adamw_8bit" and qlora["plugins"] == ["del_plugin.DELPlugin"]
    assert qlora["del_criterion"] == "del_centered" and qlora["tf32"] is True
    # the QLoRA example the regime follows sets the same schedule
    import yaml

    example = yaml.safe_load((REPO / "examples" / "qwen2.5-7b" / "qlora-24gb.yml").read_text())
    for key in ("learning_rate", "lr_scheduler", "warmup_ratio", "weight_decay", "num_epochs", "lora_r", "lora_alpha"):
        assert qlora[key if key != "num_epochs" else "num_epochs"] == example[key], key

    lora = axolotl_config(tmp_path / "m", tmp_path / "t.jsonl", tmp_path / "run", _spec("users", "cpu"))
    assert lora["adapter"] == "lora" and "load_in_4bit" not in lora
    assert lora["plugins"][-1] == "experiments.precision.Float32MasterWeightsPlugin"


def test_the_precision_plugin_refuses_what_it_cannot_serve():
    from experiments.precision import Float32MasterWeightsPlugin

    plugin = Float32MasterWeightsPlugin()
    plugin.register({"bf16": True})
    with pytest.raises(ValueError, match="set `bf16: true`"):
        plugin.register({"bf16": False})
    with pytest.raises(ValueError, match="QLoRA"):
        plugin.register({"bf16": True, "adapter": "qlora", "load_in_4bit": True})


def test_the_sets_scored(tmp_path):
    assert eval_sets(None) == ["gsm8k", "math", "svamp", "aqua", "mmlu_math"]
    assert eval_sets(str(tmp_path)) == ["gsm8k", "math", "svamp", "simuleq", "aqua", "sat", "mmlu_math"]


def test_a_run_is_trained_once_and_rescored_when_the_evaluation_changes(tmp_path):
    spec, evaluation = {"train": {"device": "cpu"}, "seed": 1}, {"sets": ["gsm8k"], "limit": 10}
    run = tmp_path / "run"
    assert run_state(run, spec, evaluation) == "new"
    write_record(run, {"spec": spec, "state": "new"})
    assert run_state(run, spec, evaluation) == "new"  # stopped while training
    write_record(run, {"spec": spec, "state": "trained", "artefact": "trained/config.json"})
    assert run_state(run, spec, evaluation) == "new"  # the record says trained, but the model is not there
    (run / "trained").mkdir()
    (run / "trained" / "config.json").write_text("{}")
    assert run_state(run, spec, evaluation) == "trained"
    write_record(run, {"spec": spec, "state": "done", "artefact": "trained/config.json", "evaluated_with": evaluation})
    assert run_state(run, spec, evaluation) == "trained"  # no report
    (run / "eval").mkdir()
    (run / "eval" / "report.json").write_text("{}")
    assert run_state(run, spec, evaluation) == "done"
    assert run_state(run, spec, evaluation | {"limit": 20}) == "trained"  # scored again, not trained again


def _report(accuracies: dict[str, float], tf_accuracy: float) -> dict:
    return {
        "datasets": [{"benchmark": k, "generation": {"accuracy": v}} for k, v in accuracies.items()],
        "macc": {"value": sum(accuracies.values()) / len(accuracies)},
        "overall": {
            "generation": {"mae": 3.0, "log_mae": 0.5},
            "teacher_forced": {"digit_accuracy": tf_accuracy, "mean_entropy": 1.0},
        },
    }


def test_the_report_pairs_each_setting_with_mle_on_the_same_seed(tmp_path):
    from experiments.efficacy import run_metrics
    from experiments.paper_metrics import metrics_for
    from experiments.paper_report import write_report
    from experiments.paper_runs import eval_spec_for, new_record, plan_runs

    sets = ["gsm8k", "aqua"]
    profile = replace(smoke_profile(PROFILES["cpu"]), settings={"paper": ("del:0", "del:1.28")}, seeds=(42, 43))
    runs = plan_runs(profile, "tiny", 42, "0" * 64, eval_spec_for(profile, None) | {"sets": sets})
    # MLE / DEL accuracies on GSM8K and AQuA, TF digit accuracy; DEL - MLE per seed: GSM8K -0.1 and -0.3,
    # AQuA +0.2 and 0.0, so mACC -> (-0.1 + 0.2) / 2 = +0.05 and (-0.3 + 0) / 2 = -0.15
    numbers = {
        ("del:0", 42): ({"gsm8k": 0.5, "aqua": 0.2}, 0.7),
        ("del:1.28", 42): ({"gsm8k": 0.4, "aqua": 0.4}, 0.6),
        ("del:0", 43): ({"gsm8k": 0.6, "aqua": 0.3}, 0.8),
        ("del:1.28", 43): ({"gsm8k": 0.3, "aqua": 0.3}, 0.6),
    }
    from experiments.paper_runs import run_dir as _run_dir

    for run in runs:
        run_dir = _run_dir(tmp_path, run["regime"], run["setting"], run["seed"])
        key = ("base", None) if run["setting"] is None else (run["setting"].key, run["seed"])
        accuracies, tf = numbers.get(key, ({"gsm8k": 0.1, "aqua": 0.25}, 0.5))
        (run_dir / "eval").mkdir(parents=True)
        (run_dir / "eval" / "report.json").write_text("{}")
        (run_dir / "trained").mkdir()
        (run_dir / "trained" / "config.json").write_text("{}")
        write_record(
            run_dir,
            new_record(run)
            | {
                "evaluated_with": run["eval_spec"],
                "state": "done",
                "artefact": "trained/config.json",
                "metrics": run_metrics(_report(accuracies, tf), metrics_for(sets)),
                "generations": "eval/generations.jsonl",
                "timing": {"train_s": 60.0, "eval_s": 30.0},
                "training": {"rows": 8, "steps": 2, "tokens": 3000, "tokens_per_s": 50.0},
            },
        )
        (run_dir / "eval" / "generations.jsonl").write_text("")
    files = write_report(tmp_path, profile, runs, ["--smoke"], None)
    text = (tmp_path / "results.md").read_text()
    assert [f.name for f in files] == ["results.md", "summary.json", "runs.csv", "paired_paper.png"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    paired = summary["regimes"]["paper"]["paired"]["del:1.28"]["metrics"]
    assert paired["acc_gsm8k"]["per_seed"] == pytest.approx([-0.1, -0.3])
    assert paired["macc"]["per_seed"] == pytest.approx([0.05, -0.15])
    assert paired["macc"]["diff"]["mean"] == pytest.approx(-0.05)
    half = 12.7062 * math.sqrt(((0.05 + 0.05) ** 2 + (-0.15 + 0.05) ** 2) / 1) / math.sqrt(2)
    assert paired["macc"]["diff"]["high"] == pytest.approx(-0.05 + half)
    assert paired["tf_digit_accuracy"]["per_seed"] == pytest.approx([-0.1, -0.2])
    assert "| del:1.28 | 2 | -20.0 [" in text  # GSM8K: mean of -10 and -30 points
    assert "| base model (no fine-tune) | - | 10.0 | 25.0 | 17.5 |" in text  # GSM8K, AQuA, mACC
    assert "| paper | del:1.28 | 43 | 8 | 2 | 3,000 | 1 min 00 s | 50.0 | 0 min 30 s |" in text
    # del-eval compare's verdict per setting; these hand-made reports hold no problems, and the report says so
    assert "### Accuracy, del:1.28 against del:0: `del-eval compare --baseline --candidate`" in text
    assert "del:1.28 - del:0: cannot be tested: " in text


@pytest.mark.e2e
def test_the_gpu_profile_smoke_path_end_to_end_and_resumed(tmp_path):
    """``--profile gpu --smoke`` on a tiny model: both regimes (the users' QLoRA as LoRA on this CPU) train through
    Axolotl and the plugin, are scored on the five shipped sets, and reported; run again, nothing is redone."""
    from tools.assets import tiny_model_dir

    model = tiny_model_dir("llama-spm")
    out = tmp_path / "paper"
    command = [sys.executable, "-m", "experiments", "paper", "--profile", "gpu", "--smoke"]
    command += ["--model", str(model), "--out", str(out), "--threads", "1"]
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "5 runs planned (gpu-smoke profile), 5 to do" in done.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert {(r["regime"], r["setting"]) for r in summary["runs"]} == {
        ("paper", "del:0"),
        ("paper", f"del:{PAPER_DEL_WEIGHT:g}"),
        ("users", "del:0"),
        ("users", "del_centered:0.1"),
    }
    for r in summary["runs"]:
        assert r["training"]["rows"] == 8 and r["training"]["steps"] == 2 and r["training"]["tokens"] > 0
        assert r["training"]["tokens_per_s"] > 0 and r["metrics"]["macc"] is not None
    users = json.loads((out / "runs" / "users" / "del-a0" / "seed42" / "config.json").read_text())
    assert users["adapter"] == "lora"  # QLoRA needs CUDA
    paper = out / "runs" / "paper" / "del-a1.28" / "seed42"
    assert json.loads((paper / "config.json").read_text())["del_alpha"] == PAPER_DEL_WEIGHT
    log = json.loads((paper / "train_log.json").read_text())
    assert any(h.get("del_loss", 0) > 0 for h in log)  # DEL was on, through the plugin
    report = json.loads((paper / "eval" / "report.json").read_text())
    assert [d["benchmark"] for d in report["datasets"]] == ["gsm8k", "math", "svamp", "aqua", "mmlu_math"]
    text = (out / "results.md").read_text()
    assert "mACC, 5 of 7 sets (%)" in text and "paired against del:0" in text
    before = {p: p.stat().st_mtime for p in out.glob("runs/**/run.json")}
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "5 runs planned (gpu-smoke profile), 0 to do" in again.stdout
    assert {p: p.stat().st_mtime for p in out.glob("runs/**/run.json")} == before


def test_the_estimate_command_and_every_setting(capsys):
    from experiments.paper import main
    from experiments.paper_plan import ALL_PAPER_SETTINGS

    assert main(["--profile", "gpu", "--estimate"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:] == ["  " + line for line in estimate(PROFILES["gpu"], GPU_RATES, SMOLLM2_TOKENS_PER_ROW)["lines"]]
    # every setting in the paper's regime, on the seeds asked for: 6 settings x 2 seeds full fine-tunes
    assert main(["--profile", "gpu", "--all-settings", "--seeds", "1", "2", "--estimate"]) == 0
    assert "x 12 runs" in capsys.readouterr().out.splitlines()[2]
    assert len(ALL_PAPER_SETTINGS) == 6 and ALL_PAPER_SETTINGS[:2] == ("del:0", f"del:{PAPER_DEL_WEIGHT:g}")


def test_the_help_is_plain_text(capsys):
    """The description is the module's docstring, without its reStructuredText markup."""
    from experiments.paper import main

    with pytest.raises(SystemExit) as done:
        main(["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0
    assert "``" not in out and ":mod:" not in out and "our users" not in out
    assert "for MLE (del_alpha: 0) and the DEL settings of a profile" in out


def test_the_cpu_estimate_is_near_the_cpu_profiles_measured_time():
    """CPU_RATES are medians of the cpu profile's runs; the profile as a whole took 1 h 08 min of training and 54 min
    of scoring (docs/efficacy.md): the estimate lands within 15 % of that."""
    measured = (68 + 54) * 60
    assert "1 h 08 min of training and 54 min of\nscoring" in (REPO / "docs" / "efficacy.md").read_text()
    total = estimate(PROFILES["cpu"], CPU_RATES, tokens_per_row=CPU_TOKENS_PER_ROW)["total_s"]
    assert abs(total - measured) / measured < 0.15, total
    # tokens per row, recounted from the runs: 19,060 training tokens of 64 rows x 2 epochs
    assert CPU_TOKENS_PER_ROW == pytest.approx(19060 / 128, abs=0.05)
