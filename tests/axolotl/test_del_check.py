"""`del-check CONFIG`: every example config checked offline, with a local folder (a tiny model carrying the family's
real tokenizer) standing in for the hub model it names, for the GPUs its header names; the failures a user meets,
each with its reason; the card it checks for, in every form a compute capability is written; files it cannot use,
each with a one-line error and exit 3; and the host libraries' own warnings kept off its output.
(tests/project/test_install.py checks the installed command.)"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from del_plugin.axolotl.check import GPUS, main, parse_args, parse_compute_capability
from tools.assets import load_tokenizer, tiny_model_dir

from example_families import EXAMPLES, FAMILIES, OTHER_FAMILIES, write
from repo import REPO

# the ablation's Qwen2.5-1.5B has Qwen2.5-7B's tokenizer
TOKENIZERS = {f.hub_id: f.tokenizer for f in [*FAMILIES.values(), *OTHER_FAMILIES.values()]} | {
    "Qwen/Qwen2.5-1.5B": "qwen2"
}
EXAMPLE_PATHS = sorted(EXAMPLES.glob("*/*.yml")) + sorted(EXAMPLES.glob("ablation/*.yaml"))


def header_commands(path: Path) -> tuple[list[str], int | None]:
    """The del-check arguments an example's header gives for it (after the path), and the GPU count its command
    lines start (``--num_processes N``, ``--nproc_per_node N``), None for one GPU."""
    header = path.read_text(encoding="utf-8").split("\n\n", 1)[0]
    relative = str(path.relative_to(REPO))
    args = [shlex.split(line.split("#", 2)[1])[2:] for line in header.splitlines() if f"del-check {relative}" in line]
    launches = [line for line in header.splitlines() if re.match(r"#   (axolotl|accelerate|torchrun) ", line)]
    counts = {int(n) for line in launches for n in re.findall(r"--(?:num_processes|nproc_per_node) (\d+)", line)}
    assert len(args) <= 1 and len(counts) <= 1, (args, counts)
    return (args[0] if args else []), (counts.pop() if counts else None)


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
        assert ": " in rest, (line, lines)
        name, detail = rest.split(": ", 1)
        checks[name] = (state, detail)
    return status, checks, lines[-1]


@pytest.mark.parametrize("path", EXAMPLE_PATHS, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_every_example_is_checked_for_the_gpus_its_header_names(path):
    """The GPU count del-check validates an example for (its default, or the `--gpus` of the del-check line in the
    header) is the count the header's launch commands start."""
    args, launched = header_commands(path)
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    checked = parse_args([str(path), *args]).gpus or (8 if "fsdp_config" in cfg or "deepspeed" in cfg else 1)
    assert checked == (launched or 1), path


CHECKED_BY_RUNNING = [p for p in EXAMPLE_PATHS if p.parent.name != "ablation"] + [EXAMPLES / "ablation" / "del.yaml"]


