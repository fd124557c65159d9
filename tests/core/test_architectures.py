"""Conformance: for every architecture of ``del_plugin.core.architectures.ARCHITECTURES``, a tiny random model built
from transformers' own config class, with its post-head transform (soft cap, scale, division) and head bias set
to values that matter, gives

* captured digit logits equal to the model's own logits (float32, within 1e-5), and the start-up measurement
  (``check_against_logits``) passes;
* LoRA gradients of CE + DEL, DEL read from the hidden states, equal those of CE + DEL read from the logits;
* for MoE models, the same digit logits (so the same DEL term) with the routers' auxiliary loss on;
* where Liger-Kernel patches the architecture, the same gradients under Liger's fused linear cross-entropy
  forward, its real Triton kernel run by Triton's CPU interpreter (with tests/helpers/fused_kernels.py's interpreter
  shims,
  which change the interpreter, not the kernel).

The table holds exactly the architectures tested here. A model type outside it is accepted by measurement only,
and a wrong reading is refused with the measured difference.

One test-only replacement: Qwen3.5's gated-delta-rule layers call flash-linear-attention's Triton kernels when the
package is installed (Axolotl installs it), and those ask for a GPU driver even under the interpreter (their
autotuner's cache key); the Qwen3.5 models here are built with transformers' own torch implementation instead
(``fla`` hidden while its modeling module is imported), which is what transformers runs without the package.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys

import pytest
import torch
import transformers
from packaging.version import Version

from del_plugin.core import DigitLogitsCapture, shift_to_next_token
from del_plugin.core.architectures import ARCHITECTURES, Architecture
from del_plugin.core.capture import DigitCaptureError, LogitsMismatch, check_architecture, logits_tolerance

from capture_checks import Step, assert_same_step, ce_plus_del_step
from fake_vocab import VOCAB, V, encode
from fused_kernels import apply_liger, interpreter_shims
from repo import REPO
from tiny_models import SHAPE

TEXT = "it costs 12.75 and 3,040 more: 1.5 or 99"
COMMON = dict(SHAPE, vocab_size=V, hidden_size=32, intermediate_size=64, head_dim=8)
_MOE = dict(num_experts=4, num_local_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)
_VISION = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28)
# per model type: the config beyond COMMON, with every post-head transform set to a value that changes the logits
CONFIGS: dict[str, dict] = {
    "llama": {},
    "mistral": {},
    "ministral": {},
    "mixtral": dict(_MOE),
    "qwen2": {},
    "qwen2_moe": dict(_MOE, shared_expert_intermediate_size=16),
    "qwen3": {},
    "qwen3_moe": dict(_MOE),
    "qwen3_5_text": dict(
        linear_num_key_heads=2,
        linear_num_value_heads=2,
        linear_key_head_dim=8,
        linear_value_head_dim=8,
        layer_types=["linear_attention", "full_attention"],
    ),
    "gemma": {},
    "gemma2": dict(final_logit_softcapping=3.0),
    "gemma3_text": dict(final_logit_softcapping=3.0),
    "gemma3": dict(
        text_config=dict(COMMON, final_logit_softcapping=3.0),
        vision_config=dict(_VISION, patch_size=14),
        mm_tokens_per_image=4,
    ),
    "gemma4_text": dict(final_logit_softcapping=3.0),
    "phi3": {},
    "phi": {},
    "olmo2": {},
    "olmo3": {},
    "cohere": dict(logit_scale=0.37),
    "cohere2": dict(logit_scale=0.37),
    "granite": dict(logits_scaling=2.7),
    "granitemoe": dict(_MOE, logits_scaling=2.7),
    "gpt_oss": dict(_MOE),
    "deepseek_v3": dict(
        _MOE,
        n_routed_experts=4,
        qk_nope_head_dim=8,
        qk_rope_head_dim=4,
        v_head_dim=8,
        kv_lora_rank=16,
        q_lora_rank=16,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
        num_key_value_heads=4,
        head_dim=4,
    ),
    "glm4_moe": dict(_MOE, n_routed_experts=4, first_k_dense_replace=1, n_group=1, topk_group=1),
    "falcon_h1": dict(lm_head_multiplier=2.3),
    "llama4_text": dict(_MOE, intermediate_size_mlp=64),
    "llama4": dict(
        text_config=dict(COMMON, **_MOE, intermediate_size_mlp=64),
        vision_config=dict(
            _VISION, patch_size=14, vision_output_dim=16, projector_input_dim=16, projector_output_dim=16
        ),
    ),
    "mistral3": dict(
        text_config=dict(COMMON, model_type="mistral"),
        vision_config=dict(_VISION, patch_size=14, head_dim=8),
    ),
    "smollm3": {},
}
WRAPPERS = ("gemma3", "llama4", "mistral3")  # multimodal: built with AutoModelForImageTextToText
# MoE models whose forward adds the routers' auxiliary loss (output_router_logits); DeepSeek-V3, GLM-4.5 and
# Llama-4 balance their experts without one
MOE_WITH_AUX_LOSS = ("mixtral", "qwen2_moe", "qwen3_moe", "granitemoe", "gpt_oss")
# LoRA targets where "all-linear" does not fit: Falcon-H1's Mamba mixer (PEFT refuses out_proj / conv1d), Llama-4's
# router (a Linear whose forward returns a tuple)
_PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LORA_TARGETS = {"falcon_h1": _PROJECTIONS, "llama4_text": _PROJECTIONS, "llama4": _PROJECTIONS}


@functools.cache
def torch_gated_delta_rule() -> None:
    """Re-import Qwen3.5's modeling module with flash-linear-attention hidden (module docstring), once for the test
    process: its layers look the kernels up in the module's globals at every call, so it stays that way."""
    import transformers.models.qwen3_5.modeling_qwen3_5 as module

    saved = sys.modules.get("fla")
    sys.modules["fla"] = None  # the import fails: transformers falls back to its torch implementation
    try:
        importlib.reload(module)
    finally:
        if saved is None:
            sys.modules.pop("fla", None)
        else:
            sys.modules["fla"] = saved


