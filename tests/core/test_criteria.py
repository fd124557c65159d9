"""The baselines and the ablation (``del_criterion``): hand-worked values, slow oracles, the ``ntloss`` package,
half precision, empty batches, config validation, one Axolotl run per criterion and the ablation examples."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from del_plugin.core import CRITERIA, PlaceWeighting, digit_criterion_loss, digit_targets_from_logits, number_places
from del_plugin.core.criteria import (
    DIGIT_CRITERIA,
    TOKEN_CRITERIA,
    digit_criterion_terms,
    dist2_place_weights,
    emo_cost_embedding,
    emo_token_losses,
    mixce_token_losses,
    token_criterion_terms,
    token_nll,
)
from del_plugin.core.places import NOT_A_DIGIT

from fake_vocab import VOCAB, V, encode
from number_oracle import digit_runs, oracle_number_errors
from repo import REPO

LN2 = math.log(2.0)
SQRT2 = math.sqrt(2.0)
ABLATION = REPO / "examples" / "ablation"


def logits_for(labels: torch.Tensor, digit_logits: dict[int, list[float]] | None = None, dtype=torch.float32):
    """Logits that are 0 everywhere except the given digit logits of family 0 at given positions."""
    logits = torch.zeros(*labels.shape, V, dtype=dtype)
    for pos, z in (digit_logits or {}).items():
        logits[pos, list(VOCAB.family_token_ids[0])] = torch.tensor(z, dtype=dtype)
    return logits


def per_token(criterion, text, digit_logits=None, **kwargs):
    labels = encode(text)
    places = number_places(labels, VOCAB)
    return digit_criterion_loss(
        criterion,
        digit_targets_from_logits(logits_for(labels, digit_logits), labels, VOCAB),
        places,
        reduction="none",
        **kwargs,
    )


def emo_state(criterion: str, weight: torch.Tensor) -> dict:
    """What ``CRITERIA[criterion].prepare`` builds for a model with this output embedding (EMO's cost embedding)."""
    return {"cost_embedding": emo_cost_embedding(weight)} if criterion == "emo" else {}


def own_params(criterion: str, **params) -> dict:
    """The subset of ``params`` that ``criterion`` takes (the registry refuses the others)."""
    return {k: v for k, v in params.items() if k in {p.name for p in CRITERIA[criterion].params}}


def peaked(digit: int) -> list[float]:
    # z_d = ln 9, the other nine 0: p_d = 9 / 18 = 1/2 and p_k = 1/18 for k != d
    z = [0.0] * 10
    z[digit] = math.log(9.0)
    return z


# ---------------------------------------------------------------------------------------------- hand-worked
def test_ntl_was_hand_worked():
    # y = 7, p_7 = 1/2, p_k = 1/18: sum_{k != 7} |7 - k| = (7+6+5+4+3+2+1) + (1+2) = 31  ->  31/18
    out = per_token("ntl_was", "a7", {1: peaked(7)})
    assert out.tolist() == pytest.approx([0.0, 31 / 18], rel=1e-6)


def test_ntl_mse_hand_worked():
    # E[k] = 7/2 + (45 - 7)/18 = 63/18 + 38/18 = 101/18; (101/18 - 7)^2 = (25/18)^2
    out = per_token("ntl_mse", "a7", {1: peaked(7)})
    assert out.tolist() == pytest.approx([0.0, (25 / 18) ** 2], rel=1e-6)


def test_ntl_criteria_ignore_place_weighting():
    # the units and the tens digit of "77" score the same: NTL has no place weight
    out = per_token("ntl_was", "77", {0: peaked(7), 1: peaked(7)})
    assert out.tolist() == pytest.approx([31 / 18, 31 / 18], rel=1e-6)


@pytest.mark.parametrize("tau", [1.0, 2.0])
def test_dist2_hand_worked(tau):
    # uniform digit logits (p = 1/10), y = 0, units (weight 1): q_k = exp(-k^2/tau) / Z and
    # KL(q || p) = sum_k q_k ln q_k + ln 10
    z_sum = sum(math.exp(-k * k / tau) for k in range(10))
    q = [math.exp(-k * k / tau) / z_sum for k in range(10)]
    kl = sum(qk * math.log(qk) for qk in q) + math.log(10.0)
    out = per_token("dist2", "a0", dist2_tau=tau)
    assert out.tolist() == pytest.approx([0.0, kl], rel=1e-5)
    # "40": the '4' is the tens (weight 2), target 4: q_k = exp(-(4-k)^2/tau) / Z4
    z4 = sum(math.exp(-((4 - k) ** 2) / tau) for k in range(10))
    kl4 = sum(math.exp(-((4 - k) ** 2) / tau) / z4 * math.log(math.exp(-((4 - k) ** 2) / tau) / z4) for k in range(10))
    kl4 += math.log(10.0)
    assert per_token("dist2", "40", dist2_tau=tau).tolist() == pytest.approx([2 * kl4, kl], rel=1e-5)


def test_dist2_is_zero_when_the_model_predicts_its_target():
    # logits -(y-k)^2/tau make p_hat = q exactly: KL 0
    labels = encode("a3")
    z = [-((3 - k) ** 2) / 0.5 for k in range(10)]
    places = number_places(labels, VOCAB)
    logits = logits_for(labels, {1: z})
    out = digit_criterion_loss(
        "dist2", digit_targets_from_logits(logits, labels, VOCAB), places, reduction="none", dist2_tau=0.5
    )
    assert out.abs().max().item() < 1e-6


def test_del_dist_hand_worked():
    # uniform logits, "a3": DEL's l_t = u * 0.1 ln 2 with u = 2 (units), see test_loss.py;
    # NTL-WAS = 0.1 * sum_k |3 - k| = 0.1 * (3+2+1+0+1+2+3+4+5+6) = 2.7   ->  0.2 ln 2 * 2.7
    out = per_token("del_dist", "a3")
    assert out.tolist() == pytest.approx([0.0, 0.2 * LN2 * 2.7], rel=1e-6)
    # place weighting off: u = 1
    out = per_token("del_dist", "a3", weighting=PlaceWeighting(enabled=False))
    assert out.tolist() == pytest.approx([0.0, 0.1 * LN2 * 2.7], rel=1e-6)


def test_del_matches_the_existing_digit_entropy_loss():
    from del_plugin.core import digit_entropy_loss

    torch.manual_seed(0)
    labels = encode("pay 1,234.50 for ⁷8 items")
    places = number_places(labels, VOCAB)
    logits = torch.randn(labels.numel(), V) * 3
    ours = digit_criterion_loss("del", digit_targets_from_logits(logits, labels, VOCAB), places, alpha=0.3)
    assert ours.item() == digit_entropy_loss(logits, labels, places, VOCAB, alpha=0.3).item()


@pytest.mark.parametrize(
    "text, expected",
    [
        # integers weigh i + 1; the decimals of a number read as an integer of their own (3.14159: 14159)
        ("3.14159", [1, 0, 5, 4, 3, 2, 1]),
        ("120.5 and 0.25", [3, 2, 1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 2, 1]),
        ("1.2.3", [1, 0, 1, 0, 1]),  # 1.2 then .3
        ("⁷8.75", [2, 1, 0, 2, 1]),  # a space-marked digit starts the number; it is still a digit
        ("x", [0]),
    ],
)
def test_dist2_place_weights_hand_worked(text, expected):
    assert dist2_place_weights(number_places(encode(text), VOCAB)).tolist() == expected


def test_dist2_place_weights_on_batches_and_cut_numbers():
    n = NOT_A_DIGIT
    # row 0 starts inside the decimals of a number (places -2, -3: three decimals, the first one cut off),
    # row 1 holds 45.678; rows never share a number
    places = torch.tensor([[-2, -3, n, 0, -1], [1, 0, -1, -2, -3]], dtype=torch.int32)
    assert dist2_place_weights(places).tolist() == [[2, 1, 0, 1, 1], [2, 1, 3, 2, 1]]
    assert dist2_place_weights(places, enabled=False).tolist() == [[1, 1, 0, 1, 1], [1, 1, 1, 1, 1]]
    assert dist2_place_weights(torch.zeros(0, dtype=torch.int32)).shape == (0,)


def test_mixce_hand_worked():
    # V = 4, z = [ln 3, 0, 0, 0]: p_0 = 3/6 = 1/2, NLL = ln 2.
    # eta = 0.5:  0.5 ln 2 + 0.5 * 1/2 * ln 2 = 0.75 ln 2 ; eta = 0.2: 0.2 ln 2 + 0.8 * 1/2 * ln 2 = 0.6 ln 2
    # alpha = 0.5 (eta 0.5): 0.5 ln 2 + 0.5 * 0.75 ln 2 = 0.875 ln 2
    logits = torch.tensor([[math.log(3.0), 0.0, 0.0, 0.0], [5.0, 1.0, 2.0, 3.0]], requires_grad=True)
    labels = torch.tensor([0, -100])
    terms = mixce_token_losses(logits, labels, eta=0.5)
    assert terms.loss.tolist() == pytest.approx([0.75 * LN2, 0.0], rel=1e-6)
    assert terms.nll.tolist() == pytest.approx([LN2, 0.0], rel=1e-6)
    assert terms.mask.tolist() == [True, False]
    assert mixce_token_losses(logits, labels, eta=0.2).loss[0].item() == pytest.approx(0.6 * LN2, rel=1e-6)
    assert mixce_token_losses(logits, labels, eta=0.5, alpha=0.5).loss[0].item() == pytest.approx(0.875 * LN2, rel=1e-6)
    # sg[p_y] is a constant: the gradient is 0.75 * (p - onehot) = 0.75 * [-1/2, 1/6, 1/6, 1/6]; none off targets
    terms.loss.sum().backward()
    assert logits.grad[0].tolist() == pytest.approx([-0.375, 0.125, 0.125, 0.125], rel=1e-6)
    assert logits.grad[1].abs().max().item() == 0.0


def test_mixce_limits_are_cross_entropy():
    torch.manual_seed(1)
    logits = torch.randn(2, 5, 11)
    labels = torch.randint(0, 11, (2, 5))
    labels[0, :2] = -100
    nll = token_nll(logits, labels)
    assert torch.equal(mixce_token_losses(logits, labels, eta=1.0).loss, nll)
    assert torch.equal(mixce_token_losses(logits, labels, eta=0.3, alpha=0.0).loss, nll)
    mean_ce = F.cross_entropy(logits.view(-1, 11), labels.view(-1)).item()
    assert (nll.sum() / (labels != -100).sum()).item() == pytest.approx(mean_ce, rel=1e-6)


def emo_example():
    # V = 4, H = 2: rows (3,0), (0,2), (2,2), (0,0) normalise to e0 = (1,0), e1 = (0,1), e2 = (1,1)/sqrt2, e3 = 0
    weight = torch.tensor([[3.0, 0.0], [0.0, 2.0], [2.0, 2.0], [0.0, 0.0]])
    # z = [ln 2, 0, 0, 0]: p = (2/5, 1/5, 1/5, 1/5)
    logits = torch.tensor([[math.log(2.0), 0.0, 0.0, 0.0]] * 2, requires_grad=True)
    return weight, logits


def test_emo_cost_embedding_normalises_rows_and_keeps_zero_rows():
    weight, _ = emo_example()
    cost = emo_cost_embedding(weight.to(torch.bfloat16))
    assert cost.dtype == torch.float32 and not cost.requires_grad
    expected = torch.tensor([[1, 0], [0, 1], [1 / SQRT2, 1 / SQRT2], [0, 0]])
    assert torch.allclose(cost, expected, rtol=1e-6, atol=0)
    with pytest.raises(ValueError, match="sharded"):
        emo_cost_embedding(torch.zeros(0))


def test_emo_hand_worked():
    weight, logits = emo_example()
    labels = torch.tensor([0, 2])
    terms = emo_token_losses(logits, labels, emo_cost_embedding(weight))
    # y = 0: emo = 1 - sum_{k != 0} p_k <e0, e_k> = 1 - (1/5 * 0 + 1/5 * 1/sqrt2 + 1/5 * 0) = 1 - 1/(5 sqrt2)
    # y = 2: emo = 1 - (2/5 * 1/sqrt2 + 1/5 * 1/sqrt2 + 0) = 1 - 3/(5 sqrt2)
    emo = [1 - 1 / (5 * SQRT2), 1 - 3 / (5 * SQRT2)]
    nll = [math.log(5 / 2), math.log(5.0)]
    assert terms.extras["emo_cost"].tolist() == pytest.approx(emo, rel=1e-6)
    assert terms.nll.tolist() == pytest.approx(nll, rel=1e-6)
    # 0.5 * (NLL + NLL / emo * emo) = NLL in value
    assert terms.loss.tolist() == pytest.approx(nll, rel=1e-6)
    # gradient of row 0: 0.5 (p - onehot) - 0.5 (NLL / emo) * p_j (c_j - c_bar), c = <e0, e_k> = (1, 0, 1/sqrt2, 0)
    # (the target's own c_0 = 1 counts: only the *value* of p_y is detached), c_bar = sum_k p_k c_k
    terms.loss[0].backward()
    p = [0.4, 0.2, 0.2, 0.2]
    c = [1.0, 0.0, 1 / SQRT2, 0.0]
    c_bar = sum(pk * ck for pk, ck in zip(p, c))
    ratio = nll[0] / emo[0]
    expected = [0.5 * (p[j] - (j == 0)) - 0.5 * ratio * p[j] * (c[j] - c_bar) for j in range(4)]
    assert logits.grad[0].tolist() == pytest.approx(expected, rel=1e-5)
    assert logits.grad[1].abs().max().item() == 0.0


def emo_reference(logits, labels, weight):
    """EMO as the EMO authors write it: one-hot, q = softmax - sg[softmax * onehot], per-token float64."""
    vocab = logits.shape[-1]
    embedding = weight.double() / torch.linalg.vector_norm(weight.double(), ord=2, dim=1, keepdim=True).clamp(min=1e-30)
    flat_logits = logits.reshape(-1, vocab)
    flat_labels = labels.reshape(-1)
    out = []
    for t in range(flat_labels.numel()):
        y = int(flat_labels[t])
        if y == -100:
            out.append(torch.zeros((), dtype=torch.float64))
            continue
        one_hot = F.one_hot(torch.tensor(y), vocab).double()
        q = torch.softmax(flat_logits[t].double(), -1)
        q_final = q - (q * one_hot).detach()
        emo = 1 - (one_hot @ embedding) @ (q_final @ embedding)
        mle = -torch.log(q[y])
        out.append(0.5 * (mle + (mle / (emo + 1e-10)).detach() * emo))
    return torch.stack(out).view(labels.shape)


def test_emo_matches_reference_loop_and_its_gradient():
    torch.manual_seed(2)
    weight = torch.randn(13, 6)
    logits = (torch.randn(2, 4, 13) * 2).requires_grad_()
    labels = torch.randint(0, 13, (2, 4))
    labels[1, 0] = -100
    ours = emo_token_losses(logits, labels, emo_cost_embedding(weight), alpha=0.7)
    ref_logits = logits.detach().double().requires_grad_()
    ref = 0.3 * torch.where(labels != -100, token_nll(ref_logits, labels).double(), 0.0)
    ref = ref + 0.7 * emo_reference(ref_logits, labels, weight)
    assert torch.allclose(ours.loss.double(), ref, rtol=1e-5, atol=1e-6)
    (g,) = torch.autograd.grad(ours.loss.sum(), logits)
    (g_ref,) = torch.autograd.grad(ref.sum(), ref_logits)
    assert torch.allclose(g.double(), g_ref, rtol=1e-4, atol=1e-6)


def test_token_criteria_refuse_bad_arguments():
    logits, labels = torch.zeros(3, 5), torch.tensor([1, 2, 3])
    with pytest.raises(ValueError, match="eta"):
        mixce_token_losses(logits, labels, eta=1.5)
    with pytest.raises(ValueError, match="alpha"):
        mixce_token_losses(logits, labels, alpha=1.2)
    with pytest.raises(ValueError, match="cost embedding"):
        emo_token_losses(logits, labels, torch.zeros(4, 2))
    with pytest.raises(ValueError, match="cost embedding"):
        token_criterion_terms("emo", logits, labels, alpha=1.0)
    with pytest.raises(ValueError, match="aligned"):
        token_nll(logits, torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="not a token criterion"):
        token_criterion_terms("del", logits, labels, alpha=1.0)
    with pytest.raises(TypeError, match="takes no parameter dist2_tau"):
        token_criterion_terms("mixce", logits, labels, alpha=1.0, dist2_tau=2.0)
    with pytest.raises(ValueError, match="`del_mixce_eta` must be a finite number"):
        token_criterion_terms("mixce", logits, labels, alpha=1.0, mixce_eta=float("nan"))


def test_unknown_criterion_is_refused_and_token_criteria_add_no_digit_term():
    labels = encode("a7")
    targets = digit_targets_from_logits(logits_for(labels), labels, VOCAB)
    places = number_places(labels, VOCAB)
    for criterion in ("mle", *TOKEN_CRITERIA):
        assert digit_criterion_terms(criterion, targets, places).tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="'del2'.*mle, mixce, emo"):
        digit_criterion_terms("del2", targets, places)


