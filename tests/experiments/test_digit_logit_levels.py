"""experiments/digit_logit_levels.py (the efficacy doc's diagnostic) against a per-position loop written from its
definitions, on random logits over the hand-made vocabulary."""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch

from del_plugin.core.places import shift_to_next_token

from fake_vocab import DIGITS, SPACE_MARKED, TOKEN_ID, VOCAB, V, encode
from repo import REPO

SCRIPT = REPO / "experiments" / "digit_logit_levels.py"


def _script():
    spec = importlib.util.spec_from_file_location("digit_logit_levels", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _oracle(logits: torch.Tensor, aligned: torch.Tensor) -> dict[str, float]:
    sums = dict.fromkeys(("digits", "z_target", "z_other", "z_max", "digit_mass", "l_num", "tf_accuracy"), 0.0)
    for row in range(aligned.shape[0]):
        for t in range(aligned.shape[1]):
            label = int(aligned[row, t])
            family = next((f for f in (DIGITS, SPACE_MARKED) if label in [TOKEN_ID[c] for c in f]), None)
            if family is None:
                continue
            ids = [TOKEN_ID[c] for c in family]
            y = ids.index(label)
            full = [float(v) for v in logits[row, t]]
            z = [full[i] for i in ids]
            top = max(z)
            p = [math.exp(v - top) / sum(math.exp(w - top) for w in z) for v in z]
            # BCE with logits: softplus(-z) for the target, softplus(z) for the others
            bce = [math.log1p(math.exp(-v)) if k == y else math.log1p(math.exp(v)) for k, v in enumerate(z)]
            everything = math.fsum(math.exp(v - max(full)) for v in full)
            sums["digits"] += 1
            sums["z_target"] += z[y]
            sums["z_other"] += (sum(z) - z[y]) / 9
            sums["z_max"] += max(full)
            sums["digit_mass"] += math.fsum(math.exp(v - max(full)) for v in z) / everything
            sums["l_num"] += sum(pk * bk for pk, bk in zip(p, bce)) / 10
            sums["tf_accuracy"] += float(z.index(max(z)) == y)
    return sums


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_level_sums_match_a_per_position_loop(dtype):
    torch.manual_seed(0)
    labels = torch.stack([encode("ab 12.5 c ⁷⁰ dd", "##"), encode("x 3 y 40 z 9.9.", "#")])
    aligned = shift_to_next_token(labels, -100)
    logits = (4 * torch.randn(*labels.shape, V)).to(dtype)
    got = _script().level_sums(logits, aligned, VOCAB)
    want = _oracle(logits.float(), aligned)
    assert want["digits"] == 10  # 1 2 5 ⁷ ⁰ | 3 4 0 9 9: bare and space-marked digits both count
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-5, abs=1e-5), key