def tiny_model(model_type: str, *, dtype=torch.float32, extra: dict | None = None) -> torch.nn.Module:
    """A tiny random model of ``model_type`` from transformers' config class (``CONFIGS``, or ``extra`` instead),
    float32, eager attention; the head scaled up so that the logits reach the soft cap's non-linear range, a random
    head bias where there is one."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    extra = CONFIGS[model_type] if extra is None else extra
    kwargs = dict(extra) if model_type in WRAPPERS else dict(COMMON, **extra)
    config = AutoConfig.for_model(model_type, **kwargs)
    torch.manual_seed(5)
    auto = AutoModelForImageTextToText if model_type in WRAPPERS else AutoModelForCausalLM
    if model_type == "qwen3_5_text":
        torch_gated_delta_rule()
    model = auto.from_config(config, attn_implementation="eager", dtype=dtype)
    head = model.get_output_embeddings()
    with torch.no_grad():
        head.weight.normal_(0.0, 0.6)
        if getattr(head, "bias", None) is not None:
            head.bias.normal_(0.0, 1.0)
    return model.eval()


def inputs() -> dict:
    labels = torch.stack([encode(TEXT), encode(TEXT[::-1])])
    labels[0, :5] = -100
    ids = torch.where(labels == -100, 3, labels)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def family_logits(logits: torch.Tensor) -> torch.Tensor:
    return logits[..., VOCAB.family_ids(logits.device)]


def test_the_table_is_the_tested_list():
    assert list(CONFIGS) == list(ARCHITECTURES)
    for model_type, architecture in ARCHITECTURES.items():
        assert isinstance(architecture, Architecture) and architecture.family, model_type


@pytest.mark.parametrize("model_type", list(CONFIGS))
def test_digit_logits_equal_the_models_own(model_type):
    model = tiny_model(model_type)
    batch = inputs()
    capture = DigitLogitsCapture(model, VOCAB)
    assert capture.architecture is ARCHITECTURES[model_type]
    with torch.no_grad(), capture:
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False)
    theirs = family_logits(out.logits.float())
    torch.testing.assert_close(capture.digit_logits(), theirs, rtol=1e-5, atol=1e-5)
    # the transforms set in CONFIGS really change the logits here (the test would pass on an identity otherwise)
    if capture.transform is not None:
        raw = capture.reader.raw_logits
        assert (raw - theirs).abs().max() > 0.05, capture.transform.description
    difference = capture.check_against_logits(model, batch["input_ids"], batch["attention_mask"])
    assert difference is not None and difference <= 1e-5 and capture.verified
    capture.remove()


def ce_plus_del(model, *, from_logits: bool, **forward_kwargs) -> Step:
    """CE + DEL on one batch, DEL read from the logits or from the hidden states."""
    return ce_plus_del_step(model, inputs(), VOCAB, from_logits=from_logits, use_cache=False, **forward_kwargs)


def lora(model, model_type: str):
    from peft import LoraConfig, get_peft_model

    targets = LORA_TARGETS.get(model_type, "all-linear")
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=targets))
    torch.manual_seed(6)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.2)
    return model


def assert_same_gradients(reference: Step, ours: Step):
    assert any("lora_A" in n for n in ours.grads)
    assert_same_step(reference, ours)


@pytest.mark.parametrize("model_type", list(CONFIGS))
def test_lora_gradients_equal_the_logits_path(model_type):
    model = lora(tiny_model(model_type), model_type)
    assert_same_gradients(ce_plus_del(model, from_logits=True), ce_plus_del(model, from_logits=False))


@pytest.mark.parametrize("model_type", ["gemma2", "phi", "falcon_h1"])
def test_gradient_checkpointing_still_reads_the_last_hidden_state(model_type):
    model = tiny_model(model_type)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()
    model = lora(model, model_type)
    assert_same_gradients(ce_plus_del(model, from_logits=True), ce_plus_del(model, from_logits=False))


@pytest.mark.parametrize("model_type", MOE_WITH_AUX_LOSS)
def test_router_auxiliary_loss_leaves_the_digit_logits_alone(model_type):
    model = tiny_model(model_type)
    batch = inputs()
    results = {}
    for router_logits in (False, True):
        model.config.router_aux_loss_coef = 0.7
        capture = DigitLogitsCapture(model, VOCAB)
        with torch.no_grad(), capture:
            out = model(**batch, use_cache=False, output_router_logits=router_logits)
        results[router_logits] = (out.loss, capture.digit_logits())
        capture.remove()
    (plain_loss, plain_digits), (aux_loss, aux_digits) = results[False], results[True]
    assert aux_loss != plain_loss  # the auxiliary loss is on, and in the model's loss
    torch.testing.assert_close(aux_digits, plain_digits, rtol=0, atol=0)


# ------------------------------------------------------------------------------------------------ measurement
def test_a_model_type_outside_the_table_is_accepted_by_measurement():
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model("stablelm", **COMMON)
    assert config.model_type not in ARCHITECTURES and check_architecture(config) is None
    torch.manual_seed(3)
    model = AutoModelForCausalLM.from_config(config)
    model.train()
    capture = DigitLogitsCapture(model, VOCAB)
    assert capture.architecture is None and not capture.verified
    batch = inputs()
    assert capture.check_against_logits(model, batch["input_ids"]) <= 1e-5
    assert capture.verified and model.training  # the training mode is restored


def test_a_wrong_reading_is_refused_with_the_measured_difference(monkeypatch):
    # Granite's entry without its division: the capture accepts it, the measurement refuses it
    monkeypatch.setitem(ARCHITECTURES, "granite", Architecture("Granite, read wrongly", reads=("logits_scaling",)))
    model = tiny_model("granite")
    capture = DigitLogitsCapture(model, VOCAB)
    batch = inputs()
    with pytest.raises(LogitsMismatch, match=r"model_type 'granite': DEL's digit logits differ .* by \d") as err:
        capture.check_against_logits(model, batch["input_ids"], batch["attention_mask"])
    assert err.value.difference > 100 * err.value.tolerance and not capture.verified


@pytest.mark.parametrize(
    ("model_type", "extra", "words"),
    [
        ("stablelm", {"logit_scale": 0.0625}, "logit_scale=0.0625.*no table entry"),
        ("llama", {"logits_scaling": 8.0}, "logits_scaling=8.0.*whose entry does not read it"),
        ("gemma2", {"logit_scale": 2.0}, "logit_scale=2.0"),
    ],
)
def test_a_transform_del_does_not_apply_is_refused_up_front(model_type, extra, words):
    from transformers import AutoConfig

    with pytest.raises(DigitCaptureError, match=words):
        check_architecture(AutoConfig.for_model(model_type, **extra))


# ------------------------------------------------------------------------------------------------ Liger
# Liger patches these but cannot train them with its fused linear cross-entropy: Granite (Liger raises
# NotImplementedError itself), Falcon-H1 and the Llama-4 wrapper (their table entries refuse the key, see
# test_liger_forwards_that_train_other_logits_are_refused)
LIGER_WITHOUT_FLCE = ("granite", "falcon_h1", "llama4")


# Liger's Gemma-3 forward (liger_kernel/transformers/model/gemma3.py multimodal_forward, 0.8.4 and 0.8.5, the newest)
# reads the model output's `image_hidden_states`, which transformers 5.25.0 turned into a property that fails on a
# text-only batch ('NoneType' object has no attribute 'pooler_output'): on the newest-hosts lane (CONTRIBUTING.md) the
# forward fails before DEL is involved. Strict, so that a Liger release that follows transformers shows here.
LIGER_GEMMA3_FAILS = Version(transformers.__version__) >= Version("5.25.0")


def liger_types() -> list:
    try:
        from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN
    except ImportError:
        return []
    fails = pytest.mark.xfail(LIGER_GEMMA3_FAILS, raises=AttributeError, strict=True, reason="Liger, transformers 5.25")
    types = [t for t in CONFIGS if t in MODEL_TYPE_TO_APPLY_LIGER_FN and t not in LIGER_WITHOUT_FLCE]
    return [pytest.param(t, marks=fails) if t == "gemma3" else t for t in types]


@contextlib.contextmanager
def restored_class_forward(model):
    """Liger's ``apply_liger_kernel_to_*`` replaces the causal LM class's forward and transformers' loss: undo both."""
    from transformers.loss import loss_utils

    cls = type(model.get_base_model() if hasattr(model, "get_base_model") else model)
    saved = cls.__dict__.get("forward")
    saved_loss = dict(loss_utils.LOSS_MAPPING), loss_utils.ForCausalLMLoss, loss_utils.nn.functional.cross_entropy
    try:
        yield
    finally:
        if saved is not None:
            cls.forward = saved
        loss_utils.LOSS_MAPPING.clear()
        loss_utils.LOSS_MAPPING.update(saved_loss[0])
        loss_utils.ForCausalLMLoss, loss_utils.nn.functional.cross_entropy = saved_loss[1:]


