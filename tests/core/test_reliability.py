"""What a careful user runs into: non-finite or misspelled settings, fully masked batches, and resuming."""

from __future__ import annotations

import math

import pytest
import torch

from tools.assets import tiny_model_dir
from tools.cpu import write_alpaca_jsonl

from axolotl_helpers import cpu_config, load_config, refused, run_axolotl
from gsm8k_rows import gsm8k_rows
from trainer_checks import LOGGED_KEYS, train_logs


# ---------------------------------------------------------------------------------------------- settings
@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("del_alpha", math.inf, "finite number"),
        ("del_alpha", math.nan, "finite number"),
        ("del_alpha", True, "not a boolean"),
        ("del_alpha", 1e30, "outside [0, 100]"),
        ("del_alpha", -0.1, "outside [0, 100]"),
        ("del_integer_slope", math.inf, "finite number"),
        ("del_integer_slope", 0.0, "outside (0, 100]"),
        ("del_decimal_base", math.inf, "finite number"),
        ("del_decimal_base", 0.5, "base below 1"),
        ("del_dist2_tau", math.inf, "finite number"),
        ("del_dist2_tau", False, "not a boolean"),
        ("del_place_weighting", "maybe", "del_place_weighting"),
    ],
)
def test_settings_are_finite_numbers_within_their_bounds(base, key, value, words):
    extra = {"del_criterion": "dist2"} if key == "del_dist2_tau" else {}
    message = refused(base(**{key: value}, **extra))
    assert key in message and words in message, message


def test_alpha_bounds_follow_the_criterion(base):
    assert "outside [0, 1]" in refused(base(del_criterion="mixce", del_alpha=1.5))
    assert load_config(base(del_criterion="del", del_alpha=2.56)).del_alpha == 2.56


@pytest.mark.parametrize(
    ("typo", "meant"),
    [("del_alpah", "del_alpha"), ("del_criterium", "del_criterion"), ("del_decimal_bse", "del_decimal_base")],
)
def test_a_misspelled_key_is_refused_with_the_closest_name(base, typo, meant):
    cfg = base()
    cfg[typo] = 0.5
    message = refused(cfg)
    assert f"unknown key `{typo}`" in message and f"did you mean `{meant}`?" in message


@pytest.mark.parametrize("key", ["del_alpha", "del_alpah"])
def test_del_keys_without_the_plugin_line_are_refused_with_the_line_to_add(base, key):
    """Axolotl 0.21 registers an installed plugin from its entry point (tests/project/test_install.py checks that with
    the
    package's real metadata) and validates every config with its keys; here the plugin is registered as that
    discovery does it, under the same name."""
    from axolotl.integrations.base import PluginManager

    PluginManager.get_instance().register("del_plugin.DELPlugin")
    cfg = base(plugins=[])
    del cfg["del_alpha"]
    cfg[key] = 0.5
    message = refused(cfg)
    assert f"`{key}` set, but the plugin is not listed" in message
    assert "plugins:\n  - del_plugin.DELPlugin" in message


def test_a_config_without_the_plugin_carries_no_del_keys(base):
    from axolotl.integrations.base import PluginManager

    PluginManager.get_instance().register("del_plugin.DELPlugin")
    cfg = base(plugins=[])
    del cfg["del_alpha"]
    loaded = load_config(cfg)
    assert not [key for key in loaded if key.startswith("del_")]


# ---------------------------------------------------------------------------------------------- masked batches
def test_metrics_mirror_the_trainers_filter_of_non_finite_losses():
    from del_plugin.hf import DigitMetrics

    metrics = DigitMetrics()
    metrics.start_step(torch.tensor(10))
    metrics.add_train(torch.tensor(3.0), torch.tensor(1.0), 1.0, nan_filter=True)
    metrics.start_step(torch.tensor(0))  # a fully masked step: CE is 0 / 0
    metrics.add_train(torch.tensor(float("nan")), torch.tensor(0.0), 1.0, nan_filter=True)
    # the Trainer adds tr_loss / (1 + steps since the last log) = 4 / 2 for the NaN step; the parts do the same
    sums = metrics.sums["train"]
    assert sums["ce"].item() == pytest.approx(3.0 + 3.0 / 2) and sums["del"].item() == pytest.approx(1.0 + 1.0 / 2)


@pytest.mark.e2e
def test_fully_masked_batches_log_finite_parts_that_sum_to_the_loss(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorForSeq2Seq, Trainer, TrainingArguments

    from del_plugin.hf import DELSettings, DELTrainerMixin

    class DELTrainer(DELTrainerMixin, Trainer):
        def _get_train_sampler(self, *args, **kwargs):  # rows in order, so that the masked rows share a batch
            return torch.utils.data.SequentialSampler(self.train_dataset)

    model_dir = tiny_model_dir("llama-spm")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rows = []
    for i, row in enumerate(gsm8k_rows(6)):
        ids = tokenizer(row["question"] + "\n" + row["answer"])["input_ids"][:96]
        labels = [-100] * len(ids) if i in (2, 3) else ids  # the second step's batch is fully masked
        rows.append({"input_ids": ids, "labels": labels})
    trainer = DELTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        processing_class=tokenizer,
        args=TrainingArguments(
            output_dir=str(tmp_path),
            max_steps=3,
            per_device_train_batch_size=2,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            seed=0,
            learning_rate=1e-3,
        ),
        train_dataset=rows,
        data_collator=DataCollatorForSeq2Seq(tokenizer, padding=True),
        del_settings=DELSettings(alpha=0.5),
    )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 3
    for log in logs:
        for key in LOGGED_KEYS:
            assert math.isfinite(log[key]), (key, log)
        assert log["ce_loss"] + log["del_loss"] == pytest.approx(log["loss"], rel=1e-5), log
    assert logs[1]["digit_targets"] == 0  # the masked step had no digit target


# ---------------------------------------------------------------------------------------------- resume
@pytest.mark.e2e
def test_resumed_run_logs_what_the_uninterrupted_run_logs(tmp_path):
    data = write_alpaca_jsonl(tmp_path / "d.jsonl", gsm8k_rows(24))
    model_dir = tiny_model_dir("llama-spm")
    common = dict(
        max_steps=6,
        save_strategy="steps",
        save_steps=3,
        logging_steps=1,
        del_alpha=0.5,
        micro_batch_size=2,
        gradient_accumulation_steps=2,
    )
    whole = train_logs(run_axolotl(cpu_config(tmp_path / "whole", model_dir, data, **common)))
    run_axolotl(cpu_config(tmp_path / "cut", model_dir, data, **{**common, "max_steps": 3}))
    checkpoint = tmp_path / "cut" / "out" / "checkpoint-3"
    assert checkpoint.is_dir()
    resumed = train_logs(
        run_axolotl(cpu_config(tmp_path / "cut", model_dir, data, **common, resume_from_checkpoint=str(checkpoint)))
    )
    after = [log for log in resumed if log["step"] > 3]
    assert [log["step"] for log in after] == [4, 5, 6]
    for got, want in zip(after, [log for log in whole if log["step"] > 3]):
        for key in ("loss",) + LOGGED_KEYS:
            assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-7), (key, got, want)
        assert got["ce_loss"] + got["del_loss"] == pytest.approx(got["loss"], rel=1e-5)
