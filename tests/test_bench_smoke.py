"""The benchmarks' own measuring instruments, checked on cases with known answers (seconds, no Axolotl run).

A benchmark that measures the wrong thing publishes wrong numbers, so: the peak-memory measurement must see
torch's CPU allocations exactly, and the naive re-implementation of the reference approach must compute the same
loss and gradient as the plugin's DEL (or comparing their speed means nothing).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import benchlib  # noqa: E402


def test_peak_memory_sees_torch_cpu_allocations_exactly():
    report = benchlib.validate_memory_measurement(torch.device("cpu"))
    assert report["known_pattern_measured_bytes"] == 96 * 2**20
    assert report["touch_profiled_bytes"] == 256 * 2**20

    def grows_then_shrinks():
        a = torch.empty(3 * 2**20, dtype=torch.uint8)
        b = torch.empty(5 * 2**20, dtype=torch.uint8)
        del a
        c = torch.empty(1 * 2**20, dtype=torch.uint8)
        del b, c

    assert benchlib.peak_live_bytes(grows_then_shrinks, torch.device("cpu")) == 8 * 2**20


@pytest.fixture(scope="module")
def llama_case():
    import loss_step

    from del_plugin.assets import load_tokenizer
    from del_plugin.core import DigitVocab

    tokenizer = load_tokenizer("llama-spm")
    vocab = DigitVocab.from_tokenizer(tokenizer, name="llama-spm")
    digit_ids = list(vocab.family_token_ids[0])
    words = loss_step.word_token_ids(tokenizer, digit_ids, vocab.decimal_point_id)
    labels = loss_step.synthetic_labels(2, 256, digit_ids, vocab.decimal_point_id, words, 0.3, seed=3)
    leaf = torch.randn(2, 256, len(tokenizer), generator=torch.Generator().manual_seed(0)).requires_grad_(True)
    return loss_step, loss_step.Case(leaf, labels, vocab, digit_ids, vocab.decimal_point_id, {}, {}, {})


def test_synthetic_labels_hit_the_requested_digit_share(llama_case):
    _, case = llama_case
    share = float(case.n_digits) / float(case.num_items)
    assert 0.27 <= share <= 0.33


def test_naive_reference_is_the_same_loss_and_gradient_as_del(llama_case):
    loss_step, case = llama_case
    ours = case.ours_sparse(case.leaf)  # DEL alone: the sparse path (in_place needs a second loss)
    (grad_ours,) = torch.autograd.grad(ours, case.leaf)
    naive = case.naive(case.leaf)
    (grad_naive,) = torch.autograd.grad(naive, case.leaf)
    assert ours.item() > 0
    torch.testing.assert_close(naive, ours, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(grad_naive, grad_ours.to_dense(), rtol=1e-4, atol=1e-9)
