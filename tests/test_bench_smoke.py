"""The benchmarks' own measuring instruments, checked on cases with known answers (seconds, no Axolotl run).

A benchmark that measures the wrong thing publishes wrong numbers, so: the peak-memory measurement must see
torch's CPU allocations exactly; the loss step must run the cross-entropy Axolotl runs and DEL as the trainer
computes it (from the hidden states, no [V, H]-sized allocation beside a trainable head's own gradient); and the
naive re-implementation of the authors' approach must compute the same loss and gradient as the plugin's DEL (or
comparing their speed means nothing).
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

    peak, sizes = benchlib.peak_and_allocations(grows_then_shrinks, torch.device("cpu"))
    assert peak == 8 * 2**20 and sizes == [3 * 2**20, 5 * 2**20, 1 * 2**20]


def test_interleaved_groups_run_back_to_back():
    seen = []
    methods = {name: (lambda name=name: seen.append(name)) for name in ("a", "a+x", "b", "b+x", "b+y")}
    benchlib.interleaved_rounds(methods, 4, torch.device("cpu"), groups=[["a", "a+x"], ["b", "b+x", "b+y"]])
    for r in range(4):
        order = seen[5 * r : 5 * r + 5]
        assert sorted(order) == sorted(methods)
        groups = [name[0] for name in order]
        runs = [g for i, g in enumerate(groups) if i == 0 or groups[i - 1] != g]
        assert sorted(runs) == ["a", "b"]  # each group in one run
    with pytest.raises(ValueError):
        benchlib.interleaved_rounds(methods, 1, torch.device("cpu"), groups=[["a"]])


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
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(2 * 256, 16, generator=gen)
    weight = torch.randn(len(tokenizer), 16, generator=gen) * 0.5
    # the chunked loss is torch.compile'd on its first call (seconds); the plain one stands in for it here
    ce_losses = {"plain": loss_step.plain_ce_loss(), "chunked": loss_step.plain_ce_loss()}
    return loss_step, loss_step.Case(hidden, weight, labels, vocab, digit_ids, vocab.decimal_point_id, ce_losses)


def test_synthetic_labels_hit_the_requested_digit_share(llama_case):
    _, case = llama_case
    share = float(case.n_digits) / float(case.num_items)
    assert 0.27 <= share <= 0.33


def test_naive_reference_is_the_same_loss_and_gradient_as_del(llama_case):
    """The naive term from the logits and ours from the hidden states: the same value, and the same gradient for
    the hidden states and the head."""
    loss_step, case = llama_case
    case.clear_grad()
    ours = case.del_from_hidden(case.hidden_view(), case.parameter)
    ours.backward()  # DEL alone on a trainable head: its rows are added into a zero .grad when backward ends
    grads_ours = case.hidden.grad.clone(), case.parameter.grad.clone()
    case.clear_grad()
    naive = case.naive(torch.nn.functional.linear(case.hidden_view(), case.parameter))
    naive.backward()
    assert ours.item() > 0
    torch.testing.assert_close(naive, ours, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(case.hidden.grad, grads_ours[0], rtol=1e-4, atol=1e-9)
    torch.testing.assert_close(case.parameter.grad, grads_ours[1], rtol=1e-4, atol=1e-9)
    case.clear_grad()


def test_every_method_adds_the_same_digit_term(llama_case):
    loss_step, case = llama_case
    values = {}
    for name, fn in case.methods(extras=False).items():
        values[name] = float(fn())
        case.clear_grad()
    loss_step.check_same_terms(values, "smoke")  # CE + DEL - CE equal for every head, and for the logits API
    assert (
        values[loss_step.method_name("plain", "frozen", "ce+del")]
        > values[loss_step.method_name("plain", "frozen", "ce")]
    )


def test_del_beside_a_trainable_head_allocates_nothing_head_sized(llama_case):
    """The head's [V, H] gradient is allocated once by CE's backward; DEL's digit rows go into it in place."""
    loss_step, case = llama_case
    head_bytes = case.parameter.numel() * case.parameter.element_size()
    counts, peaks = {}, {}
    for loss in ("ce", "ce+del"):
        fn = case.methods(extras=False)[loss_step.method_name("plain", "trainable", loss)]
        fn()  # warm-up
        case.clear_grad()
        peaks[loss], sizes = benchlib.peak_and_allocations(fn, torch.device("cpu"))
        counts[loss] = sum(1 for s in sizes if s == head_bytes)
        case.clear_grad()
    assert counts == {"ce": 1, "ce+del": 1}
    assert peaks["ce+del"] - peaks["ce"] < head_bytes / 4


def test_the_chunked_loss_is_axolotls_and_transformers_is_restored():
    import loss_step
    import transformers.loss.loss_utils as loss_utils

    before = loss_utils.LOSS_MAPPING["ForCausalLM"], loss_utils.ForCausalLMLoss
    chunked = loss_step.axolotl_chunked_ce_loss()
    assert chunked.__name__ == "for_causal_lm_chunked_loss" and chunked.__module__ == "axolotl.monkeypatch.loss.chunked"
    assert (loss_utils.LOSS_MAPPING["ForCausalLM"], loss_utils.ForCausalLMLoss) == before


def test_del_on_float32_hidden_states_allocates_one_hidden_sized_buffer(llama_case):
    """DEL alone, forward + backward, on float32 h: the gradient of h is the only [N, H] buffer (a blocked copy of
    it would be a second one)."""
    _, case = llama_case
    hidden_bytes = case.hidden.numel() * case.hidden.element_size()
    fn = case.term_fns(None)["del"]
    fn()  # warm-up
    case.clear_grad()
    _, sizes = benchlib.peak_and_allocations(fn, torch.device("cpu"))
    case.clear_grad()
    assert sizes.count(hidden_bytes) == 1, sizes
