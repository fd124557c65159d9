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

from repo import REPO

BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))

import benchlib  # noqa: E402
import op_census  # noqa: E402


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

    from del_plugin.core import DigitVocab
    from tools.assets import load_tokenizer

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


def test_memory_profile_names_what_is_live_at_the_peak():
    """The allocations live at the peak sum to the peak, and the difference of two profiles is what one adds."""
    cpu = torch.device("cpu")

    def pattern(extra: bool):
        a = torch.empty(4 * 2**20, dtype=torch.uint8)
        b = torch.ones(2 * 2**20, dtype=torch.uint8) if extra else None
        c = torch.empty(3 * 2**20, dtype=torch.uint8)
        del a, c
        d = torch.empty(1 * 2**20, dtype=torch.uint8)  # after the peak
        del b, d

    base = benchlib.memory_profile(lambda: pattern(False), cpu)
    more = benchlib.memory_profile(lambda: pattern(True), cpu)
    assert (base.peak, more.peak) == (7 * 2**20, 9 * 2**20)
    assert sum(s for s, _ in more.live_at_peak) == more.peak
    assert [s for s, _ in more.live_at_peak] == [4 * 2**20, 3 * 2**20, 2 * 2**20]
    added, removed = benchlib.live_difference(more.live_at_peak, base.live_at_peak)
    assert [s for s, _ in added] == [2 * 2**20] and "aten::ones" in added[0][1] and removed == []
    assert benchlib.summarize_live(more.live_at_peak, top=1)[1] == {
        "bytes": 5 * 2**20,
        "where": "2 smaller allocations",
    }


@pytest.fixture(scope="module")
def number_token_cases():
    """Llama-3's tokenizer (number tokens of 1-3 digits) and Llama-2's (single digits) on the same GSM8K text, at
    V = 128,256 as in bench/number_tokens.py, with a tiny hidden size."""
    import loss_step

    from del_plugin.core import DigitVocab
    from tools.assets import load_tokenizer

    cases = {}
    for name in ("llama-bpe", "llama-spm"):
        tokenizer = load_tokenizer(name)
        vocab = DigitVocab.from_tokenizer(tokenizer, name=name)
        labels = loss_step.gsm8k_labels(tokenizer, 2, 128)
        gen = torch.Generator().manual_seed(0)
        hidden = torch.randn(256, 16, generator=gen)
        weight = torch.randn(128_256, 16, generator=gen) * 0.5
        ce_losses = {"plain": loss_step.plain_ce_loss(), "chunked": loss_step.plain_ce_loss()}
        digit_ids = list(vocab.family_token_ids[0])
        cases[name] = loss_step.Case(hidden, weight, labels, vocab, digit_ids, vocab.decimal_point_id, ce_losses)
    return loss_step, cases


def test_gsm8k_labels_hold_number_tokens_of_every_length(number_token_cases):
    _, cases = number_token_cases
    bpe, spm = cases["llama-bpe"], cases["llama-spm"]
    assert bpe.labels.shape == (2, 128) and (bpe.labels == -100).any()  # prompts masked
    by = bpe.targets_by_digits
    assert len(by) == 4 and all(n > 0 for n in by)  # targets of 0 (words), 1, 2 and 3 digits
    assert int(bpe.n_digits) == by[1] + 2 * by[2] + 3 * by[3]  # one slot per digit
    assert len(spm.targets_by_digits) == 2 and int(spm.n_digits) == spm.targets_by_digits[1] > 0


def test_number_token_bench_end_to_end(number_token_cases):
    """One round of every method with number tokens through loss_step.bench_case (the single-digit path is the
    other tests'), then number_tokens' targets and tables: the same DEL term every way (checked inside), and no
    [V, H]-sized allocation beside a trainable head."""
    import number_tokens
    from tqdm import tqdm

    loss_step, cases = number_token_cases
    case = cases["llama-bpe"]
    out = loss_step.bench_case(case, 256, 128_256, "llama-bpe", torch.device("cpu"), 1, False, None, tqdm(disable=True))
    case.clear_grad()
    results = {"dtype": "float32", "cases": [out], "skipped": []}
    targets = number_tokens.targets(results)
    assert targets["no_extra_head_sized_allocation"] is True and targets["llama-bpe_memory_le_1.02"]
    assert out["methods"][loss_step.method_name("plain", "frozen", "ce+del")]["extra_peak_bytes"] > 0
    text = number_tokens.tables(results)
    assert "| llama-bpe | plain | trainable |" in text and "_HiddenNumberLogits" in text


