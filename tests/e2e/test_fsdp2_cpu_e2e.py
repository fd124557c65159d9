"""DEL under FSDP2, in real two-process Axolotl runs on CPU (``fully_shard`` over gloo), against one process.

The paper fine-tunes with FSDP full sharding; examples/*/paper-full-fsdp.yml do it through Axolotl 0.21's FSDP2. Here
the ``fsdp_config`` of examples/codellama-7b/paper-full-fsdp.yml, read from the file (the four paper-full-fsdp examples
share it but for the decoder layer class, tests/axolotl/test_examples.py), trains a tiny Llama on two ranks through
Axolotl's
own path: accelerate's FSDP2 plugin and Axolotl's ``fsdp2_prepare_model`` wrap each decoder layer in a unit with
activation checkpointing and make the rest (embedding, final norm, ``lm_head``) the root unit, every unit resharded
after the forward, the weights loaded on rank 0 and broadcast (``cpu_ram_efficient_loading``). tests/helpers/ddp_cpu.py
says
which CUDA-only steps are patched for the CPU; nothing of FSDP2 or DEL is.

The same rows make one optimizer step in one plain process (micro-batch 2 x accumulation 2, no FSDP) and on two
ranks (micro-batch 1 x accumulation 2 each): rank 0 holds most of the digits, both ranks the same number of label
tokens (tests/e2e/test_ddp_cpu_e2e.py explains the assignment and why equal token counts make every gradient
comparable). The gradients the optimizer sees at that step (FSDP2's reduce-scattered shards, gathered whole) and
every logged part of the loss must equal one process's, in float32, for

* single digit tokens (Llama-2's tokenizer): a full fine-tune, whose head weight gets DEL's digit-row gradient, and
  LoRA (frozen head: DEL's gradient reaches the adapters through the hidden states only);
* number tokens of 1-3 digits (Llama-3's, read slot by slot after the forward, from the head rows copied while the
  forward ran: FSDP2 frees the root's gathered weights when the forward returns), full fine-tune, with the head tied
  to the input embedding as Llama-3.2's are: one parameter that the embedding, the head and DEL's rows all reach.
  (LoRA with number tokens is the LoRA path above with the reader of this one; left out to keep the test short:
  each Llama-3 tokenizer load costs seconds, three per run and rank.)

Mixed precision as the examples set it (``bf16: true``: FSDP2 computes in bf16 parameters and reduces in bf16) runs
too, and gives the float32 gradient up to bf16 rounding. A head that FSDP2 makes a unit of its own
(``SIZE_BASED_WRAP``) is still sharded when the decoder returns, where DEL reads its digit rows: refused with the
error that says how to keep it in the root unit.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
import yaml

from tools.assets import tiny_model_dir
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
    assert_grads_close,
    assert_ranks_log,
    ok,
    step_keys,
    tied_copy,
    train_log,
)
from repo import REPO

pytestmark = pytest.mark.e2e

EXAMPLE = REPO / "examples" / "codellama-7b" / "paper-full-fsdp.yml"  # a Llama, as the tiny models are

# name -> (tokenizer, full fine-tune: else LoRA)
CASES = {
    "full_spm": ("llama-spm", True),
    "lora_spm": ("llama-spm", False),
    "full_bpe_tied": ("llama-bpe", True),
}


def example_fsdp_config() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())["fsdp_config"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fsdp2")
    rows = gsm8k_rows(max(ROWS + BPE_ROWS) + 1)
    data = {
        "llama-spm": write_alpaca_jsonl(tmp / "spm.jsonl", [rows[i] for i in ROWS]),
        "llama-bpe": write_alpaca_jsonl(tmp / "bpe.jsonl", [rows[i] for i in BPE_ROWS]),
    }
    models = {
        "llama-spm": tiny_model_dir("llama-spm"),
        "llama-bpe": tied_copy(tiny_model_dir("llama-bpe"), tmp / "tiny-llama-bpe-tied"),
    }
    fsdp = example_fsdp_config()

    def plan(world: int) -> dict:
        def run(name, tokenizer, full, fsdp_config=None, **overrides):
            keys = step_keys(world)
            keys["dataset_prepared_path"] = str(tmp / f"prepared-{tokenizer}-w{world}")  # tokenised once per world
            if full:
                keys["adapter"] = None
            if world == 2:
                keys["fsdp_config"] = fsdp_config or fsdp
            config = cpu_config(tmp / f"w{world}-{name}", models[tokenizer], data[tokenizer], **{**keys, **overrides})
            return {"config": config, "setup": None}

        plan = {name: run(name, *case) for name, case in CASES.items()}
        if world == 1:
            plan["ce_full_spm"] = run("ce_full_spm", "llama-spm", True, del_alpha=0.0)
        else:
            plan["bf16_full_spm"] = run("bf16_full_spm", "llama-spm", True, bf16=True)
            # last: DEL refuses it at the first step (the runs are one after the other in the same processes)
            size_based = {**fsdp, "auto_wrap_policy": "SIZE_BASED_WRAP", "min_num_params": 1_000_000}
            size_based.pop("transformer_layer_cls_to_wrap")
            plan["head_unit_spm"] = run("head_unit_spm", "llama-spm", True, fsdp_config=size_based)
        return plan

    two = start(plan(2), tmp / "world2", nproc=2)
    one = start(plan(1), tmp / "world1", nproc=1)  # a plain process: no process group, no FSDP
    return one.results(), two.results()


def layer_units(full: bool) -> set[str]:
    prefix = "" if full else "base_model.model."
    return {f"{prefix}model.layers.{i}" for i in (0, 1)}


@pytest.mark.parametrize("name", list(CASES) + ["bf16_full_spm"])
def test_the_runs_are_fsdp2_units_of_the_examples_over_two_gloo_ranks(runs, name):
    one, two = runs
    tokenizer, full = CASES.get(name, ("llama-spm", True))
    digits, tokens = (
        (DIGITS_PER_ROW, LABEL_TOKENS_PER_ROW)
        if tokenizer == "llama-spm"
        else (BPE_DIGITS_PER_ROW, BPE_LABEL_TOKENS_PER_ROW)
    )
    for rank, result in enumerate(two[name]):
        assert ok(result)["world_size"] == 2 and result["cpu_backend"] == "gloo"
        assert result["distributed_type"] == "DistributedType.FSDP"
        # one unit per decoder layer, checkpointed, and the root, which holds the head
        assert set(result["fsdp_units"]) == {""} | layer_units(full)
        assert set(result["checkpointed"]) == layer_units(full)
        assert result["head_unit"] == ""
        assert result["head_tied"] == (name == "full_bpe_tied")
        micro = result["micro_batches"]
        assert [mb["rows"] for mb in micro] == [1, 1]
        assert [mb["digits"] for mb in micro] == [digits[rank], digits[rank + 2]]
        assert [mb["label_tokens"] for mb in micro] == [tokens[rank], tokens[rank + 2]]
    assert digits[0] + digits[2] > 4 * (digits[1] + digits[3])
    assert tokens[0] + tokens[2] == tokens[1] + tokens[3]
    # both ranks step with the same gradient
    for param, grad in two[name][0]["grads"].items():
        assert torch.equal(grad, two[name][1]["grads"][param]), param
    if name in one:
        assert ok(one[name][0])["world_size"] == 1 and one[name][0]["fsdp_units"] == []
        assert one[name][0]["micro_batches"][0]["digits"] == digits[0] + digits[1]


@pytest.mark.parametrize("name", list(CASES))
def test_gradient_under_fsdp2_equals_one_process(runs, name):
    one, two = runs
    expected = ok(one[name][0])["grads"]
    tokenizer, full = CASES[name]
    if full:  # the head (tied: the embedding) is trained, with DEL's digit rows in its gradient
        head = "model.embed_tokens.weight" if name == "full_bpe_tied" else "lm_head.weight"
        assert head in expected and (name != "full_bpe_tied" or "lm_head.weight" not in expected)
    else:
        assert all(".lora_" in param for param in expected)
    for rank in (0, 1):
        assert_grads_close(ok(two[name][rank])["grads"], expected, f"{name}, rank {rank}")


@pytest.mark.parametrize("name", list(CASES))
def test_logged_parts_under_fsdp2_equal_one_process(runs, name):
    one, two = runs
    expected = train_log(one[name][0])
    tokenizer = CASES[name][0]
    assert expected["digit_targets"] == sum(DIGITS_PER_ROW if tokenizer == "llama-spm" else BPE_DIGITS_PER_ROW)
    assert_ranks_log(expected, two[name], name)


def test_del_moves_the_gradient_far_beyond_the_tolerance(runs):
    # the comparisons have teeth: DEL's part of the gradient (alpha 2 against alpha 0, one process) is orders of
    # magnitude above the tolerance, on the head's digit rows (and on them only) and on the layers below, so a
    # digit-row gradient lost in FSDP2's reduce-scatter, or normalised per rank, would fail them
    one, _ = runs
    del_run, ce_run = ok(one["full_spm"][0])["grads"], ok(one["ce_full_spm"][0])["grads"]
    contribution = {n: del_run[n] - ce_run[n] for n in del_run}
    head = contribution["lm_head.weight"]
    assert head.abs().max() > 1000 * ATOL
    assert contribution["model.layers.0.mlp.down_proj.weight"].abs().max() > 100 * ATOL
    vocabulary = json.loads((tiny_model_dir("llama-spm") / "tokenizer.json").read_text())["model"]["vocab"]
    digits = [vocabulary[digit] for digit in "0123456789"]
    assert set(head.abs().amax(dim=1).nonzero().flatten().tolist()) == set(digits)


def test_mixed_precision_as_the_examples_gives_the_float32_gradient_to_bf16_rounding(runs):
    one, two = runs
    expected_grads, expected_log = ok(one["full_spm"][0])["grads"], train_log(one["full_spm"][0])
    for rank in (0, 1):
        result = ok(two["bf16_full_spm"][rank])
        assert result["param_dtypes"] == ["torch.bfloat16"]
        log = train_log(two["bf16_full_spm"][rank])
        for key in PARTS:
            assert math.isfinite(log[key])
            assert log[key] == pytest.approx(expected_log[key], rel=BF16_REL, abs=1e-3), (rank, key)
        assert result["grads"].keys() == expected_grads.keys()
        for param, expected in expected_grads.items():
            actual = result["grads"][param].float()
            error = (actual - expected).norm() / expected.norm()
            assert error < BF16_REL, (rank, param, error.item())


def test_a_head_in_a_unit_of_its_own_is_refused_with_the_fix(runs):
    _, two = runs
    for result in two["head_unit_spm"]:
        error = result.get("error", "")
        assert "DigitCaptureError" in error and "still sharded (a DTensor)" in error, error[-3000:]
        assert "TRANSFORMER_BASED_WRAP" in error and "transformer_layer_cls_to_wrap" in error