# ---------------------------------------------------------------------------------------------- slow oracle
def oracle_digit_terms(criterion, logits, labels, places, tau=1.0, weighting=PlaceWeighting()):
    """Per-token terms one digit at a time with explicit Python sums, from the formulas in docs/criteria.md."""
    out = torch.zeros(labels.shape, dtype=torch.float64)
    flat_places = places.view(-1).tolist()
    for b in range(labels.shape[0]):
        for t in range(labels.shape[1]):
            y = VOCAB.digit_of(int(labels[b, t]))
            if y is None:
                continue
            family = next(f for f in VOCAB.family_token_ids if int(labels[b, t]) in f)
            z = [float(logits[b, t, i]) for i in family]
            m = max(z)
            denom = sum(math.exp(v - m) for v in z)
            p = [math.exp(v - m) / denom for v in z]
            i = int(places[b, t])
            was = sum(p[k] * abs(y - k) for k in range(10))
            if criterion == "ntl_was":
                value = was
            elif criterion == "ntl_mse":
                value = (sum(p[k] * k for k in range(10)) - y) ** 2
            elif criterion == "dist2":
                w = [math.exp(-((y - k) ** 2) / tau) for k in range(10)]
                q = [v / sum(w) for v in w]
                kl = sum(q[k] * (math.log(q[k]) - math.log(p[k])) for k in range(10) if q[k] > 0)
                if i >= 0:
                    weight = i + 1
                else:  # count this number's decimals: walk along the consecutive decimal places
                    pos, decimals = b * labels.shape[1] + t, -i
                    while (pos + 1) % labels.shape[1] and flat_places[pos + 1] == flat_places[pos] - 1 < 0:
                        pos, decimals = pos + 1, decimals + 1
                    weight = decimals + i + 1
                value = kl * weight
            else:
                u = weighting.integer_slope * (i + 1) if i >= 0 else weighting.decimal_base ** (i - 1)
                # del_centered: the BCE reads the logits less their mean over the ten digits
                level = sum(z) / 10 if criterion == "del_centered" else 0.0
                entropy = 0.0
                for k in range(10):
                    target = 1.0 if k == y else 0.0
                    x = z[k] - level
                    entropy += p[k] * (max(x, 0) - x * target + math.log1p(math.exp(-abs(x))))
                value = u * entropy / 10 * (was if criterion == "del_dist" else 1.0)
            out[b, t] = value
    return out


