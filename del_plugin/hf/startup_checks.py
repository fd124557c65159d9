"""DEL's checks before the first training step, run once: the digit logits DEL reads against the model's own (on
one no-grad forward of the batch's first row), and the collator's number-token positions against the step's targets.
An error of the model's own forward in that check is named as the host's (:class:`HostForwardError`)."""

from __future__ import annotations

import traceback
from pathlib import Path

import torch

from ..core.capture import DigitCaptureError, DigitLogitsCapture
from ..core.digits import number_target_positions
from ..core.vocab import DigitVocab
from .collator import NUMBER_POSITIONS_KEY

__all__ = ["CHECK_TOKENS", "HostForwardError", "StartupChecks"]

PACKAGE_DIR = Path(__file__).resolve().parents[1]
# tokens of the first row that the start-up check runs the model on: enough to hold digits, cheap at 7B
CHECK_TOKENS = 64


class HostForwardError(RuntimeError):
    """The model's own forward failed in DEL's start-up check, in the host's code (its kernels, its model), not in
    DEL's: the message names where, the original error is chained (``__cause__``)."""


def _raised_in(err: BaseException) -> traceback.FrameSummary | None:
    """Where ``err`` was raised: the innermost frame of its traceback outside torch's own modules (which a library
    calls into, as in ``torch.empty(..., device="cuda")``); None without a traceback."""
    frames = traceback.extract_tb(err.__traceback__)
    torch_dir = Path(torch.__file__).resolve().parent
    for frame in reversed(frames):
        if not Path(frame.filename).resolve().is_relative_to(torch_dir):
            return frame
    return frames[-1] if frames else None


def _host_forward_error(err: Exception) -> HostForwardError | None:
    """A :class:`HostForwardError` for an error the model's forward raised outside DEL's own code, None for DEL's."""
    frame = _raised_in(err)
    if frame is None or Path(frame.filename).resolve().is_relative_to(PACKAGE_DIR):
        return None
    where = Path(frame.filename).as_posix().split("site-packages/")[-1]
    hint = ""
    if not torch.cuda.is_available() and any(w in str(err) for w in ("CUDA", "NVIDIA", "cuda", "Triton", "triton")):
        hint = (
            " This machine has no GPU, and something in the run needs one (a GPU-only kernel or setting); with "
            "Axolotl, `del-check --cpu CONFIG` names each key and the value that trains on a CPU (docs/cpu.md)."
        )
    return HostForwardError(
        f"the model's own forward failed in DEL's first-step check (one no-grad forward of the batch's first row): "
        f"{type(err).__name__}: {str(err).strip()} -- raised in {where}, line {frame.lineno} ({frame.name}), which "
        "is the host's code, not DEL's; the training step runs the same forward and would fail the same way "
        f"without DEL.{hint}"
    )


class StartupChecks:
    """The checks of :mod:`del_plugin.hf.startup_checks` for one trainer's capture and vocabulary; their lines go to
    ``log`` (the trainer's ``del_log``)."""

    def __init__(self, capture: DigitLogitsCapture, vocab: DigitVocab, log) -> None:
        self.capture, self.vocab, self.log = capture, vocab, log

    @property
    def done(self) -> bool:
        return bool(self.capture.verified)

    def run(self, model, inputs, targets: torch.Tensor, positions: list[torch.Tensor] | None) -> None:
        """Both checks, before the first captured forward (the positions' only when the batch has them)."""
        self.digit_logits(model, inputs)
        if positions is not None:
            self.number_positions(targets, positions)

    def digit_logits(self, model, inputs) -> None:
        """Once, before the first captured forward: the digit logits DEL reads against the model's own, on one
        no-grad forward of the batch's first row (at most :data:`CHECK_TOKENS` tokens). Refuses the run with the
        measured difference when they differ (:meth:`DigitLogitsCapture.check_against_logits`)."""
        input_ids = inputs.get("input_ids")
        if input_ids is None:
            raise KeyError("del_plugin: the batch has no input_ids, which DEL's start-up check of the logits needs")
        mask = inputs.get("attention_mask")
        rows = slice(0, 1), slice(0, CHECK_TOKENS)
        try:
            difference = self.capture.check_against_logits(
                model, input_ids[rows], None if mask is None or mask.dim() != 2 else mask[rows]
            )
        except DigitCaptureError:
            raise
        except Exception as err:  # noqa: BLE001 - any error of the host's forward, re-raised as the host's
            host_error = _host_forward_error(err)
            if host_error is None:
                raise
            raise host_error from err
        capture = self.capture
        if difference is None and capture.architecture is None:
            raise DigitCaptureError(
                f"del_plugin: model_type {capture.model_type!r} has no entry in DEL's architecture table, and its "
                "forward returned no logits to measure DEL's digit logits against, so they cannot be verified; "
                "nothing else accepts it (docs/architectures.md)"
            )
        if difference is None:
            self.log.warning(
                "DEL: model_type %r: the check forward returned no logits, so DEL's digit logits were not measured "
                "against the model's own (the architecture's table entry is tested)",
                capture.model_type,
            )
            capture.verified = True
        else:
            self.log.info(
                "DEL: model_type %r: digit logits equal the model's own to %.3g (the check forward's largest "
                "difference; rounding allows %.3g, and a larger one stops the run)",
                capture.model_type,
                difference,
                capture.measured_tolerance,
            )

    def number_positions(self, targets: torch.Tensor, positions: list[torch.Tensor]) -> None:
        """Once, with the start-up check: the collator's number-token positions against the targets this step
        reads (found on their device), so that a pipeline that changes the labels after the collator is refused
        instead of scoring the wrong positions."""
        found = number_target_positions(targets, self.vocab)
        if len(found) != len(positions) or not all(
            p.shape == f.shape and torch.equal(p.to(f.device), f) for p, f in zip(positions, found)
        ):
            raise RuntimeError(
                f"del_plugin: the batch's `{NUMBER_POSITIONS_KEY}` (where NumberSpanCollator found the number tokens "
                "among the targets) do not match the targets of this step: something changed the labels after the "
                "collator. Collate with NumberSpanCollator last; if accelerate cuts each batch per process, set "
                "accelerator_config.dispatch_batches: true (the step then finds the number tokens itself)"
            )