def test_op_census_names_every_host_synchronisation():
    """op_census.op_census on ops whose host synchronisations are known: boolean indexing (a nonzero forward and
    one in its backward), float() (a read of the value), .tolist() and torch.tensor(host data) (no aten op: seen
    by the function mode), and one_hot's range checks, which read the data on the CPU only. A function of plain
    element-wise ops has none, and launches a handful of kernels."""
    x = torch.randn(16, requires_grad=True)
    mask = torch.arange(16) % 3 == 0

    def clean():
        x.grad = None
        (x * 2).sum().backward()

    def syncing():
        x.grad = None
        x[mask].sum().backward()
        x.detach().tolist()
        torch.tensor([1.0])
        float(x.detach().sum())
        torch.nn.functional.one_hot(torch.arange(3), 5)

    plain = op_census.op_census(clean)
    assert (plain.syncs, plain.host_reads, plain.cpu_only_checks) == ({}, {}, {})
    assert 2 <= plain.launches <= 8
    found = op_census.op_census(syncing)
    assert found.syncs == {
        "aten::index > aten::nonzero": 1,
        "aten::_index_put_impl_ > aten::nonzero": 1,
        "aten::item > aten::_local_scalar_dense": 1,
    }
    assert found.host_reads == {"tolist()": 1, "tensor()": 1}
    assert found.cpu_only_checks == {"aten::one_hot > aten::item > aten::_local_scalar_dense": 2}
    assert found.sync_count == 5 and found.minus(plain).launches == found.launches - plain.launches


# ---------------------------------------------------------------------------------------------------- GPU check
# bench/gpu_check/syncs.py counts the host synchronisations CUDA reports as warnings (set_sync_debug_mode("warn")).
# There is no CUDA here: these tests replace only that report, with a CPU operation whose C++ warning reaches
# Python by the same path (an ``out=`` tensor of the wrong size is resized, with a warning, at every call).
RESIZED = "was resized"
RESIZE_PROBE = "def probe(x):\n    return torch.add(x, x, out=torch.ones(1))\n"


def _cpu_counter(**kwargs):
    import contextlib

    from bench.gpu_check.syncs import SyncCounter

    return SyncCounter(reports=contextlib.nullcontext, message=RESIZED, **kwargs)


def _module_in(folder: Path, source: str) -> dict:
    """``source`` run as a module whose file is in ``folder``: its frames carry that file name."""
    namespace = {"torch": torch}
    exec(compile(source, str(folder / "probe_module.py"), "exec"), namespace)
    return namespace


def test_sync_count_charges_each_synchronisation_to_the_code_that_made_it():
    """Two reported operations per step, one from a module of the del_plugin package and one from here; only the
    steps counted while ``counting`` add up, DEL's with its file and line. The self-check passes."""
    import del_plugin

    counter = _cpu_counter()
    tallies = counter.self_check(torch.ones(2), probe=RESIZE_PROBE)
    assert {side: (t.total, t.by_del) for side, t in tallies.items()} == {"del_plugin": (1, 1), "outside": (1, 0)}
    assert list(tallies["del_plugin"].del_sites) == ["del_plugin/_gpu_check_sync_probe.py:2"]
    dels = _module_in(Path(del_plugin.__file__).parent / "core", RESIZE_PROBE)["probe"]

    def training_step(x):
        dels(x)  # DEL's code
        torch.add(x, x, out=torch.ones(1))  # the trainer's (this file's) code
        torch.nn.functional.relu(dels(x))  # DEL's again: the result passed on is not a report

    step = counter.counted(training_step)
    with pytest.warns(UserWarning, match=RESIZED):  # not counting (a warm-up step): the warnings go on as usual
        step(torch.ones(2))
    counter.counting = True
    for _ in range(3):
        step(torch.ones(2))
    counter.counting = False
    assert counter.per_step(3) == {
        "syncs_per_step": 3.0,
        "del_syncs_per_step": 2.0,
        "del_sync_sites": {"del_plugin/core/probe_module.py:2": 6},
    }


def test_sync_count_fails_loudly_when_it_counts_nothing():
    """The self-check raises when the report it counts never comes (here CUDA's own text, which a CPU never
    raises: what a torch that stopped reporting would look like), when DEL's package is somewhere else than the
    code it charges (a moved package), and the count raises when the function it wraps was never called."""
    from bench.gpu_check.syncs import SYNC_WARNING

    silent = _cpu_counter()
    silent.message = SYNC_WARNING
    with pytest.raises(RuntimeError, match=r"self-check.*\{'del_plugin': \(0, 0\), 'outside': \(0, 0\)\}"):
        silent.self_check(torch.ones(2), probe=RESIZE_PROBE)
    with pytest.raises(RuntimeError, match="self-check"):
        _cpu_counter().self_check(torch.ones(1))  # its own probe, .item(), raises no warning on the CPU
    elsewhere = _cpu_counter(del_root=BENCH)
    elsewhere_del = _module_in(BENCH.parent / "del_plugin", RESIZE_PROBE)["probe"]
    with elsewhere.watching(elsewhere.tally):
        elsewhere_del(torch.ones(2))
    assert (elsewhere.tally.total, elsewhere.tally.by_del) == (1, 0)
    never = _cpu_counter()
    never.counted(lambda: None)
    never.counting = True
    with pytest.raises(RuntimeError, match="never called"):
        never.per_step(3)
    assert never.per_step(0) is None