@pytest.mark.parametrize("path", CHECKED_BY_RUNNING, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_every_example_passes_del_check_with_local_folders(capsys, path):
    """(One config of the ablation: the nine differ in the criterion only, tests/core/test_criteria.py, and each passes
    Axolotl's validation there.)"""
    cfg = yaml.safe_load(path.read_text(encoding="utf-8"))
    tokenizer = TOKENIZERS[cfg["base_model"]]
    folder = tiny_model_dir(tokenizer)
    args, launched = header_commands(path)
    status, checks, verdict = del_check(capsys, path, *args, "--local", f"{cfg['base_model']}={folder}")

    assert status == 0 and verdict == f"del-check {path}: passed", checks
    # on a machine without a GPU, a note of what would stop the run here (tests/axolotl/test_cpu_recipe.py), not a check
    note = [] if torch.cuda.is_available() else ["this machine"]
    assert list(checks) == ["validation", *note, "tokenizer", "model type", "kernels"]
    assert all(state == ("note" if name in note else "ok") for name, (state, _) in checks.items()), checks
    card = "A100, compute capability 8.0" if launched else "RTX 3090 / A10 (24 GB), compute capability 8.6"
    assert checks["validation"][1].startswith(
        f"Axolotl's validation for {launched or 1} x {card}, del-check's default card, as no card was given"
    )
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
        assert (state, detail) == (
            "not checked",
            "Qwen/Qwen2.5-7B: not in the Hugging Face cache; pass --local Qwen/Qwen2.5-7B=FOLDER (a folder holding "
            "its files)",
        )


def test_a_folder_without_config_json_is_named_with_the_file_it_lacks(capsys, tmp_path):
    """A tokenizer-only folder for the hub id: the tokenizer is checked, and the model type names config.json."""
    folder = tmp_path / "qwen-tokenizer"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((tiny_model_dir("qwen2") / name).read_bytes())
    path = EXAMPLES / "qwen2.5-7b" / "qlora-24gb.yml"
    status, checks, _ = del_check(capsys, path, "--local", f"Qwen/Qwen2.5-7B={folder}")
    assert status == 2 and checks["tokenizer"][0] == "ok"
    assert checks["model type"] == (
        "not checked",
        f"{folder} (for Qwen/Qwen2.5-7B): no config.json in this folder, from which the model type is read; copy "
        "the model's file there",
    )


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
    from tools.assets import tokenizer_dir

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


# ---------------------------------------------------------------------------------------------- the card


@pytest.mark.parametrize(
    "text, expected",
    [
        ("8.9", (8, 9)),  # nvidia-smi --query-gpu=compute_cap
        ("(8, 9)", (8, 9)),  # torch.cuda.get_device_capability()
        ("sm_89", (8, 9)),  # torch.cuda.get_arch_list(), Axolotl's compute_capability
        ("89", (8, 9)),
        ("sm_90a", (9, 0)),
        ("12.0", (12, 0)),
        ("sm_120", (12, 0)),
        ("7.5", (7, 5)),
    ],
)
def test_a_compute_capability_in_every_form_nvidia_smi_and_torch_print(text, expected):
    card = parse_compute_capability(text)
    assert (card.major, card.minor) == expected
    assert card.capabilities(1)["compute_capability"] == f"sm_{expected[0]}{expected[1]}"


@pytest.mark.parametrize("text", ["8.", "sm_9", "9", "sm_890", "2.0", "ampere", "8.9.1"])
def test_a_malformed_compute_capability_is_a_usage_error_naming_the_forms(capsys, text):
    with pytest.raises(SystemExit) as stop:
        main(["config.yml", "--compute-capability", text])
    assert stop.value.code == 3  # not 1, "a check failed", nor 2, "partly checked"
    err = capsys.readouterr().err
    assert f"--compute-capability {text!r}: not a CUDA compute capability" in err
    assert "8.9, 89, sm_89 or (8, 9)" in err


def test_help_names_the_forms_the_cards_and_the_exit_statuses(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "8.9, 89, sm_89 or (8, 9)" in text and "--verbose" in text
    assert ", ".join(sorted(GPUS)) in text and "rtx4090" in GPUS and GPUS["l4"].sm == "sm_89"
    assert "3 nothing checked" in text


QLORA = EXAMPLES / "qwen2.5-7b" / "qlora-24gb.yml"


@pytest.mark.parametrize("card", [["--gpu", "t4"], ["--compute-capability", "7.5"]], ids=["gpu-t4", "cc-7.5"])
def test_a_card_without_bf16_fails_as_axolotl_warns_and_transformers_refuses_tf32(capsys, card):
    """Axolotl's validation only warns that bf16 training will fail below compute capability 8.0 (its check_bf16),
    and transformers' TrainingArguments raises for tf32 there: del-check fails the config for that card."""
    folder = tiny_model_dir("qwen2")
    status, checks, _ = del_check(capsys, QLORA, *card, "--local", f"Qwen/Qwen2.5-7B={folder}")
    assert status == 1 and list(checks) == ["validation"]
    state, detail = checks["validation"]
    label = "1 x T4, compute capability 7.5" if card[0] == "--gpu" else "1 GPU(s) of compute capability 7.5"
    assert state == "FAILED" and detail.startswith(f"Axolotl's validation for {label}: training would fail there")
    assert "Axolotl warns: bf16 requested, but AMP is not supported on this GPU" in detail
    assert "set `bf16: false` and `fp16: true`" in detail and "set `tf32: false`" in detail


def test_the_advised_precision_passes_on_that_card_and_an_ada_card_passes_as_written(capsys, tmp_path):
    folder = tiny_model_dir("qwen2")
    fp16 = write(tmp_path, "qwen2.5-7b/qlora-24gb.yml", bf16=False, fp16=True, tf32=False)
    status, checks, _ = del_check(capsys, fp16, "--gpu", "t4", "--local", f"Qwen/Qwen2.5-7B={folder}")
    assert status == 0 and checks["validation"][1].startswith("Axolotl's validation for 1 x T4, compute capability")
    status, checks, _ = del_check(capsys, QLORA, "--compute-capability", "8.9", "--local", f"Qwen/Qwen2.5-7B={folder}")
    assert status == 0
    assert checks["validation"][1].startswith("Axolotl's validation for 1 GPU(s) of compute capability 8.9 passed")


def test_a_named_card_wins_over_this_machines_gpu(monkeypatch):
    """The CUDA probe replaced (this machine has no GPU): without --gpu / --compute-capability del-check reads the
    local GPU as Axolotl does, with either it checks for the card named."""
    import torch
    from axolotl.cli import config as axolotl_cli_config

    from del_plugin.axolotl.check import hardware

    # Axolotl's n_gpu is WORLD_SIZE, 1 outside a launcher: del-check checks for the machine's 4 GPUs
    local = ({"bf16": True, "fp8": True, "tf32": True, "n_gpu": 1, "compute_capability": "sm_90"}, {})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(axolotl_cli_config, "gpu_capabilities", lambda: (dict(local[0]), {}))
    capabilities, _, described = hardware(parse_args(["c.yml"]), {})
    assert capabilities["compute_capability"] == "sm_90" and described == "this machine's GPU (sm_90), 4 GPU(s)"
    assert hardware(parse_args(["c.yml", "--gpus", "2"]), {})[0]["n_gpu"] == 2
    capabilities, _, described = hardware(parse_args(["c.yml", "--gpu", "rtx3090", "--gpus", "2"]), {})
    assert capabilities == {"bf16": True, "fp8": False, "tf32": True, "n_gpu": 2, "compute_capability": "sm_86"}
    assert described == "2 x RTX 3090, compute capability 8.6"


# ---------------------------------------------------------------------------------------------- unusable input


def _unusable(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / "a.yml").write_text("base_model: x\n", encoding="utf-8")
    latin1 = tmp_path / "latin1.yml"
    latin1.write_bytes("base_model: x\n# caf\u00e9\n".encode("latin-1"))
    broken = tmp_path / "broken.yml"
    broken.write_text("base_model: x\nplugins:\n  - del_plugin.DELPlugin\n del_alpha: 0.03\n", encoding="utf-8")
    listed = tmp_path / "list.yml"
    listed.write_text("- base_model: x\n", encoding="utf-8")
    empty = tmp_path / "empty.yml"
    empty.write_text("# nothing yet\n", encoding="utf-8")
    sweep = EXAMPLES / "compare-with-mle.yml"
    missing = tmp_path / "missing.yml"
    return {
        "missing": (missing, f"{missing}: no such file; pass the path of the Axolotl YAML you train with"),
        "folder": (folder, f"{folder} is a folder; pass the Axolotl YAML file itself (in it: a.yml)"),
        "not-utf8": (latin1, f"{latin1} is not UTF-8 text (byte 0xe9 on line 2); save it as UTF-8"),
        "broken-yaml": (broken, f"{broken} is not valid YAML at line 4, column 2: "),
        "a-list": (listed, f"{listed} holds a YAML list, not an Axolotl config"),
        "empty": (empty, f"{empty} is empty; pass the Axolotl YAML you train with"),
        "sweep": (
            sweep,
            f"{sweep} is an Axolotl sweep file (values to vary), not a config: use it as `axolotl train CONFIG "
            f"--sweep {sweep}` and check the config it varies, `del-check CONFIG`",
        ),
    }


@pytest.mark.parametrize("case", ["missing", "folder", "not-utf8", "broken-yaml", "a-list", "empty", "sweep"])
def test_a_file_that_cannot_be_used_gets_one_line_and_exit_3(capsys, tmp_path, case):
    path, message = _unusable(tmp_path)[case]
    assert main([str(path)]) == 3
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith(f"del-check: {message}"), err


# ---------------------------------------------------------------------------------------------- host output


def test_the_host_libraries_output_is_held_back_and_shown_with_verbose(capsys):
    """What a library logs through a handler of its own (as torch does), through the root logger (bitsandbytes) or
    as a Python warning, emitted inside the check."""
    import logging
    import warnings

    from del_plugin.axolotl.check import HostOutput

    own = logging.getLogger("torch_like_library")
    own.propagate = False
    handler = logging.StreamHandler(sys.stderr)
    own.addHandler(handler)
    try:
        for verbose in (False, True):
            with HostOutput(verbose) as host:
                own.warning("register_constant() on Enum subclasses is deprecated")
                logging.getLogger("bitsandbytes_like").warning("Failed to load CPU gemm_4bit_forward")
                if not verbose:  # (with --verbose a warning goes where Python sends it: pytest's summary here)
                    warnings.warn("a deprecated argument", UserWarning, stacklevel=1)
            err = capsys.readouterr().err
            if verbose:
                assert host.held == [] and "register_constant() on Enum subclasses is deprecated" in err
            else:
                assert err == ""
                assert host.held == [
                    "torch_like_library: register_constant() on Enum subclasses is deprecated",
                    "bitsandbytes_like: Failed to load CPU gemm_4bit_forward",
                    "UserWarning: a deprecated argument",
                ]
    finally:
        own.removeHandler(handler)


def test_del_check_prints_its_report_and_no_host_warnings(tmp_path):
    """The command as a user runs it, in a process of its own, where torch, Axolotl and bitsandbytes are imported
    inside the check (the pinned torch warns about register_constant on import of Axolotl's dependencies), on the
    config of a user who wrote `del_alpha: 1e9`: the report and the verdict on stdout, one note on stderr."""
    config = tmp_path / "big-alpha.yml"
    config.write_text(QLORA.read_text(encoding="utf-8").replace("\ndel_alpha: 0.03", "\ndel_alpha: 1e9"), "utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "del_plugin.axolotl.check", config.name, "--compute-capability", "8.9"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        "FAILED       validation: Axolotl's validation for 1 GPU(s) of compute capability 8.9 refused the config:",
        "  del_plugin.DELPlugin: `del_alpha: 1e9` is read by YAML as the string '1e9', not a number (YAML needs a "
        "dot and a signed exponent); write `del_alpha: 1.0e+9`.",
        "del-check big-alpha.yml: failed",
    ]
    note = re.fullmatch(
        r"del-check: (\d+) message\(s\) of the host libraries held back; --verbose shows them\n", done.stderr
    )
    assert note and int(note.group(1)) >= 1, done.stderr


def test_a_key_no_schema_knows_is_warned_with_the_closest_key_and_a_bad_value_names_its_key(capsys, tmp_path):
    """Axolotl drops keys it does not know: a typo of one of its own keys would train with the default. The warning
    does not change the exit status; a value Axolotl cannot read is refused with its key."""
    folder = tiny_model_dir("qwen2")
    path = write(tmp_path, "qwen2.5-7b/qlora-24gb.yml", lora_dropuot=0.0, lora_dropout=None)
    status, checks, _ = del_check(capsys, path, "--local", f"Qwen/Qwen2.5-7B={folder}")
    assert status == 0, checks
    assert checks["keys"] == (
        "warning",
        "`lora_dropuot` is no key of Axolotl's or a plugin's, so it is not used: did you mean `lora_dropout`?",
    )
    path = write(tmp_path, "qwen2.5-7b/qlora-24gb.yml", learning_rate="fast")
    status, checks, _ = del_check(capsys, path, "--local", f"Qwen/Qwen2.5-7B={folder}")
    assert status == 1 and "keys" not in checks
    assert checks["validation"][1].endswith("\n  `learning_rate: fast`: could not convert string to float: 'fast'")
