"""The LLaMA-Factory host's config rules: DEL's keys by the rules every host applies (the same refusals as
Axolotl's validator), LLaMA-Factory's options that cannot combine with DEL, every problem at once, and the entry
point refusing a bad config before LLaMA-Factory is imported. No LLaMA-Factory needed: these run on every lane."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from del_plugin.core.compatibility import RULES
from del_plugin.hf.config_keys import TRAINING_KEYS
from del_plugin.hf.settings import DELSettings
from del_plugin.llamafactory.config import DELConfigError, check_llamafactory_version, config_problems, read_config

from llamafactory_runs import LANE_ONLY, LLAMAFACTORY_LANE
from repo import REPO

BASE = {"model_name_or_path": "some/model", "stage": "sft", "finetuning_type": "lora", "del_alpha": 0.3}


def test_a_good_config_splits_into_llamafactorys_arguments_and_dels_settings():
    host_args, settings = read_config({**BASE, "del_criterion": "del", "del_place_weighting": False})
    assert host_args == {"model_name_or_path": "some/model", "stage": "sft", "finetuning_type": "lora"}
    assert settings == DELSettings.from_config({"del_alpha": 0.3, "del_place_weighting": False})


@pytest.mark.axolotl
def test_the_keys_are_those_of_axolotls_config_without_its_evaluation_keys():
    from del_plugin.axolotl.args import DEFAULTS

    assert set(TRAINING_KEYS) == set(DEFAULTS)


@pytest.mark.axolotl
def test_dels_keys_are_refused_with_the_same_words_as_by_axolotls_validator():
    """One rule table: each refusal of a bad del_ key is the Axolotl plugin's message, less its prefix (an unknown
    key's list of the known ones differs: Axolotl's holds its evaluation keys too)."""
    from pydantic import ValidationError

    from del_plugin.axolotl.args import DELArgs

    for bad in ({"del_alpah": 0.3}, {"del_alpha": "3e-2"}, {"del_alpha": 500.0}, {"del_integer_slope": -1.0}):
        (problem,) = config_problems({**BASE, **bad})
        with pytest.raises(ValidationError) as err:
            DELArgs.model_validate({"plugins": ["del_plugin.DELPlugin"], **bad})
        assert problem.split("; the DEL keys are")[0] in str(err.value), (bad, problem)


def test_every_problem_is_reported_at_once():
    config = {
        **BASE,
        "del_alpah": 0.1,
        "del_integer_slope": 0.0,
        "stage": "dpo",
        "use_dft_loss": True,
        "use_ray": True,
        "del_eval_benchmarks": ["gsm8k"],
    }
    with pytest.raises(DELConfigError) as err:
        read_config(config)
    problems = err.value.problems
    assert len(problems) == 6, problems
    for words in ("`del_alpah` (did you mean `del_alpha`?)", "del_integer_slope", "`stage: dpo`", "`use_ray: true`"):
        assert any(words in p for p in problems), words
    assert RULES["own_loss_vs_llamafactory"].message(key="use_dft_loss") in problems
    assert any("`del_eval_benchmarks`" in p and "del-eval run --model OUTPUT_DIR" in p for p in problems)


@pytest.mark.parametrize("key", ["use_dft_loss", "use_eaft_loss", "use_asft_loss"])
def test_llamafactorys_own_losses_are_refused(key):
    assert config_problems({**BASE, key: True}) == [RULES["own_loss_vs_llamafactory"].message(key=key)]
    assert config_problems({**BASE, key: False}) == []


def test_liger_is_kept_for_a_digit_criterion_and_refused_where_the_table_refuses_it(tmp_path):
    liger = {**BASE, "enable_liger_kernel": True}
    assert config_problems(liger) == []  # DEL reads the hidden states: Liger's fused loss needs no logits from it
    mixce = {**liger, "del_criterion": "mixce", "del_alpha": 0.5}
    assert config_problems(mixce) == [
        RULES["full_logits_vs_kernels"].message(criterion="mixce", kernels=["enable_liger_kernel"])
    ]
    head = {**liger, "lora_target": "q_proj, lm_head"}
    assert config_problems(head) == [RULES["lora_head_vs_llamafactory_liger"].message()]
    assert config_problems({**head, "finetuning_type": "full"}) == []
    zero3 = tmp_path / "ds_z3.json"
    zero3.write_text('{"zero_optimization": {"stage": 3}}', encoding="utf-8")
    assert config_problems({**liger, "deepspeed": str(zero3)}) == [
        RULES["fused_kernel_vs_zero3"].message(kernels=["enable_liger_kernel"])
    ]


def test_a_token_criterion_beside_label_smoothing_is_refused():
    config = {**BASE, "del_criterion": "mixce", "del_alpha": 0.5, "label_smoothing_factor": 0.1}
    assert config_problems(config) == [RULES["full_logits_vs_label_smoothing"].message(criterion="mixce")]


def test_the_tested_llamafactory_is_accepted_and_another_refused():
    assert check_llamafactory_version("0.9.5") == "0.9.5"
    for other in ("0.9.4", "0.9.6", "1.0.0"):
        with pytest.raises(RuntimeError, match=f"{other} is installed.*llamafactory==0.9.5"):
            check_llamafactory_version(other)


@pytest.mark.skipif(not LLAMAFACTORY_LANE, reason=LANE_ONLY + " (the entry point reads YAML with its OmegaConf)")
def test_the_entry_point_refuses_a_bad_config_before_llamafactory_is_imported(tmp_path):
    """The model path does not exist: the refusal comes from DEL's rules, before any model (or LLaMA-Factory) is
    loaded; the subprocess reports the modules it imported."""
    config = tmp_path / "bad.yaml"
    config.write_text(
        yaml.safe_dump({**BASE, "model_name_or_path": str(tmp_path / "none"), "del_alph": 0.3, "use_eaft_loss": True}),
        encoding="utf-8",
    )
    code = (
        "import sys\nfrom del_plugin.llamafactory.cli import main\nstatus = main(['train', sys.argv[1], "
        "'del_alpha=500.0'])\nprint('IMPORTED', 'llamafactory' in sys.modules)\n"
        "sys.exit(status)"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, str(config)], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 2, run.stderr
    assert "3 problem(s)" in run.stderr and "nothing was loaded" in run.stderr
    assert "`del_alph` (did you mean `del_alpha`?)" in run.stderr
    assert "`use_eaft_loss: true`" in run.stderr
    assert "del_alpha" in run.stderr and "500" in run.stderr  # the override is read as llamafactory-cli reads it
    assert "IMPORTED False" in run.stdout


@pytest.mark.skipif(not LLAMAFACTORY_LANE, reason=LANE_ONLY + " (the entry point reads YAML with its OmegaConf)")
def test_the_entry_point_refuses_another_llamafactory_before_training(tmp_path, monkeypatch, capsys):
    """Only the installed version the command reads is replaced (0.9.4 in place of the lane's 0.9.5)."""
    from del_plugin.llamafactory import cli

    config = tmp_path / "ok.yaml"
    config.write_text(yaml.safe_dump(BASE), encoding="utf-8")
    monkeypatch.setattr(cli, "version", lambda name: "0.9.4" if name == "llamafactory" else None)
    assert cli.main(["train", str(config)]) == 2
    assert "0.9.4 is installed" in capsys.readouterr().err
