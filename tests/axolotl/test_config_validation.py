"""Bad configs are refused by Axolotl's own config validation, before any model is loaded, naming the key."""

from __future__ import annotations

import pytest

from tools.assets import tokenizer_dir

from axolotl_helpers import load_config, refused


def test_valid_config_keeps_our_keys(base):
    cfg = load_config(base(del_alpha=0.05, del_place_weighting=False, del_integer_slope=3.0, del_decimal_base=1.1))
    assert (cfg.del_alpha, cfg.del_place_weighting, cfg.del_integer_slope, cfg.del_decimal_base) == (
        0.05,
        False,
        3.0,
        1.1,
    )


def test_defaults(base):
    cfg = base()
    del cfg["del_alpha"]
    loaded = load_config(cfg)
    # the README's config table and docs/efficacy.md ("Choosing del_alpha") give these
    assert (loaded.del_alpha, loaded.del_place_weighting, loaded.del_integer_slope, loaded.del_decimal_base) == (
        0.03,
        True,
        2.0,
        1.02,
    )


@pytest.mark.parametrize(
    "key, value",
    [("del_alpha", -0.1), ("del_integer_slope", 0.0), ("del_decimal_base", -1.0), ("del_alpha", "lots")],
)
def test_bad_values_name_the_key(base, key, value):
    assert key in refused(base(**{key: value}))


@pytest.mark.parametrize(
    "line, written",
    [("del_alpha: 1e9", "1.0e+9"), ("del_alpha: 3e-2", "3.0e-2"), ("del_decimal_base: 1.5E0", "1.5e+0")],
)
def test_a_number_yaml_reads_as_a_string_is_refused_with_how_to_write_it(base, line, written):
    import yaml

    key, value = line.split(": ")
    assert yaml.safe_load(line) == {key: value}  # PyYAML, as Axolotl loads configs: a string
    message = refused(base(**yaml.safe_load(line)))
    assert f"`{line}` is read by YAML as the string '{value}', not a number" in message
    assert f"write `{key}: {written}`" in message
    assert yaml.safe_load(f"{key}: {written}") == {key: float(value)}  # the advice is a YAML float, the same value


CCE = "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"


@pytest.mark.parametrize(
    "overrides",
    [
        {"liger_fused_linear_cross_entropy": True},
        {"liger_cross_entropy": True},
        {"chunked_cross_entropy": True},
        {"bf16": True, "plugins": [CCE, "del_plugin.DELPlugin"]},
    ],
)
def test_every_cross_entropy_kernel_is_accepted(base, overrides):
    # DEL reads the hidden states, so kernels that never return logits (or overwrite them) are fine
    cfg = load_config(base(**overrides))
    assert cfg.del_alpha == 0.3


@pytest.mark.parametrize("criterion", ["mixce", "emo"])
@pytest.mark.parametrize(
    "overrides, key",
    [
        ({"liger_fused_linear_cross_entropy": True}, "liger_fused_linear_cross_entropy"),
        ({"bf16": True, "plugins": [CCE, "del_plugin.DELPlugin"]}, "cut_cross_entropy"),
        ({"liger_cross_entropy": True}, "liger_cross_entropy"),
        ({"chunked_cross_entropy": True}, "chunked_cross_entropy"),
    ],
)
def test_full_softmax_criteria_refuse_cross_entropy_kernels(base, criterion, overrides, key):
    message = refused(base(del_criterion=criterion, del_alpha=1.0, **overrides))
    assert f"`{key}`" in message and "full softmax" in message and criterion in message


@pytest.mark.parametrize("targets", [["q_proj", "lm_head"], "model.*|lm_head"])
def test_lora_on_the_head_is_refused_with_liger_fused_loss_only(base, targets):
    message = refused(base(lora_target_modules=targets, liger_fused_linear_cross_entropy=True))
    assert "LoRA adapter on lm_head" in message and "lora_modules_to_save" in message
    # Axolotl 0.21's Cut Cross Entropy fork folds the adapter into its loss (tests/hf/test_fused_losses.py trains
    # through its forward); plain cross-entropy calls the head (tests/core/test_hidden.py)
    for overrides in ({"bf16": True, "plugins": [CCE, "del_plugin.DELPlugin"]}, {}):
        assert load_config(base(lora_target_modules=targets, **overrides)).lora_target_modules == targets


