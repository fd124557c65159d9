"""Axolotl on a machine without a GPU: the keys that switch off its GPU-only features (the recipe that
docs/cpu.md and ``examples/smollm2-135m-cpu.yml`` give users), and what ``del-check`` refuses for such a
machine, each with the key and the fix.

Imports no Axolotl at module level: the tests, benchmarks and experiments (through tools/cpu.py) read
:data:`CPU_RECIPE` without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LORA_KERNEL_KEYS = ("lora_mlp_kernel", "lora_qkv_kernel", "lora_o_kernel", "lora_embedding_kernel")


@dataclass(frozen=True)
class CpuKey:
    """A key of the CPU recipe: the value to write, and why (what the GPU default would do on a CPU)."""

    value: Any
    why: str


_LORA_KERNEL_WHY = (
    "Axolotl's fused LoRA kernels are Triton GPU kernels, and Axolotl switches them on for a LoRA adapter unless "
    'the key is set: the first forward stops with "RuntimeError: Found no NVIDIA driver"'
)

CPU_RECIPE: dict[str, CpuKey] = {
    "bf16": CpuKey(
        False, 'Axolotl checks bf16 against the GPU ("bf16 requested, but AMP is not supported ... Training will fail")'
    ),
    "fp16": CpuKey(False, "the recipe trains in float32, which a CPU computes natively (not refused when set)"),
    "tf32": CpuKey(
        False, 'TF32 is a CUDA feature (transformers stops with "--tf32 requires Ampere or a newer GPU arch")'
    ),
    "attn_implementation": CpuKey(
        "sdpa", "flash-attention, xformers and SageAttention are CUDA kernels; sdpa runs anywhere (and packs rows)"
    ),
    **{key: CpuKey(False, _LORA_KERNEL_WHY) for key in LORA_KERNEL_KEYS},
}

# attention backends that need a GPU (hub-kernel paths, "org/name", too)
_GPU_ATTENTION = ("flash_attention_2", "flash_attention_3", "flash_attention_4", "xformers", "sage", "fp8")
_GPU_ATTENTION_FLAGS = ("flash_attention", "xformers_attention", "sage_attention")


def cpu_refusals(raw: dict, cfg: Any) -> list[str]:
    """What stops a run of this config on a machine without a GPU, one line per key with the fix. ``raw`` is the
    config as written, ``cfg`` as Axolotl validated it (auto-enabled LoRA kernels, the attention flags folded into
    ``attn_implementation``)."""
    refusals = []
    kernels = [key for key in LORA_KERNEL_KEYS if cfg.get(key)]
    if kernels:
        written = [f"`{key}: true`" for key in kernels if key in raw]
        unset = [f"`{key}`" for key in kernels if key not in raw]
        named = ", ".join(written + ([f"{', '.join(unset)} (unset, so Axolotl switches them on)"] if unset else []))
        fix = ", ".join(f"`{key}: false`" for key in LORA_KERNEL_KEYS)
        refusals.append(f"{named}: {_LORA_KERNEL_WHY}; set {fix}")
    if raw.get("bf16") in (True, "full"):
        refusals.append(f"`bf16: {str(raw['bf16']).lower()}`: {CPU_RECIPE['bf16'].why}; set `bf16: false`")
    if raw.get("tf32") is True:
        refusals.append(f"`tf32: true`: {CPU_RECIPE['tf32'].why}; set `tf32: false`")
    flags = [flag for flag in _GPU_ATTENTION_FLAGS if raw.get(flag)]
    attention = str(raw.get("attn_implementation") or cfg.get("attn_implementation") or "")
    if flags or attention in _GPU_ATTENTION or "/" in attention:
        written = ", ".join(f"`{flag}: true`" for flag in flags) or f"`attn_implementation: {attention}`"
        remove = "".join(f", and remove `{flag}`" for flag in flags)
        refusals.append(f"{written}: {CPU_RECIPE['attn_implementation'].why}; set `attn_implementation: sdpa`{remove}")
    liger = [key for key, value in raw.items() if str(key).startswith("liger_") and value is True]
    plugins = [str(p) for p in raw.get("plugins") or []]
    cce = [p for p in plugins if "cut_cross_entropy" in p]
    if liger or cce:
        named = ", ".join([f"`{key}: true`" for key in liger] + [f"the plugin {p}" for p in cce])
        refusals.append(
            f"{named}: Liger's and Cut Cross Entropy's kernels are Triton GPU kernels; remove them (plain "
            "cross-entropy trains the same loss)"
        )
    return refusals
