"""Tiny randomly initialised causal LMs of any transformers model type, built by the library's own config class and
model code: what the capture and fused-loss tests compare DEL's reading of the digits against."""

from __future__ import annotations

import torch

# the shape every tiny model shares unless a test says otherwise (hidden 24: a multiple of the 4 attention heads)
SHAPE = dict(
    hidden_size=24,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)


def tiny_config(model_type: str, vocab_size: int, **overrides):
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type, **{"vocab_size": vocab_size, **SHAPE, **overrides})


def tiny_causal_lm(model_type: str, vocab_size: int, *, dtype=torch.float32, seed: int = 5, **overrides):
    """A float32 (or ``dtype``) model of ``model_type`` with eager attention, weights drawn from ``seed``."""
    from transformers import AutoModelForCausalLM

    config = tiny_config(model_type, vocab_size, **overrides)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="eager")


def lora(model, **config):
    from peft import LoraConfig, get_peft_model

    return get_peft_model(model, LoraConfig(r=4, lora_alpha=8, **config))
