"""Bad configs are refused by Axolotl's own config validation, before any model is loaded, naming the key."""

from __future__ import annotations

import pytest
from axolotl_helpers import cpu_config, load_config

from del_plugin.assets import gsm8k_rows
from del_plugin.cpu import write_alpaca_jsonl

from del_plugin.assets import tiny_model_dir, tokenizer_dir


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cfg")
    data = write_alpaca_jsonl(tmp / "d.jsonl", gsm8k_rows(4))
    return lambda **kw: cpu_config(tmp, tiny_model_dir("llama-spm"), data, **kw)


def refused(cfg) -> str:
    with pytest.raises(Exception) as err:
        load_config(cfg)
    return str(err.value)


def test_valid_config_keeps_our_keys(base):
    cfg = load_config(base(del_alpha=0.05, del_place_weighting=False, del_integer_slope=3.0, del_decimal_base=1.1))
    assert (cfg.del_alpha, cfg.del_place_weighting, cfg.del_integer_slope, cfg.del_decimal_base) == (
        0.05, False, 3.0, 1.1
    )


def test_defaults(base):
    cfg = base()
    del cfg["del_alpha"]
    loaded = load_config(cfg)
    assert (loaded.del_alpha, loaded.del_place_weighting, loaded.del_integer_slope, loaded.del_decimal_base) == (
        0.1, True, 2.0, 1.02
    )


@pytest.mark.parametrize(
    "key, value",
    [("del_alpha", -0.1), ("del_integer_slope", 0.0), ("del_decimal_base", -1.0), ("del_alpha", "lots")],
)
def test_bad_values_name_the_key(base, key, value):
    assert key in refused(base(**{key: value}))


CCE = "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"


@pytest.fixture
def unregister_cce():
    # Axolotl's plugin manager is process-wide and would keep CCE's validators for every later config
    yield
    from axolotl.integrations.base import PluginManager

    PluginManager.get_instance().plugins.pop(CCE, None)


def test_fused_losses_that_hide_logits_are_refused(base, unregister_cce):
    message = refused(base(liger_fused_linear_cross_entropy=True))
    assert "liger_fused_linear_cross_entropy" in message and "logits" in message
    message = refused(base(liger_cross_entropy=True))
    assert "liger_cross_entropy" in message and "in place" in message
    message = refused(base(bf16=True, plugins=[CCE, "del_plugin.DELPlugin"]))
    assert "Cut Cross Entropy" in message and "cut_cross_entropy: false" in message


def test_chunked_cross_entropy_is_accepted(base):
    # chunked CE only changes how CE is summed; the logits DEL reads are still returned
    assert load_config(base(chunked_cross_entropy=True)).chunked_cross_entropy


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


def test_multi_digit_tokenizer_is_refused_at_validation(base):
    message = refused(base(tokenizer_config=str(tokenizer_dir("llama-bpe"))))
    assert "multi-digit tokens" in message and "llama-bpe" in message


def test_other_configs_are_untouched_when_the_plugin_is_not_listed(base):
    # the plugin manager is process-wide: a later config without the plugin must not be checked by it
    cfg = base(plugins=[], rl=None, tokenizer_config=str(tokenizer_dir("llama-bpe")))
    del cfg["del_alpha"]
    assert load_config(cfg).plugins in ([], None)