@pytest.mark.interpreter
@pytest.mark.parametrize("model_type", liger_types())
def test_liger_fused_linear_cross_entropy_forward(model_type):
    extra = None
    if model_type == "gemma3":
        # Liger's Gemma-3 wrapper forward applies text_config.final_logit_softcapping, which transformers' wrapper
        # does not (Gemma-3 checkpoints set none): tested without one, as the checkpoints are
        extra = dict(CONFIGS["gemma3"], text_config=dict(COMMON, final_logit_softcapping=None))
    model = lora(tiny_model(model_type, extra=extra), model_type)
    reference = ce_plus_del(model, from_logits=True)
    with restored_class_forward(model), interpreter_shims():
        apply_liger(model_type, fused_linear_cross_entropy=True)
        model.train()
        batch = inputs()
        with torch.no_grad():
            assert model(**batch, use_cache=False).logits is None  # the fused forward really runs
        fused = ce_plus_del(model, from_logits=False)
    assert_same_gradients(reference, fused)


@pytest.mark.interpreter
def test_liger_falcon_h1_forward_drops_the_lm_head_multiplier():
    """Why Falcon-H1's entry refuses Liger's FLCE: its patched forward's loss is the cross-entropy of h · Wᵀ, not of
    the model's logits h · Wᵀ x lm_head_multiplier."""
    import torch.nn.functional as F

    model = tiny_model("falcon_h1")
    batch = inputs()
    with torch.no_grad():
        own = model(**batch, use_cache=False)
        flat = shift_to_next_token(batch["labels"], -100).reshape(-1)
        unscaled = F.cross_entropy((own.logits / 2.3).reshape(-1, V), flat, ignore_index=-100)
        assert own.loss.item() == pytest.approx(
            F.cross_entropy(own.logits.reshape(-1, V), flat, ignore_index=-100).item(), rel=1e-5
        )
        with restored_class_forward(model), interpreter_shims():
            apply_liger("falcon_h1", fused_linear_cross_entropy=True)
            model.train()
            liger = model(**batch, use_cache=False)
    assert liger.logits is None
    assert liger.loss.item() == pytest.approx(unscaled.item(), rel=1e-4)
    assert abs(liger.loss.item() - own.loss.item()) > 1.0