@pytest.mark.parametrize("criterion", DIGIT_CRITERIA)
def test_digit_criteria_match_slow_oracle(criterion):
    torch.manual_seed(3)
    labels = torch.stack([encode("pay 1,234.50 for ⁷8 items. 3.14159 "), encode("1.2.3 and .75 or 9 - x ..8 y 0.0625")])
    labels[0, :4] = -100
    logits = torch.randn(*labels.shape, V) * 3
    places = number_places(labels, VOCAB)
    digits = digit_targets_from_logits(logits, labels, VOCAB)
    ours = digit_criterion_loss(criterion, digits, places, reduction="none", **own_params(criterion, dist2_tau=0.7))
    if CRITERIA[criterion].unit == "number":  # one term per number, at its first digit, averaged over numbers
        expected = torch.zeros(labels.shape, dtype=torch.float64)
        for key, error in oracle_number_errors(logits, labels, VOCAB).items():
            expected[key] = error
        units = len(digit_runs(labels, VOCAB))
        assert units == 14  # 1 234 50 ⁷8 3 14159 | 1 2 3 75 9 8 0 0625
    else:
        expected = oracle_digit_terms(criterion, logits, labels, places, tau=0.7)
        units = (places != NOT_A_DIGIT).sum().item()
    assert torch.allclose(ours.double(), expected, rtol=1e-5, atol=1e-6)
    mean = digit_criterion_loss(criterion, digits, places, alpha=0.5, **own_params(criterion, dist2_tau=0.7))
    assert mean.item() == pytest.approx(0.5 * expected.sum().item() / units, rel=1e-5)


