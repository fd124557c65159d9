"""A small hand-made vocabulary with number tokens: it cuts digit runs left to right into chunks of three, as
Llama-3's ``\\p{N}{1,3}`` does; its tiny causal LM, and the CE + DEL step the capture tests compare on it."""

from __future__ import annotations

import re

import torch

from del_plugin.core import DigitVocab

import tiny_models
from capture_checks import Step, ce_plus_del_step
from capture_checks import assert_same_step as assert_same_steps

CHARS = " abcdefghijklmnopqrstuvwxyz,.$%:=" + "0123456789"
NUMBERS = [str(v).zfill(m) for m in (2, 3) for v in range(10**m)]
TOKENS = list(CHARS) + NUMBERS
TOKEN_ID = {t: i for i, t in enumerate(TOKENS)}
V = len(TOKENS)
VOCAB = DigitVocab(
    family_token_ids=(tuple(TOKEN_ID[d] for d in "0123456789"),),
    decimal_point_id=TOKEN_ID["."],
    number_token_ids=tuple(tuple(TOKEN_ID[str(v).zfill(m)] for v in range(10**m)) for m in (2, 3)),
    number_families=(0, 0),
    name="chunked",
)
H = 24
TEXT = "pay 1,234.50 for 12345678 items, 3.14159 each, not 42 or .5: 7"


def encode(text: str) -> torch.Tensor:
    """Digit runs in chunks of 3 from the left ('12345678': '123', '456', '78'), every other character alone."""
    pieces = []
    for run in re.findall(r"\d+|\D", text):
        pieces += [run[i : i + 3] for i in range(0, len(run), 3)] if run[0].isdigit() else [run]
    return torch.tensor([TOKEN_ID[p] for p in pieces])


def batch(rows: int = 2) -> dict:
    ids = torch.stack([encode(TEXT)] * rows)
    labels = ids.clone()
    labels[1:, :5] = -100
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def tiny_causal_lm(model_type: str = "llama", *, dtype=torch.float32, vocab_size: int = V, **overrides):
    return tiny_models.tiny_causal_lm(model_type, vocab_size, dtype=dtype, hidden_size=H, **overrides)


def step(model, path: str) -> Step:
    """CE + DEL, DEL from the captured hidden states or from the returned logits; the gradients."""
    return ce_plus_del_step(model, batch(), VOCAB, from_logits=path == "logits", alpha=0.7, train=None)


def assert_same_step(a: Step, b: Step) -> None:
    assert_same_steps(a, b, loss_rtol=1e-6)


SPACED = DigitVocab(family_token_ids=(tuple(range(40, 50)), tuple(range(60, 70))), family_markers=("", "▁"))
