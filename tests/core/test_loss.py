"""DEL against hand-worked values, a slow per-token oracle and gradcheck; the logits API on logits of any provenance."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from del_plugin.core import (
    PlaceWeighting,
    digit_entropy_loss,
    digit_targets_from_hidden,
    digit_targets_from_logits,
    number_places,
)
from del_plugin.core.places import NOT_A_DIGIT

from fake_vocab import VOCAB, V, encode
from number_token_oracle import oracle_term

LN2 = math.log(2.0)


def logits_for(labels: torch.Tensor, digit_logits: dict[int, list[float]] | None = None, dtype=torch.float32):
    """Logits that are 0 everywhere except the given digit logits of family 0 at given positions."""
    logits = torch.zeros(*labels.shape, V, dtype=dtype)
    for pos, z in (digit_logits or {}).items():
        logits[pos, list(VOCAB.family_token_ids[0])] = torch.tensor(z, dtype=dtype)
    return logits


def test_hand_worked_uniform_digits():
    # "12": places 1, 0 -> weights 4, 2. Zero logits: p_hat = 0.1 and every BCE_k = ln 2, so
    # l_t = u_t * mean_k(0.1 * ln 2) = 0.1 * ln 2 * u_t and the mean over the two digits is 0.3 ln 2.
    labels = encode("12")
    places = number_places(labels, VOCAB)
    loss = digit_entropy_loss(logits_for(labels), labels, places, VOCAB)
    assert loss.item() == pytest.approx(0.3 * LN2, rel=1e-6)
    assert digit_entropy_loss(logits_for(labels), labels, places, VOCAB, reduction="sum").item() == pytest.approx(
        0.6 * LN2, rel=1e-6
    )


def test_hand_worked_peaked_digit():
    # "7": z_7 = ln 9, the other nine 0. p_7 = 9 / 18 = 1/2, p_k = 1/18.
    # BCE_7 = softplus(-ln 9) = ln(10/9), BCE_k = ln 2.  mean_k = (1/2 ln(10/9) + 9/18 ln 2) / 10 = ln(20/9) / 20
    # u = 2 (units), alpha = 0.5  ->  0.5 * 2 * ln(20/9) / 20
    labels = encode("a7")
    z = [0.0] * 10
    z[7] = math.log(9.0)
    places = number_places(labels, VOCAB)
    loss = digit_entropy_loss(logits_for(labels, {1: z}), labels, places, VOCAB, alpha=0.5)
    assert loss.item() == pytest.approx(0.5 * 2 * math.log(20 / 9) / 20, rel=1e-6)


def test_reduction_none_has_zeros_off_digits():
    labels = encode("x 12.5")
    places = number_places(labels, VOCAB)
    per_token = digit_entropy_loss(logits_for(labels), labels, places, VOCAB, alpha=2.0, reduction="none")
    weights = [0, 0, 4, 2, 0, 1.02**-2]
    assert per_token.tolist() == pytest.approx([2.0 * 0.1 * LN2 * w for w in weights], rel=1e-6)


def slow_del(logits, labels, places, weighting=PlaceWeighting()):
    """One digit at a time: each target's term from the paper's formula written out (number_token_oracle's
    ``oracle_term``, on the ten logits of the target's digit family), averaged over the digit targets."""
    terms = []
    for b in range(labels.shape[0]):
        for t in range(labels.shape[1]):
            y = VOCAB.digit_of(int(labels[b, t]))
            if y is None:
                continue
            family = next(f for f in VOCAB.family_token_ids if int(labels[b, t]) in f)
            z = logits[b, t, list(family)].double()
            terms.append(float(oracle_term("del", z, y, int(places[b, t]), 0, weighting)))
    return sum(terms) / max(len(terms), 1)


@pytest.mark.parametrize("weighting", [PlaceWeighting(), PlaceWeighting(enabled=False)])
def test_matches_slow_oracle_on_random_logits(weighting):
    torch.manual_seed(0)
    labels = torch.stack([encode("pay 1,234.50 for ⁷8 items.  "), encode("1.2.3 and .75 or 9 - x ..8 y")])
    labels[0, :4] = -100
    logits = torch.randn(*labels.shape, V) * 3
    places = number_places(labels, VOCAB)
    loss = digit_entropy_loss(logits, labels, places, VOCAB, weighting=weighting)
    assert loss.item() == pytest.approx(slow_del(logits, labels, places, weighting), rel=1e-5)


def test_gradcheck_float64():
    torch.manual_seed(1)
    labels = encode("3.14 ⁴2")
    places = number_places(labels, VOCAB)
    logits = torch.randn(1, labels.numel(), V, dtype=torch.float64)
    labels, places = labels[None], places[None]

    def f(x):
        # dense gradient path: gradcheck compares against finite differences on the float64 input
        targets = digit_targets_from_logits(x, labels, VOCAB)
        z = targets.logits.double()
        onehot = F.one_hot(targets.target, 10).double()
        from del_plugin.core.places import place_weights

        per = (torch.softmax(z, -1) * F.binary_cross_entropy_with_logits(z, onehot, reduction="none")).mean(-1)
        return (per * place_weights(places).double() * targets.mask).sum()

    x = logits.clone().requires_grad_()
    assert torch.autograd.gradcheck(f, (x,), eps=1e-6, atol=1e-6)
    # the float32 public function agrees with the float64 gradient
    (g64,) = torch.autograd.grad(f(x), x)
    x32 = logits.float().requires_grad_()
    loss = digit_entropy_loss(x32, labels, places, VOCAB, reduction="sum")
    (g32,) = torch.autograd.grad(loss, x32)
    assert torch.allclose(g32.double(), g64, atol=1e-5)


PROVENANCES = {
    # how user code gets its logits: each used to break a sparse gradient path
    "linear layer": lambda h, w: torch.nn.functional.linear(h, w),
    "matmul": lambda h, w: h @ w.T,
    "bf16 cast to float": lambda h, w: (h.bfloat16() @ w.bfloat16().T).float(),
    "bf16": lambda h, w: h.bfloat16() @ w.bfloat16().T,
    "view": lambda h, w: (h.reshape(-1, h.shape[-1]) @ w.T).view(*h.shape[:-1], -1),
    "slice": lambda h, w: torch.cat([h @ w.T, h[..., :1]], -1)[..., :-1],
}


@pytest.mark.parametrize("provenance", sorted(PROVENANCES))
def test_logits_of_any_provenance_give_the_right_gradients(provenance):
    from del_plugin.core.criteria import del_token_losses
    from del_plugin.core.places import place_weights

    labels = encode("it is 42.5 now, not 7")[None]
    places = number_places(labels, VOCAB)
    bf16 = "bf16" in provenance
    grads = {}
    for path in ("logits", "hidden"):
        torch.manual_seed(2)
        hidden = torch.randn(*labels.shape, 8, requires_grad=True)
        weight = torch.randn(V, 8, requires_grad=True)
        if path == "logits":
            loss = digit_entropy_loss(PROVENANCES[provenance](hidden, weight), labels, places, VOCAB, alpha=0.3)
        else:  # the reference: the same term read from the hidden states
            h, w = (hidden.bfloat16(), weight.bfloat16()) if bf16 else (hidden, weight)
            digits = digit_targets_from_hidden(h, w, labels, VOCAB)
            loss = 0.3 * del_token_losses(digits, place_weights(places)).sum() / digits.mask.sum()
        loss.backward()
        grads[path] = (loss.detach(), hidden.grad, weight.grad)
    tol = dict(rtol=3e-2, atol=3e-3) if bf16 else dict(rtol=1e-5, atol=1e-6)
    for got, want in zip(grads["logits"], grads["hidden"]):
        torch.testing.assert_close(got.float(), want.float(), **tol)
    assert grads["logits"][2].abs().sum() > 0  # the term really reached the weight


def test_no_digit_gives_zero_not_nan():
    labels = encode("no numbers here")
    places = number_places(labels, VOCAB)
    assert (places == NOT_A_DIGIT).all()
    logits = torch.randn(*labels.shape, V, requires_grad=True)
    loss = digit_entropy_loss(logits, labels, places, VOCAB)
    assert loss.item() == 0.0
    loss.backward()
    assert torch.isfinite(logits.grad).all()
    empty = torch.zeros(0, V, requires_grad=True)
    assert (
        digit_entropy_loss(empty, torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.int32), VOCAB).item()
        == 0.0
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_logits_stay_finite(dtype):
    torch.manual_seed(3)
    labels = encode("99999.99999 and 1")[None]
    places = number_places(labels, VOCAB)
    # large logits, as a confident model produces; float32 inside keeps softmax and BCE finite
    logits = (torch.randn(*labels.shape, V) * 40).to(dtype).requires_grad_()
    loss = digit_entropy_loss(logits, labels, places, VOCAB)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    ref = digit_entropy_loss(logits.detach().float(), labels, places, VOCAB)
    assert loss.item() == pytest.approx(ref.item(), rel=1e-6)
    loss.backward()
    assert logits.grad.dtype == dtype and torch.isfinite(logits.grad).all()


def test_misaligned_inputs_are_refused():
    with pytest.raises(ValueError, match="aligned"):
        digit_targets_from_logits(torch.zeros(1, 4, V), torch.zeros(1, 5, dtype=torch.long), VOCAB)
