"""DEL's training step at GPU speed, checked on the CPU (issue 29): no host synchronisation in DEL's path, its
small ops compiled whole (``torch.compile(fullgraph=True)``) to the results they give op by op, and the number-token
positions the collator sends so that the step never asks the device where its number tokens are.

A host synchronisation cannot be observed as a wait without a GPU; ``benchlib.op_census`` counts the ops that make
one on CUDA (``aten::nonzero``, ``.item()``, ``.tolist()``, tensors made from host data ...), and is itself checked
on known cases in tests/project/test_bench_smoke.py.
"""

from __future__ import annotations

import sys

import pytest
import torch

from repo import REPO

sys.path.insert(0, str(REPO / "bench"))

from del_plugin.core import DigitVocab, next_token_places, shift_to_next_token  # noqa: E402
from del_plugin.core.digits import number_target_positions  # noqa: E402
from del_plugin.hf.collator import NUMBER_POSITIONS_KEY, TARGET_PLACES_KEY, NumberSpanCollator  # noqa: E402

from fake_vocab import MULTI_VOCAB as MULTI  # noqa: E402
from fake_vocab import VOCAB, encode, encode_tokens  # noqa: E402


# ---------------------------------------------------------------------------------------------- the step
@pytest.mark.parametrize("tokenizer", ["llama-spm", "llama-bpe"])
def test_dels_path_in_a_training_step_has_no_host_sync(tokenizer):
    """A training step (get_batch_samples, compute_loss, backward) of a tiny Llama with DEL, minus the same step
    without: no op that waits for the device. With number tokens the control drops the collator's positions,
    and the census then sees the step find them itself: with NumPy on these CPU tensors (one read of the targets
    on the host), where a GPU's would take one ``nonzero`` per number group."""
    import step_ops

    case = step_ops.census_case(tokenizer, "trainable", rows=2, seq_len=256)
    assert case["digit_targets"] > 0
    del_part = case["del"]
    assert del_part["sync_ops"] == {} and del_part["host_read_calls"] == {}, del_part
    assert del_part["cpu_only_check_ops"] == {}
    assert 0 < del_part["launches"] < case["step_without_del"]["launches"]
    if tokenizer == "llama-bpe":
        assert case["number_token_digits"] == 3 and all(n > 0 for n in case["targets_by_digits"][1:])
        control = step_ops.census_case(tokenizer, "trainable", rows=2, seq_len=256, number_positions=False)
        assert control["del"]["host_read_calls"] == {"numpy()": 1}


def _tokenizer(name: str):
    from tools.assets import load_tokenizer

    return load_tokenizer(name)


# ---------------------------------------------------------------------------------------------- compiled
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


# ---------------------------------------------------------------------------------------------- the collator
def test_the_collator_sends_where_the_number_tokens_are():
    """Per number group, the flat positions of the targets in it (labels shifted by one, or the batch's
    shift_labels): what the step's ``nonzero`` would find; none for single digits or when turned off."""
    labels = torch.stack(
        [
            encode_tokens(["a", "12", "3", " ", "⁴56", ".", "7", "b", "999", "c"]),
            encode_tokens(["#", "5", ",", "000", "y", " ", "⁰1", "z", "q", "q"]),
        ]
    )
    collate = NumberSpanCollator(lambda features: {"labels": labels.clone()}, MULTI)
    batch = collate([])
    targets = shift_to_next_token(labels, -100)
    group = MULTI.slot_targets(targets)[0].reshape(-1)
    expected = [(group == g).nonzero().squeeze(1) for g in range(len(MULTI.number_groups))]
    assert [p.tolist() for p in batch[NUMBER_POSITIONS_KEY]] == [e.tolist() for e in expected]
    assert sum(len(p) for p in expected) == int((group >= 0).sum()) > 0
    assert all(p.dtype == torch.long for p in batch[NUMBER_POSITIONS_KEY])

    shift_labels = targets.clone()
    shift_labels[0, 0] = -100  # the target '12', masked by the batch's own shifted targets
    with_shift = NumberSpanCollator(lambda features: {"labels": labels.clone(), "shift_labels": shift_labels}, MULTI)
    positions = with_shift([])[NUMBER_POSITIONS_KEY]
    assert sum(len(p) for p in positions) == sum(len(p) for p in expected) - 1
    assert all(0 not in p.tolist() for p in positions) and 0 in expected[len(MULTI.family_token_ids)].tolist()

    off = NumberSpanCollator(lambda features: {"labels": labels.clone()}, MULTI, number_positions=False)([])
    assert NUMBER_POSITIONS_KEY not in off and TARGET_PLACES_KEY in off
    single = NumberSpanCollator(lambda features: {"labels": torch.zeros(1, 3, dtype=torch.long)}, VOCAB)([])
    assert NUMBER_POSITIONS_KEY not in single


@pytest.fixture(scope="module")
def bpe_trainer_parts():
    import step_ops

    from tools.assets import tiny_model_dir

    tokenizer = _tokenizer("llama-bpe")
    vocab = DigitVocab.from_tokenizer(tokenizer, name="llama-bpe")
    return step_ops, tokenizer, vocab, step_ops.packed_batch(tokenizer, vocab, 2, 256), tiny_model_dir("llama-bpe")


def _trainer(parts, tmp_path, **kwargs):
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

    from del_plugin.hf import DELSettings, DELTrainerMixin

    step_ops, tokenizer, vocab, _, model_dir = parts

    class DELTrainer(DELTrainerMixin, Trainer):
        pass

    args = TrainingArguments(
        output_dir=str(tmp_path),
        use_cpu=True,
        report_to=[],
        per_device_train_batch_size=2,
        max_steps=1,
        **kwargs.pop("args", {}),
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir).train()
    return DELTrainer(
        model=model,
        args=args,
        processing_class=tokenizer,
        del_settings=DELSettings(alpha=0.3),
        del_vocab=vocab,
        data_collator=lambda features: features,
        **kwargs,
    )


