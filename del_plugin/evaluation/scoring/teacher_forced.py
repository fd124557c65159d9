"""Teacher-forced digit metrics on reference solutions: the quantities DEL acts on, measured without generating.

Each reference solution is fed after its prompt, as in training; at every digit target of the solution the
model's distribution over the ten digits of that target's family is read with DEL's own
:func:`~del_plugin.core.digit_targets_from_logits`:

* ``digit_accuracy``: share of digit targets whose most likely digit is the target (:func:`digit_correct`);
* ``mean_entropy``: mean entropy H(p_hat) of the ten-digit distribution, in nats (0 = certain, ln 10 = uniform);
* ``entropy_histogram``: counts of those entropies in ``ENTROPY_BINS`` equal bins over [0, ln 10];
* ``places``: the same accuracy and entropy per place of the digit in its number (units 0, tens 1, first decimal
  -1), with places from :func:`~del_plugin.core.next_token_places` as in training.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ...core import DigitVocab, digit_correct, digit_entropy, digit_targets_from_logits, next_token_places
from ...core.places import NOT_A_DIGIT, shift_to_next_token

__all__ = ["ENTROPY_BINS", "ENTROPY_EDGES", "TeacherForcedStats", "pad_teacher_forced", "teacher_forced_batches"]

ENTROPY_BINS = 20
ENTROPY_EDGES = [math.log(10) * k / ENTROPY_BINS for k in range(ENTROPY_BINS + 1)]


@dataclass
class TeacherForcedStats:
    digits: int = 0
    correct: int = 0
    entropy_sum: float = 0.0
    histogram: list[int] = field(default_factory=lambda: [0] * ENTROPY_BINS)
    place_digits: dict[int, int] = field(default_factory=dict)
    place_correct: dict[int, int] = field(default_factory=dict)
    place_entropy: dict[int, float] = field(default_factory=dict)

    def add_positions(self, entropy: torch.Tensor, correct: torch.Tensor, places: torch.Tensor) -> None:
        """Add the digit targets given as flat tensors (entropy float, correct bool, place int)."""
        if entropy.numel() == 0:
            return
        self.digits += int(entropy.numel())
        self.correct += int(correct.sum())
        self.entropy_sum += float(entropy.double().sum())
        edges = torch.tensor(ENTROPY_EDGES[1:-1], dtype=entropy.dtype, device=entropy.device)
        bins = torch.bucketize(entropy, edges, right=True).clamp(0, ENTROPY_BINS - 1)
        for b, count in zip(*torch.unique(bins, return_counts=True)):
            self.histogram[int(b)] += int(count)
        for place in torch.unique(places).tolist():
            at = places == place
            self.place_digits[place] = self.place_digits.get(place, 0) + int(at.sum())
            self.place_correct[place] = self.place_correct.get(place, 0) + int(correct[at].sum())
            self.place_entropy[place] = self.place_entropy.get(place, 0.0) + float(entropy[at].double().sum())

    def merge(self, other: TeacherForcedStats) -> None:
        self.digits += other.digits
        self.correct += other.correct
        self.entropy_sum += other.entropy_sum
        self.histogram = [a + b for a, b in zip(self.histogram, other.histogram)]
        for place, n in other.place_digits.items():
            self.place_digits[place] = self.place_digits.get(place, 0) + n
            self.place_correct[place] = self.place_correct.get(place, 0) + other.place_correct[place]
            self.place_entropy[place] = self.place_entropy.get(place, 0.0) + other.place_entropy[place]

    @classmethod
    def from_dict(cls, data: dict) -> TeacherForcedStats:
        """The accumulator behind :meth:`as_dict` ``data`` (sums rebuilt from the means), to pool a resumed set."""
        places = data.get("places") or {}
        return cls(
            digits=data["digits"],
            correct=data["correct"],
            entropy_sum=(data.get("mean_entropy") or 0.0) * data["digits"],
            histogram=list(data["entropy_histogram"]["counts"]),
            place_digits={int(p): v["n"] for p, v in places.items()},
            place_correct={int(p): v["correct"] for p, v in places.items()},
            place_entropy={int(p): v["mean_entropy"] * v["n"] for p, v in places.items()},
        )

    def as_dict(self) -> dict:
        return {
            "digits": self.digits,
            "correct": self.correct,
            "digit_accuracy": self.correct / self.digits if self.digits else None,
            "mean_entropy": self.entropy_sum / self.digits if self.digits else None,
            "entropy_histogram": {"edges": ENTROPY_EDGES, "counts": list(self.histogram)},
            "places": {
                str(p): {
                    "n": self.place_digits[p],
                    "correct": self.place_correct[p],
                    "accuracy": self.place_correct[p] / self.place_digits[p],
                    "mean_entropy": self.place_entropy[p] / self.place_digits[p],
                }
                for p in sorted(self.place_digits, reverse=True)
            },
        }


def pad_teacher_forced(
    sequences: Sequence[tuple[list[int], int]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask, labels)`` of ``(token ids, prompt length)`` sequences, right-padded with
    ``pad_id``; labels are -100 on the prompt and the padding."""
    width = max(len(ids) for ids, _ in sequences)
    input_ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(sequences), width), dtype=torch.long)
    labels = torch.full((len(sequences), width), -100, dtype=torch.long)
    for row, (ids, prompt_len) in enumerate(sequences):
        input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention[row, : len(ids)] = 1
        labels[row, prompt_len : len(ids)] = torch.tensor(ids[prompt_len:], dtype=torch.long)
    return input_ids, attention, labels


@torch.inference_mode()
def teacher_forced_batches(
    model: torch.nn.Module,
    sequences: Sequence[tuple[list[int], int]],
    vocab: DigitVocab,
    *,
    batch_size: int,
    pad_id: int,
    progress=None,
):
    """Score ``(token ids, prompt length)`` sequences in batches (right padding, prompt positions masked).

    Yields, per sequence and in input order, ``(digits, correct, entropy_sum)`` together with the
    :class:`TeacherForcedStats` of the batch: ``(indices, per-sequence tuples, batch stats)``.
    """
    device = next(model.parameters()).device
    for start in range(0, len(sequences), batch_size):
        chunk = sequences[start : start + batch_size]
        input_ids, attention, labels = pad_teacher_forced(chunk, pad_id)
        logits = model(input_ids=input_ids.to(device), attention_mask=attention.to(device)).logits
        aligned = shift_to_next_token(labels, -100).to(device)
        targets = digit_targets_from_logits(logits, aligned, vocab)
        entropy = digit_entropy(targets.logits)
        correct = digit_correct(targets)
        places = next_token_places(labels, vocab).to(device)
        # a digit target always has a place; the mask and the places agree by construction
        mask = targets.mask & (places != NOT_A_DIGIT)
        stats = TeacherForcedStats()
        stats.add_positions(entropy[mask].float().cpu(), correct[mask].cpu(), places[mask].cpu())
        per_sequence = [
            (int(mask[r].sum()), int(correct[r][mask[r]].sum()), float(entropy[r][mask[r]].double().sum()))
            for r in range(len(chunk))
        ]
        if progress is not None:
            progress.update(len(chunk))
        yield list(range(start, start + len(chunk))), per_sequence, stats
