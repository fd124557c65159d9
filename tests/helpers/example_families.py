"""The model families of the shipped examples (examples/<family>/): the paper's four with the authors' runs they
convert, and the families the authors did not train; and a changed copy of an example, for the tests that check or
refuse one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from repo import REPO

EXAMPLES = REPO / "examples"


@dataclass(frozen=True)
class AuthorsRun:
    """One family's run in the authors' repository (PolyU-VCLab/DEL, train_<family>.sh and train-*.py)."""

    alpha: float  # the constant in front of their L_num
    gpus: int  # torchrun --nproc_per_node
    grad_accum: int  # --gradient_accumulation_steps (micro-batch 1)
    # True where their Trainer divided the whole loss by the accumulation steps (transformers 4.35.2 through
    # accelerate's backward: CodeLlama, Mistral); False where it did not and multiplied the loss by the number of
    # processes instead (transformers 4.57.1 with a compute_loss_func and average_tokens_across_devices: Qwen2.5,
    # DeepSeek-Math), which leaves their per-micro-batch mean GA x GPUs times heavier than a mean over the step.
    loss_divided_by_grad_accum: bool

    @property
    def del_alpha(self) -> float:
        """The weight of the mean of l_t over an optimizer step's digits that their gradient corresponds to."""
        return self.alpha if self.loss_divided_by_grad_accum else self.alpha * self.grad_accum * self.gpus

    @property
    def rows_per_step(self) -> int:
        return self.gpus * self.grad_accum


@dataclass(frozen=True)
class Family:
    directory: str
    hub_id: str
    tokenizer: str  # tools.assets tokenizer with the same vocabulary
    model_module: str  # transformers.models.<module>
    decoder_layer: str
    learning_rate: float  # the paper's full fine-tuning learning rate
    authors: AuthorsRun


FAMILIES = {
    f.directory: f
    for f in (
        Family(
            "codellama-7b",
            "codellama/CodeLlama-7b-hf",
            "llama-spm",
            "llama",
            "LlamaDecoderLayer",
            2e-5,
            AuthorsRun(alpha=0.1, gpus=4, grad_accum=32, loss_divided_by_grad_accum=True),
        ),
        Family(
            "mistral-7b",
            "mistralai/Mistral-7B-v0.1",
            "mistral",
            "mistral",
            "MistralDecoderLayer",
            5e-6,
            AuthorsRun(alpha=0.1, gpus=8, grad_accum=32, loss_divided_by_grad_accum=True),
        ),
        # DeepSeek-Math-7B is a Llama architecture (the authors wrap LlamaDecoderLayer too)
        Family(
            "deepseek-math-7b-instruct",
            "deepseek-ai/deepseek-math-7b-instruct",
            "deepseek-llm",
            "llama",
            "LlamaDecoderLayer",
            5e-6,
            AuthorsRun(alpha=0.01, gpus=8, grad_accum=32, loss_divided_by_grad_accum=False),
        ),
        # train_qwen.sh is for Qwen2.5-1.5B on 4 GPUs; for 7B we assume the 8 GPUs of their other 7B run (DeepSeek)
        Family(
            "qwen2.5-7b",
            "Qwen/Qwen2.5-7B",
            "qwen2",
            "qwen2",
            "Qwen2DecoderLayer",
            5e-6,
            AuthorsRun(alpha=0.01, gpus=8, grad_accum=32, loss_divided_by_grad_accum=False),
        ),
    )
}


# ------------------------------------------------------------------------- families the authors did not train
@dataclass(frozen=True)
class DefaultAlphaFamily:
    """A family outside the paper's four: no authors' run to convert, so a QLoRA example at the plugin's default
    ``del_alpha``, with the fused loss and attention its architecture supports. A base model trains in the alpaca
    prompt; an instruct model (``chat_template`` set) in its chat format, through a user-defined prompt."""

    directory: str
    hub_id: str
    tokenizer: str  # tools.assets tokenizer of the family (its real vocabulary)
    model_type: str  # the checkpoint's config.json model_type
    causal_lm: str  # the class AutoModelForCausalLM loads for it, whose forward the CCE fork patches
    config: dict  # the checkpoint's published config.json shapes (the memory estimates in docs/examples.md)
    parameters: float  # total parameters those shapes give (a tied head counted once), in billions
    lora_parameters: float  # the adapter's parameters at the example's r 32 and targets, in millions
    chat_template: str | None = None  # Axolotl's chat template of an instruct model's rows; None: alpaca prompt
    max_digits: int = 1  # the most digits the tokenizer puts in one number token


OTHER_FAMILIES = {
    f.directory: f
    for f in (
        DefaultAlphaFamily(
            "qwen3-8b",
            "Qwen/Qwen3-8B-Base",
            "qwen3",
            "qwen3",
            "Qwen3ForCausalLM",
            # Qwen/Qwen3-8B(-Base) config.json: untied head, head_dim 128
            dict(
                vocab_size=151936,
                hidden_size=4096,
                intermediate_size=12288,
                num_hidden_layers=36,
                num_attention_heads=32,
                num_key_value_heads=8,
                head_dim=128,
                tie_word_embeddings=False,
            ),
            8.19,
            87.3,
        ),
        DefaultAlphaFamily(
            "gemma-3-12b",
            "google/gemma-3-12b-pt",
            "gemma3",
            "gemma3",
            "Gemma3ForConditionalGeneration",
            # google/gemma-3-12b-pt config.json: the text decoder (tied head, head_dim 256 > hidden / heads, no
            # soft caps) and the SigLIP vision tower
            dict(
                text_config=dict(
                    vocab_size=262208,
                    hidden_size=3840,
                    intermediate_size=15360,
                    num_hidden_layers=48,
                    num_attention_heads=16,
                    num_key_value_heads=8,
                    head_dim=256,
                    query_pre_attn_scalar=256,
                    sliding_window=1024,
                ),
                vision_config=dict(
                    hidden_size=1152,
                    intermediate_size=4304,
                    num_hidden_layers=27,
                    num_attention_heads=16,
                    image_size=896,
                    patch_size=14,
                    vision_use_head=False,
                ),
                mm_tokens_per_image=256,
            ),
            12.19,
            130.9,
        ),
        DefaultAlphaFamily(
            "llama-3.1-8b",
            "meta-llama/Llama-3.1-8B-Instruct",
            "llama-bpe",
            "llama",
            "LlamaForCausalLM",
            # meta-llama/Llama-3.1-8B-Instruct config.json: untied head, head_dim 128 (Mistral-7B's decoder shapes)
            dict(
                vocab_size=128256,
                hidden_size=4096,
                intermediate_size=14336,
                num_hidden_layers=32,
                num_attention_heads=32,
                num_key_value_heads=8,
                tie_word_embeddings=False,
            ),
            8.03,
            83.9,
            chat_template="llama3",
            max_digits=3,
        ),
    )
}


def write(tmp_path: Path, example: str, **changes) -> Path:
    """``examples/<example>`` with ``changes`` (a ``None`` value drops the key), as ``tmp_path/config.yml``."""
    cfg = yaml.safe_load((EXAMPLES / example).read_text(encoding="utf-8"))
    for key, value in changes.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    out = tmp_path / "config.yml"
    out.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return out