def test_ntl_number_float_level_matches_slow_oracle():
    """``del_ntl_float_level`` on the single-digit test vocabulary with space-marked digits (which ntloss does not
    read): each term and the mean over numbers equal the oracle's, which joins a run across one '.' before a digit."""
    torch.manual_seed(3)
    labels = torch.stack([encode("pay 1,234.50 for ⁷8 items. 3.14159 "), encode("1.2.3 and .75 or 9 - x ..8 y 0.0625")])
    labels[0, :4] = -100
    logits = (torch.randn(*labels.shape, V, dtype=torch.float64) * 3).requires_grad_()
    places = number_places(labels, VOCAB)
    digits = digit_targets_from_logits(logits, labels, VOCAB)
    ours = digit_criterion_loss("ntl_number", digits, places, reduction="none", ntl_float_level=True)
    errors = oracle_number_errors(logits, labels, VOCAB, float_level=True)
    assert len(errors) == len(digit_runs(labels, VOCAB, float_level=True)) == 9  # 1 23450 ⁷8 314159 | 123 75 9 8 00625
    # what the trainer counts for the normalisation (get_batch_samples), from the places alone
    units = CRITERIA["ntl_number"].units(places, places != NOT_A_DIGIT, ntl_float_level=True)
    assert units.sum() == 9 and CRITERIA["ntl_number"].units(places, places != NOT_A_DIGIT).sum() == 14
    expected = torch.zeros(labels.shape, dtype=torch.float64)
    for key, error in errors.items():
        expected[key] = error
    torch.testing.assert_close(ours, expected, rtol=1e-9, atol=0)
    mean = digit_criterion_loss("ntl_number", digits, places, ntl_float_level=True)
    (grad,) = torch.autograd.grad(mean, logits)
    (their_grad,) = torch.autograd.grad(sum(errors.values()) / len(errors), logits)
    assert mean.item() == pytest.approx(expected.sum().item() / 9, rel=1e-9)
    torch.testing.assert_close(grad, their_grad, rtol=1e-9, atol=1e-15)


# ---------------------------------------------------------------------------------------------- del_centered
def _one_target_gradient(criterion: str, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """d(term)/dz of one criterion's unweighted term at rows of ten digit logits ``z`` with target digits ``y``."""
    from del_plugin.core import DigitTargets

    z = z.detach().clone().requires_grad_(True)
    targets = DigitTargets(logits=z, target=y, mask=torch.ones(y.shape, dtype=torch.bool))
    places = torch.zeros(y.shape, dtype=torch.int32)
    digit_criterion_terms(criterion, targets, places, weighting=PlaceWeighting(enabled=False)).sum().backward()
    return z.grad


def test_del_centered_is_invariant_to_a_common_logit_shift_and_del_is_not():
    torch.manual_seed(11)
    labels = encode("3.14159 and 2,718 or 0.5")[None]
    places = number_places(labels, VOCAB)
    logits = torch.randn(*labels.shape, V, dtype=torch.float64) * 3
    family = list(VOCAB.family_token_ids[0])

    def terms(criterion, shift):
        shifted = logits.clone()
        shifted[..., family] += shift  # every digit logit, at every position, moved by the same constant
        digits = digit_targets_from_logits(shifted, labels, VOCAB)
        return digit_criterion_loss(criterion, digits, places, reduction="none")

    base = terms("del_centered", 0.0)
    assert base.abs().sum() > 0
    for shift in (-30.0, -3.0, 0.5, 34.0):
        assert torch.allclose(terms("del_centered", shift), base, rtol=1e-12, atol=1e-12)
        assert not torch.allclose(terms("del", shift), terms("del", 0.0), rtol=1e-3)


def test_del_centered_gradient_table_does_not_depend_on_the_level():
    """docs/efficacy.md's table (ten logits at a common level c, the target y = 3 one higher), recomputed.

    ``del``: its values as the doc prints them (the sign of dL/dz_y flips below c = 0). ``del_centered``: one value
    for every c, and the gradient sums to 0 over the ten logits (no push on their common level)."""
    levels = (15.0, 5.0, 0.0, -3.0, -6.0)
    y = torch.tensor([3])
    rows = {}
    for criterion in ("del", "del_centered"):
        for c in levels:
            z = torch.full((1, 10), c, dtype=torch.float64)
            z[0, 3] += 1.0
            grad = _one_target_gradient(criterion, z, y)[0]
            rows.setdefault(criterion, []).append((round(grad[3].item(), 3), round(grad.sum().item(), 3)))
    assert rows["del"] == [(-0.267, 0.077), (-0.089, 0.076), (-0.013, 0.032), (0.017, -0.017), (0.066, -0.023)]
    target_grads = [g for g, _ in rows["del_centered"]]
    assert max(target_grads) - min(target_grads) == 0.0 and target_grads[0] < 0
    for c in levels:
        z = torch.full((1, 10), c, dtype=torch.float64)
        z[0, 3] += 1.0
        assert abs(_one_target_gradient("del_centered", z, y).sum().item()) < 1e-15


def test_del_centered_never_lowers_the_target_logit_where_del_does():
    """On random logits (N(0, 3^2), float64), a gradient-descent step on ``del_centered`` never lowers the target's
    logit (dL/dz_y <= 0 at every draw); on ``del`` it does at about 7 % of the draws."""
    generator = torch.Generator().manual_seed(12)
    n = 20000
    z = torch.randn(n, 10, generator=generator, dtype=torch.float64) * 3
    y = torch.randint(0, 10, (n,), generator=generator)
    share = {}
    for criterion in ("del", "del_centered"):
        grad = _one_target_gradient(criterion, z, y)
        share[criterion] = (grad.gather(1, y[:, None]) > 0).double().mean().item()
        if criterion == "del_centered":
            assert grad.sum(-1).abs().max().item() < 1e-12
    assert share["del_centered"] == 0.0
    assert 0.06 < share["del"] < 0.09


# ---------------------------------------------------------------------------------------------- ntloss package
@pytest.fixture(scope="module")
def llama_ntl():
    pytest.importorskip("ntloss")
    from del_plugin.core import DigitVocab
    from tools.assets import load_tokenizer

    tokenizer = load_tokenizer("llama-spm")
    return tokenizer, DigitVocab.from_tokenizer(tokenizer)


@pytest.mark.parametrize("criterion", ["ntl_was", "ntl_mse"])
def test_ntl_matches_ntloss_package(llama_ntl, criterion):
    from ntloss import NTLoss, NTLossDotProduct

    tokenizer, vocab = llama_ntl
    package = (NTLoss if criterion == "ntl_was" else NTLossDotProduct)(tokenizer, digit_level=True, reweigh=False)
    torch.manual_seed(4)
    batch, length, size = 3, 24, len(tokenizer)
    # float64, so that 1e-5 is a test of the formula and not of float32 rounding (NTL-MSE reaches 81)
    logits = torch.randn(batch, length, size, dtype=torch.float64) * 4
    digits = torch.tensor(vocab.family_token_ids[0])
    labels = torch.randint(100, size, (batch, length))
    is_digit = torch.rand(batch, length) < 0.5
    labels = torch.where(is_digit, digits[torch.randint(0, 10, (batch, length))], labels)
    labels[:, :3] = -100
    targets = digit_targets_from_logits(logits, labels, vocab)
    assert targets.mask.sum() > 20
    ours = digit_criterion_terms(criterion, targets, torch.zeros(batch, length, dtype=torch.int32))
    theirs = package(logits, labels, reduction="none")
    assert ours.dtype == theirs.dtype == torch.float64
    assert torch.allclose(ours, theirs, atol=1e-5, rtol=0)
    ours_mean = digit_criterion_loss(criterion, targets, number_places(labels, vocab))
    assert ours_mean.item() == pytest.approx(package(logits, labels).item(), abs=1e-5)
    # and in float32, as training runs it (relative: float32 keeps ~7 digits of an error up to 81)
    targets32 = digit_targets_from_logits(logits.float(), labels, vocab)
    ours32 = digit_criterion_terms(criterion, targets32, torch.zeros(batch, length, dtype=torch.int32))
    assert torch.allclose(ours32, theirs.float(), atol=1e-5, rtol=1e-5)


# The number-level criterion against ntloss.NumberLevelLoss (reweigh=False, either float_level; ``reweigh`` is not
# offered: docs/criteria.md). Llama-2's tokenizer gives bare single digits, which is what ntloss reads.
NUMBER_TEXTS = (
    "7 apples cost -12.5 dollars, 0.075 of 1,040 or 1.2.3 and .5 for 1000",  # starts with a number
    "a loss of -3.25 at 2024-05-06 is 99",  # ends with a number
    "42",  # only a number
)


def number_level_loss(tokenizer, float_level=False):
    from ntloss import NumberLevelLoss

    return NumberLevelLoss(tokenizer, float_level=float_level, reweigh=False)


def padded_rows(rows: list[list[int]]) -> torch.Tensor:
    length = max(len(r) for r in rows)
    return torch.tensor([r + [-100] * (length - len(r)) for r in rows])


def ntl_number_against_ntloss(package, vocab, labels, logits, places=None, theirs_of=None):
    """(ours, theirs) as (per-position terms, mean, gradient of the mean w.r.t. ``logits``): ours on ``labels``
    (``places`` defaults to their number places; ``del_ntl_float_level`` as the package's ``float_level``), theirs
    from ntloss on ``theirs_of(logits)`` (default: the same batch)."""
    float_level = {"ntl_float_level": package.float_level}
    places = number_places(labels, vocab) if places is None else places
    results = []
    for side in ("ours", "theirs"):
        leaf = logits.detach().clone().requires_grad_()
        if side == "ours":
            digits = digit_targets_from_logits(leaf, labels, vocab)
            terms = digit_criterion_terms("ntl_number", digits, places, **float_level)
            mean = digit_criterion_loss("ntl_number", digits, places, **float_level)
        else:
            their_logits, their_labels = theirs_of(leaf) if theirs_of else (leaf, labels)
            terms = package(their_logits, their_labels, reduction="none")
            mean = package(their_logits, their_labels)
        if mean.requires_grad:
            mean.backward()
        results.append((terms.detach(), mean.detach(), leaf.grad))
    return results


def assert_same_number_loss(ours, theirs, ours_terms=None):
    (terms, mean, grad), (their_terms, their_mean, their_grad) = ours, theirs
    torch.testing.assert_close(terms if ours_terms is None else ours_terms, their_terms, atol=1e-5, rtol=0)
    assert mean.item() == pytest.approx(their_mean.item(), abs=1e-5)
    if their_grad is None:  # no number: ntloss returns a constant 0
        assert grad is None or not grad.any()
    else:
        torch.testing.assert_close(grad, their_grad, atol=1e-5, rtol=0)


@pytest.mark.parametrize("float_level, numbers", [(False, 19), (True, 14)])
def test_ntl_number_matches_ntloss_number_level_loss(llama_ntl, float_level, numbers):
    """Decimals (-12.5, 0.075, 1.2.3, .5, a trailing '.'), numbers at a row's start and end, a masked prompt: with
    ``del_ntl_float_level`` 12.5 is one number (read as 125) and so is 1.2.3 (123), as ntloss reads them."""
    tokenizer, vocab = llama_ntl
    package = number_level_loss(tokenizer, float_level)
    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in NUMBER_TEXTS]
    labels = padded_rows(rows)
    labels[1, :2] = -100  # a masked prompt
    torch.manual_seed(21)
    logits = torch.randn(*labels.shape, len(tokenizer), dtype=torch.float64) * 3
    ours, theirs = ntl_number_against_ntloss(package, vocab, labels, logits)
    assert (theirs[0] != 0).sum() == numbers and ours[0][0, 0] > 0 and ours[0][1, len(rows[1]) - 2] > 0
    assert_same_number_loss(ours, theirs)
    # float32, as training runs it
    ours32, theirs32 = ntl_number_against_ntloss(package, vocab, labels, logits.float())
    assert ours32[0].dtype == torch.float32
    assert_same_number_loss(ours32, theirs32)


