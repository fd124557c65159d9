"""The number-token positions the collator sends so that the training step never asks the device where its number
tokens are: what they hold, the trainer's check of them at the first step, and the batches that go without them."""

from __future__ import annotations

import pytest
import torch

from del_plugin.core import DigitVocab, shift_to_next_token
from del_plugin.hf.collator import NUMBER_POSITIONS_KEY, TARGET_PLACES_KEY, NumberSpanCollator

from fake_vocab import MULTI_VOCAB as MULTI
from fake_vocab import VOCAB, encode_tokens


def _tokenizer(name: str):
    from tools.assets import load_tokenizer

    return load_tokenizer(name)


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
    from bench import step_ops
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