def test_positions_that_do_not_match_the_targets_are_refused_at_the_first_step(bpe_trainer_parts, tmp_path):
    step_ops, _, _, batch, _ = bpe_trainer_parts
    trainer = _trainer(bpe_trainer_parts, tmp_path)
    bad = dict(batch)
    bad[NUMBER_POSITIONS_KEY] = [p[1:] if len(p) else p for p in batch[NUMBER_POSITIONS_KEY]]
    with pytest.raises(RuntimeError, match="del_number_positions.*do not match the targets"):
        step_ops.train_step(trainer, bad)
    step_ops.train_step(trainer, dict(batch))  # the collator's own positions pass the check


def test_dispatched_batches_are_collated_without_positions(bpe_trainer_parts, tmp_path):
    """accelerate cuts every tensor of a dispatched batch along its first axis, which the positions would not
    survive: for an iterable dataset (dispatched by default) or dispatch_batches=True the collator leaves them out
    and the step finds the number tokens on the device."""
    step_ops, _, _, batch, _ = bpe_trainer_parts

    class Rows(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter([])

    for kwargs in ({"train_dataset": Rows()}, {"args": {"accelerator_config": {"dispatch_batches": True}}}):
        trainer = _trainer(bpe_trainer_parts, tmp_path, **kwargs)
        assert trainer.data_collator.number_positions is False
        without = {k: v for k, v in batch.items() if k != NUMBER_POSITIONS_KEY}
        step_ops.train_step(trainer, without)
        assert torch.isfinite(trainer.del_metrics.sums["train"]["del"])
    assert _trainer(bpe_trainer_parts, tmp_path).data_collator.number_positions is True


# ---------------------------------------------------------------------------------------------- the GPU check
def test_gpu_check_runs_the_number_tokens_and_the_loss_step_and_fails_on_host_syncs(monkeypatch, capsys):
    """bench/gpu_check's bookkeeping with its runs faked: by default the plain pair, the number-token pair
    (its own model, with number tokens at Llama-3's vocabulary), the loss step, then the fused kernels' pairs; it
    fails when DEL's calls synchronise, when a DEL run's steps synchronise more often than the run without, or
    when the loss step's term alone waited for the GPU."""
    from bench.gpu_check import driver as gpu_check
    from bench.gpu_check.cli import SMOKE_NUMBERS_VOCAB, parse_args
    from bench.gpu_check.report import DEL_KEYS

    order, built = [], {}
    syncs = {"plain": (2.0, 2.0, 0.0), "numbers": (2.0, 2.0, 0.0), "liger": (2.0, 3.0, 0.0), "cce": (2.0, 2.0, 1.0)}

    def fake_launch(args, workdir, pair, variant):
        order.append((pair, variant))
        off_syncs, on_syncs, del_syncs = syncs[pair]
        return {
            "pair": pair,
            "del": variant == "on",
            "trainer": "DELTrainer" if variant == "on" else "AxolotlTrainer",
            "forward": "?.forward",
            "attention": "sdpa",
            "steps": args.warmup + args.steps,
            "step_time_s": 0.5,
            "peak_allocated_gib": None,
            "peak_reserved_gib": None,
            "last_log": dict.fromkeys(DEL_KEYS, 1.0) if variant == "on" else {},
            "syncs_per_step": on_syncs if variant == "on" else off_syncs,
            "del_syncs_per_step": del_syncs if variant == "on" else None,
            "wall_s": 1.0,
        }

    def fake_loss_step(args, workdir):
        order.append(("loss step", None))
        row = {"shape": "8,192 x 128,256", "tokenizer": "synthetic number tokens", "term_ms": 0.2}
        row.update(term_over_fastest_ce=0.01, term_kernels=12, term_sync_free="called a synchronizing CUDA operation")
        return {"tables": "(tables)", "targets": {"memory_le_1.02_every_case": True}, "summary": [row], "wall_s": 9.0}

    monkeypatch.setattr(gpu_check, "launch", fake_launch)
    monkeypatch.setattr(gpu_check, "run_loss_step", fake_loss_step)
    monkeypatch.setattr(gpu_check, "unavailable", lambda pair, args: None)
    monkeypatch.setattr(gpu_check, "build_model_dir", lambda args, out: built.update({out.name: args}) or 0)
    monkeypatch.setattr(gpu_check, "write_arithmetic_rows", lambda path, rows: None)
    assert gpu_check.main(["--cpu-smoke", "--loss-step"]) == 1
    assert [p for p, _ in order] == [
        "plain",
        "plain",
        "numbers",
        "numbers",
        "loss step",
        "liger",
        "liger",
        "cce",
        "cce",
    ]
    assert not built["model"].number_tokens and built["model-numbers"].number_tokens
    assert built["model-numbers"].vocab == SMOKE_NUMBERS_VOCAB
    assert parse_args([]).numbers_vocab == 128_256 and parse_args([]).loss_step
    captured = capsys.readouterr()
    failures = [line for line in captured.err.splitlines() if "FAILED" in line]
    assert len(failures) == 3, failures
    assert any("Liger FLCE: 3 host synchronisations per step with DEL, 2 without" in f for f in failures)
    assert any("cce, DEL on: DEL's code made the host wait" in f for f in failures)
    assert any("loss step 8,192 x 128,256: DEL's term alone waited" in f for f in failures)
    assert "host synchronisations per step (numbers): training_step 2 (DEL off), 2 (DEL on)" in captured.out
