"""DEL with TRL's SFTTrainer (del_plugin.hf.trl.DELSFTTrainer), run through examples/trl_sft.py on CPU with the
tiny model: its collator padded and padding-free (packed), completion-only loss, its loss paths (chunked_nll, nll,
dft), the token criteria it can and cannot host, and a gradient that does not depend on how the step is cut into
micro-batches. SmolLM2-135M: test_trl_sft_smollm2.py.

Both test lanes run this file (CONTRIBUTING.md): TRL 1.14.1 (Axolotl 0.21's pin) and TRL 1.16.0 (the newest-hosts
lane). Where the two TRL releases differ, each test says which version it describes and checks what holds on the
one installed (``TRL_1_16``)."""

from __future__ import annotations

import math

import pytest
import torch
import trl
from packaging.version import Version
from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

from del_plugin.core import DigitVocab, next_token_places
from del_plugin.core.places import NOT_A_DIGIT
from del_plugin.hf import DELSettings
from del_plugin.hf.collator import TARGET_PLACES_KEY, NumberSpanCollator
from del_plugin.hf.trl import DELSFTTrainer, check_sft_loss
from tools.assets import load_tokenizer

from gsm8k_rows import GSM8K_FILES, gsm8k_rows
from trainer_checks import GradientCapture, check_run, load_example, train_logs

example = load_example("trl_sft")
# TRL 1.16.0 makes loss_type="chunked_nll" a deprecated alias of "nll" (which then computes the loss in chunks
# itself), and refuses Liger's fused linear cross-entropy (it patches the model with a fused LM head of its own)
TRL_1_16 = Version(trl.__version__) >= Version("1.16.0")


def digit_labels(labels: torch.Tensor, vocab: DigitVocab) -> torch.Tensor:
    digit, _ = vocab.classify(labels)
    return digit >= 0


# ---------------------------------------------------------------------------------------------- collator
def test_packed_places_are_each_samples_own():
    """TRL's padding-free collator flattens samples into one row; a number at the end of one sample and a number at
    the start of the next stay two numbers (places read per sample, as if each were alone)."""
    tokenizer = load_tokenizer("llama-spm")
    vocab = DigitVocab.from_tokenizer(tokenizer)

    def encode(text: str) -> list[int]:  # without the leading "▁" SentencePiece puts before a first digit
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids[1:] if tokenizer.convert_ids_to_tokens(ids[0]) == "\u2581" else ids

    samples = [encode(t) for t in ("costs 12", "345 apples and 5.25", "7", "86 or 90.5")]
    assert all(tokenizer.convert_ids_to_tokens(s[0]).isdigit() for s in samples[1:])  # digits at both ends
    features = [
        {"input_ids": samples[0] + samples[1], "seq_lengths": [len(samples[0]), len(samples[1])]},
        {"input_ids": samples[2] + samples[3], "seq_lengths": [len(samples[2]), len(samples[3])]},
    ]
    collator = NumberSpanCollator(
        DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True, pad_to_multiple_of=8), vocab
    )
    batch = collator(features)
    assert batch["labels"].shape[0] == 1 and "position_ids" in batch and "attention_mask" not in batch
    # each sample alone, its first label masked as the collator masks it
    expected = torch.cat([next_token_places(torch.tensor([[-100] + s[1:]]), vocab)[0] for s in samples])
    places = batch[TARGET_PLACES_KEY][0]
    assert torch.equal(places[: len(expected)], expected)
    assert (places[len(expected) :] == NOT_A_DIGIT).all()  # pad_to_multiple_of padding
    # targets 12 | (3)45 5.25 | (7) | (8)6 90.5, the first digit of a sample masked: "12" and "45" stay two numbers
    assert (expected != NOT_A_DIGIT).sum() == 2 + 5 + 0 + 4
    assert places[len(samples[0]) - 3 : len(samples[0]) + 2].tolist() == [1, 0, NOT_A_DIGIT, 1, 0]


# ---------------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    "config, match",
    [
        ({"loss_type": "dft"}, "loss_type='dft'"),
        ({"loss_type": "chunked_nll"}, "loss_type='nll'"),
        ({"loss_type": "nll", "use_liger_kernel": True}, "use_liger_kernel=False"),
    ],
)
def test_token_criterion_refused_with_sft_losses_it_cannot_replace(config, match):
    from types import SimpleNamespace

    with pytest.raises(ValueError, match=match):
        check_sft_loss(DELSettings(criterion="mixce", alpha=0.5), SimpleNamespace(**config))
    check_sft_loss(DELSettings(criterion="del", alpha=0.5), SimpleNamespace(**config))  # digit criteria: any


@pytest.mark.e2e
def test_token_criterion_with_dft_refused_by_the_trainer(tmp_path):
    with pytest.raises(ValueError, match="loss_type='dft'"):
        example.build_trainer(
            [*GSM8K_FILES, "--output-dir", str(tmp_path), "--criterion", "mixce", "--loss-type", "dft", "--rows", "2"]
        )


