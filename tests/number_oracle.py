"""A slow oracle of the number-level criterion (``ntl_number``) for single-digit vocabularies, written from the
formula in docs/criteria.md and ntloss's reading of numbers, not from the plugin's code: one Python walk per row
over the labels, the numbers as integers (a decimal part an integer of its own), their values in float64."""

from __future__ import annotations

import torch

EPS = float(torch.finfo(torch.float32).eps)


def digit_runs(labels: torch.Tensor, vocab, position_ids: torch.Tensor | None = None) -> list[tuple[int, list[int]]]:
    """[(row, [positions])] of every number of ``[B, T]`` labels (aligned with the logits that predict them): the
    maximal runs of consecutive digit labels in a row, a space-marked digit and a packed sample's first label
    starting a new one (ntloss's runs, with the plugin's two extensions)."""
    runs = []
    for b in range(labels.shape[0]):
        current: list[int] = []
        for t in range(labels.shape[1]):
            label = int(labels[b, t])
            digit = vocab.digit_of(label) if label >= 0 else None
            fresh = digit is not None and label not in vocab.family_token_ids[0]
            restart = position_ids is not None and t > 0 and int(position_ids[b, t]) != int(position_ids[b, t - 1]) + 1
            if current and (digit is None or fresh or restart):
                runs.append((b, current))
                current = []
            if digit is not None:
                current.append(t)
        if current:
            runs.append((b, current))
    return runs


def oracle_number_errors(
    logits: torch.Tensor, labels: torch.Tensor, vocab, position_ids: torch.Tensor | None = None
) -> dict[tuple[int, int], torch.Tensor]:
    """{(row, first position): the number's relative error} with the autograd graph of ``logits`` ``[B, T, V]``."""
    out = {}
    for b, positions in digit_runs(labels, vocab, position_ids):
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
