"""The loss step of bench/loss_step.py on the GPU at 7-8B models' heads, in a child process, with this check's
synthetic tokenizers (nothing to download) and arithmetic labels: single digits at 32,000 and 151,936 logits,
number tokens at 128,256 (Llama-3's)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

from .assets import arithmetic_labels, build_tokenizer
from .cli import NUMBERS_VOCAB
from .protocol import REPO_ROOT, emit_result

# Llama-2-7B's, Llama-3-8B's and Qwen2.5-7B's logits, H = 4,096
LOSS_STEP_SHAPES = ("8192x32000", "8192x128256", "8192x151936")
LOSS_STEP_HIDDEN = 4096


def run_loss_step_child(args: argparse.Namespace) -> None:
    """Every shape of LOSS_STEP_SHAPES in bfloat16 through bench/loss_step.py; prints one result line: its
    tables, targets and per shape DEL's term alone (time, kernels, whether it ran without a host sync)."""
    sys.path.insert(0, str(REPO_ROOT / "bench"))
    import loss_step

    import benchlib

    device = torch.device("cuda")
    results = {
        "machine": {**benchlib.machine_info(), "device": str(device)},
        "memory_validation": benchlib.validate_memory_measurement(device),
        "alpha": loss_step.ALPHA,
        "seq_len": loss_step.SEQ_LEN,
        "hidden_size": LOSS_STEP_HIDDEN,
        "dtype": "bfloat16",
        "labels": "gpu_check's synthetic arithmetic rows",
        "cases": [],
        "skipped": [],
    }
    ce_losses = {"plain": loss_step.plain_ce_loss(), "chunked": loss_step.axolotl_chunked_ce_loss()}
    for shape in LOSS_STEP_SHAPES:
        results["cases"].append(bench_shape(loss_step, shape, ce_losses, Path(args.workdir), device))
        torch.cuda.empty_cache()
    results["targets"] = loss_step.evaluate_targets(results)
    emit_result({"tables": loss_step.tables(results), "targets": results["targets"], "summary": summary(results)})


def bench_shape(loss_step, shape: str, ce_losses: dict, workdir: Path, device: torch.device) -> dict:
    """bench/loss_step.py's measurements of one ``TOKENSxVOCAB`` shape: random hidden states and head, the
    synthetic tokenizer's labels (with number tokens at Llama-3's vocabulary)."""
    from tqdm import tqdm

    from del_plugin.core import DigitVocab

    tokens, vocab_size = loss_step.parse_shape(shape)
    number_tokens = vocab_size == NUMBERS_VOCAB
    tokenizer = build_tokenizer(vocab_size, number_tokens)
    name = f"synthetic{' number tokens' if number_tokens else ''}"
    vocab = DigitVocab.from_tokenizer(tokenizer, name=name)
    labels = arithmetic_labels(tokenizer, workdir / "rows.jsonl", tokens // loss_step.SEQ_LEN, loss_step.SEQ_LEN)
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(tokens, LOSS_STEP_HIDDEN, generator=gen).to(device, torch.bfloat16)
    weight = torch.randn(vocab_size, LOSS_STEP_HIDDEN, generator=gen) * (2 / math.sqrt(LOSS_STEP_HIDDEN))
    weight = weight.to(device, torch.bfloat16)
    digit_ids = list(vocab.family_token_ids[0])
    case = loss_step.Case(hidden, weight, labels, vocab, digit_ids, vocab.decimal_point_id, ce_losses)
    del hidden, weight
    return loss_step.bench_case(case, tokens, vocab_size, name, device, 5, False, None, tqdm(disable=True))


def summary(results: dict) -> list[dict]:
    """Per shape: DEL's term alone, its share of the fastest CE step, its kernels and its sync-free run."""
    rows = []
    for case in results["cases"]:
        alone = case["term_only"]["del"]
        fastest = min(m["median_wall_s"] for m in case["methods"].values() if m["loss"] == "ce")
        rows.append(
            {
                "shape": f"{case['tokens']:,} x {case['vocab_size']:,}",
                "tokenizer": case["tokenizer"],
                "term_ms": alone["median_wall_s"] * 1e3,
                "term_over_fastest_ce": alone["median_wall_s"] / fastest,
                "term_kernels": alone.get("launches"),
                "term_sync_free": alone.get("cuda_sync_free"),
            }
        )
    return rows
