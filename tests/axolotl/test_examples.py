"""The example configs under examples/: Axolotl's own validation of the files as shipped, the paper's recipe and the
DEL weight derived from the authors' scripts, and a few real training steps on CPU with the same YAML.

The CPU runs change exactly what ``CPU_OVERRIDES`` lists (GPU-only features and the run length) and swap the
model for a tiny random Llama that carries the family's real tokenizer and the dataset for local GSM8K rows; Cut
Cross Entropy (QLoRA configs) is replaced by a CPU copy of its forward (tests/helpers/fused_kernels.py); the prompt
format,
the adapter with its 4-bit base weights, packing and the DEL keys are the user's. The families outside the paper
(Qwen3, Gemma-3, Llama-3.1) train on a tiny model of their own architecture with their real tokenizer, and check
that ``digit_targets`` counts the digits of each step's targets (Llama-3's number tokens hold 1-3 of them).
"""

from __future__ import annotations

import copy
import importlib
from pathlib import Path

import pytest
import yaml

from del_plugin.hf.settings import DEFAULT_ALPHA
from tools.assets import axolotl_deepspeed_configs
from tools.cpu import CPU_KEYS, write_alpaca_jsonl

from axolotl_helpers import StepLabels, run_axolotl
from example_families import EXAMPLES, FAMILIES, OTHER_FAMILIES, AuthorsRun, DefaultAlphaFamily, Family
from fused_kernels import CALLS, cce_style_forward, restored_forwards
from gsm8k_rows import gsm8k_rows
from repo import REPO
from trainer_checks import assert_parts_logged, train_logs

CCE = "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"


# the quick-start QLoRA config at the advised weight, and the paper's full fine-tune at the authors' weight
KINDS = ("qlora-24gb", "paper-full-fsdp")
EXAMPLE_IDS = [f"{d}/{k}" for d in FAMILIES for k in KINDS]
# the full fine-tune's twin under DeepSpeed ZeRO-3 (test_zero3_twin_is_the_fsdp_example_with_axolotls_zero3_config)
ZERO3_IDS = [f"{d}/paper-full-zero3" for d in FAMILIES]


# The hardware each kind is written for, as Axolotl's validation takes it (normally probed from the local GPU).
CAPABILITIES = {
    "qlora-24gb": {"bf16": True, "fp8": False, "tf32": True, "n_gpu": 1, "compute_capability": "sm_89"},  # RTX 4090
    "paper-full-fsdp": {
        "bf16": True,
        "fp8": False,
        "tf32": True,
        "n_gpu": 8,
        "compute_capability": "sm_90",
    },  # 8 x H100
}

# Everything a CPU run changes in the user's YAML besides the model and the data (see `cpu_run_config`).
# None unsets a key.
CPU_OVERRIDES = {
    **CPU_KEYS,  # GPU-only features and their CPU stand-ins (tools/cpu.py says why each)
    "fsdp_config": None,  # one process, no sharding
    "fsdp_version": None,
    # a short run: two optimizer steps of one micro-batch of two rows of up to 256 tokens, nothing saved
    "sequence_len": 256,
    "micro_batch_size": 2,
    "gradient_accumulation_steps": 1,
    "max_steps": 2,
    "logging_steps": 1,
    "save_strategy": "no",
    "saves_per_epoch": None,
    "save_total_limit": None,
}


def example_path(example_id: str) -> Path:
    return EXAMPLES / f"{example_id}.yml"


