"""What each architecture's logits are, so that DEL's digit logits are the model's own: ``logits = f(h · Wᵀ + b)``.

``h`` is the last hidden state the decoder returns (``outputs[0]`` of ``causal_lm.model(...)``, what every causal LM
of transformers passes to its head), ``W`` / ``b`` the head's weight and optional bias, and ``f`` an elementwise
post-head transform that a few architectures apply in their ``*ForCausalLM.forward``: none, a scale
(Cohere's ``logit_scale``, Falcon-H1's ``lm_head_multiplier``), a division (Granite's ``logits_scaling``) or
Gemma's soft cap ``cap * tanh(x / cap)``. Applying ``f`` to the ten digit logits gives the model's ten logits.

:data:`ARCHITECTURES` is the table of model types that ``tests/core/test_architectures.py`` proves exact (captured digit
logits against the model's own, LoRA gradients against the logits path); each entry names the function that reads
its transform from the config. A model type outside the table is accepted only by measurement
(:meth:`~del_plugin.core.capture.DigitLogitsCapture.check_against_logits`), and refused up front when its config
sets a transform key DEL does not know how that model applies.

Pure Python and torch: nothing here imports transformers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["ARCHITECTURES", "TRANSFORM_KEYS", "Architecture", "LogitTransform", "text_config"]

# config keys that transform the logits after the head in some architecture (transformers 5.20's modeling files)
TRANSFORM_KEYS = (
    "final_logit_softcapping",
    "logits_soft_cap",
    "logit_scale",
    "logits_scaling",
    "output_multiplier",
    "lm_head_multiplier",
    "logits_mup_width_multiplier",
)


@dataclass(frozen=True)
class LogitTransform:
    """An elementwise post-head transform, applied to float32 digit logits as the model applies it to its logits."""

    description: str
    fn: Callable[[torch.Tensor], torch.Tensor]

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        return self.fn(logits)


def text_config(config: Any) -> Any:
    """The text decoder's config: itself, or the ``text_config`` of a multimodal wrapper (Gemma-3, Mistral-3)."""
    getter = getattr(config, "get_text_config", None)
    return getter() if callable(getter) else config


def _set(value: Any, neutral: float) -> bool:
    return value is not None and value != neutral


def no_transform(config: Any) -> LogitTransform | None:
    return None


def final_logit_softcapping(config: Any) -> LogitTransform | None:
    """Gemma-2/3/4: ``cap * tanh(logits / cap)`` when ``final_logit_softcapping`` is set."""
    cap = getattr(text_config(config), "final_logit_softcapping", None)
    if cap is None:
        return None
    cap = float(cap)
    return LogitTransform(f"soft cap {cap:g}", lambda z: torch.tanh(z / cap) * cap)


def times_logit_scale(config: Any) -> LogitTransform | None:
    """Cohere, Cohere-2: ``logits * logit_scale``."""
    scale = getattr(text_config(config), "logit_scale", None)
    if not _set(scale, 1.0):
        return None
    scale = float(scale)
    return LogitTransform(f"x logit_scale {scale:g}", lambda z: z * scale)


def divided_by_logits_scaling(config: Any) -> LogitTransform | None:
    """Granite, Granite-MoE: ``logits / logits_scaling``."""
    scaling = getattr(text_config(config), "logits_scaling", None)
    if not _set(scaling, 1.0):
        return None
    scaling = float(scaling)
    return LogitTransform(f"/ logits_scaling {scaling:g}", lambda z: z / scaling)


def times_lm_head_multiplier(config: Any) -> LogitTransform | None:
    """Falcon-H1: ``logits * lm_head_multiplier``."""
    multiplier = getattr(text_config(config), "lm_head_multiplier", None)
    if not _set(multiplier, 1.0):
        return None
    multiplier = float(multiplier)
    return LogitTransform(f"x lm_head_multiplier {multiplier:g}", lambda z: z * multiplier)


@dataclass(frozen=True)
class Architecture:
    """One model type: ``transform(config)`` reads its post-head transform (None: the logits are ``h · Wᵀ + b``),
    ``reads`` the config keys that transform handles (any other key of :data:`TRANSFORM_KEYS` set on the config is
    refused), ``family`` the models it serves and ``needed`` what reading it exactly takes (for the docs table)."""

    family: str
    transform: Callable[[Any], LogitTransform | None] = no_transform
    reads: tuple[str, ...] = ()
    needed: str = "nothing"
    # (config key of a loss kernel, why that kernel's patched forward does not train the model's own logits here)
    kernel_refusals: tuple[tuple[str, str], ...] = ()


_SOFTCAP = dict(transform=final_logit_softcapping, reads=("final_logit_softcapping",))
_GRANITE = dict(transform=divided_by_logits_scaling, reads=("logits_scaling",), needed="÷ `logits_scaling`")
_COHERE = dict(transform=times_logit_scale, reads=("logit_scale",), needed="× `logit_scale`")

