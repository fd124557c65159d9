"""`del-check CONFIG`: every example config checked offline, with a local folder (a tiny model carrying the family's
real tokenizer) standing in for the hub model it names; and the failures a user meets, each with its reason.
(tests/test_install.py checks the installed command.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_examples import EXAMPLES, FAMILIES, OTHER_FAMILIES

from del_plugin.axolotl.check import main
from del_plugin.tooling.assets import load_tokenizer, tiny_model_dir

TOKENIZERS = {f.hub_id: f.tokenizer for f in [*FAMILIES.values(), *OTHER_FAMILIES.values()]}
EXAMPLE_PATHS = sorted(EXAMPLES.glob("*/*.yml"))


def del_check(capsys, *argv) -> tuple[int, dict[str, tuple[str, str]], str]:
    """Exit status, {check: (status, detail)} and the verdict line of ``del-check argv``."""
    status = main([str(a) for a in argv])
    lines = capsys.readouterr().out.strip().splitlines()
    checks = {}
    for line in lines[:-1]:
        if line[:1].isspace():  # a reason's continuation line
            name = list(checks)[-1]
            checks[name] = (checks[name][0], checks[name][1] + "\n" + line)
            continue
        state, rest = (line[:12].strip(), line[12:].strip())
        name, detail = rest.split(": ", 1)
        checks[name] = (state, detail)
    return status, checks, lines[-1]


@pytest.mark.parametrize("path", EXAMPLE_PATHS, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_every_example_passes_del_check_with_local_folders(capsys, path):
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    tokenizer = TOKENIZERS[cfg["base_model"]]
    folder = tiny_model_dir(tokenizer)
    status, checks, verdict = del_check(capsys, path, "--local", f"{cfg['base_model']}={folder}")

    assert status == 0 and verdict == f"del-check {path}: passed", checks
    assert list(checks) == ["validation", "tokenizer", "model type", "kernels"]
    assert all(state == "ok" for state, _ in checks.values()), checks
    gpus = 8 if "fsdp" in path.name else 1
    assert checks["validation"][1].startswith(f"Axolotl's validation for {gpus} GPU(s) of compute capability sm_90")
    assert f"del_alpha {cfg['del_alpha']}" in checks["validation"][1]
    # the layout read independently of del-check: the family's real tokenizer's digits
    layout = "number tokens of 1-3 digits" if tokenizer == "llama-bpe" else "one token per digit"
    assert checks["tokenizer"][1].startswith(f"{folder}: {layout}")
    assert "'0'..'9'" in checks["tokenizer"][1] and "0" in load_tokenizer(tokenizer).get_vocab()
    expected_type = {"qwen3": "qwen3", "gemma3": "gemma3_text"}.get(tokenizer, "llama")
    assert checks["model type"][1].startswith(f"{expected_type!r}, in DEL's architecture table")
    cce = "cut_cross_entropy" in str(cfg["plugins"])
    expected_kernels = f"cut_cross_entropy with model_type {expected_type!r}" if cce else "plain cross-entropy"
    assert checks["kernels"][1].startswith(expected_kernels)


def test_a_hub_id_without_a_local_folder_is_reported_as_not_checked(capsys):
    path = EXAMPLES / "qwen2.5-7b" / "paper-full-fsdp.yml"
    status, checks, verdict = del_check(capsys, path)
    assert status == 2 and verdict.endswith("passed what could be checked here")
    assert checks["validation"][0] == "ok"
    for name in ("tokenizer", "model type"):
        state, detail = checks[name]
        assert state == "not checked" and "pass --local Qwen/Qwen2.5-7B=FOLDER" in detail


def write(tmp_path: Path, example: str, **changes) -> Path:
    cfg = yaml.safe_load((EXAMPLES / example).read_text(encoding="utf-8"))
    for key, value in changes.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    out = tmp_path / "config.yml"
    out.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return out


@pytest.mark.parametrize(
    "changes, tokenizer, reason",
    [
        # GPT-2 cuts numbers into incomplete 1-4-digit tokens
        ({}, "gpt-2", "merges digits into multi-digit tokens"),
        (
            {
                "plugins": ["axolotl.integrations.liger.LigerPlugin", "del_plugin.DELPlugin"],
                "cut_cross_entropy": None,
                "liger_fused_linear_cross_entropy": True,
                "lora_target_linear": None,
                "lora_target_modules": ["q_proj", "lm_head"],
            },
            "qwen2",
            "a LoRA adapter on lm_head (`lora_target_modules`) with `liger_fused_linear_cross_entropy`",
        ),
        (
            {"plugins": ["axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"]},
            "qwen2",
            "add it to the config:\n  plugins:\n    - del_plugin.DELPlugin",
        ),
    ],
    ids=["tokenizer", "liger-lora-head", "plugin-line-forgotten"],
)
def test_a_failing_check_names_the_reason(capsys, tmp_path, changes, tokenizer, reason):
    from del_plugin.tooling.assets import tokenizer_dir

    folder = tiny_model_dir(tokenizer) if tokenizer != "gpt-2" else tokenizer_dir("gpt-2")
    path = write(tmp_path, "qwen2.5-7b/qlora-24gb.yml", **changes)
    status, checks, verdict = del_check(capsys, path, "--local", f"Qwen/Qwen2.5-7B={folder}")
    assert status == 1 and verdict.endswith(": failed")
    state, detail = checks["validation"]
    assert state == "FAILED" and reason in detail, detail


def test_a_config_without_del_is_not_checked_as_one(capsys, tmp_path):
    keys = yaml.safe_load((EXAMPLES / "qwen3-8b/qlora-24gb.yml").read_text(encoding="utf-8"))
    path = write(
        tmp_path,
        "qwen3-8b/qlora-24gb.yml",
        plugins=["axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"],
        **{key: None for key in keys if key.startswith("del_")},
    )
    status, checks, _ = del_check(capsys, path)
    assert status == 1 and checks["plugin"] == (
        "FAILED",
        f"{path} does not list del_plugin.DELPlugin in `plugins`; DEL would not run",
    )
