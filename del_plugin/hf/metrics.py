"""The bookkeeping of a DEL run: the digit count of each optimizer step (for the normalisation) and the sums of the
logged parts, kept on the device between logs (no host synchronisation per step)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..core.criteria import DigitTermSums

__all__ = ["DigitMetrics"]

SPLITS = ("train", "eval")
# the sums of a token criterion's logged extras are kept under this prefix, and their target-token count here
TOKEN_MEAN = "token_mean:"
TARGET_TOKENS = "target_tokens"
# the digit statistics of a batch, kept as one vector
DIGIT_PARTS = ("l_num", "digits", "entropy", "correct", "units")


class DigitMetrics:
    """Per split, the sums of ``ce``, ``del`` (both as the Trainer reports its loss), ``l_num``, ``digits``,
    ``entropy`` and ``correct``; plus, in training, the digit count of the current optimizer step and the number
    of optimizer steps since the last log.

    Training parts are added as the Trainer adds each micro-batch to its logged loss: scaled by ``1 / GA`` when the
    loss is not already scaled for accumulation, and, when that micro-batch's loss is not finite and
    ``logging_nan_inf_filter`` is on, replaced by the running average as the Trainer does (so ``ce_loss + del_loss
    == loss`` on every log). Evaluation parts are weighted by batch size, as ``eval_loss`` is.
    """

    def __init__(self) -> None:
        self.sums: dict[str, dict[str, torch.Tensor]] = {split: {} for split in SPLITS}
        self.step_digits: torch.Tensor | None = None
        self.steps_since_log = 0
        self.eval_prefix = "eval"  # the metric_key_prefix of the evaluation in progress

    def start_step(self, digits: torch.Tensor) -> None:
        """A new optimizer step whose micro-batches hold ``digits`` digit targets (numbers, for a number-level
        criterion) over all ranks."""
        self.step_digits = digits
        self.steps_since_log += 1

    def _add(self, split: str, key: str, value: torch.Tensor) -> None:
        sums = self.sums[split]
        sums[key] = value if key not in sums else sums[key] + value

    def add_train(self, ce: torch.Tensor, del_term: torch.Tensor, scale: float, nan_filter: bool) -> None:
        ce, del_term = ce.detach().float() * scale, del_term.detach().float() * scale
        if nan_filter and self.steps_since_log:
            sums = self.sums["train"]
            bad = ~torch.isfinite(ce + del_term)
            # the Trainer adds tr_loss / (1 + steps since the last log) for a non-finite micro-batch loss
            ce = torch.where(bad, sums.get("ce", torch.zeros_like(ce)) / self.steps_since_log, ce)
            del_term = torch.where(bad, sums.get("del", torch.zeros_like(del_term)) / self.steps_since_log, del_term)
        self._add("train", "ce", ce)
        self._add("train", "del", del_term)

    def add_eval(self, ce: torch.Tensor, del_term: torch.Tensor, batch_size: int) -> None:
        self._add("eval", "ce", ce.detach().float() * batch_size)
        self._add("eval", "del", del_term.detach().float() * batch_size)
        self._add("eval", "weight", torch.full((), float(batch_size), device=ce.device))

    @torch.no_grad()
    def add_digits(self, split: str, sums: DigitTermSums) -> None:
        """The digit statistics of one batch (:class:`~del_plugin.core.criteria.DigitTermSums`): ``l_num`` (the
        criterion's unweighted sum), the digit count, their entropy, how many are correct and the units the criterion
        is averaged over (digits, or numbers), as one vector."""
        parts = torch.stack([sums.loss.detach(), sums.digits, sums.entropy, sums.correct, sums.units])
        self._add(split, "digit_parts", parts)

    @torch.no_grad()
    def add_token_terms(self, split: str, tokens: torch.Tensor, sums: dict[str, torch.Tensor]) -> None:
        """A token criterion's logged extras of one batch (their sums over its ``tokens`` target tokens), each
        logged under its own name as its mean over target tokens."""
        self._add(split, TARGET_TOKENS, tokens.detach())
        for name, value in sums.items():
            self._add(split, TOKEN_MEAN + name, value.detach().float())

    def reset(self, split: str) -> None:
        self.sums[split] = {}

    def pop_logs(
        self, split: str, prefix: str, world_size: int, reduce: Callable[[torch.Tensor], torch.Tensor]
    ) -> dict[str, float]:
        """The logged values of ``split`` since the last call (empty if nothing was added), summed over ranks with
        ``reduce``; training parts are averaged over ranks and optimizer steps, as the Trainer's ``loss`` is."""
        sums = self.sums[split]
        if not sums:
            return {}
        keys = sorted(sums)
        stacked = torch.cat([sums[k].float().reshape(-1) for k in keys])
        flat = (reduce(stacked) if world_size > 1 else stacked).tolist()
        values: dict[str, float] = {}
        for key in keys:
            names = DIGIT_PARTS if key == "digit_parts" else (key,)
            values.update(zip(names, flat[: len(names)]))
            flat = flat[len(names) :]
        self.reset(split)
        if split == "train":
            denom = max(self.steps_since_log, 1) * max(world_size, 1)
            self.steps_since_log = 0
        else:
            denom = max(values.get("weight", 1.0), 1.0)
        digits = values["digits"]
        logs = {
            "ce_loss": values["ce"] / denom,
            "del_loss": values["del"] / denom,
            "del_l_num": values["l_num"] / values["units"] if values["units"] else 0.0,
            "digit_entropy": values["entropy"] / digits if digits else 0.0,
            "digit_accuracy": values["correct"] / digits if digits else 0.0,
            "digit_targets": digits,
        }
        tokens = values.get(TARGET_TOKENS, 0.0)
        for key, value in values.items():
            if key.startswith(TOKEN_MEAN):
                logs[key[len(TOKEN_MEAN) :]] = value / tokens if tokens else 0.0
        return {prefix + key: value for key, value in logs.items()}
