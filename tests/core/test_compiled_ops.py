"""DEL's small ops under ``torch.compile(fullgraph=True)`` (what a CUDA device gets by default), checked on the CPU
against the results they give op by op."""

from __future__ import annotations

import torch

from del_plugin.core import next_token_places, shift_to_next_token
from del_plugin.core.digits import number_target_positions

from fake_vocab import MULTI_VOCAB as MULTI
from fake_vocab import VOCAB, encode, encode_tokens


def test_dels_small_ops_compile_whole_and_give_the_eager_results(monkeypatch):
    """DEL_PLUGIN_COMPILE=1 (what a CUDA device gets by default): the family selection, the slot marginals of
    number tokens and the criterion's sums compile without a graph break (fullgraph=True; a failure would fall
    back to eager and be recorded) to the eager values and gradients, and a second batch shape reuses the
    programs (dynamic shapes)."""
    from del_plugin.core import digit_targets_from_hidden
    from del_plugin.core.criteria import digit_criterion_sums
    from del_plugin.core.criteria.dispatch import _digit_sums
    from del_plugin.core.digits import _assemble_slots, _select_family

    def run(vocab, labels, mode, criterion="del"):
        monkeypatch.setenv("DEL_PLUGIN_COMPILE", mode)
        gen = torch.Generator().manual_seed(0)
        rows = max(int(labels.max()), *vocab.number_row_ids) + 1
        hidden = torch.randn(*labels.shape, 8, generator=gen, requires_grad=True)
        weight = torch.randn(rows, 8, generator=gen, requires_grad=True)
        targets = shift_to_next_token(labels, -100)
        places = next_token_places(labels, vocab)
        positions = number_target_positions(targets, vocab) if vocab.max_digits > 1 else None
        digits = digit_targets_from_hidden(hidden, weight, targets, vocab, positions)
        sums = digit_criterion_sums(criterion, digits, places)
        sums.loss.backward()
        return [digits.logits.detach(), *(s.detach() for s in sums), hidden.grad, weight.grad]

    spm = torch.stack([encode("a 12 b 3.5 c ⁴0 ", "#"), encode("x 9.75 y 128 zzz", "##")])
    # 3, 4, ... 8 targets in the six number groups (bare and marked, 1-3 digits): no group with 0 or 1 targets and
    # no two sizes alike, which torch.compile would give programs of their own (fused.RECOMPILE_LIMIT)
    examples = [["5"], ["⁵"], ["12", "07"], ["345", "999"], ["⁴2", "⁰0"], ["⁴56", "⁹99"]]
    numbers = [ex[k % len(ex)] for g, ex in enumerate(examples) for k in range(3 + g)]
    rows = [[t for n in half for t in (" ", n)] for half in (numbers[::2], numbers[1::2])]
    multi = torch.stack([encode_tokens(row + [" "] * (len(rows[0]) - len(row))) for row in rows])
    cases = [(VOCAB, spm), (MULTI, multi)]
    for vocab, labels in cases:
        eager = run(vocab, labels, "0")
        compiled = run(vocab, labels, "1")
        for a, b in zip(eager, compiled):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert all(f.failure is None and f.compiled is not None for f in (_select_family, _assemble_slots, _digit_sums))
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for vocab, labels in cases:  # rows twice as long: the same programs
        longer = torch.cat([labels, labels], dim=1)
        for a, b in zip(run(vocab, longer, "0"), run(vocab, longer, "1")):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs
    # the number-level criterion (its numbers read with cumulative and scatter ops) compiles whole too
    for a, b in zip(run(VOCAB, spm, "0", "ntl_number"), run(VOCAB, spm, "1", "ntl_number")):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert _digit_sums.failure is None and _digit_sums.compiled is not None