# ---------------------------------------------------------------------------------------------- training runs
@pytest.mark.e2e
def test_padded_completion_only_chunked_nll_with_eval(tmp_path):
    """The example's default, loss_type="chunked_nll": TRL 1.14.1 keeps it (its patched forward returns no logits);
    TRL 1.16.0 reads it as "nll". DEL's parts are logged either way."""
    trainer = example.main(
        [*GSM8K_FILES, "--output-dir", str(tmp_path), "--max-steps", "2", "--eval-steps", "2", "--rows", "8"]
    )
    collator = trainer.data_collator
    assert isinstance(collator, NumberSpanCollator) and isinstance(collator.collator, DataCollatorForLanguageModeling)
    assert not collator.collator.padding_free
    assert trainer.args.loss_type == ("nll" if TRL_1_16 else "chunked_nll")
    assert trainer.completion_only_loss
    check_run(trainer, steps=2, evaluations=1)
    # completion only: the questions' digits are in the inputs but are no targets
    batch = next(iter(trainer.get_train_dataloader()))
    in_inputs = digit_labels(batch["input_ids"], trainer.del_vocab).sum()
    targets = (batch[TARGET_PLACES_KEY] != NOT_A_DIGIT).sum()
    assert 0 < targets == digit_labels(batch["labels"], trainer.del_vocab).sum() < in_inputs


@pytest.mark.e2e
def test_packed_padding_free_nll_with_eval(tmp_path):
    trainer = example.main(
        [
            *GSM8K_FILES,
            "--output-dir",
            str(tmp_path),
            "--max-steps",
            "2",
            "--eval-steps",
            "2",
            "--rows",
            "8",
            "--packing",
            "--loss-type",
            "nll",
        ]
    )
    assert trainer.data_collator.collator.padding_free
    check_run(trainer, steps=2, evaluations=1)
    batch = next(iter(trainer.get_train_dataloader()))
    assert batch["input_ids"].shape[0] == 1 and (batch["position_ids"] == 0).sum() > 1  # several samples, one row


@pytest.mark.e2e
def test_token_criterion_with_nll(tmp_path, monkeypatch):
    """The criterion's loss goes through transformers.Trainer.compute_loss with the Trainer's compute_loss_func,
    never through SFTTrainer.compute_loss, whose handling of a compute_loss_func TRL 1.16 deprecates and 2.0
    removes (it would then train TRL's own loss instead)."""
    from trl import SFTTrainer

    def not_trls(*args, **kwargs):
        raise AssertionError("a token criterion went through SFTTrainer.compute_loss")

    monkeypatch.setattr(SFTTrainer, "compute_loss", not_trls)
    trainer = example.main(
        [
            *GSM8K_FILES,
            "--output-dir",
            str(tmp_path),
            "--max-steps",
            "1",
            "--rows",
            "2",
            "--criterion",
            "mixce",
            "--alpha",
            "0.5",
            "--loss-type",
            "nll",
        ]
    )
    (log,) = train_logs(trainer)
    assert math.isfinite(log["loss"]) and log["del_loss"] == 0.0 and log["digit_targets"] > 0
    assert log["loss"] != pytest.approx(log["ce_loss"])  # mixce's loss, CE logged beside it


@pytest.mark.e2e
def test_liger_fused_loss_with_eval(tmp_path):
    """TRL's use_liger_kernel, Liger's real Triton kernels run by Triton's CPU interpreter with
    tests/helpers/fused_kernels.py's shims. TRL 1.14.1: Liger's fused linear cross-entropy never builds the logits; DEL
    still reads its digits from the hidden states. TRL 1.16.0 refuses that kernel itself and applies Liger's layer
    kernels only (RMSNorm here)."""
    pytest.importorskip("liger_kernel")
    from fused_kernels import CALLS, liger_on_cpu, restored_forwards

    argv = [
        *GSM8K_FILES,
        "--output-dir",
        str(tmp_path),
        "--max-steps",
        "2",
        "--eval-steps",
        "2",
        "--rows",
        "4",
        "--loss-type",
        "nll",
    ]
    # only the fused loss: the other kernels are tested in test_liger_real.py
    kernels = dict(fused_linear_cross_entropy=True, cross_entropy=False, rope=False, rms_norm=False, swiglu=False)
    if TRL_1_16:
        with pytest.raises(ValueError, match="fused_linear_cross_entropy"):
            example.build_trainer(argv, use_liger_kernel=True, liger_kernel_config=kernels)
        kernels = kernels | dict(fused_linear_cross_entropy=False, rms_norm=True)
    before, rms_norm_before = CALLS["liger_cross_entropy_kernel"], CALLS["rms_norm"]
    with restored_forwards(), liger_on_cpu():
        trainer = example.build_trainer(argv, use_liger_kernel=True, liger_kernel_config=kernels)
        trainer.train()
    if TRL_1_16:
        # What holds with TRL 1.16.0 on transformers 5.25.0: the model has hub kernels on, and Trainer.training_step's
        # model.train() kernelizes it again, which puts the RMSNorm class's own forward back over Liger's (no Liger
        # launch in training). DEL is unaffected: it reads whichever final norm runs, measured at the first step.
        assert CALLS["rms_norm"] == rms_norm_before and trainer.del_capture.verified
    else:
        assert CALLS["liger_cross_entropy_kernel"] > before
    check_run(trainer, steps=2, evaluations=1)