@pytest.mark.axolotl
@pytest.mark.parametrize(
    ("model_type", "kernel_key"),
    [("falcon_h1", "liger_fused_linear_cross_entropy"), ("llama4", "liger_fused_linear_cross_entropy")],
)
def test_liger_forwards_that_train_other_logits_are_refused(tmp_path, model_type, kernel_key):
    from transformers import AutoConfig

    from del_plugin.axolotl.source_checks import check_model_source

    kwargs = dict(CONFIGS[model_type]) if model_type in WRAPPERS else dict(COMMON, **CONFIGS[model_type])
    AutoConfig.for_model(model_type, **kwargs).save_pretrained(tmp_path)
    assert check_model_source(str(tmp_path), trust_remote_code=False, revision=None) == model_type
    check_model_source.cache_clear()
    with pytest.raises(ValueError, match=rf"`{kernel_key}: true` with model_type '{model_type}': Liger's"):
        check_model_source(str(tmp_path), trust_remote_code=False, revision=None, kernels=(kernel_key,))


def test_docs_table_is_the_table():

    from del_plugin.core.architectures import architectures_table

    text = (REPO / "docs" / "architectures.md").read_text(encoding="utf-8")
    start = text.index("-->\n", text.index("<!-- architectures-table")) + 4
    assert text[start : text.index("<!-- /architectures-table -->")] == architectures_table(), (
        "docs/architectures.md's table is out of date; paste del_plugin.core.architectures.architectures_table()"
    )


