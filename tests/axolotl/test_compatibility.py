"""The table of what works with what (del_plugin/core/compatibility.py): its readings of a config, worked out by hand;
each rule's wording written there once; every rule raised by the host that applies it, with the table's message."""

from __future__ import annotations

import ast
import string
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from del_plugin.core.compatibility import (
    RULES,
    cce_enabled,
    cross_entropy_kernels,
    fused_cross_entropy,
    kernels_dropping_lora_head,
    logits_missing_message,
    lora_targets_head,
    zero_stage,
)

from repo import REPO

pytestmark = pytest.mark.axolotl

PACKAGE = REPO / "del_plugin"
PLUGIN = "del_plugin.DELPlugin"
CCE = "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"


# ------------------------------------------------------------------------------------------ the table's readings
@pytest.mark.parametrize(
    "config, fused, replacing",
    [
        ({}, [], []),
        ({"liger_fused_linear_cross_entropy": True}, ["liger_fused_linear_cross_entropy"], []),
        ({"plugins": [CCE, PLUGIN]}, ["cut_cross_entropy"], []),  # the plugin listed: on by default, as Axolotl's
        ({"plugins": [CCE, PLUGIN], "cut_cross_entropy": False}, [], []),
        ({"plugins": [CCE, PLUGIN], "cut_cross_entropy": None}, [], []),  # Axolotl reads the key as a truth value
        ({"cut_cross_entropy": True}, [], []),  # the key without the plugin switches nothing on
        (
            {"liger_cross_entropy": True, "chunked_cross_entropy": True},
            [],
            ["liger_cross_entropy", "chunked_cross_entropy"],
        ),
        (
            {"plugins": [CCE], "chunked_cross_entropy": True, "liger_fused_linear_cross_entropy": True},
            ["liger_fused_linear_cross_entropy", "cut_cross_entropy"],
            ["chunked_cross_entropy"],
        ),
    ],
)
def test_the_kernels_a_config_switches_on(config, fused, replacing):
    assert fused_cross_entropy(config) == fused
    assert cce_enabled(config) == ("cut_cross_entropy" in fused)
    assert cross_entropy_kernels(config) == fused + replacing
    # of them, Liger's fused kernel alone reads the base lm_head.weight (Axolotl's Cut Cross Entropy folds a LoRA head)
    assert kernels_dropping_lora_head(config) == [k for k in fused if k == "liger_fused_linear_cross_entropy"]


@pytest.mark.parametrize(
    "targets, on_head",
    [
        (["q_proj", "lm_head"], True),
        (["model.lm_head"], True),
        (["q_proj", "v_proj"], False),
        (["my_lm_head"], False),
        ("model.*|lm_head", True),  # one regex, as PEFT matches it against the whole module name
        ("lm_head_extra", False),
        (".*proj", False),
        (None, False),
    ],
)
def test_lora_targets_on_the_head(targets, on_head):
    assert lora_targets_head(targets) is on_head


def test_the_zero_stage_of_a_deepspeed_key(tmp_path):
    path = tmp_path / "ds.json"
    path.write_text('{"zero_optimization": {"stage": 2}}')
    assert zero_stage(str(path)) == 2
    assert zero_stage({"zero_optimization": {"stage": 3}}) == 3
    assert zero_stage(str(tmp_path / "deepspeed_configs_zero3.json")) == 3  # not here: read from its name
    assert zero_stage(str(tmp_path / "zero2.json")) is None
    assert zero_stage({"zero_optimization": {"stage": "auto"}}) is None
    assert zero_stage(None) is None


# ------------------------------------------------------------------------------------------ each rule written once
def _fragments(rule) -> list[str]:
    """The literal pieces of a rule's templates long enough to be its own wording."""
    return [
        literal.strip()
        for template in (rule.problem, rule.fix)
        for literal, _, _, _ in string.Formatter().parse(template)
        if len(literal.strip()) >= 24
    ]