def test_ntl_number_reads_packed_rows_as_ntloss_reads_them_apart(llama_ntl):
    """A packed row (position_ids restart at each sample) scores each sample's numbers as ntloss scores the samples
    in rows of their own, though one sample ends and the next starts with a number; ntloss on the packed row
    itself reads the two as one number (the control)."""
    tokenizer, vocab = llama_ntl
    package = number_level_loss(tokenizer)
    samples = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("x 3.5 and 42", "17 or 8.25", "9")]
    packed = torch.tensor([sum(samples, [])])
    position_ids = torch.tensor([[i for s in samples for i in range(len(s))]])
    places = number_places(packed, vocab, position_ids)
    apart = padded_rows(samples)
    starts = torch.tensor([0, len(samples[0]), len(samples[0]) + len(samples[1])])

    def unpacked(leaf):
        pad = torch.zeros(apart.shape[1], leaf.shape[-1], dtype=leaf.dtype)
        rows = [torch.cat([leaf[0, s : s + len(sample)], pad[len(sample) :]]) for s, sample in zip(starts, samples)]
        return torch.stack(rows), apart

    torch.manual_seed(22)
    logits = torch.randn(*packed.shape, len(tokenizer), dtype=torch.float64) * 3
    ours, theirs = ntl_number_against_ntloss(package, vocab, packed, logits, places, unpacked)
    their_terms_packed = torch.cat([theirs[0][i, : len(s)] for i, s in enumerate(samples)])[None]
    assert (their_terms_packed != 0).sum() == 7
    torch.testing.assert_close(ours[0], their_terms_packed, atol=1e-5, rtol=0)
    assert ours[1].item() == pytest.approx(theirs[1].item(), abs=1e-5)
    torch.testing.assert_close(ours[2], theirs[2], atol=1e-5, rtol=0)
    control = package(logits, packed)
    assert abs(control.item() - ours[1].item()) > 1e-3


def test_ntl_number_keeps_long_numbers_exact_where_ntloss_caps_them(llama_ntl):
    """A 25-digit and a 60-digit number: the plugin's values (relative to each number's top place) equal the slow
    oracle's exact integers; ntloss caps the exponent at 19 (the stated difference), so it scores the 25-digit
    number otherwise, and the 60-digit number stays finite in float32."""
    tokenizer, vocab = llama_ntl
    text = "x 1234567890123456789012345 y " + "9" * 60
    labels = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
    torch.manual_seed(23)
    logits = torch.randn(*labels.shape, len(tokenizer), dtype=torch.float64) * 3
    digits = digit_targets_from_logits(logits, labels, vocab)
    ours = digit_criterion_terms("ntl_number", digits, number_places(labels, vocab))
    expected = torch.zeros(labels.shape, dtype=torch.float64)
    for key, error in oracle_number_errors(logits, labels, vocab).items():
        expected[key] = error
    assert (expected != 0).sum() == 2
    torch.testing.assert_close(ours, expected, rtol=1e-12, atol=0)
    theirs = number_level_loss(tokenizer)(logits, labels, reduction="none")
    first = int(expected[0].nonzero()[0])
    assert abs(theirs[0, first].item() - ours[0, first].item()) > 1e-3
    ours32 = digit_criterion_terms(
        "ntl_number", digit_targets_from_logits(logits.float(), labels, vocab), number_places(labels, vocab)
    )
    assert torch.isfinite(ours32).all()
    torch.testing.assert_close(ours32.double(), expected, rtol=1e-5, atol=1e-6)