# model_type -> Architecture, in the order of the docs table. Every entry is proven by tests/core/test_architectures.py.
ARCHITECTURES: dict[str, Architecture] = {
    "llama": Architecture("Llama-2/3.x, CodeLlama, DeepSeek LLM/Math/Coder, SmolLM2"),
    "mistral": Architecture("Mistral 7B, Mistral-Nemo, Mistral-Small"),
    "ministral": Architecture("Ministral"),
    "mixtral": Architecture("Mixtral (MoE)", needed="router auxiliary loss kept out of DEL's term"),
    "qwen2": Architecture("Qwen2, Qwen2.5"),
    "qwen2_moe": Architecture("Qwen1.5/2-MoE", needed="router auxiliary loss kept out of DEL's term"),
    "qwen3": Architecture("Qwen3"),
    "qwen3_moe": Architecture("Qwen3-MoE", needed="router auxiliary loss kept out of DEL's term"),
    "qwen3_5_text": Architecture("Qwen3.5 (text)", needed="hybrid linear attention: nothing for DEL"),
    "gemma": Architecture("Gemma"),
    "gemma2": Architecture("Gemma-2", needed="soft cap `final_logit_softcapping` (30)", **_SOFTCAP),
    "gemma3_text": Architecture("Gemma-3 1B, Gemma-3 text decoders", needed="soft cap when set", **_SOFTCAP),
    # Gemma3ForConditionalGeneration.forward applies no soft cap, even where its text_config sets one
    "gemma3": Architecture(
        "Gemma-3 4B/12B/27B (multimodal wrapper)",
        reads=("final_logit_softcapping",),
        needed="text decoder of the wrapper (whose forward applies no soft cap)",
    ),
    "gemma4_text": Architecture("Gemma-4 (text)", needed="soft cap `final_logit_softcapping`", **_SOFTCAP),
    "phi3": Architecture("Phi-3, Phi-3.5, Phi-4"),
    "phi": Architecture("Phi-1.5, Phi-2", needed="head bias; final norm `final_layernorm`"),
    "olmo2": Architecture("OLMo-2"),
    "olmo3": Architecture("OLMo-3"),
    "cohere": Architecture("Command-R", **_COHERE),
    "cohere2": Architecture("Command-R7B, Command-A", **_COHERE),
    "granite": Architecture("Granite-3.x", **_GRANITE),
    "granitemoe": Architecture("Granite-3.x MoE", **_GRANITE),
    "gpt_oss": Architecture("gpt-oss (MoE)", needed="router auxiliary loss kept out of DEL's term"),
    "deepseek_v3": Architecture("DeepSeek-V3, R1 (MoE, MLA)"),
    "glm4_moe": Architecture("GLM-4.5/4.6 (MoE)"),
    "falcon_h1": Architecture(
        "Falcon-H1 (hybrid Mamba)",
        transform=times_lm_head_multiplier,
        reads=("lm_head_multiplier",),
        needed="× `lm_head_multiplier`; final norm `final_layernorm`",
        kernel_refusals=(
            (
                "liger_fused_linear_cross_entropy",
                "Liger's Falcon-H1 forward (liger-kernel 0.8.4) computes the cross-entropy of h · Wᵀ without the "
                "model's × lm_head_multiplier, so it would train other logits than the model's (and than DEL's); "
                "use cut_cross_entropy or plain cross-entropy",
            ),
        ),
    ),
    "llama4_text": Architecture("Llama-4 (text, MoE)"),
    "llama4": Architecture(
        "Llama-4 Scout/Maverick (multimodal wrapper)",
        needed="the wrapper's inner causal LM",
        kernel_refusals=(
            (
                "liger_fused_linear_cross_entropy",
                "Liger's Llama-4 forward (liger-kernel 0.8.4) returns no router_logits, which "
                "Llama4ForConditionalGeneration reads, so the wrapper's forward fails; train the text model "
                "(llama4_text) or use cut_cross_entropy",
            ),
        ),
    ),
    "mistral3": Architecture("Mistral-Small-3.1/3.2 (multimodal wrapper)", needed="text decoder of the wrapper"),
    "smollm3": Architecture("SmolLM3"),
}


def architectures_table() -> str:
    """The docs table of :data:`ARCHITECTURES` (docs/architectures.md and the README; a test keeps both current)."""
    lines = [
        "| `model_type` | models | what DEL needed | refused beside |",
        "|---|---|---|---|",
    ]
    for model_type, arch in ARCHITECTURES.items():
        refused = ", ".join(f"`{key}`" for key, _ in arch.kernel_refusals)
        lines.append(f"| `{model_type}` | {arch.family} | {arch.needed} | {refused} |")
    return "\n".join(lines) + "\n"