# ---------------------------------------------------------------------------------------------- normalisation


def first_step_gradients(tmp_path, rows, batch_size: int, grad_accum: int, argv=(), **config) -> dict:
    trainer = example.build_trainer(
        [
            *GSM8K_FILES,
            "--output-dir",
            str(tmp_path),
            "--max-steps",
            "1",
            "--alpha",
            "2.0",
            "--batch-size",
            str(batch_size),
            "--grad-accum",
            str(grad_accum),
            *argv,
        ],
        rows=rows,
        max_grad_norm=0.0,
        learning_rate=1e-4,
        **config,
    )
    capture = GradientCapture()
    trainer.add_callback(capture)
    trainer.train()
    check_run(trainer, steps=1, evaluations=0)
    assert len(capture.grads) > 0
    return capture.grads


def per_micro_batch_samples(self, epoch_iterator, num_batches, device):
    samples, num_items = super(DELSFTTrainer, self).get_batch_samples(epoch_iterator, num_batches, device)
    self.del_metrics.step_digits = None  # each micro-batch falls back to its own digit mean
    return samples, num_items


@pytest.fixture(scope="module")
def four_rows():
    # four answers with very different numbers of digits, so that per-micro-batch means would differ
    rows = sorted(gsm8k_rows(40), key=lambda r: sum(ch.isdigit() for ch in r["answer"]))
    return [rows[0], rows[13], rows[26], rows[39]]


@pytest.mark.e2e
@pytest.mark.parametrize(
    "argv, config",
    [
        ((), {}),  # padded, TRL's default loss (chunked_nll: the model normalises by the step's token count)
        # one row of four samples vs one sample a row; DFT is a compute_loss_func
        (("--loss-type", "dft"), {"padding_free": True, "max_length": None}),
    ],
    ids=["padded-chunked_nll", "padding_free-dft"],
)
def test_gradient_is_independent_of_micro_batching(tmp_path, four_rows, argv, config, monkeypatch):
    one_by_four = first_step_gradients(tmp_path / "ga4", four_rows, 1, 4, argv, **config)
    four_by_one = first_step_gradients(tmp_path / "ga1", four_rows, 4, 1, argv, **config)
    assert one_by_four.keys() == four_by_one.keys()
    for name in one_by_four:
        torch.testing.assert_close(one_by_four[name], four_by_one[name], rtol=1e-4, atol=1e-6, msg=name)
    if argv:  # the control once, on the padded run
        return
    # Control: normalising DEL per micro-batch moves the gradient.
    monkeypatch.setattr(DELSFTTrainer, "get_batch_samples", per_micro_batch_samples)
    per_micro = first_step_gradients(tmp_path / "ref", four_rows, 1, 4, argv, **config)
    differs = [n for n in per_micro if not torch.allclose(per_micro[n], four_by_one[n], rtol=1e-3, atol=1e-5)]
    assert differs


@pytest.mark.e2e
def test_llama3_number_tokens_packed_padding_free(tmp_path):
    """Llama-3's tokenizer (numbers in 1-3-digit tokens), TRL's padding-free packing: every digit of every packed
    sample is a slot of its own, read per sample, and the run logs DEL's parts."""
    from tools.assets import tiny_model_dir

    argv = [
        "--model",
        str(tiny_model_dir("llama-bpe")),
        *GSM8K_FILES,
        "--output-dir",
        str(tmp_path),
        "--max-steps",
        "2",
    ]
    trainer = example.main([*argv, "--eval-steps", "2", "--rows", "8", "--packing", "--loss-type", "nll"])
    check_run(trainer, steps=2, evaluations=1)
    vocab = trainer.del_vocab
    assert vocab.max_digits == 3
    batch = next(iter(trainer.get_train_dataloader()))
    assert batch["input_ids"].shape[0] == 1 and (batch["position_ids"] == 0).sum() > 1
    places = batch[TARGET_PLACES_KEY]
    assert places.shape == (*batch["labels"].shape, 3)
    # each packed sample read alone: its labels between position-0 starts, places shifted within the row
    labels, starts = batch["labels"][0], (batch["position_ids"][0] == 0).nonzero().flatten().tolist()
    alone = []
    for begin, end in zip(starts, starts[1:] + [len(labels)]):
        alone.append(next_token_places(labels[begin:end][None], vocab)[0])
    expected = torch.cat(alone)
    # the last position of each sample predicts the next sample's first label, which the collator masks
    assert torch.equal(places[0], expected)
    # one slot per digit character of the number tokens among the targets
    tokens = trainer.processing_class.convert_ids_to_tokens([i for i in labels[1:].tolist() if i >= 0])
    assert int((places != NOT_A_DIGIT).sum()) == sum(len(t) for t in tokens if t.isdigit() and len(t) <= 3)