NUMBER_ALPHABET = "0123456789" * 3 + ".-, ax"


def leading_point_between_digits(labels: torch.Tensor, vocab) -> bool:
    """Whether a point merged with punctuation ('▁.', '*.') sits between two digit labels: read at float level,
    the documented difference from ntloss (:func:`test_ntl_number_float_level_joins_across_leading_points`)."""
    digit = torch.isin(labels, torch.tensor(vocab.family_token_ids).flatten())
    point = torch.isin(labels, torch.tensor(vocab.leading_point_ids))
    return bool((digit[:, :-2] & point[:, 1:-1] & digit[:, 2:]).any())


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.text(NUMBER_ALPHABET, min_size=1, max_size=24), min_size=1, max_size=3),
    st.integers(0, 3),
    st.integers(0, 2**16),
    st.booleans(),
)
def test_ntl_number_matches_ntloss_on_random_text(llama_ntl, texts, masked, seed, float_level):
    tokenizer, vocab = llama_ntl
    rows = [tokenizer(t, add_special_tokens=False)["input_ids"] or [tokenizer.eos_token_id] for t in texts]
    labels = padded_rows(rows)
    labels[0, :masked] = -100
    assume(not (float_level and leading_point_between_digits(labels, vocab)))
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(*labels.shape, len(tokenizer), dtype=torch.float64, generator=generator)
    ours, theirs = ntl_number_against_ntloss(number_level_loss(tokenizer, float_level), vocab, labels, logits * 3)
    assert_same_number_loss(ours, theirs)


def test_ntl_number_float_level_joins_across_leading_points(llama_ntl):
    """The stated difference: the places do not tell a bare '.' from a point merged with punctuation ('▁.' in
    "3 .5", '*.' in "18*.5"), so at float level a decimal part one such point after a digit joins it, where ntloss
    joins across its '.' token only. Ours on "18*.5" and "3 .5" equals ntloss on "18.5" and "3.5"."""
    tokenizer, vocab = llama_ntl
    ours_rows = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("18*.5 x", "3 .5 x")]
    their_rows = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("18.5 x", "3.5 x")]
    assert [len(r) for r in ours_rows] == [len(r) for r in their_rows]
    labels, their_labels = padded_rows(ours_rows), padded_rows(their_rows)
    assert leading_point_between_digits(labels, vocab) and not leading_point_between_digits(their_labels, vocab)
    torch.manual_seed(24)
    logits = torch.randn(*labels.shape, len(tokenizer), dtype=torch.float64) * 3
    package = number_level_loss(tokenizer, float_level=True)
    ours, theirs = ntl_number_against_ntloss(
        package, vocab, labels, logits, theirs_of=lambda leaf: (leaf, their_labels)
    )
    assert (ours[0] != 0).sum() == 2
    assert_same_number_loss(ours, theirs)
    assert (package(logits, labels, reduction="none") != 0).sum() == 4  # ntloss: 18 and 5, 3 and 5


# ---------------------------------------------------------------------------------------------- robustness
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("criterion", DIGIT_CRITERIA)
def test_digit_criteria_finite_in_half_precision(criterion, dtype):
    torch.manual_seed(5)
    labels = encode("99999.99999 and 1")[None]
    places = number_places(labels, VOCAB)
    # large logits, as a confident model produces; the digit slice is computed in float32
    logits = (torch.randn(*labels.shape, V) * 40).to(dtype).requires_grad_()
    tau = own_params(criterion, dist2_tau=0.1)
    loss = digit_criterion_loss(criterion, digit_targets_from_logits(logits, labels, VOCAB), places, **tau)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    ref = digit_criterion_loss(
        criterion, digit_targets_from_logits(logits.detach().float(), labels, VOCAB), places, **tau
    )
    assert loss.item() == pytest.approx(ref.item(), rel=1e-6)
    loss.backward()
    assert logits.grad.dtype == dtype and torch.isfinite(logits.grad).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("criterion", TOKEN_CRITERIA)
def test_token_criteria_finite_in_half_precision(criterion, dtype):
    torch.manual_seed(6)
    weight = torch.randn(50, 8).to(dtype)
    weight[7] = 0  # a padding row
    logits = (torch.randn(2, 6, 50) * 40).to(dtype).requires_grad_()
    labels = torch.randint(0, 50, (2, 6))
    labels[0, 0] = -100
    terms = token_criterion_terms(criterion, logits, labels, alpha=1.0, state=emo_state(criterion, weight))
    assert terms.loss.dtype == torch.float32
    for part in (terms.loss, terms.nll, terms.mask, *terms.extras.values()):
        assert torch.isfinite(part.float()).all()
    terms.loss.sum().backward()
    assert logits.grad.dtype == dtype and torch.isfinite(logits.grad).all()


@pytest.mark.parametrize("criterion", DIGIT_CRITERIA)
def test_digit_criteria_zero_without_digits(criterion):
    labels = encode("no numbers here")
    places = number_places(labels, VOCAB)
    logits = torch.randn(*labels.shape, V, requires_grad=True)
    terms = digit_criterion_loss(criterion, digit_targets_from_logits(logits, labels, VOCAB), places, reduction="none")
    assert terms.abs().max().item() == 0.0
    loss = digit_criterion_loss(criterion, digit_targets_from_logits(logits, labels, VOCAB), places)
    assert loss.item() == 0.0
    loss.backward()
    assert logits.grad.abs().max().item() == 0.0
    empty = torch.zeros(0, V, requires_grad=True)
    no_labels, no_places = torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.int32)
    assert digit_criterion_loss(criterion, digit_targets_from_logits(empty, no_labels, VOCAB), no_places).item() == 0.0


@pytest.mark.parametrize("criterion", TOKEN_CRITERIA)
def test_token_criteria_zero_without_targets(criterion):
    logits = torch.randn(2, 3, 9, requires_grad=True)
    labels = torch.full((2, 3), -100)
    terms = token_criterion_terms(criterion, logits, labels, alpha=1.0, state=emo_state(criterion, torch.randn(9, 4)))
    assert terms.loss.abs().max().item() == 0.0 and not terms.mask.any()
    terms.loss.sum().backward()
    assert logits.grad.abs().max().item() == 0.0


def test_token_criterion_loss_is_normalised_like_transformers_cross_entropy():
    """The mixce / emo ``compute_loss_func``: two micro-batches with the step's ``num_items_in_batch`` add up to the
    whole batch (loss and gradient), and without it the loss is the token mean, like ``ForCausalLMLoss``."""
    from del_plugin.core import shift_to_next_token
    from del_plugin.hf import DELSettings, TokenCriterionLoss

    torch.manual_seed(7)
    logits = torch.randn(4, 6, 20, requires_grad=True)
    labels = torch.randint(0, 20, (4, 6))
    labels[:, :2] = -100
    labels[2:, 2:4] = -100  # the two halves hold different numbers of targets
    aligned = shift_to_next_token(labels, -100)
    n_items = (aligned != -100).sum()
    for criterion in TOKEN_CRITERIA:
        settings = DELSettings(criterion=criterion, alpha=0.8, params=own_params(criterion, mixce_eta=0.3))
        loss_func = TokenCriterionLoss(settings, emo_state(criterion, torch.randn(20, 5)))
        whole = loss_func({"logits": logits}, labels, n_items)
        (g_whole,) = torch.autograd.grad(whole, logits)
        micro = [loss_func({"logits": logits[rows]}, labels[rows], n_items) for rows in (slice(0, 2), slice(2, 4))]
        (g_micro,) = torch.autograd.grad(micro[0] + micro[1], logits)
        assert (micro[0] + micro[1]).item() == pytest.approx(whole.item(), rel=1e-6)
        assert torch.allclose(g_micro, g_whole, atol=1e-7)
        mean = loss_func({"logits": logits}, labels, None)
        terms = token_criterion_terms(
            criterion, logits, aligned, alpha=0.8, state=loss_func.state, **own_params(criterion, mixce_eta=0.3)
        )
        assert mean.item() == pytest.approx((terms.loss.sum() / n_items).item(), rel=1e-6)
        ce = F.cross_entropy(logits[:, :-1].reshape(-1, 20), labels[:, 1:].reshape(-1))
        assert loss_func.last_parts["ce"].item() == pytest.approx(ce.item(), rel=1e-6)
        assert loss_func.last_parts["tokens"].item() == n_items.item()


