"""A slow oracle of the number-level criterion (``ntl_number``) for single-digit vocabularies, written from the
formula in docs/criteria.md and ntloss's reading of numbers, not from the plugin's code: one Python walk per row
over the labels, the numbers as integers (a decimal part an integer of its own), their values in float64."""

from __future__ import annotations

import torch

EPS = float(torch.finfo(torch.float32).eps)


def _restarts(position_ids: torch.Tensor | None, b: int, t: int) -> bool:
    """Whether a packed sample starts at label ``t`` of row ``b``."""
    return position_ids is not None and t > 0 and int(position_ids[b, t]) != int(position_ids[b, t - 1]) + 1


def digit_runs(
    labels: torch.Tensor, vocab, position_ids: torch.Tensor | None = None, float_level: bool = False
) -> list[tuple[int, list[int]]]:
    """[(row, [positions])] of every number of ``[B, T]`` labels (aligned with the logits that predict them): the
    maximal runs of consecutive digit labels in a row, a space-marked digit and a packed sample's first label
    starting a new one (ntloss's runs, with the plugin's two extensions). ``float_level``: a run goes on across one
    '.' label between its last digit and a digit (ntloss's ``float_level=True``)."""
    runs = []
    for b in range(labels.shape[0]):
        current: list[int] = []
        after_point = False  # the label before is a '.' right after the run's last digit (float_level only)
        for t in range(labels.shape[1]):
            label = int(labels[b, t])
            digit = vocab.digit_of(label) if label >= 0 else None
            fresh = digit is not None and label not in vocab.family_token_ids[0]

            if after_point:
                after_point = False
                if (
                    digit is not None
                    and not fresh
                    and not _restarts(position_ids, b, t)
                    and not _restarts(position_ids, b, t - 1)
                ):
                    current.append(t)
                    continue
                runs.append((b, current))
                current = []
            if float_level and current and label == vocab.decimal_point_id:
                after_point = True
                continue
            if current and (digit is None or fresh or _restarts(position_ids, b, t)):
                runs.append((b, current))
                current = []
            if digit is not None:
                current.append(t)
        if current:
            runs.append((b, current))
    return runs


def oracle_number_errors(
    logits: torch.Tensor, labels: torch.Tensor, vocab, position_ids: torch.Tensor | None = None, float_level=False
) -> dict[tuple[int, int], torch.Tensor]:
    """{(row, first position): the number's relative error} with the autograd graph of ``logits`` ``[B, T, V]``;
    ``float_level`` as :func:`digit_runs` reads it (the digits of a run are one integer either way)."""
    out = {}
    for b, positions in digit_runs(labels, vocab, position_ids, float_level):
        true, predicted = 0, 0.0
        for k, t in enumerate(positions):
            label = int(labels[b, t])
            family = next(f for f in vocab.family_token_ids if label in f)
            p = torch.softmax(logits[b, t, list(family)].double(), 0)
            exponent = len(positions) - 1 - k
            true += vocab.digit_of(label) * 10**exponent
            predicted = predicted + (p * torch.arange(10, dtype=torch.float64)).sum() * 10.0**exponent
        true = float(true)  # an exact integer, rounded once to float64
        out[b, positions[0]] = (predicted - true).abs() / (predicted.abs() + abs(true) + EPS)
    return out
