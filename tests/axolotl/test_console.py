"""What a user sees on the console of `axolotl train` with the plugin on: Axolotl's real CLI in its own process,
its real logging set-up (``axolotl.logging_config``: the console shows records below WARNING only from loggers
under ``axolotl``), one short run on the tiny Llama-2-tokenizer model."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tools.assets import tiny_model_dir
from tools.cpu import write_alpaca_jsonl

from axolotl_helpers import cpu_config
from gsm8k_rows import gsm8k_rows
from repo import REPO

PLUGIN_LOGGER = "[axolotl.integrations.del_plugin]"


def axolotl_train_console(tmp_path: Path, **overrides) -> list[str]:
    """The lines `python -m axolotl.cli.train CONFIG` prints (stdout and stderr), Axolotl's default log levels."""
    data = write_alpaca_jsonl(tmp_path / "train.jsonl", gsm8k_rows(4))
    cfg = cpu_config(tmp_path, tiny_model_dir("llama-spm"), data, max_steps=1, **overrides)
    config = tmp_path / "config.yml"
    config.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("AXOLOTL_LOG_LEVEL", "LOG_LEVEL")}
    env.update(PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]), OMP_NUM_THREADS="2")
    done = subprocess.run(
        [sys.executable, "-m", "axolotl.cli.train", str(config)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    # the progress bar shares lines with log records: split on its carriage returns too
    return [line for line in re.split(r"[\r\n]+", done.stdout + done.stderr) if line.strip()]


@pytest.mark.e2e
def test_axolotl_console_shows_the_start_up_lines_once_each(tmp_path):
    lines = axolotl_train_console(tmp_path, del_alpha=0.3)
    mine = [line[line.index(PLUGIN_LOGGER) + len(PLUGIN_LOGGER) :].strip() for line in lines if PLUGIN_LOGGER in line]
    model = str(tiny_model_dir("llama-spm"))
    # the config check of the tokenizer, the trainer's set-up, the first step's check of the digit logits: once each
    # (Axolotl's `axolotl` logger does not propagate, so nothing reaches the root handler a second time)
    assert len(mine) == 3, "\n".join(lines[-60:])
    tokenizer_line, setup_line, check_line = mine
    # tiny_model_dir("llama-spm") carries Llama-2's tokenizer: '0'..'9' only (' 12' is '▁' '1' '2')
    layout = "one token per digit ('0'..'9')"
    assert tokenizer_line == f"DEL: tokenizer {model}: {layout}"
    assert setup_line == f"DEL is on: criterion del, alpha 0.3, place weighting on; tokenizer {model}: {layout}"
    assert re.fullmatch(r"DEL: model_type 'llama': digit logits equal the model's own to \S+ \(.*\)", check_line)
    # and the rest of the run logged DEL's parts
    assert any("'del_loss'" in line and "'digit_targets'" in line for line in lines)


def test_del_eval_and_the_demo_hold_back_the_hosts_import_notices():
    """torch's `_pytree` deprecation (on importing torchao) and bitsandbytes' offline CPU kernel notice, which
    del-check already holds back: shown by a bare import (the oracle), held back after the call that del-eval's and
    the demo's entry points make first."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("DEL_PLUGIN_HOST_NOTICES", None)
    held = "from del_plugin.host_notices import hold_back_import_notices; hold_back_import_notices()"
    # bitsandbytes tries its hub kernel (and says it failed, offline) only on a CPU with AVX512-BF16: the subprocess
    # reports whether this one has it, so the notice is expected exactly where bitsandbytes would print it.
    probe = "from bitsandbytes.functional import has_avx512bf16; print('avx512bf16:', bool(has_avx512bf16()))"
    outputs = []
    for first in ("pass", held):
        code = f"{first}\nimport torchao, bitsandbytes\n{probe}"
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout + done.stderr)
    bare, quiet = outputs
    notices = ["torch/utils/_pytree.py"]
    if "avx512bf16: True" in bare:
        notices.append("Failed to load CPU gemm_4bit_forward")
    else:
        assert "avx512bf16: False" in bare, bare
    for notice in notices:
        assert notice in bare and notice not in quiet, (bare, quiet)
    for entry in ("del_plugin/evaluation/cli.py", "experiments/__main__.py"):
        assert "hold_back_import_notices()" in (REPO / entry).read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "cfg, keys",
    [
        ({}, ", place weighting on"),
        ({"del_place_weighting": False}, ", place weighting off"),
        ({"del_criterion": "ntl_number"}, ", del_ntl_float_level false"),
        ({"del_criterion": "ntl_number", "del_ntl_float_level": True}, ", del_ntl_float_level true"),
        ({"del_criterion": "dist2", "del_dist2_tau": 0.5}, ", place weighting on, del_dist2_tau 0.5"),
        ({"del_criterion": "ntl_was"}, ""),
        ({"del_criterion": "mixce", "del_alpha": 1.0}, ", del_mixce_eta 0.5"),
    ],
    ids=["del", "del-unweighted", "ntl-number", "ntl-number-float-level", "dist2", "ntl-was", "mixce"],
)
def test_the_start_up_line_names_the_keys_each_criterion_reads(cfg, keys):
    """`DEL is on: criterion C, alpha A<keys>` (del_plugin/hf/trainer.py) and del-check's validation line: place
    weighting only for a criterion that reads the place keys (the registry's place_keys), then the criterion's own
    keys with their values; ntl_number reads no place key."""
    from del_plugin.core.criteria import CRITERIA
    from del_plugin.hf.settings import DELSettings

    settings = DELSettings.from_config(cfg)
    assert settings.described_keys() == keys
    assert ("place weighting" in keys) == bool(CRITERIA[settings.criterion].place_keys)


def test_del_check_names_del_ntl_float_level(tmp_path, capsys):
    from del_plugin.axolotl.check import main as del_check

    from example_families import write

    config = write(tmp_path, "smollm2-135m-cpu.yml", del_criterion="ntl_number", del_ntl_float_level=True)
    local = f"HuggingFaceTB/SmolLM2-135M-Instruct={tiny_model_dir('llama-spm')}"
    status = del_check([str(config), "--cpu", "--local", local])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "DEL: criterion ntl_number, del_alpha 0.03, del_ntl_float_level true\n" in out
