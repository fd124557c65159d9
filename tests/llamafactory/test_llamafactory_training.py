"""DEL trained by LLaMA-Factory 0.9.5's own ``run_exp`` on a tiny Llama on CPU (the LLaMA-Factory lane): the loss the
trainer optimises equals the core's on the same batch, with LoRA and full fine-tuning, packing and neat packing; the
gradient is the same for accumulation 4 x micro-batch 1 and 1 x 4; DEL's parts are logged beside LLaMA-Factory's
loss; the start-up check of the digit logits ran. The CPU example trains through ``del-llamafactory train``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from llamafactory_runs import DATASET, LANE_ONLY, LLAMAFACTORY_LANE, core_loss, tiny_config, write_dataset
from repo import REPO

pytestmark = pytest.mark.skipif(not LLAMAFACTORY_LANE, reason=LANE_ONLY)


@pytest.fixture(scope="module")
def tiny_llama():
    from tools.assets import tiny_model_dir

    return tiny_model_dir("llama-spm")


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("lf-data"))


def recording_trainer():
    """DEL's LLaMA-Factory trainer, recording the first training batch (before the mixin takes DEL's keys out of
    it) and the loss its ``compute_loss`` returns for it; nothing else is changed."""
    from del_plugin.llamafactory.trainer import DELSeq2SeqTrainer

    class Recording(DELSeq2SeqTrainer):
        built: list = []

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.first = None
            Recording.built.append(self)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            batch = {k: v.detach().clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            if model.training and self.first is None:
                self.first = (batch, (loss[0] if return_outputs else loss).detach())
            return loss

    return Recording


def run(config: dict):
    """Train ``config`` in this process through the entry point's ``train``; the trainer LLaMA-Factory built."""
    from del_plugin.llamafactory.cli import train

    trainer_class = recording_trainer()
    train(config, trainer_class=trainer_class)
    (trainer,) = trainer_class.built
    return trainer


