"""DEL under DeepSpeed ZeRO-1, -2 and -3, in real two-process Axolotl runs on CPU, against one plain process.

Axolotl's own DeepSpeed configs (from the axolotl 0.21.0 source distribution on PyPI, unchanged:
:func:`~tools.assets.axolotl_deepspeed_configs`; zero1.json,
zero2.json, which also offloads the optimizer to the CPU, zero3.json and zero3_bf16_cpuoffload_params.json) train a
tiny Llama through Axolotl's DeepSpeed path on two ranks: transformers' DeepSpeed integration filling the configs'
``"auto"`` values, the model loaded under ``deepspeed.zero.Init`` for ZeRO-3 (every parameter partitioned as it is
built), accelerate's DeepSpeed engine, DeepSpeed's CPU accelerator (``DS_ACCELERATOR=cpu``) over gloo.
tests/helpers/ddp_cpu.py says which steps are patched for the CPU; nothing of DeepSpeed, its ZeRO stages or DEL is.

The same rows make one optimizer step in one plain process (micro-batch 2 x accumulation 2, no DeepSpeed) and on
two ranks (micro-batch 1 x accumulation 2 each), with the rows, step keys, readers and comparisons of
tests/e2e/test_fsdp2_cpu_e2e.py (rank 0 holds most of the digits, both ranks the same number of label tokens). The
gradients DeepSpeed's optimizer steps with (read whole with DeepSpeed's ``safe_get_full_grad`` at the first step,
after ZeRO's reduction) and every logged part of the loss must equal one process's, in float32, for

* ZeRO-1 and ZeRO-2: a full fine-tune with single digit tokens (Llama-2's tokenizer); the parameters stay whole on
  every rank (only optimizer states and gradients are partitioned), so DEL reads them as under DDP, and what is
  tested is DeepSpeed's reduction of the head's gradient with DEL's digit rows in it;
* ZeRO-3, where the head weight is partitioned (no elements on a rank) except inside its own forward: a full
  fine-tune and LoRA with single digit tokens; number tokens (Llama-3's 1-3 digits) with the head tied to the
  embedding (full fine-tune), and LoRA with a trainable head (``lora_modules_to_save: [lm_head]``), the number rows
  copied inside the head's forward and read after it;
* ZeRO-3 with the parameters offloaded to the CPU (zero3_bf16_cpuoffload_params.json, which sets bf16 on, not
  ``"auto"``: the run has ``bf16: true``, and DeepSpeed reduces the gradients in bf16): the float32 step to bf16
  rounding, as the FSDP2 test's bf16 run.

DeepSpeed's own ``deepspeed.zero.Init`` partitioning in one process, with a LoRA adapter on the head and the refusal
of a forward that never calls the head, is tests/core/test_zero3_capture.py.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from tools.assets import axolotl_deepspeed_configs, tiny_model_dir
from tools.cpu import write_alpaca_jsonl

from axolotl_helpers import cpu_config
from ddp_cpu import start
from gsm8k_rows import gsm8k_rows
from parallel_checks import (
    ATOL,
    BF16_REL,
    BPE_DIGITS_PER_ROW,
    BPE_LABEL_TOKENS_PER_ROW,
    BPE_ROWS,
    DIGITS_PER_ROW,
    LABEL_TOKENS_PER_ROW,
    PARTS,
    ROWS,
    RTOL,
    assert_grads_close,
    assert_ranks_log,
    ok,
    step_keys,
    tied_copy,
    train_log,
)

pytestmark = pytest.mark.e2e

CONFIGS = axolotl_deepspeed_configs()

# name -> (model, keys over the step keys): the one-process runs, and what the two-process runs train
CASES = {
    "full_spm": ("llama-spm", {"adapter": None}),
    "lora_spm": ("llama-spm", {}),
    "full_bpe_tied": ("llama-bpe-tied", {"adapter": None}),
    "lora_head_bpe": ("llama-bpe", {"lora_modules_to_save": ["lm_head"]}),
}
# name -> (Axolotl's DeepSpeed config, case), in launch order
RUNS = {
    "zero1_full_spm": ("zero1.json", "full_spm"),
    "zero2_full_spm": ("zero2.json", "full_spm"),
    "zero3_full_spm": ("zero3.json", "full_spm"),
    "zero3_lora_spm": ("zero3.json", "lora_spm"),
    "zero3_full_bpe_tied": ("zero3.json", "full_bpe_tied"),
    "zero3_lora_head_bpe": ("zero3.json", "lora_head_bpe"),
}
OFFLOAD = "zero3_offload_full_spm"  # zero3_bf16_cpuoffload_params.json on full_spm, bf16: true


def single_digits(case: str) -> bool:
    return CASES[case][0] == "llama-spm"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("deepspeed")
    rows = gsm8k_rows(max(ROWS + BPE_ROWS) + 1)
    spm = write_alpaca_jsonl(tmp / "spm.jsonl", [rows[i] for i in ROWS])
    bpe = write_alpaca_jsonl(tmp / "bpe.jsonl", [rows[i] for i in BPE_ROWS])
    models = {
        "llama-spm": (tiny_model_dir("llama-spm"), spm),
        "llama-bpe": (tiny_model_dir("llama-bpe"), bpe),
        "llama-bpe-tied": (tied_copy(tiny_model_dir("llama-bpe"), tmp / "tiny-llama-bpe-tied"), bpe),
    }

    def run(world: int, name: str, case: str, **overrides) -> dict:
        model, keys = CASES[case]
        keys = {**step_keys(world), "dataset_prepared_path": str(tmp / f"prepared-{model}-w{world}"), **keys}
        config = cpu_config(tmp / f"w{world}-{name}", *models[model], **{**keys, **overrides})
        return {"config": config, "setup": None}

    plan = {name: run(2, name, case, deepspeed=str(CONFIGS / file)) for name, (file, case) in RUNS.items()}
    plan[OFFLOAD] = run(2, OFFLOAD, "full_spm", deepspeed=str(CONFIGS / "zero3_bf16_cpuoffload_params.json"), bf16=True)
    two = start(plan, tmp / "world2", nproc=2)
    one = start({case: run(1, case, case) for case in CASES}, tmp / "world1", nproc=1)  # no DeepSpeed
    return one.results(), two.results()


def test_the_runs_use_axolotls_configs_unchanged():
    # Axolotl's files as shipped in its release; on CPU their "auto" values take the Axolotl
    # config's (bf16: false) except where a file sets a value itself, as the offload one sets bf16
    for file, stage in (("zero1.json", 1), ("zero2.json", 2), ("zero3.json", 3)):
        config = json.loads((CONFIGS / file).read_text())
        assert config["zero_optimization"]["stage"] == stage
        assert config["bf16"]["enabled"] == "auto" and config["train_micro_batch_size_per_gpu"] == "auto"
    offload = json.loads((CONFIGS / "zero3_bf16_cpuoffload_params.json").read_text())
    assert offload["zero_optimization"]["offload_param"]["device"] == "cpu" and offload["bf16"]["enabled"] is True


@pytest.mark.parametrize("name", list(RUNS) + [OFFLOAD])
def test_the_runs_are_deepspeed_zero_over_two_gloo_ranks(runs, name):
    one, two = runs
    file, case = RUNS.get(name, ("zero3_bf16_cpuoffload_params.json", "full_spm"))
    stage = json.loads((CONFIGS / file).read_text())["zero_optimization"]["stage"]
    digits, tokens = (
        (DIGITS_PER_ROW, LABEL_TOKENS_PER_ROW)
        if single_digits(case)
        else (BPE_DIGITS_PER_ROW, BPE_LABEL_TOKENS_PER_ROW)
    )
    for rank, result in enumerate(two[name]):
        assert ok(result)["world_size"] == 2 and result["cpu_backend"] == "gloo"
        assert result["distributed_type"] == "DistributedType.DEEPSPEED"
        assert result["zero_stage"] == stage
        assert result["offload_param"] == ("cpu" if name == OFFLOAD else None)
        assert result["offload_optimizer"] == ("cpu" if stage == 2 else None)  # zero2.json offloads it
        # DeepSpeed's bf16 (the offload file turns it on) reduces gradients in bf16; Axolotl keeps the parameters
        # in float32 on this CPU path
        assert result["bf16"] == (name == OFFLOAD) and result["param_dtypes"] == ["torch.float32"]
        assert result["communication_dtype"] == ("torch.bfloat16" if name == OFFLOAD else "torch.float32")
        # ZeRO-3 leaves the head weight with no elements on a rank between forwards; ZeRO-1 and -2 keep it whole
        assert result["head_numel"] == (0 if stage == 3 else math.prod(result["head_shape"]))
        assert result["head_tied"] == (case == "full_bpe_tied")
        micro = result["micro_batches"]
        assert [mb["rows"] for mb in micro] == [1, 1]
        assert [mb["digits"] for mb in micro] == [digits[rank], digits[rank + 2]]
        assert [mb["label_tokens"] for mb in micro] == [tokens[rank], tokens[rank + 2]]
    # both ranks step with the same gradient
    for param, grad in two[name][0]["grads"].items():
        assert torch.equal(grad, two[name][1]["grads"][param]), param
    assert ok(one[case][0])["world_size"] == 1 and "zero_stage" not in one[case][0]
    assert one[case][0]["micro_batches"][0]["digits"] == digits[0] + digits[1]


@pytest.mark.parametrize("name", list(RUNS))
def test_gradient_under_zero_equals_one_process(runs, name):
    one, two = runs
    case = RUNS[name][1]
    expected = ok(one[case][0])["grads"]
    if case.startswith("full"):  # the head (tied: the embedding) is trained, with DEL's digit rows in its gradient
        head = "model.embed_tokens.weight" if case == "full_bpe_tied" else "lm_head.weight"
        assert head in expected and (case != "full_bpe_tied" or "lm_head.weight" not in expected)
    elif case == "lora_head_bpe":  # the adapters and PEFT's trainable copy of the head
        assert "base_model.model.lm_head.modules_to_save.default.weight" in expected
        assert all(".lora_" in param or ".modules_to_save." in param for param in expected)
    else:
        assert all(".lora_" in param for param in expected)
    for rank in (0, 1):
        assert_grads_close(ok(two[name][rank])["grads"], expected, f"{name}, rank {rank}", rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", list(RUNS))
def test_logged_parts_under_zero_equal_one_process(runs, name):
    one, two = runs
    case = RUNS[name][1]
    expected = train_log(one[case][0])
    assert expected["digit_targets"] == sum(DIGITS_PER_ROW if single_digits(case) else BPE_DIGITS_PER_ROW)
    assert_ranks_log(expected, two[name], name)


def test_zero3_with_parameter_offload_gives_the_float32_step_to_bf16_rounding(runs):
    one, two = runs
    expected_grads, expected_log = ok(one["full_spm"][0])["grads"], train_log(one["full_spm"][0])
    for rank in (0, 1):
        result = ok(two[OFFLOAD][rank])
        log = train_log(two[OFFLOAD][rank])
        for key in PARTS:
            assert math.isfinite(log[key])
            assert log[key] == pytest.approx(expected_log[key], rel=BF16_REL, abs=1e-3), (rank, key)
        assert result["grads"].keys() == expected_grads.keys()
        for param, expected in expected_grads.items():
            error = (result["grads"][param].float() - expected).norm() / expected.norm()
            assert error < BF16_REL, (rank, param, error.item())