# ---------------------------------------------------------------------------------------------- config validation
@pytest.fixture(scope="module")
def tiny_llama():
    from tools.assets import tiny_model_dir

    return tiny_model_dir("llama-spm")


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory):
    from tools.cpu import write_alpaca_jsonl

    from gsm8k_rows import gsm8k_rows

    return write_alpaca_jsonl(tmp_path_factory.mktemp("data") / "gsm8k.jsonl", gsm8k_rows(8))


@pytest.mark.axolotl
@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"del_criterion": "del2"}, r"del_criterion\n.*unknown criterion 'del2'.*choose one of mle, mixce, emo"),
        ({"del_criterion": "del_centred"}, r"unknown criterion 'del_centred' \(did you mean 'del_centered'\?\)"),
        (
            {"del_criterion": "mixce", "del_alpha": 1.0, "del_mixce_eta": 1.5},
            r"`del_mixce_eta: 1.5` is outside \[0, 1\]",
        ),
        ({"del_criterion": "mixce", "del_alpha": 1.0, "del_mixce_eta": -0.1}, r"`del_mixce_eta: -0.1` is outside"),
        ({"del_criterion": "dist2", "del_dist2_tau": 0}, r"`del_dist2_tau: 0` is outside \[0.01, 100\]"),
        ({"del_criterion": "emo", "del_alpha": None}, r"`emo` replaces cross-entropy.*set it explicitly.*1.0"),
        ({"del_criterion": "mixce", "del_alpha": 1.5}, r"`del_alpha: 1.5` is outside \[0, 1\]: it interpolates"),
        ({"del_criterion": "emo", "del_alpha": 1.0, "label_smoothing_factor": 0.1}, r"label_smoothing_factor"),
        ({"del_criterion": "mixce", "del_alpha": 1.0, "use_dft": True}, r"use_dft"),
    ],
)
def test_bad_criterion_keys_fail_in_load_config(tmp_path, tiny_llama, small_dataset, overrides, message):
    from axolotl_helpers import cpu_config, load_config

    # load_config only validates (no model is loaded); the message names the offending key
    cfg = cpu_config(tmp_path, tiny_llama, small_dataset, **overrides)
    with pytest.raises(Exception, match=message):
        load_config({k: v for k, v in cfg.items() if v is not None})


@pytest.mark.axolotl
def test_criterion_keys_reach_the_config(tmp_path, tiny_llama, small_dataset):
    from del_plugin.hf import DELSettings

    from axolotl_helpers import cpu_config, load_config

    cfg = load_config(cpu_config(tmp_path, tiny_llama, small_dataset, del_criterion="dist2", del_dist2_tau=0.5))
    settings = DELSettings.from_config(cfg)
    assert (settings.criterion, dict(settings.params), settings.digit_alpha) == ("dist2", {"dist2_tau": 0.5}, 0.3)
    cfg = load_config(cpu_config(tmp_path, tiny_llama, small_dataset, del_criterion="mixce", del_alpha=1.0))
    settings = DELSettings.from_config(cfg)
    assert (settings.criterion, dict(settings.params), settings.alpha, settings.digit_alpha) == (
        "mixce",
        {"mixce_eta": 0.5},
        1.0,
        0.0,
    )
    assert DELSettings.from_config(load_config(cpu_config(tmp_path, tiny_llama, small_dataset))).criterion == "del"


# ---------------------------------------------------------------------------------------------- Axolotl runs
@pytest.fixture(scope="module")
def criterion_run(tmp_path_factory, tiny_llama, small_dataset):
    """``criterion_run(name)``: one short Axolotl CPU run per criterion (cached), with an evaluation at the end."""
    from axolotl_helpers import cpu_config, run_axolotl

    runs = {}
    prepared = tmp_path_factory.mktemp("prepared")  # same data and tokenizer: tokenised once, then reused

    def get(criterion):
        if criterion not in runs:
            tmp = tmp_path_factory.mktemp(criterion)
            alpha = 1.0 if criterion in TOKEN_CRITERIA else 0.3
            cfg = cpu_config(
                tmp,
                tiny_llama,
                small_dataset,
                del_criterion=criterion,
                del_alpha=alpha,
                max_steps=2,
                micro_batch_size=1,
                gradient_accumulation_steps=2,
                val_set_size=0.25,
                eval_steps=2,
                dataset_prepared_path=str(prepared),
            )
            runs[criterion] = run_axolotl(cfg).state.log_history
        return runs[criterion]

    return get


def _finite(log: dict) -> bool:
    return all(math.isfinite(v) for v in log.values() if isinstance(v, float))


def _first_train_log(history: list[dict]) -> dict:
    return next(h for h in history if "loss" in h)


@pytest.mark.axolotl
@pytest.mark.e2e
@pytest.mark.parametrize("criterion", CRITERIA)
def test_each_criterion_trains_in_axolotl(criterion_run, criterion):
    history = criterion_run(criterion)
    train = [h for h in history if "loss" in h]
    evals = [h for h in history if "eval_loss" in h]
    assert len(train) == 2 and evals
    for log in train + evals:
        assert _finite(log), log
    for prefix, log in [("", train[0]), ("eval_", evals[-1])]:
        for part in ("ce_loss", "del_loss", "del_l_num", "digit_entropy", "digit_accuracy", "digit_targets"):
            assert f"{prefix}{part}" in log, (prefix, part, log)
        assert log[f"{prefix}digit_targets"] > 0
        loss, ce, digit_term = log[f"{prefix}loss"], log[f"{prefix}ce_loss"], log[f"{prefix}del_loss"]
        if criterion == "mle":
            assert loss == ce and digit_term == 0.0  # plain cross-entropy, bit for bit
        elif criterion in DIGIT_CRITERIA:
            assert digit_term > 0 and loss == pytest.approx(ce + digit_term, rel=1e-5)
            if prefix == "":  # one optimizer step per log: the term is alpha times the mean per digit
                assert digit_term == pytest.approx(0.3 * log["del_l_num"], rel=1e-5)
        elif criterion == "mixce":
            # per token eta * NLL <= MixCE <= NLL (sg[p_y] in [0, 1])
            assert digit_term == 0.0 and 0.5 * ce <= loss < ce
        else:  # emo: its forward value is the NLL; the transport cost is logged
            assert digit_term == 0.0 and loss == pytest.approx(ce, rel=1e-5)
            assert 0.0 <= log[f"{prefix}emo_cost"] <= 2.0
    # same data, seed and initial model: the first step's cross-entropy is the same under every criterion
    if criterion != "mle":
        assert train[0]["ce_loss"] == pytest.approx(_first_train_log(criterion_run("mle"))["ce_loss"], rel=1e-5)