CASES = {
    "lora": {},
    "full": {"finetuning_type": "full"},
    "packing": {"packing": True, "per_device_train_batch_size": 1},
    "neat_packing": {"packing": True, "neat_packing": True, "per_device_train_batch_size": 1},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_loss_is_the_cores_on_the_same_batch_and_dels_parts_are_logged(case, tiny_llama, dataset_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    alpha = 0.3
    trainer = run(tiny_config(tiny_llama, dataset_dir, tmp_path / "out", del_alpha=alpha, **CASES[case]))
    batch, loss = trainer.first
    if case.endswith("packing"):  # one row of packed samples, each with its own positions from 0
        assert batch["input_ids"].shape[0] == 1 and int((batch["position_ids"][0] == 0).sum()) > 1
    # the weights before the first step: the base model (LoRA's B starts at zero)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32)
    expected = core_loss(model, batch, trainer.del_vocab, alpha)
    assert loss.item() == pytest.approx(expected.item(), abs=1e-6)
    assert trainer.del_capture.verified  # the first-step check of the digit logits ran and passed
    first = trainer.state.log_history[0]
    for key in ("ce_loss", "del_loss", "del_l_num", "digit_entropy", "digit_accuracy", "digit_targets"):
        assert key in first, (key, first)
    assert first["ce_loss"] + first["del_loss"] == pytest.approx(first["loss"], abs=1e-3)  # `loss` is rounded
    assert first["del_loss"] == pytest.approx(alpha * first["del_l_num"], rel=1e-5)
    assert first["digit_targets"] > 0


def test_qlora_4bit_on_cpu_the_loss_is_the_cores(tiny_llama, dataset_dir, tmp_path):
    """QLoRA (LLaMA-Factory's bitsandbytes 4-bit): the oracle runs the trainer's own quantised model, whose weights
    the step leaves as they were (learning rate 0), on the recorded batch."""
    import bitsandbytes as bnb

    config = tiny_config(tiny_llama, dataset_dir, tmp_path / "out", quantization_bit=4, learning_rate=0.0)
    trainer = run(config)
    assert any(isinstance(m, bnb.nn.Linear4bit) for m in trainer.model.modules())
    batch, loss = trainer.first
    expected = core_loss(trainer.model, batch, trainer.del_vocab, config["del_alpha"])
    assert loss.item() == pytest.approx(expected.item(), abs=1e-6)


def test_a_token_criterion_trains_and_evaluation_logs_dels_parts(tiny_llama, dataset_dir, tmp_path):
    """MixCE (a token criterion: the Trainer's compute_loss_func) with LLaMA-Factory's evaluation during training and
    after it (``do_eval``: run_sft hands ``evaluate`` its generation arguments)."""
    eval_keys = dict(val_size=0.5, eval_strategy="steps", eval_steps=1, per_device_eval_batch_size=2, do_eval=True)
    config = tiny_config(tiny_llama, dataset_dir, tmp_path / "out", del_criterion="mixce", del_alpha=0.5, **eval_keys)
    trainer = run(config)
    history = trainer.state.log_history
    train, evaluated = history[0], [h for h in history if "eval_loss" in h]
    assert train["loss"] != pytest.approx(train["ce_loss"], rel=1e-3)  # the criterion's loss, CE logged beside it
    assert len(evaluated) == 2  # the step's evaluation and do_eval's
    for logs in evaluated:
        assert {"eval_ce_loss", "eval_digit_accuracy", "eval_digit_targets"} <= set(logs), logs


def lora_weights(trainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n}


def test_accumulation_4_x_1_equals_1_x_4(tiny_llama, dataset_dir, tmp_path):
    """One SGD step (no clipping) over the four rows, once as four accumulated micro-batches of one, once as one
    batch of four: the same weights, and DEL moves them well beyond the difference (a mean per micro-batch would
    weigh the one-digit row four times as much)."""
    step = dict(optim="sgd", learning_rate=1.0, max_grad_norm=0.0, max_steps=1, del_alpha=2.0)
    micro = tiny_config(tiny_llama, dataset_dir, tmp_path / "a", per_device_train_batch_size=1, **step)
    whole = tiny_config(tiny_llama, dataset_dir, tmp_path / "b", per_device_train_batch_size=4, **step)
    accumulated = lora_weights(run({**micro, "gradient_accumulation_steps": 4}))
    batched = lora_weights(run({**whole, "gradient_accumulation_steps": 1}))
    plain = lora_weights(run({**whole, "gradient_accumulation_steps": 1, "del_alpha": 0.0}))
    largest = max((accumulated[n] - batched[n]).abs().max().item() for n in accumulated)
    dels = max((batched[n] - plain[n]).abs().max().item() for n in batched)
    assert largest < 1e-6 and dels > 1e3 * max(largest, 1e-9), (largest, dels)


def test_the_cpu_example_trains_through_the_entry_point(dataset_dir, tmp_path):
    """examples/llamafactory/smollm2-135m-cpu.yaml, as a user runs it, for two steps of SmolLM2-135M-Instruct on the
    test rows (no hub here: the model's cached copy and the data are given on the command line, as llamafactory-cli
    takes overrides)."""
    from tools.assets import smollm2_dir

    example = REPO / "examples" / "llamafactory" / "smollm2-135m-cpu.yaml"
    overrides = [
        f"model_name_or_path={smollm2_dir()}",
        f"output_dir={tmp_path / 'out'}",
        "max_steps=2",
        "logging_steps=1",
    ]
    overrides += [f"dataset_dir={dataset_dir}", f"dataset={DATASET}"]
    command = [sys.executable, "-m", "del_plugin.llamafactory.cli", "train", str(example), *overrides]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    console = done.stdout + done.stderr  # LLaMA-Factory's console handler writes to stdout
    assert "DEL is on: criterion del" in console and "digit logits equal the model's own" in console
    history = json.loads((tmp_path / "out" / "trainer_state.json").read_text(encoding="utf-8"))["log_history"]
    steps = [h for h in history if "loss" in h]
    assert len(steps) == 2 and all("del_loss" in h and "digit_accuracy" in h for h in steps)
    assert (tmp_path / "out" / "adapter_config.json").is_file()
