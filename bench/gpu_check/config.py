"""The Axolotl config of one run: what examples/*/qlora-24gb.yml uses, on the locally built model and rows, with
the pair's kernel plugin and, DEL on, the plugin and its weight."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import torch

from .pairs import PAIRS, pair_model


def axolotl_config(args: argparse.Namespace, workdir: Path, with_del: bool, pair: str = "plain") -> dict:
    name = f"{pair}-{'on' if with_del else 'off'}"
    model = pair_model(args, pair)[0]
    cfg = {
        "base_model": str(workdir / model),
        "tokenizer_config": str(workdir / model),
        "datasets": [{"path": str(workdir / "rows.jsonl"), "ds_type": "json", "type": "alpaca"}],
        "dataset_prepared_path": str(workdir / f"prepared-{name}"),
        "dataset_num_proc": 1,
        "val_set_size": 0.0,
        "output_dir": str(workdir / f"out-{name}"),
        "save_strategy": "no",
        **qlora_keys(args),
        "sequence_len": args.seq_len,
        "sample_packing": True,
        "pad_to_sequence_len": True,
        "micro_batch_size": args.micro_batch,
        "gradient_accumulation_steps": args.grad_accum,
        "max_steps": args.warmup + args.steps,
        "num_epochs": 100,  # max_steps ends the run
        "learning_rate": 2e-4,
        "lr_scheduler": "constant",
        **device_keys(args),
        "gradient_checkpointing": True,
        "gradient_checkpointing_kwargs": {"use_reentrant": False},
        "logging_steps": 1,
        "dataloader_num_workers": 0,
        "seed": 42,
        "plugins": list(PAIRS[pair]["plugins"]),
        **PAIRS[pair]["cfg"],
    }
    if with_del:
        cfg.update({"plugins": cfg["plugins"] + ["del_plugin.DELPlugin"], "del_alpha": args.del_alpha})
    return cfg


def qlora_keys(args: argparse.Namespace) -> dict:
    """4-bit NF4 with double quantisation, LoRA r=32 on all linear layers (Axolotl's fused LoRA kernels on a GPU)."""
    return {
        "load_in_4bit": True,
        "adapter": "qlora",
        "bnb_config_kwargs": {"bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True},
        "lora_r": 32,
        "lora_alpha": 16,
        "lora_dropout": 0.0,
        "lora_target_linear": True,
        "lora_mlp_kernel": not args.cpu_smoke,
        "lora_qkv_kernel": not args.cpu_smoke,
        "lora_o_kernel": not args.cpu_smoke,
        "lora_embedding_kernel": False,
    }


def device_keys(args: argparse.Namespace) -> dict:
    """What a GPU run uses (bf16 or fp16, flash-attention 2 when installed, paged 8-bit AdamW) and --cpu-smoke's
    CPU equivalents."""
    use_flash = (not args.cpu_smoke) and importlib.util.find_spec("flash_attn") is not None
    bf16 = (not args.cpu_smoke) and torch.cuda.is_bf16_supported()
    return {
        "optimizer": "adamw_torch" if args.cpu_smoke else "paged_adamw_8bit",
        "bf16": bf16,
        "fp16": (not args.cpu_smoke) and not bf16,
        "tf32": not args.cpu_smoke,
        "attn_implementation": "flash_attention_2" if use_flash else "sdpa",
        "dataloader_pin_memory": not args.cpu_smoke,
    }