# ---------------------------------------------------------------------------------------------- ablation examples
ABLATION_CONFIGS = sorted(ABLATION.glob("*.yaml"))
CRITERION_KEYS = {"del_criterion", "del_alpha", "del_mixce_eta", "del_dist2_tau", "output_dir"}


def test_docs_table_is_the_registry():
    from del_plugin.hf.settings import criteria_table

    text = (REPO / "docs" / "criteria.md").read_text(encoding="utf-8")
    start = text.index("-->\n", text.index("<!-- criteria-table")) + 4
    assert text[start : text.index("<!-- /criteria-table -->")] == criteria_table(), (
        "docs/criteria.md's table is out of date; paste del_plugin.hf.settings.criteria_table() into it"
    )


def test_ablation_runner_defaults_to_one_config_per_registered_criterion():
    import importlib.util

    spec = importlib.util.spec_from_file_location("run_ablation", ABLATION / "run_ablation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    configs = module.ablation_configs()
    assert [p.stem for p in configs] == list(CRITERIA) and all(p.is_file() for p in configs)


def test_one_ablation_config_per_criterion_differing_only_in_the_criterion():
    configs = {path.stem: yaml.safe_load(path.read_text()) for path in ABLATION_CONFIGS}
    assert sorted(configs) == sorted(CRITERIA)
    for name, cfg in configs.items():
        assert cfg["del_criterion"] == name and cfg["base_model"] == "Qwen/Qwen2.5-1.5B"
        assert cfg["datasets"][0]["path"] == "TIGER-Lab/MathInstruct"
        assert cfg["output_dir"] == f"./outputs/ablation/{name}"
    shared = {k: v for k, v in configs["del"].items() if k not in CRITERION_KEYS}
    for name, cfg in configs.items():
        assert {k: v for k, v in cfg.items() if k not in CRITERION_KEYS} == shared, name
    # the authors' Qwen2.5-1.5B recipe: 4 GPUs x 32 x 1 = 128 rows per step, lr 5e-6, 2 epochs
    assert shared["micro_batch_size"] * shared["gradient_accumulation_steps"] * 4 == 128
    assert (shared["learning_rate"], shared["num_epochs"], shared["seed"]) == (5e-6, 2, 42)
    # one weight for every digit criterion (only the per-digit term changes); the token criteria as published
    assert {configs[c]["del_alpha"] for c in DIGIT_CRITERIA} == {1.28}
    assert configs["mixce"]["del_alpha"] == configs["emo"]["del_alpha"] == 1.0
    assert "del_alpha" not in configs["mle"]


def local_swap(tmp_path: Path, model_dir: Path, dataset: Path) -> list[str]:
    """The overrides that point an ablation config at a local tiny model and JSONL (no Hub here), on a CPU."""
    return [
        f"base_model={model_dir}",
        f"tokenizer_config={model_dir}",
        f"datasets=[{{path: {dataset}, ds_type: json, type: alpaca}}]",
        f"dataset_prepared_path={tmp_path / 'prepared'}",
        "bf16=false",
        "tf32=false",
    ]


SMOKE_SCHEDULE = [
    "fsdp_config=null",
    "optimizer=adamw_torch",
    "attn_implementation=sdpa",  # one CPU process
    "val_set_size=0.25",
    "micro_batch_size=1",
    "gradient_accumulation_steps=1",
    "max_steps=2",
    "evals_per_epoch=null",
    "eval_steps=2",
    "sequence_len=256",
    "logging_steps=1",
    "dataloader_num_workers=0",
]


@pytest.fixture(scope="module")
def tiny_qwen():
    from tools.assets import tiny_model_dir

    return tiny_model_dir("qwen2")


@pytest.mark.axolotl
@pytest.mark.parametrize("path", ABLATION_CONFIGS, ids=lambda p: p.stem)
def test_ablation_configs_pass_axolotl_validation(tmp_path, path, tiny_qwen, small_dataset):
    import run_ablation

    cfg = run_ablation.load_yaml_config(
        path, [run_ablation.parse_override(o) for o in local_swap(tmp_path, tiny_qwen, small_dataset)], tmp_path
    )
    loaded = run_ablation.validate(cfg)
    assert loaded.del_criterion == path.stem and loaded.seed == 42
    # the real schedule, not the smoke one, passed validation
    assert (loaded.micro_batch_size, loaded.gradient_accumulation_steps, loaded.sequence_len) == (1, 32, 1536)
    assert loaded.fsdp_config.transformer_layer_cls_to_wrap == "Qwen2DecoderLayer"
    assert loaded.output_dir == str(tmp_path / path.stem)


@pytest.fixture(autouse=True)
def _ablation_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(ABLATION))  # examples/ablation/run_ablation.py is a script, not a package


@pytest.mark.axolotl
@pytest.mark.e2e
def test_run_ablation_script_on_two_configs(tmp_path, tiny_llama, small_dataset):
    import run_ablation

    # the tiny Llama-tokenizer model (32k vocabulary) trains faster on CPU than the Qwen one (152k)
    table = tmp_path / "table"
    argv = [
        str(ABLATION / "mle.yaml"),
        str(ABLATION / "del.yaml"),
        "--output-root",
        str(tmp_path / "runs"),
        "--table-dir",
        str(table),
    ]
    for override in local_swap(tmp_path, tiny_llama, small_dataset) + SMOKE_SCHEDULE:
        argv += ["--override", override]
    assert run_ablation.main(argv) == 0
    with open(table / "ablation.csv", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["config"], r["criterion"], r["status"], r["steps"]) for r in rows] == [
        ("mle", "mle", "ok", "2"),
        ("del", "del", "ok", "2"),
    ]
    for row in rows:
        for key in ("loss", "ce_loss", "digit_accuracy", "eval_loss", "eval_ce_loss", "eval_digit_accuracy"):
            assert math.isfinite(float(row[key])), (row["config"], key)
    mle, dl = rows
    assert float(mle["del_loss"]) == 0.0 and float(dl["del_loss"]) > 0.0
    # same data, seed and model: identical first-step inputs, so the first logged CE agrees across the two runs
    histories = [json.loads((table / f"{n}.log_history.json").read_text()) for n in ("mle", "del")]
    firsts = [_first_train_log(h) for h in histories]
    assert firsts[0]["ce_loss"] == pytest.approx(firsts[1]["ce_loss"], rel=1e-6)
    markdown = (table / "ablation.md").read_text()
    assert "| mle | mle | ok | 2 |" in markdown and "| del | del | ok | 2 |" in markdown
    # the table can be rebuilt from the saved histories without training
    (table / "ablation.md").unlink()
    assert run_ablation.main(argv + ["--table-only"]) == 0
    assert "| del | del | ok | 2 |" in (table / "ablation.md").read_text()


@pytest.mark.axolotl
def test_run_ablation_refuses_a_bad_override_and_missing_config(tmp_path):
    import run_ablation

    with pytest.raises(SystemExit):
        run_ablation.main([str(tmp_path / "missing.yaml")])
    with pytest.raises(Exception, match="KEY=VALUE"):
        run_ablation.parse_override("no_equals_sign")