def load_example(example_id: str) -> dict:
    with open(example_path(example_id), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def family_of(example_id: str) -> Family:
    return FAMILIES[example_id.split("/")[0]]


def validate(cfg: dict, kind: str):
    """Axolotl's validation with the plugin's keys, as `axolotl train` runs it, for the hardware of `kind`."""
    import torch
    from axolotl.utils.config import prepare_plugins, validate_config
    from axolotl.utils.dict import DictDefault

    cfg = DictDefault(copy.deepcopy(cfg))
    prepare_plugins(cfg)
    return validate_config(
        cfg,
        capabilities=CAPABILITIES[kind],
        env_capabilities={"torch_version": torch.__version__.split("+")[0]},
    )


def test_every_family_has_both_examples():
    found = sorted(str(p.relative_to(EXAMPLES).with_suffix("")) for p in EXAMPLES.glob("*/*.yml"))
    mine = sorted(p for p in found if p.split("/")[0] in FAMILIES)
    assert mine == sorted(EXAMPLE_IDS + ZERO3_IDS)


@pytest.mark.parametrize("example_id", EXAMPLE_IDS)
def test_example_passes_axolotl_validation_as_shipped(example_id):
    """The file as a user runs it (hub model id, hub dataset), validated offline: the tokenizer check of the
    plugin only warns when the hub is unreachable, and nothing else in validation downloads anything."""
    family, kind = family_of(example_id), example_id.split("/")[1]
    shipped = load_example(example_id)
    cfg = validate(shipped, kind)

    assert cfg.base_model == family.hub_id
    # the QLoRA configs save the logits' memory with Cut Cross Entropy; the full ones train the head with plain CE
    assert cfg.plugins == ([CCE, "del_plugin.DELPlugin"] if kind == "qlora-24gb" else ["del_plugin.DELPlugin"])
    if kind == "qlora-24gb":
        assert cfg.cut_cross_entropy is True
    if kind == "qlora-24gb":  # the quick start follows docs/choosing-del-alpha.md; the paper's config, the authors
        assert cfg.del_alpha == DEFAULT_ALPHA
    else:
        assert cfg.del_alpha == pytest.approx(family.authors.del_alpha, rel=1e-12)
    assert (cfg.del_place_weighting, cfg.del_integer_slope, cfg.del_decimal_base) == (True, 2.0, 1.02)
    assert [d["path"] for d in cfg.datasets] == ["TIGER-Lab/MathInstruct"]
    assert cfg.train_on_inputs is False
    assert cfg.bf16 is True
    assert cfg.attn_implementation == "flash_attention_2"
    # the paper truncates at 1500 tokens; the examples use the nearest multiple of 128 and truncate too
    assert cfg.sequence_len == 1536 and cfg.excess_length_strategy == "truncate"
    assert cfg.lr_scheduler == "cosine" and cfg.warmup_ratio == 0.03 and cfg.num_epochs == 2
    assert cfg.weight_decay == 0.0

    if kind == "qlora-24gb":
        assert cfg.adapter == "qlora" and cfg.load_in_4bit is True
        assert cfg.bnb_config_kwargs == {"bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True}
        assert cfg.lora_target_linear is True
        assert cfg.sample_packing is True
        assert cfg.gradient_checkpointing is True
        assert cfg.optimizer == "paged_adamw_8bit"
        assert not cfg.fsdp_config
        assert cfg.micro_batch_size * cfg.gradient_accumulation_steps == 16
    else:
        # the paper's recipe: full fine-tune, the paper's learning rate and rows per optimizer step, FSDP2 over
        # 8 GPUs wrapping the family's decoder layer class
        assert not cfg.adapter and not cfg.load_in_4bit
        assert cfg.learning_rate == family.learning_rate
        assert cfg.micro_batch_size * cfg.gradient_accumulation_steps * 8 == family.authors.rows_per_step
        assert cfg.sample_packing is False
        assert cfg.fsdp_version == 2 and cfg.fsdp_config.fsdp_version == 2
        assert cfg.fsdp_config.auto_wrap_policy == "TRANSFORMER_BASED_WRAP"
        assert cfg.fsdp_config.transformer_layer_cls_to_wrap == family.decoder_layer
        module = importlib.import_module(f"transformers.models.{family.model_module}.modeling_{family.model_module}")
        assert hasattr(module, family.decoder_layer)


def test_full_examples_share_the_fsdp_config_that_trains_in_two_processes():
    # tests/e2e/test_fsdp2_cpu_e2e.py trains codellama-7b's fsdp_config under FSDP2 on two ranks (a tiny Llama): the
    # other full examples differ from it in their decoder layer class only
    tested = load_example("codellama-7b/paper-full-fsdp")["fsdp_config"]
    assert tested["transformer_layer_cls_to_wrap"] == "LlamaDecoderLayer"
    for family_id, family in FAMILIES.items():
        config = load_example(f"{family_id}/paper-full-fsdp")["fsdp_config"]
        assert config["transformer_layer_cls_to_wrap"] == family.decoder_layer
        assert {**config, "transformer_layer_cls_to_wrap": "LlamaDecoderLayer"} == tested, family_id


@pytest.mark.parametrize("example_id", ZERO3_IDS)
def test_zero3_twin_is_the_fsdp_example_with_axolotls_zero3_config(example_id):
    # the same run but for the engine: Axolotl's zero3_bf16.json instead of the fsdp_config (its activation
    # checkpointing becoming gradient_checkpointing), and its own output folder; tests/e2e/test_deepspeed_cpu_e2e.py
    # trains DEL under Axolotl's ZeRO-3 configs in two processes
    from del_plugin.axolotl.args import zero_stage

    zero3 = load_example(example_id)
    fsdp = load_example(example_id.replace("paper-full-zero3", "paper-full-fsdp"))
    assert fsdp.pop("fsdp_config")["activation_checkpointing"] is True
    assert zero3 == {
        **fsdp,
        "deepspeed": "deepspeed_configs/zero3_bf16.json",
        "gradient_checkpointing": True,
        "output_dir": fsdp["output_dir"] + "-zero3",
    }
    fetched = str(axolotl_deepspeed_configs() / "zero3_bf16.json")
    assert zero_stage(zero3["deepspeed"]) == 3 and zero_stage(fetched) == 3
    for deepspeed in (zero3["deepspeed"], fetched):  # as shipped, and with the file `axolotl fetch` gives
        cfg = validate({**zero3, "deepspeed": deepspeed}, "paper-full-fsdp")
        assert cfg.deepspeed and not cfg.fsdp_config and cfg.gradient_checkpointing is True
        assert cfg.del_alpha == pytest.approx(family_of(example_id).authors.del_alpha, rel=1e-12)


ADVICE = "docs/choosing-del-alpha.md"


@pytest.mark.parametrize(
    "path",
    sorted(EXAMPLES.glob("*/*.yml")) + sorted(EXAMPLES.glob("ablation/*.yaml")),
    ids=lambda path: str(path.relative_to(EXAMPLES)),
)
def test_every_example_says_where_its_weight_comes_from(path):
    """The comment above `del_alpha` names the advice it follows or says it reproduces the paper; a quick start uses
    the advised weight (the plugin's default) and shows the del_alpha 0 twin's command; the paper's weights live
    only in configs named as reproductions (paper-*.yml, the paper's ablation)."""
    text = path.read_text(encoding="utf-8")
    reproduction = path.name.startswith("paper-") or path.parent.name == "ablation"
    assert ADVICE in text, path
    if reproduction:  # (the ablation's `mle` config has no weight)
        assert "PAPER REPRODUCTION" in text
    else:
        (alpha,) = [yaml.safe_load(line)["del_alpha"] for line in text.splitlines() if line.startswith("del_alpha:")]
        comment = text[: text.index("\ndel_alpha:")].rsplit("\n\n", 1)[-1]
        assert alpha == DEFAULT_ALPHA, path
        assert f"axolotl train {path.relative_to(REPO)} --sweep examples/compare-with-mle.yml" in comment
    assert (REPO / ADVICE).is_file()


def test_the_mle_twin_sweep_trains_the_config_and_its_del_alpha_zero_twin(tmp_path):
    """examples/compare-with-mle.yml through Axolotl's own sweep code (what `axolotl train --sweep` runs): two
    configs, sweep0001 the example as written, sweep0002 the same with del_alpha 0, as its comment says."""
    from axolotl.cli.utils.train import generate_config_files

    example = example_path("qwen3-8b/qlora-24gb")
    shipped = load_example("qwen3-8b/qlora-24gb")
    runs = [
        yaml.safe_load(Path(f).read_text())
        for f, _ in generate_config_files(str(example), str(EXAMPLES / "compare-with-mle.yml"))
    ]
    assert [run["output_dir"] for run in runs] == [
        f"{shipped['output_dir']}/sweep0001".removeprefix("./"),
        f"{shipped['output_dir']}/sweep0002".removeprefix("./"),
    ]
    assert runs[0] == {**shipped, "output_dir": runs[0]["output_dir"]}
    assert runs[1] == {**shipped, "del_alpha": 0.0, "output_dir": runs[1]["output_dir"]}


def test_authors_weights_convert_to_the_documented_del_alpha():
    # worked out by hand from the authors' scripts (see docs/examples.md)
    assert FAMILIES["codellama-7b"].authors.del_alpha == 0.1
    assert FAMILIES["mistral-7b"].authors.del_alpha == 0.1
    assert FAMILIES["deepseek-math-7b-instruct"].authors.del_alpha == pytest.approx(2.56)
    assert FAMILIES["qwen2.5-7b"].authors.del_alpha == pytest.approx(2.56)
    # the published Qwen script (Qwen2.5-1.5B, 4 GPUs) would give half of that
    assert AuthorsRun(0.01, 4, 32, False).del_alpha == pytest.approx(1.28)


def test_deepseek_qlora_prompt_is_the_models_chat_template():
    """The DeepSeek-Math QLoRA example writes rows in the model's own chat format: the prompt Axolotl tokenizes is
    the chat template's generation prompt, and the trained answer is the answer followed by the eos token."""
    from axolotl.prompt_strategies import load as load_strategy
    from axolotl.utils.dict import DictDefault

    from tools.assets import load_tokenizer

    # deepseek-ai/deepseek-math-7b-instruct, tokenizer_config.json
    template = (
        "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
        "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
        "{{ 'User: ' + message['content'] + '\n\n' }}{% elif message['role'] == 'assistant' %}"
        "{{ 'Assistant: ' + message['content'] + eos_token }}{% elif message['role'] == 'system' %}"
        "{{ message['content'] + '\n\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}"
        "{{ 'Assistant:' }}{% endif %}"
    )
    tokenizer = load_tokenizer("deepseek-llm")
    shipped = load_example("deepseek-math-7b-instruct/qlora-24gb")
    cfg = DictDefault({"train_on_inputs": shipped["train_on_inputs"], "sequence_len": shipped["sequence_len"]})
    strategy = load_strategy("user_defined", tokenizer, cfg, shipped["datasets"][0]["type"])

    row = gsm8k_rows(1)[0]
    tokenized = strategy.tokenize_prompt({"instruction": row["question"], "output": row["answer"]})
    ids, labels = tokenized["input_ids"], tokenized["labels"]
    n_prompt = sum(label == -100 for label in labels)
    assert labels[n_prompt:] == ids[n_prompt:] and -100 not in labels[n_prompt:]

    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": row["question"]}],
        chat_template=template,
        add_generation_prompt=True,
        tokenize=False,
    )
    adds_bos = tokenizer("x")["input_ids"][0] == tokenizer.bos_token_id
    expected_prompt = rendered if adds_bos else rendered.removeprefix(tokenizer.bos_token)
    assert ids[:n_prompt] == tokenizer(expected_prompt, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids[:n_prompt]) == expected_prompt
    assert tokenizer.decode(ids[n_prompt:]) == row["answer"] + tokenizer.eos_token


# ---------------------------------------------------------------------------------------------------- CPU runs
@pytest.fixture(scope="module")
def gsm8k_alpaca(tmp_path_factory):
    return write_alpaca_jsonl(tmp_path_factory.mktemp("data") / "gsm8k.jsonl", gsm8k_rows(48))


def cpu_run_config(example_id: str, tmp_path: Path, dataset: Path) -> dict:
    """The shipped YAML with ``CPU_OVERRIDES``, the family's tiny model and local GSM8K rows in place of
    MathInstruct (same alpaca fields, same prompt `type`)."""
    from tools.assets import tiny_model_dir

    cfg = load_example(example_id)
    model_dir = str(tiny_model_dir(family_of(example_id).tokenizer))
    (source,) = cfg["datasets"]
    cfg.update(CPU_OVERRIDES)
    # Cut Cross Entropy cannot run here (fork not on PyPI, Ampere-only kernel, bf16 required): the test runs its
    # forward's CPU copy instead (see cce_forward_on_cpu)
    cfg["plugins"] = [p for p in cfg["plugins"] if p != CCE]
    cfg["cut_cross_entropy"] = None
    cfg.update(
        base_model=model_dir,
        tokenizer_config=model_dir,
        datasets=[{**source, "path": str(dataset), "ds_type": "json", "split": "train"}],
        output_dir=str(tmp_path / "out"),
        dataset_prepared_path=str(tmp_path / "prepared"),
    )
    return {key: value for key, value in cfg.items() if value is not None}


@pytest.mark.e2e
@pytest.mark.parametrize("example_id", EXAMPLE_IDS)
def test_example_trains_on_cpu_with_the_family_tokenizer(example_id, tmp_path, gsm8k_alpaca):
    import bitsandbytes as bnb

    from del_plugin.axolotl.trainer import DELTrainer
    from tools.assets import load_tokenizer

    family, kind = family_of(example_id), example_id.split("/")[1]
    shipped = load_example(example_id)
    uses_cce = CCE in shipped["plugins"]
    before = CALLS["cce_style_forward"]
    with restored_forwards():
        if uses_cce:  # the tiny models are Llamas; the fork patches the causal LM's forward the same way
            from transformers import LlamaForCausalLM

            LlamaForCausalLM.forward = cce_style_forward
        trainer = run_axolotl(cpu_run_config(example_id, tmp_path, gsm8k_alpaca))
    assert isinstance(trainer, DELTrainer)
    assert (CALLS["cce_style_forward"] > before) == uses_cce

    # the family's digits: the trainer found the tokenizer's own '0'..'9'
    tokenizer = load_tokenizer(family.tokenizer)
    assert list(trainer.del_vocab.family_token_ids[0]) == tokenizer.convert_tokens_to_ids(list("0123456789"))

    logs = train_logs(trainer)
    assert len(logs) == CPU_OVERRIDES["max_steps"]
    for log in logs:
        assert_parts_logged(log)  # every part finite and in range; the parts add up to the optimised loss
        # the weight the trainer applied is the YAML's del_alpha
        assert log["del_loss"] == pytest.approx(shipped["del_alpha"] * log["del_l_num"], rel=1e-3)

    model = trainer.model
    if kind == "qlora-24gb":
        # 4-bit stayed on: NF4 with double quantisation under the LoRA adapter
        quantized = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
        assert quantized
        assert {m.weight.quant_type for m in quantized} == {"nf4"}
        assert all(m.weight.compress_statistics for m in quantized)
        trainable = {n for n, p in model.named_parameters() if p.requires_grad}
        assert trainable and all("lora_" in n for n in trainable)
    else:
        assert all(p.requires_grad for p in model.parameters())


# ------------------------------------------------------------------------- families the authors did not train
OTHER_EXAMPLE_IDS = [f"{d}/qlora-24gb" for d in OTHER_FAMILIES]


def other_family_of(example_id: str) -> DefaultAlphaFamily:
    return OTHER_FAMILIES[example_id.split("/")[0]]


def published_model_on_meta(family: DefaultAlphaFamily):
    """The checkpoint's architecture at its published shapes, without memory (meta device), as Axolotl loads it."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(family.model_type, **family.config)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def lora_targets(cfg: dict, model) -> list[str]:
    """The module names PEFT puts the example's adapters on: every linear layer but the head for
    ``lora_target_linear`` (Axolotl's find_all_linear_names), else those whose whole name matches the regex."""
    import re

    import torch

    linear = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n != "lm_head"]
    if cfg.get("lora_target_linear"):
        return linear
    return [n for n in linear if re.fullmatch(cfg["lora_target_modules"], n)]


def test_other_families_have_their_qlora_example():
    found = sorted(str(p.relative_to(EXAMPLES).with_suffix("")) for p in EXAMPLES.glob("*/*.yml"))
    assert sorted(p for p in found if p.split("/")[0] in OTHER_FAMILIES) == sorted(OTHER_EXAMPLE_IDS)
    assert not set(OTHER_FAMILIES) & set(FAMILIES)


@pytest.mark.parametrize("example_id", OTHER_EXAMPLE_IDS)
def test_other_example_passes_axolotl_validation_as_shipped(example_id):
    """As the paper families' QLoRA files: validated offline for one RTX 4090, the same shared QLoRA settings, Cut
    Cross Entropy and flash-attention 2; del_alpha is the plugin's default (no authors' run to convert)."""
    family = other_family_of(example_id)
    cfg = validate(load_example(example_id), "qlora-24gb")

    assert cfg.base_model == family.hub_id
    assert cfg.plugins == [CCE, "del_plugin.DELPlugin"] and cfg.cut_cross_entropy is True
    assert cfg.del_alpha == DEFAULT_ALPHA == 0.03
    assert (cfg.del_place_weighting, cfg.del_integer_slope, cfg.del_decimal_base) == (True, 2.0, 1.02)
    assert [d["path"] for d in cfg.datasets] == ["TIGER-Lab/MathInstruct"]
    if family.chat_template is None:
        assert [d["type"] for d in cfg.datasets] == ["alpaca"]
        assert not cfg.chat_template and not cfg.special_tokens
    else:  # the instruct model's chat format (test_llama3_instruct_prompt_is_the_llama3_chat_template)
        assert cfg.chat_template == family.chat_template
        (prompt,) = [d["type"] for d in cfg.datasets]
        assert set(prompt) >= {"format", "no_input_format"} and prompt["field_output"] == "output"
        assert cfg.special_tokens == {"eos_token": "<|eot_id|>", "pad_token": "<|end_of_text|>"}
    assert cfg.train_on_inputs is False
    assert cfg.bf16 is True
    assert cfg.attn_implementation == "flash_attention_2"
    assert cfg.sequence_len == 1536 and cfg.excess_length_strategy == "truncate"
    assert cfg.lr_scheduler == "cosine" and cfg.warmup_ratio == 0.03 and cfg.num_epochs == 2
    assert cfg.weight_decay == 0.0
    assert cfg.adapter == "qlora" and cfg.load_in_4bit is True
    assert cfg.bnb_config_kwargs == {"bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True}
    assert (cfg.lora_r, cfg.lora_alpha, cfg.lora_dropout) == (32, 16, 0.0)
    assert cfg.lora_mlp_kernel and cfg.lora_qkv_kernel and cfg.lora_o_kernel
    assert cfg.sample_packing is True
    assert cfg.gradient_checkpointing is True
    assert cfg.optimizer == "paged_adamw_8bit" and cfg.learning_rate == 2e-4
    assert not cfg.fsdp_config
    assert cfg.micro_batch_size == 4 and cfg.gradient_accumulation_steps == 4
    if family.model_type == "gemma3":  # the language model's projections, not the vision tower's
        assert not cfg.lora_target_linear and isinstance(cfg.lora_target_modules, str)
    else:
        assert cfg.lora_target_linear is True


@pytest.mark.parametrize("example_id", OTHER_EXAMPLE_IDS)
def test_other_example_architecture_at_its_published_shapes(example_id):
    """What the YAML's comments and the memory table take from the architecture: the class Axolotl loads (and the
    CCE integration patches), its parameter count, the adapter the YAML's targets give, no soft caps (Gemma-3:
    flash-attention 2 and CCE's forward apply none) and a head_dim flash-attention 2 serves."""
    family = other_family_of(example_id)
    shipped = load_example(example_id)
    model = published_model_on_meta(family)
    text = model.config.get_text_config()

    assert type(model).__name__ == family.causal_lm and model.config.model_type == family.model_type
    assert sum(p.numel() for p in model.parameters()) / 1e9 == pytest.approx(family.parameters, abs=0.005)
    targets = lora_targets(shipped, model)
    modules = dict(model.named_modules())
    adapter = sum(shipped["lora_r"] * (modules[n].in_features + modules[n].out_features) for n in targets)
    assert adapter / 1e6 == pytest.approx(family.lora_parameters, abs=0.05)
    # every decoder layer's seven projections, and nothing else (not the vision tower, not the head)
    assert len(targets) == 7 * text.num_hidden_layers
    assert {n.rsplit(".", 1)[1] for n in targets} == {f"{p}_proj" for p in ("q", "k", "v", "o", "gate", "up", "down")}
    assert not [n for n in targets if "vision" in n or "lm_head" in n]
    assert text.head_dim <= 256
    assert getattr(text, "final_logit_softcapping", None) is None
    assert getattr(text, "attn_logit_softcapping", None) is None
    # Axolotl 0.21's Cut Cross Entropy integration lists the model type as supported
    readme = Path(importlib.import_module("axolotl.integrations.cut_cross_entropy").__file__).with_name("README.md")
    assert f"- {family.model_type}\n" in readme.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def tiny_gemma3_wrapper(tmp_path_factory):
    """A tiny random Gemma3ForConditionalGeneration (model type gemma3, what Gemma-3 4B+ checkpoints are) with
    Gemma-3's real tokenizer and a processor, as the 12B checkpoint has them: the text decoder of
    ``tiny_model_dir("gemma3")`` (gemma3_text: sliding and full attention layers, tied head, no soft cap) at the
    checkpoints' 262,208-row vocabulary, beside a one-layer SigLIP vision tower.

    Axolotl 0.21 treats every gemma3 checkpoint as multimodal (its model type is in transformers' image-text-to-text
    mapping): it loads the checkpoint's processor before the model, even for text rows, so the folder has one. The
    tokenizer is ``tools.assets``' Gemma-3 vocabulary (from the gemma-3-270m GGUF: 262,144 tokens) with the
    4B+ checkpoints' image tokens declared as their tokenizer_config.json does (``<image_soft_token>`` added at
    262,144, the begin/end-of-image tokens named), which Gemma3Processor reads."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Gemma3Config, Gemma3ImageProcessor, Gemma3Processor

    from tools.assets import tokenizer_dir

    image_tokens = {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>"}
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir("gemma3")), extra_special_tokens=image_tokens)
    assert tok.image_token_id == 262144 and len(tok) == 262145
    hidden, heads, layers = 64, 4, 2
    special = dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    text = dict(
        vocab_size=262208,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=2,
        head_dim=hidden // heads,
        query_pre_attn_scalar=hidden // heads,
        sliding_window=64,
        layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=2048,
        **special,
    )
    vision = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=28,
        patch_size=14,
        vision_use_head=False,
    )
    config = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=1, **special)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    out = tmp_path_factory.mktemp("tiny-gemma3-wrapper")
    model.save_pretrained(out)
    image_processor = Gemma3ImageProcessor(size={"height": 28, "width": 28})
    Gemma3Processor(image_processor=image_processor, tokenizer=tok, image_seq_length=1).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def tiny_llama3_instruct(tmp_path_factory):
    """A tiny random LlamaForCausalLM (``tiny_model_dir("llama-bpe")``: hidden 64, 2 layers, untied head) with
    Llama-3's real tokenizer, which, as Llama-3.1's own tokenizer.json does, puts <|begin_of_text|> before every
    text: the GGUF that ``llama-bpe`` is converted from names the token (``tokenizer.ggml.bos_token_id``) but has
    no ``add_bos_token`` entry, so the conversion adds none (``add_bos_token`` turns the post-processor on).

    The GGUF is Llama-3's: the same 128,000 text tokens as Llama-3.1's and the same <|begin_of_text|>,
    <|end_of_text|>, <|start_header_id|>, <|end_header_id|> and <|eot_id|> ids; among the reserved ids, 3.1 renames
    some (128004 <|finetune_right_pad_id|>, 128008 <|eom_id|>, 128010 <|python_tag|>), which the example does not
    use."""
    import shutil

    from transformers import AutoTokenizer

    from tools.assets import tiny_model_dir

    out = tmp_path_factory.mktemp("tiny-llama3-instruct") / "model"
    shutil.copytree(tiny_model_dir("llama-bpe"), out)
    tok = AutoTokenizer.from_pretrained(str(out))
    tok.add_bos_token = True
    tok.save_pretrained(out)
    reloaded = AutoTokenizer.from_pretrained(str(out))
    assert reloaded("12")["input_ids"] == [reloaded.bos_token_id, reloaded.convert_tokens_to_ids("12")]
    for name, token_id in {"<|begin_of_text|>": 128000, "<|end_of_text|>": 128001, "<|eot_id|>": 128009}.items():
        assert reloaded.convert_tokens_to_ids(name) == token_id
    return out


def shipped_chat_tokenizer(example_id: str, model_dir: Path, tmp_path: Path):
    """The tokenizer Axolotl builds from the example's own keys (``special_tokens``, ``chat_template``) for the
    tokenizer in ``model_dir``, and the validated config."""
    from axolotl.loaders.tokenizer import load_tokenizer as axolotl_tokenizer

    from axolotl_helpers import load_config

    cfg = load_example(example_id)
    cfg.update(CPU_OVERRIDES)
    cfg["plugins"] = [p for p in cfg["plugins"] if p != CCE]
    cfg["cut_cross_entropy"] = None
    cfg.update(
        base_model=str(model_dir),
        tokenizer_config=str(model_dir),
        output_dir=str(tmp_path / "out"),
        dataset_prepared_path=str(tmp_path / "prepared"),
    )
    cfg = load_config({key: value for key, value in cfg.items() if value is not None})
    return axolotl_tokenizer(cfg), cfg


def test_llama3_instruct_prompt_is_the_llama3_chat_template(tmp_path, tiny_llama3_instruct):
    """The Llama-3.1 example's rows are, token for token, Axolotl's `llama3` chat template (the one the YAML saves
    with the adapter) rendering the question as a user turn and the answer as the assistant's: the prompt is the
    template's generation prompt, the trained labels the answer and <|eot_id|> (the example's eos), and the
    tokenizer's <|begin_of_text|> opens the row once."""
    from axolotl.prompt_strategies import load as load_strategy

    example_id = "llama-3.1-8b/qlora-24gb"
    shipped = load_example(example_id)
    tokenizer, cfg = shipped_chat_tokenizer(example_id, tiny_llama3_instruct, tmp_path)
    assert tokenizer.eos_token == "<|eot_id|>" and tokenizer.pad_token == "<|end_of_text|>"
    template = Path(importlib.import_module("axolotl.utils.chat_templates").__file__).parent / "templates"
    assert tokenizer.chat_template == (template / "llama3.jinja").read_text(encoding="utf-8")
    strategy = load_strategy("user_defined", tokenizer, cfg, shipped["datasets"][0]["type"])

    for row in gsm8k_rows(3):
        tokenized = strategy.tokenize_prompt({"instruction": row["question"], "output": row["answer"]})
        ids, labels = tokenized["input_ids"], tokenized["labels"]
        n_prompt = sum(label == -100 for label in labels)
        assert labels[:n_prompt] == [-100] * n_prompt and labels[n_prompt:] == ids[n_prompt:]
        user = [{"role": "user", "content": row["question"]}]
        prompt = tokenizer.apply_chat_template(user, add_generation_prompt=True, tokenize=False)
        whole = tokenizer.apply_chat_template(user + [{"role": "assistant", "content": row["answer"]}], tokenize=False)
        assert prompt.startswith("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n")
        assert ids[:n_prompt] == tokenizer(prompt, add_special_tokens=False)["input_ids"]
        assert ids == tokenizer(whole, add_special_tokens=False)["input_ids"]
        assert ids.count(tokenizer.bos_token_id) == 1 and ids[0] == tokenizer.bos_token_id
        assert tokenizer.decode(ids[n_prompt:]) == row["answer"] + "<|eot_id|>"


@pytest.mark.e2e
@pytest.mark.parametrize("example_id", OTHER_EXAMPLE_IDS)
def test_other_example_trains_on_cpu_with_the_family_tokenizer(
    example_id, tmp_path, gsm8k_alpaca, request, monkeypatch
):
    """As test_example_trains_on_cpu_with_the_family_tokenizer, on a tiny model of the family's own architecture
    (Qwen3ForCausalLM; Gemma3ForConditionalGeneration, model type gemma3 as the 12B checkpoint; LlamaForCausalLM
    for Llama-3.1) carrying the family's real tokenizer; the CCE fork's forward replaced by its CPU copy on that
    class. ``digit_targets`` of every step is the number of digit characters in that step's targets (Llama-3's
    number tokens counted digit by digit)."""
    import bitsandbytes as bnb
    from transformers.models.gemma3 import modeling_gemma3
    from transformers.models.llama import modeling_llama
    from transformers.models.qwen3 import modeling_qwen3

    from del_plugin.axolotl.trainer import DELTrainer
    from tools.assets import load_tokenizer, tiny_model_dir

    family = other_family_of(example_id)
    shipped = load_example(example_id)
    if family.model_type == "gemma3":
        model_dir = request.getfixturevalue("tiny_gemma3_wrapper")
    elif family.model_type == "llama":
        model_dir = request.getfixturevalue("tiny_llama3_instruct")
    else:
        model_dir = tiny_model_dir(family.tokenizer)
    causal_lm = {"qwen3": modeling_qwen3, "gemma3": modeling_gemma3, "llama": modeling_llama}[family.model_type]
    causal_lm = getattr(causal_lm, family.causal_lm)

    cfg = load_example(example_id)
    (source,) = cfg["datasets"]
    cfg.update(CPU_OVERRIDES)
    cfg["plugins"] = [p for p in cfg["plugins"] if p != CCE]
    cfg["cut_cross_entropy"] = None
    cfg.update(
        base_model=str(model_dir),
        tokenizer_config=str(model_dir),
        datasets=[{**source, "path": str(gsm8k_alpaca), "ds_type": "json", "split": "train"}],
        output_dir=str(tmp_path / "out"),
        dataset_prepared_path=str(tmp_path / "prepared"),
    )
    cfg = {key: value for key, value in cfg.items() if value is not None}

    before = CALLS["cce_style_forward"]
    saved = causal_lm.__dict__["forward"]
    recorded = StepLabels().install(monkeypatch)
    with restored_forwards():
        causal_lm.forward = cce_style_forward  # as the fork's patch for this model type does
        try:
            trainer = run_axolotl(cfg)
        finally:
            causal_lm.forward = saved
    assert isinstance(trainer, DELTrainer)
    assert CALLS["cce_style_forward"] > before

    model = trainer.model
    base = model.get_base_model()
    assert type(base) is causal_lm and base.config.model_type == family.model_type

    tokenizer = load_tokenizer(family.tokenizer)
    assert list(trainer.del_vocab.family_token_ids[0]) == tokenizer.convert_tokens_to_ids(list("0123456789"))
    assert trainer.del_vocab.max_digits == family.max_digits
    if tokenizer.bos_token_id is not None:  # Gemma, Llama-3: every row starts with it (Qwen's tokenizer adds none)
        assert {row[0] for row in trainer.train_dataset["input_ids"]} == {tokenizer.bos_token_id}
    if family.chat_template is not None:  # an answer ends in the chat format's end of turn, trained
        eot = tokenizer.convert_tokens_to_ids("<|eot_id|>")
        whole = [row for row in trainer.train_dataset["labels"] if len(row) < CPU_OVERRIDES["sequence_len"]]
        assert whole and {row[-1] for row in whole} == {eot}  # (rows cut at sequence_len lose it)

    logs = train_logs(trainer)
    assert len(logs) == CPU_OVERRIDES["max_steps"]
    for log in logs:
        assert_parts_logged(log)
        assert log["del_loss"] == pytest.approx(shipped["del_alpha"] * log["del_l_num"], rel=1e-3)
    # digit slots: one per digit of every target number token (Llama-3's '123' holds three)
    assert [log["digit_targets"] for log in logs] == recorded.digit_characters(tokenizer)
    assert recorded.longest_number_token(tokenizer) == family.max_digits

    # 4-bit NF4 with double quantisation under the adapter, the adapter where the YAML puts it and nowhere else
    quantized = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert quantized
    assert {m.weight.quant_type for m in quantized} == {"nf4"}
    assert all(m.weight.compress_statistics for m in quantized)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    adapted = {n.split(".lora_")[0].removeprefix("base_model.model.") for n in trainable}
    projections = {f"{p}_proj" for p in ("q", "k", "v", "o", "gate", "up", "down")}
    decoder = {n for n, _ in base.named_modules() if n.rsplit(".", 1)[-1] in projections and "vision" not in n}
    assert adapted == decoder and len(decoder) == 7 * base.config.get_text_config().num_hidden_layers


def test_the_cpu_example_is_shipped_and_trains_on_a_machine_without_a_gpu():
    """examples/smollm2-135m-cpu.yml: in the package's data files, and Axolotl's validation for a machine without a
    GPU leaves nothing on that needs one (its LoRA kernels stay off; tests/axolotl/test_cpu_recipe.py trains it)."""
    import configparser
    import fnmatch

    import torch
    from axolotl.utils.config import prepare_plugins, validate_config
    from axolotl.utils.dict import DictDefault

    from del_plugin.axolotl.cpu import cpu_refusals
    from tools.assets import tiny_model_dir

    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    patterns = setup["options.data_files"]["share/del-plugin/examples"].replace(",", " ").split()
    assert any(fnmatch.fnmatch("examples/smollm2-135m-cpu.yml", p) for p in patterns), patterns
    shipped = yaml.safe_load((EXAMPLES / "smollm2-135m-cpu.yml").read_text(encoding="utf-8"))
    cfg = DictDefault(copy.deepcopy(shipped) | {"base_model": str(tiny_model_dir("llama-spm"))})
    prepare_plugins(cfg)
    cpu = {"bf16": False, "fp8": False, "tf32": False, "n_gpu": 1, "compute_capability": None}
    cfg = validate_config(cfg, capabilities=cpu, env_capabilities={"torch_version": torch.__version__.split("+")[0]})
    assert not any(cfg[key] for key in ("bf16", "fp16", "tf32", "lora_mlp_kernel", "lora_qkv_kernel", "lora_o_kernel"))
    assert cpu_refusals(shipped, cfg) == []