def _strings(path: Path) -> str:
    """Every string a module writes, as Python reads it (literals split over lines joined; an f-string's fields as
    ``{}``), one a line."""
    texts = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.JoinedStr):
            texts.append("".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            texts.append(node.value)
    return "\n".join(texts)


def test_every_rule_is_worded_in_the_table_only():
    strings = {path.relative_to(PACKAGE).as_posix(): _strings(path) for path in PACKAGE.rglob("*.py")}
    for rule in RULES.values():
        fragments = _fragments(rule)
        assert fragments, rule.name
        for fragment in fragments:
            homes = [module for module, text in strings.items() if fragment in text]
            assert homes == ["core/compatibility.py"], (rule.name, fragment, homes)
    # the readings of a config are defined there too: no host computes them its own way
    sources = {path.name: path.read_text(encoding="utf-8") for path in PACKAGE.rglob("*.py")}
    for name in ("fused_cross_entropy", "cce_enabled", "lora_targets_head", "cce_folds_lora_head", "zero_stage"):
        assert [module for module, text in sources.items() if f"def {name}(" in text] == ["compatibility.py"], name


def test_the_table_imports_no_host_library():
    text = (PACKAGE / "core" / "compatibility.py").read_text(encoding="utf-8")
    for host in ("axolotl", "transformers", "trl", "peft"):
        assert f"import {host}" not in text and f"from {host}" not in text


# ------------------------------------------------------------------------------------- each rule raised by its host
def _validation_refusal(**keys) -> str:
    from del_plugin.axolotl.args import DELArgs

    with pytest.raises(ValidationError) as err:
        DELArgs.model_validate({"plugins": [PLUGIN], **keys})
    return "\n".join(e["msg"] for e in err.value.errors())


def _trl_refusal(criterion: str, **args) -> str:
    from del_plugin.hf import DELSettings
    from del_plugin.hf.trl import check_sft_loss

    with pytest.raises(ValueError) as err:
        check_sft_loss(DELSettings(criterion=criterion, alpha=0.5), SimpleNamespace(**args))
    return str(err.value)


def _with_cce_fork(monkeypatch, folds: bool) -> None:
    """The fork is not on PyPI: a stand-in ``cut_cross_entropy.transformers.utils``, with ``apply_lce_lm_head`` (the
    fork's function that folds a LoRA head into the loss) or without it, replaces it."""
    utils = types.ModuleType("cut_cross_entropy.transformers.utils")
    if folds:
        utils.apply_lce_lm_head = lambda *args, **kwargs: None
    monkeypatch.setitem(sys.modules, "cut_cross_entropy.transformers.utils", utils)


def _plugin_refusal(monkeypatch) -> str:
    from axolotl.utils.dict import DictDefault

    from del_plugin.axolotl.plugin import check_lora_head_kernel

    _with_cce_fork(monkeypatch, folds=False)
    cfg = DictDefault(plugins=[CCE, PLUGIN], adapter="lora", lora_target_modules=["q_proj", "lm_head"])
    with pytest.raises(ValueError) as err:
        check_lora_head_kernel(cfg)
    return str(err.value)


def _del_check_refusal(monkeypatch) -> str:
    from axolotl.utils.dict import DictDefault

    from del_plugin.axolotl.kernel_check import kernel_verdict

    _with_cce_fork(monkeypatch, folds=False)
    cfg = DictDefault(plugins=[CCE, PLUGIN], cut_cross_entropy=True, adapter="qlora", lora_target_modules="lm_head")
    passed, detail = kernel_verdict(cfg, None)
    assert passed is False
    _with_cce_fork(monkeypatch, folds=True)
    assert kernel_verdict(cfg, None) == (True, "cut_cross_entropy")
    return detail


def _trainer_refusal() -> str:
    from del_plugin.hf import DELSettings, TokenCriterionLoss

    with pytest.raises(RuntimeError) as err:
        TokenCriterionLoss(DELSettings(criterion="emo", alpha=0.5))({"logits": None}, None)
    return str(err.value)


def _capture_refusal(case: str, what) -> str:
    from del_plugin.core.capture_errors import DigitCaptureError, refuse_fused_kernel

    with pytest.raises(DigitCaptureError) as err:
        refuse_fused_kernel(case, what)
    return str(err.value)


def _llamafactory_refusal(**config) -> str:
    from del_plugin.llamafactory.config import DELConfigError, read_config

    with pytest.raises(DELConfigError) as err:
        read_config({"model_name_or_path": "m", "stage": "sft", **config})
    return str(err.value)


ZERO3 = {"zero_optimization": {"stage": 3}}
# rule -> (how its host meets it, the facts of its message, the keys the refusal must name)
TRIGGERS = {
    "full_logits_vs_label_smoothing": (
        lambda mp: _validation_refusal(del_criterion="mixce", del_alpha=1.0, label_smoothing_factor=0.1),
        {"criterion": "mixce"},
        ["`label_smoothing_factor`", "`del_criterion: mixce`"],
    ),
    "full_logits_vs_own_loss": (
        lambda mp: _validation_refusal(del_criterion="emo", del_alpha=1.0, use_eaft=True),
        {"criterion": "emo", "key": "use_eaft"},
        ["`use_eaft: true`", "`del_criterion: emo`"],
    ),
    "full_logits_vs_kernels": (
        lambda mp: _validation_refusal(
            del_criterion="mixce", del_alpha=1.0, plugins=[CCE, PLUGIN], chunked_cross_entropy=True
        ),
        {"criterion": "mixce", "kernels": ["cut_cross_entropy", "chunked_cross_entropy"]},
        ["`cut_cross_entropy`, `chunked_cross_entropy`", "`del_criterion: mixce`"],
    ),
    "full_logits_vs_trl_liger": (
        lambda mp: _trl_refusal("mixce", loss_type="nll", use_liger_kernel=True),
        {"criterion": "mixce"},
        ["use_liger_kernel=False", "loss_type='nll'"],
    ),
    "full_logits_vs_trl_dft": (
        lambda mp: _trl_refusal("emo", loss_type="dft"),
        {"criterion": "emo"},
        ["loss_type='dft'", "loss_type='nll'"],
    ),
    "full_logits_vs_trl_chunked": (
        lambda mp: _trl_refusal("mixce", loss_type="chunked_nll"),
        {"criterion": "mixce", "loss_type": "chunked_nll"},
        ["loss_type='chunked_nll'", "Set loss_type='nll'"],
    ),
    "full_logits_without_logits": (lambda mp: _trainer_refusal(), {"criterion": "emo"}, ["`emo`"]),
    "lora_head_vs_liger_fused": (
        lambda mp: _validation_refusal(lora_target_modules=["lm_head"], liger_fused_linear_cross_entropy=True),
        {},
        ["`lora_target_modules`", "`liger_fused_linear_cross_entropy`", "`lora_modules_to_save: [lm_head]`"],
    ),
    "own_loss_vs_llamafactory": (
        lambda mp: _llamafactory_refusal(use_eaft_loss=True),
        {"key": "use_eaft_loss"},
        ["`use_eaft_loss: true`", "remove `use_eaft_loss`"],
    ),
    "lora_head_vs_llamafactory_liger": (
        lambda mp: _llamafactory_refusal(lora_target="q_proj,lm_head", enable_liger_kernel=True),
        {},
        ["`lora_target`", "`enable_liger_kernel`", "`additional_target: lm_head`"],
    ),
    "lora_head_vs_cce_fork": (
        _plugin_refusal,
        {},
        ["lm_head with Cut Cross Entropy", "`lora_modules_to_save: [lm_head]`"],
    ),
    "fused_kernel_vs_zero3": (
        lambda mp: _validation_refusal(deepspeed=ZERO3, liger_fused_linear_cross_entropy=True),
        {"kernels": ["liger_fused_linear_cross_entropy"]},
        ["`liger_fused_linear_cross_entropy` with DeepSpeed ZeRO-3 (`deepspeed`, stage 3)", "FSDP2"],
    ),
    "whole_head_criterion_vs_zero3": (
        lambda mp: _validation_refusal(deepspeed=ZERO3, del_criterion="emo", del_alpha=0.5),
        {"criterion": "emo"},
        ["`del_criterion: emo` with DeepSpeed ZeRO-3 (`deepspeed`, stage 3)", "zero2.json"],
    ),
    "zero3_head_not_run": (
        lambda mp: _capture_refusal("zero3_head_not_run", "the LM head"),
        {"what": "the LM head"},
        ["the LM head did not run its forward", "shard with FSDP2"],
    ),
    "lora_head_not_run": (
        lambda mp: _capture_refusal("lora_head_not_run", ["default"]),
        {"what": ["default"]},
        ["LoRA adapter(s) ['default'] on the LM head", "modules_to_save"],
    ),
    "fsdp2_head_unit": (
        lambda mp: _capture_refusal("fsdp2_head_unit", ""),
        {"what": ""},
        ["still sharded (a DTensor)", "TRANSFORMER_BASED_WRAP"],
    ),
}


def test_every_rule_of_the_table_has_a_host_that_raises_it():
    assert set(TRIGGERS) == set(RULES)


@pytest.mark.parametrize("name", sorted(TRIGGERS))
def test_each_rule_is_raised_by_its_host_with_the_tables_message(monkeypatch, name):
    trigger, facts, named = TRIGGERS[name]
    message = trigger(monkeypatch)
    assert RULES[name].message(**facts) in message
    for words in named:
        assert words in message, (name, words, message)
    assert not RULES[name].keys or any(key in message for key in RULES[name].keys), (name, message)


def test_del_check_names_the_same_fix_as_the_plugin(monkeypatch):
    plugin = _plugin_refusal(monkeypatch)
    assert plugin == f"{PLUGIN}: {RULES['lora_head_vs_cce_fork'].message()}"
    assert _del_check_refusal(monkeypatch) == f"cut_cross_entropy: {RULES['lora_head_vs_cce_fork'].message()}"


def test_the_runtime_refusal_for_a_criterion_without_logits():
    # the text the trainer (and the capture) raise when a forward returned no logits, as before the table
    assert logits_missing_message("mixce") == (
        "del_plugin: `mixce` needs the model's logits; the forward returned none (a fused cross-entropy kernel is on)"
    )