# ------------------------------------------------------------------------------------------------ Axolotl
def arch_model_dir(tmp_path, model_type: str):
    """A tiny random model of ``model_type`` (CONFIGS' transforms and shapes) with the Llama-2 tokenizer's
    vocabulary, saved with that tokenizer: the plugin path for an architecture, whatever the family's tokenizer."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from tools.assets import load_tokenizer

    tokenizer = load_tokenizer("llama-spm")
    specials = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=0)
    config = AutoConfig.for_model(
        model_type, **dict(COMMON, **CONFIGS.get(model_type, {}), vocab_size=len(tokenizer), **specials)
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    out = tmp_path / model_type
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def arch_data(tmp_path_factory):
    from tools.cpu import write_alpaca_jsonl

    from gsm8k_rows import gsm8k_rows

    return write_alpaca_jsonl(tmp_path_factory.mktemp("arch-data") / "d.jsonl", gsm8k_rows(8))


@pytest.mark.e2e
@pytest.mark.axolotl
@pytest.mark.parametrize("model_type", ["gemma2", "phi", "qwen3_moe", "stablelm"])
def test_the_axolotl_plugin_trains_other_architectures(tmp_path, arch_data, model_type):
    """In-process Axolotl runs with the plugin: soft cap (Gemma-2), head bias and final_layernorm (Phi-2), MoE
    (Qwen3-MoE) and a model type outside the table (StableLM), accepted by the first step's measurement."""
    from axolotl_helpers import cpu_config, run_axolotl
    from trainer_checks import train_logs

    model_dir = arch_model_dir(tmp_path, model_type)
    trainer = run_axolotl(cpu_config(tmp_path, model_dir, arch_data, max_steps=2, seed=7))
    assert trainer.del_capture.verified and trainer.del_capture.model_type == model_type
    assert (trainer.del_capture.architecture is None) == (model_type not in ARCHITECTURES)
    assert trainer.del_capture.measured_difference <= 1e-5  # float32 model: the first step's measurement
    logs = train_logs(trainer)
    assert len(logs) == 2
    for log in logs:
        assert log["digit_targets"] > 0
        assert log["del_loss"] == pytest.approx(0.3 * log["del_l_num"], rel=1e-4)
        assert log["ce_loss"] + log["del_loss"] == pytest.approx(log["loss"], rel=1e-5)


