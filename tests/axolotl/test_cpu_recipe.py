"""A user's first run on a machine without a GPU: the recipe (its one home, del_plugin/axolotl/cpu.py) as
docs/cpu.md and examples/smollm2-135m-cpu.yml give it; `del-check --cpu` naming each key that would stop such a run,
with its fix; an error of the host's kernels at DEL's first-step check reported as the host's; and the README's
walkthrough, the twin sweep through `axolotl train`, on a CPU with only what the docs tell a user to write."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from del_plugin.axolotl.args import PLUGIN_NAME
from del_plugin.axolotl.check import main
from del_plugin.axolotl.cpu import CPU_RECIPE
from del_plugin.hf.settings import DEFAULT_ALPHA
from del_plugin.hf.startup_checks import HostForwardError, _host_forward_error
from tools.assets import tiny_model_dir
from tools.cpu import write_alpaca_jsonl

from axolotl_helpers import cpu_config, run_axolotl
from example_families import write
from gsm8k_rows import gsm8k_rows
from repo import REPO

EXAMPLE = REPO / "examples" / "smollm2-135m-cpu.yml"
RECIPE = {key: entry.value for key, entry in CPU_RECIPE.items()}
NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")


def docs_recipe() -> dict:
    """The YAML block docs/cpu.md tells a user to add."""
    text = (REPO / "docs" / "cpu.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- cpu-recipe[^>]*-->\n```yaml\n(.*?)```", text, re.DOTALL)
    assert block, "docs/cpu.md lost its recipe block"
    return yaml.safe_load(block.group(1))


def test_the_docs_recipe_is_the_recipe_and_names_every_key_with_why():
    assert docs_recipe() == RECIPE
    table = (REPO / "docs" / "cpu.md").read_text(encoding="utf-8")
    for key in RECIPE:
        assert f"`{key}`" in table


def test_the_cpu_example_is_the_two_lines_plus_the_recipe():
    cfg = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    assert PLUGIN_NAME in cfg["plugins"] and cfg["del_alpha"] == DEFAULT_ALPHA
    assert {key: cfg.get(key) for key in RECIPE} == RECIPE
    assert cfg["adapter"] == "lora" and cfg["base_model"] == "HuggingFaceTB/SmolLM2-135M-Instruct"


def del_check(capsys, *argv) -> tuple[int, str]:
    status = main([str(a) for a in argv])
    return status, capsys.readouterr().out


def write_config(tmp_path: Path, **changes) -> Path:
    """The CPU example with ``changes`` (None removes a key)."""
    return write(tmp_path, EXAMPLE.name, **changes)


LOCAL = ("--local", f"HuggingFaceTB/SmolLM2-135M-Instruct={tiny_model_dir('llama-spm')}")


def test_del_check_cpu_passes_the_example(capsys):
    status, out = del_check(capsys, EXAMPLE, "--cpu", *LOCAL)
    assert status == 0, out
    assert out.startswith("ok           validation: Axolotl's validation for a machine without a GPU (--cpu) passed")


@pytest.mark.parametrize(
    "changes, named",
    [
        # the README's two lines on a LoRA config: Axolotl switches its Triton LoRA kernels on
        (
            {key: None for key in RECIPE},
            [
                "`lora_mlp_kernel`, `lora_qkv_kernel`, `lora_o_kernel`, `lora_embedding_kernel` (unset, so Axolotl "
                "switches them on)",
                "set `lora_mlp_kernel: false`, `lora_qkv_kernel: false`, `lora_o_kernel: false`, "
                "`lora_embedding_kernel: false`",
            ],
        ),
        ({"lora_o_kernel": True}, ["`lora_o_kernel: true`: Axolotl's fused LoRA kernels"]),
        ({"bf16": True}, ["`bf16: true`", "set `bf16: false`"]),
        ({"tf32": True}, ["`tf32: true`", "set `tf32: false`"]),
        (
            {"attn_implementation": "flash_attention_2"},
            ["`attn_implementation: flash_attention_2`", "set `attn_implementation: sdpa`"],
        ),
        (
            {"attn_implementation": None, "flash_attention": True},
            ["`flash_attention: true`", "set `attn_implementation: sdpa`, and remove `flash_attention`"],
        ),
        (
            {"plugins": ["axolotl.integrations.liger.LigerPlugin", PLUGIN_NAME], "liger_rms_norm": True},
            ["`liger_rms_norm: true`: Liger's and Cut Cross Entropy's kernels are Triton GPU kernels; remove them"],
        ),
    ],
    ids=["two-lines", "lora-kernel", "bf16", "tf32", "flash-attention-2", "flash-attention-flag", "liger"],
)
def test_del_check_cpu_names_each_key_that_stops_a_cpu_run_and_its_fix(capsys, tmp_path, changes, named):
    status, out = del_check(capsys, write_config(tmp_path, **changes), "--cpu", *LOCAL)
    assert status == 1, out
    assert out.startswith(
        "FAILED       validation: Axolotl's validation for a machine without a GPU (--cpu): training would fail there:"
    )
    for text in named:
        assert text in out
    # the other keys of the recipe are as written: each failure is named once, none that is not one
    assert out.count("\n  `") == 1, out


@NO_GPU
def test_without_a_card_on_a_machine_without_a_gpu_del_check_adds_a_note_and_keeps_its_status(capsys, tmp_path):
    """The user's tiny LoRA config: checked for the default card, it passes (exit 0), and the note names the
    kernels that would stop it here."""
    status, out = del_check(capsys, write_config(tmp_path, **{key: None for key in RECIPE}), *LOCAL)
    assert status == 0, out
    note = out.split("\nnote         this machine: ", 1)[1]
    assert note.startswith("it has no GPU; to train this config on it (`del-check --cpu`):\n  `lora_mlp_kernel`")
    status, out = del_check(capsys, EXAMPLE, *LOCAL)
    assert status == 0 and "note         this machine: it has no GPU, and nothing in this config needs one" in out


# ------------------------------------------------------------------ the host's errors at DEL's first-step check


def _host_code():
    raise RuntimeError("a host kernel failed")


def test_an_error_raised_in_the_hosts_code_is_named_as_the_hosts_and_one_in_dels_is_left_alone():
    from del_plugin.core.places import shift_to_next_token

    try:
        _host_code()
    except RuntimeError as err:
        wrapped = _host_forward_error(err)
    assert isinstance(wrapped, HostForwardError)
    assert "RuntimeError: a host kernel failed -- raised in" in str(wrapped)
    assert f"test_cpu_recipe.py, line {_host_code.__code__.co_firstlineno + 1} (_host_code)" in str(wrapped)
    assert "which is the host's code, not DEL's" in str(wrapped)
    try:
        shift_to_next_token(None, -100)  # fails inside del_plugin's own code
    except (AttributeError, TypeError) as err:
        assert _host_forward_error(err) is None


@NO_GPU
@pytest.mark.e2e
def test_axolotls_lora_kernel_failing_on_a_cpu_is_reported_as_the_hosts(tmp_path):
    """The real crash: Axolotl's fused LoRA kernels on a CPU stop in the first forward, DEL's first-step check."""
    data = write_alpaca_jsonl(tmp_path / "train.jsonl", gsm8k_rows(2))
    cfg = cpu_config(tmp_path, tiny_model_dir("llama-spm"), data, max_steps=1, lora_mlp_kernel=True)
    with pytest.raises(HostForwardError) as err:
        run_axolotl(cfg)
    message = str(err.value)
    assert message.startswith("the model's own forward failed in DEL's first-step check")
    assert "raised in axolotl/kernels/" in message and "which is the host's code, not DEL's" in message
    assert "`del-check --cpu CONFIG` names each key" in message
    assert isinstance(err.value.__cause__, RuntimeError) and "NVIDIA" in str(err.value.__cause__)


# ------------------------------------------------------------------ the README's walkthrough on a CPU


@NO_GPU
@pytest.mark.e2e
def test_the_twin_sweep_trains_on_a_cpu_with_what_the_docs_say(tmp_path):
    """`axolotl train examples/smollm2-135m-cpu.yml --sweep examples/compare-with-mle.yml`, Axolotl's own CLI in its
    own process, as the example ships, with two changes a machine without the hub needs (a local tiny model with
    Llama-2's tokenizer for the hub id, GSM8K rows from a local file) and one for time (one step of each twin).
    Costs three processes that each import torch and Axolotl (the CLI and one `accelerate launch` per twin): 3 to
    4.5 minutes on two cores shared with other work."""
    rows = tmp_path / "gsm8k.jsonl"
    rows.write_text("".join(json.dumps(row) + "\n" for row in gsm8k_rows(8)), encoding="utf-8")
    cfg = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    dataset = {key: value for key, value in cfg["datasets"][0].items() if key != "name"}
    cfg.update(
        base_model=str(tiny_model_dir("llama-spm")),
        datasets=[{**dataset, "path": str(rows), "ds_type": "json"}],
        max_steps=1,
        logging_steps=1,
        output_dir=str(tmp_path / "out"),
    )
    config = tmp_path / "config.yml"
    config.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("AXOLOTL_LOG_LEVEL", "LOG_LEVEL")}
    env.update(PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]), OMP_NUM_THREADS="2")
    # as `source .venv/bin/activate` does (the README): Axolotl launches each run with the `accelerate` command
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    sweep = REPO / "examples" / "compare-with-mle.yml"
    done = subprocess.run(
        [sys.executable, "-m", "axolotl.cli.main", "train", str(config), "--sweep", str(sweep)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
        env=env,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    # the twins in Axolotl's order: sweep0001 the config as written (DEL), sweep0002 del_alpha 0
    started = re.findall(r"DEL is on: criterion del, alpha ([\d.]+)", output)
    assert started == [f"{DEFAULT_ALPHA}", "0.0"], output[-6000:]
    for run in ("sweep0001", "sweep0002"):
        assert (tmp_path / "out" / run / "adapter_config.json").is_file(), run