@pytest.mark.parametrize("fork, refused_", [("folds", False), ("passes the weight", True), (None, False)])
def test_a_cce_fork_that_drops_a_lora_head_is_refused_before_the_model_loads(monkeypatch, fork, refused_):
    """The fork is not on PyPI: a stand-in module ``cut_cross_entropy.transformers.utils`` with or without
    ``apply_lce_lm_head`` (the fork's function that folds the adapter) replaces it here; None: no fork installed
    (Axolotl's own plugin then refuses with its install line)."""
    import sys
    import types

    from axolotl.utils.dict import DictDefault

    from del_plugin.axolotl.plugin import check_lora_head_kernel

    if fork is None:
        monkeypatch.setitem(sys.modules, "cut_cross_entropy.transformers.utils", None)  # import fails
    else:
        utils = types.ModuleType("cut_cross_entropy.transformers.utils")
        if fork == "folds":
            utils.apply_lce_lm_head = lambda *args, **kwargs: None
        monkeypatch.setitem(sys.modules, "cut_cross_entropy.transformers.utils", utils)
    cfg = DictDefault(
        plugins=[CCE, "del_plugin.DELPlugin"], cut_cross_entropy=True, adapter="lora", lora_target_modules=["lm_head"]
    )
    if refused_:
        with pytest.raises(ValueError, match="passes lm_head.weight.*apply_lce_lm_head"):
            check_lora_head_kernel(cfg)
    else:
        check_lora_head_kernel(cfg)
    check_lora_head_kernel(DictDefault({**cfg, "lora_target_modules": ["q_proj"]}))  # no head adapter: nothing to do


def test_deepspeed_zero3_is_refused_only_beside_a_fused_kernel(base, tmp_path):
    # Axolotl's validation alone: load_cfg would go on to set DeepSpeed's process group up (NCCL) in this process;
    # tests/e2e/test_deepspeed_cpu_e2e.py trains ZeRO-1, -2 and -3 with DEL
    from axolotl.utils.config import prepare_plugins, validate_config
    from axolotl.utils.dict import DictDefault

    from del_plugin.axolotl.args import zero_stage

    for stage in (1, 2, 3):
        path = tmp_path / f"zero{stage}.json"
        path.write_text(f'{{"zero_optimization": {{"stage": {stage}}}}}')
        assert zero_stage(str(path)) == stage
        cfg = DictDefault(base(deepspeed=str(path)))
        prepare_plugins(cfg)
        assert validate_config(cfg).deepspeed
    zero3 = str(tmp_path / "zero3.json")
    message = refused(base(deepspeed=zero3, liger_fused_linear_cross_entropy=True))
    assert "`liger_fused_linear_cross_entropy` with DeepSpeed ZeRO-3" in message and "FSDP2" in message
    message = refused(base(deepspeed=zero3, bf16=True, plugins=[CCE, "del_plugin.DELPlugin"]))
    assert "`cut_cross_entropy` with DeepSpeed ZeRO-3" in message
    # EMO's cost embedding is a copy of the whole head, made when the trainer is built: refused before the model
    # loads, not at that point on every rank (del_plugin/core/criteria/token.py: emo_cost_embedding)
    message = refused(base(deepspeed=zero3, del_criterion="emo", del_alpha=0.5))
    assert "`del_criterion: emo` with DeepSpeed ZeRO-3" in message and "zero2.json" in message
    for criterion in ("emo", "mixce"):  # ZeRO-2 keeps whole parameters; MixCE reads only the logits
        stage = "zero2" if criterion == "emo" else "zero3"
        cfg = DictDefault(base(deepspeed=str(tmp_path / f"{stage}.json"), del_criterion=criterion, del_alpha=0.5))
        prepare_plugins(cfg)
        assert validate_config(cfg).del_criterion == criterion