@pytest.mark.e2e
@pytest.mark.axolotl
def test_the_axolotl_plugin_stops_a_wrong_reading_at_the_first_step(tmp_path, arch_data, monkeypatch):
    from axolotl_helpers import cpu_config, run_axolotl

    monkeypatch.setitem(ARCHITECTURES, "granite", Architecture("Granite, read wrongly", reads=("logits_scaling",)))
    model_dir = arch_model_dir(tmp_path, "granite")
    with pytest.raises(LogitsMismatch, match="model_type 'granite': DEL's digit logits differ"):
        run_axolotl(cpu_config(tmp_path, model_dir, arch_data, max_steps=1))


def test_the_readme_lists_the_tested_architectures():
    import re

    text = (REPO / "README.md").read_text(encoding="utf-8")
    start = text.index("**Supported architectures**")
    paragraph = text[start : text.index("\n\n", start)]
    listed = re.findall(r"`([a-z0-9_]+)`", paragraph[: paragraph.index("At the first step")])
    assert listed == list(ARCHITECTURES)


def test_the_measurement_allows_the_rounding_of_autocast():
    """Under bf16 autocast a float32 model's head computes in bf16: the check allows bf16 rounding there (the
    float32 tolerance would refuse it), and still refuses a wrong reading."""
    model = tiny_model("llama")
    batch = inputs()
    capture = DigitLogitsCapture(model, VOCAB)
    with torch.no_grad():
        scale = family_logits(model(input_ids=batch["input_ids"]).logits).abs().max().item()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        difference = capture.check_against_logits(model, batch["input_ids"])
    assert difference > logits_tolerance(torch.float32, scale) and capture.verified  # bf16-sized, accepted
    capture.transform = ARCHITECTURES["granite"].transform(type("C", (), {"logits_scaling": 2.7})())
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(LogitsMismatch):
        capture.check_against_logits(model, batch["input_ids"])


def test_the_measurement_allows_an_autocast_the_forward_enters_itself():
    """accelerate's mixed precision (the Trainer's ``bf16=True`` on float32 weights) wraps the model's forward in
    bf16 autocast and hands back float32 logits: the check reads the autocast inside the forward, accepts the
    correct reading and still refuses a wrong one."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, PartialState

    # accelerate's state is process-wide (an earlier Trainer's refuses bf16): a fresh one for this test, and the
    # earlier one back afterwards, in the same dicts, which every existing state object shares
    saved = [(state._shared_state, dict(state._shared_state)) for state in (AcceleratorState, PartialState)]
    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        model = Accelerator(mixed_precision="bf16", cpu=True).prepare_model(tiny_model("llama"))
    finally:
        for shared, before in saved:
            shared.clear()
            shared.update(before)
    batch = inputs()
    capture = DigitLogitsCapture(model, VOCAB)
    assert model(input_ids=batch["input_ids"]).logits.dtype == torch.float32  # the autocast does not show
    assert not torch.is_autocast_enabled("cpu")
    # the logits really went through bf16: float32 rounding alone would have refused this difference
    assert capture.check_against_logits(model, batch["input_ids"]) > logits_tolerance(torch.float32, 1.0)
    assert capture.verified
    capture.transform = ARCHITECTURES["granite"].transform(type("C", (), {"logits_scaling": 2.7})())
    with pytest.raises(LogitsMismatch):
        capture.check_against_logits(model, batch["input_ids"])