def test_architectures_are_checked_before_the_model_loads(base, tmp_path):
    from transformers import AutoConfig

    from del_plugin.axolotl.source_checks import check_model_source

    tokenizer = str(tokenizer_dir("llama-spm"))
    for name, model_type, extra in [
        ("gemma2", "gemma2", {"final_logit_softcapping": 30.0}),  # in the table: its soft cap is applied
        ("stablelm", "stablelm", {"logit_scale": 0.0625}),  # outside it, with a transform DEL does not know
        ("falcon", "falcon_h1", {"lm_head_multiplier": 2.0}),  # beside Liger's FLCE, whose forward drops it
    ]:
        AutoConfig.for_model(model_type, **extra).save_pretrained(tmp_path / name)
    check_model_source.cache_clear()
    load_config(base(base_model=str(tmp_path / "gemma2"), tokenizer_config=tokenizer))
    message = refused(base(base_model=str(tmp_path / "stablelm"), tokenizer_config=tokenizer))
    assert "model_type 'stablelm'" in message and "logit_scale=0.0625" in message and "no table entry" in message
    falcon = dict(base_model=str(tmp_path / "falcon"), tokenizer_config=tokenizer)
    load_config(base(**falcon))
    message = refused(
        base(
            **falcon,
            plugins=["axolotl.integrations.liger.LigerPlugin", "del_plugin.DELPlugin"],
            liger_fused_linear_cross_entropy=True,
        )
    )
    assert "`liger_fused_linear_cross_entropy: true` with model_type 'falcon_h1'" in message


@pytest.mark.parametrize(
    "overrides, words",
    [
        ({"rl": "dpo"}, "supervised fine-tuning only"),
        ({"reward_model": True}, "supervised fine-tuning only"),
        ({"trainer_cls": "my.Trainer"}, "trainer_cls"),
        ({"context_parallel_size": 2}, "context_parallel_size"),
    ],
)
def test_incompatible_modes_are_refused(base, overrides, words):
    assert words in refused(base(**overrides))


def test_incomplete_number_tokens_are_refused_at_validation(base):
    # GPT-2 merges digits into tokens of up to four digits, an incomplete set of them
    message = refused(base(tokenizer_config=str(tokenizer_dir("gpt-2"))))
    assert "multi-digit tokens" in message and "gpt-2" in message


def test_llama3_number_tokens_are_accepted_at_validation(base):
    tokenizer = str(tokenizer_dir("llama-bpe"))
    cfg = load_config(base(tokenizer_config=tokenizer))
    # accepted as written: the tokenizer and DEL's weight (base's 0.3) kept
    assert cfg.tokenizer_config == tokenizer and cfg.del_alpha == 0.3


def test_other_configs_are_untouched_when_the_plugin_is_not_listed(base):
    # the plugin manager is process-wide: a later config without the plugin must not be checked by it
    cfg = base(plugins=[], rl=None, tokenizer_config=str(tokenizer_dir("llama-bpe")))
    del cfg["del_alpha"]
    assert load_config(cfg).plugins in ([], None)


def test_the_installed_axolotl_version_is_checked_with_a_clear_message():
    import importlib.metadata
    import logging

    from del_plugin.axolotl.logs import LOGGER_NAME
    from del_plugin.axolotl.plugin import check_axolotl_version

    assert check_axolotl_version() == importlib.metadata.version("axolotl") == "0.21.0"
    assert check_axolotl_version("0.21.4") == "0.21.4"
    with pytest.raises(RuntimeError, match=r"needs Axolotl >=0\.21\.0,<0\.22.*Axolotl 0\.20\.1 is installed.*0\.21\.0"):
        check_axolotl_version("0.20.1")
    # a handler of its own: Axolotl's logging set-up stops `axolotl.*` records from reaching pytest's root handler
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logging.getLogger(LOGGER_NAME).addHandler(handler)
    try:
        assert check_axolotl_version("0.22.0") == "0.22.0"
    finally:
        logging.getLogger(LOGGER_NAME).removeHandler(handler)
    assert any("tested with Axolotl 0.21.0; Axolotl 0.22.0 is installed" in r.getMessage() for r in records)


def test_every_refusal_of_the_plugins_keys_is_reported_at_once(base):
    """Two unknown set names, a limit below 1, a number YAML read as a string and a bad criterion parameter: one
    validation names them all (pydantic stops at the first model validator that raises), and a key's field error
    that a refusal already names is not repeated."""
    from pydantic import ValidationError

    cfg = base(
        del_eval_benchmarks=["gsm8kk", "svampp"],
        del_eval_limit=0,
        del_eval_max_new_tokens="abc",
        del_alpha="3e-2",
    )
    with pytest.raises(ValidationError) as err:
        load_config(cfg)
    messages = [e["msg"] for e in err.value.errors()]
    text = "\n".join(messages)
    assert "unknown benchmark 'gsm8kk' (did you mean 'gsm8k'?), 'svampp' (did you mean 'svamp'?)" in text
    assert "`del_eval_limit` must be a whole number >= 1, got 0" in text
    assert "`del_eval_max_new_tokens` must be a whole number >= 1, got 'abc'" in text
    assert "`del_alpha: 3e-2` is read by YAML as the string '3e-2'" in text
    # one message each: the refusal of del_eval_max_new_tokens, not pydantic's "valid integer" beside it
    assert len(messages) == 3 and sum("del_eval_max_new_tokens" in m for m in messages) == 1, messages


def test_a_single_refusal_reads_as_before(base):
    message = refused(base(del_eval_limit=0, del_eval_benchmarks=["gsm8k"]))
    assert "del_plugin.DELPlugin: `del_eval_limit` must be a whole number >= 1, got 0." in message


def test_ntl_float_level_is_a_switch_of_ntl_number_only(base):
    """``del_ntl_float_level``: false by default, true accepted with ``ntl_number`` (and read into its settings),
    refused beside another criterion and when it is no boolean, naming the key, before the model loads."""
    from del_plugin.hf.settings import DELSettings

    assert load_config(base(del_criterion="ntl_number")).del_ntl_float_level is False
    cfg = load_config(base(del_criterion="ntl_number", del_ntl_float_level=True))
    assert cfg.del_ntl_float_level is True
    assert dict(DELSettings.from_config(cfg).params) == {"ntl_float_level": True}
    message = refused(base(del_criterion="del", del_ntl_float_level=True))
    assert "`del_ntl_float_level` applies only to `del_criterion: ntl_number`, not `del`" in message
    assert "`del_ntl_float_level` must be true or false, got 'yes'" in refused(
        base(del_criterion="ntl_number", del_ntl_float_level="yes")
    )


@pytest.mark.parametrize("criterion, alpha", [("del", None), ("ntl_number", 0.0371), ("mixce", 0.25)])
def test_the_settings_validation_builds_are_the_ones_the_trainer_is_given(base, monkeypatch, criterion, alpha):
    """Built once and carried: Axolotl's validator reads DEL's keys from the raw config, and DELTrainer's
    post_set_axolotl_cfg reads them again from the validated one (unset keys filled with their defaults); the second
    reading returns the settings the first built. Only DELSettings' reader is wrapped, to count its builds."""
    from del_plugin.hf import settings as settings_module
    from del_plugin.hf.settings import DELSettings

    monkeypatch.setattr(settings_module, "_BUILT", {})  # nothing carried from another test
    builds = []
    read = DELSettings._read.__func__
    monkeypatch.setattr(DELSettings, "_read", classmethod(lambda cls, r: builds.append(read(cls, r)) or builds[-1]))
    cfg = base(del_criterion=criterion, del_mixce_eta=0.4 if criterion == "mixce" else None)
    if alpha is None:
        del cfg["del_alpha"]
    else:
        cfg["del_alpha"] = alpha
    validated = load_config(cfg)
    assert len(builds) == 1  # the validator's
    settings = DELSettings.from_config(validated)  # what post_set_axolotl_cfg reads
    assert settings is builds[0] and len(builds) == 1
    assert (settings.criterion, settings.alpha) == (criterion, 0.03 if alpha is None else alpha)
    if criterion == "mixce":
        assert dict(settings.params) == {"mixce_eta": 0.4}
