"""DEL against hand-worked values, a slow per-token oracle, gradcheck, and the sparse-gradient path."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from fake_vocab import V, VOCAB, encode

from del_plugin.core import (
    NOT_A_DIGIT,
    PlaceWeighting,
    digit_entropy_loss,
    gather_digit_targets,
    number_places,
)

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
    """One digit at a time, with explicit sums: an oracle written from the paper's formula."""
    terms = []
    for b in range(labels.shape[0]):
        for t in range(labels.shape[1]):
            y = VOCAB.digit_of(int(labels[b, t]))
            if y is None:
                continue
            family = next(f for f in VOCAB.family_token_ids if int(labels[b, t]) in f)
            z = [float(logits[b, t, i]) for i in family]
            m = max(z)
            denom = sum(math.exp(v - m) for v in z)
            total = 0.0
            for k in range(10):
                p = math.exp(z[k] - m) / denom
                target = 1.0 if k == y else 0.0
                bce = max(z[k], 0) - z[k] * target + math.log1p(math.exp(-abs(z[k])))
                total += p * bce
            i = int(places[b, t])
            u = (weighting.integer_slope * (i + 1) if i >= 0 else weighting.decimal_base ** (i - 1)) if weighting.enabled else 1.0
            terms.append(u * total / 10)
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
        targets = gather_digit_targets(x, labels, VOCAB, sparse_grad=False)
        z = targets.logits.double()
        onehot = F.one_hot(targets.target, 10).double()
        from del_plugin.core import place_weights

        per = (torch.softmax(z, -1) * F.binary_cross_entropy_with_logits(z, onehot, reduction="none")).mean(-1)
        return (per * place_weights(places).double() * targets.mask).sum()

    x = logits.clone().requires_grad_()
    assert torch.autograd.gradcheck(f, (x,), eps=1e-6, atol=1e-6)
    # the float32 public function and its sparse gradient agree with the float64 dense gradient
    (g64,) = torch.autograd.grad(f(x), x)
    x32 = logits.float().requires_grad_()
    loss = digit_entropy_loss(x32, labels, places, VOCAB, reduction="sum")
    (g32,) = torch.autograd.grad(loss, x32)
    assert g32.is_sparse
    assert torch.allclose(g32.to_dense().double(), g64, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_gradient_path_gives_the_dense_gradient(dtype):
    # CE and DEL on the same logits of a linear head, as in training; float32 logits reach CE as a view (the
    # case where autograd cannot add in place), bfloat16 ones through a float copy
    torch.manual_seed(2)
    labels = encode("it is 42.5 now, not 7")[None]
    places = number_places(labels, VOCAB)
    grads = {}
    for path in ("dense", "sparse", "in_place"):
        torch.manual_seed(0)  # the same hidden states and head for every path
        hidden = torch.randn(1, labels.shape[1], 8, requires_grad=True)
        head = torch.nn.Linear(8, V).to(dtype)
        logits = head(hidden.to(dtype))
        ce = F.cross_entropy(logits.float().view(-1, V), labels.view(-1), ignore_index=-100)
        targets = gather_digit_targets(logits, labels, VOCAB, gradient=path)
        from del_plugin.core import del_token_losses, place_weights

        total = ce + 0.3 * del_token_losses(targets, place_weights(places)).sum()
        total.backward()
        grads[path] = (hidden.grad.clone(), head.weight.grad.clone())
    tol = dict(atol=1e-6, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-2, rtol=1e-2)
    for path in ("sparse", "in_place"):
        torch.testing.assert_close(grads[path][0], grads["dense"][0], **tol)
        torch.testing.assert_close(grads[path][1], grads["dense"][1], **tol)
    # and the DEL term really moved the gradient (the test would pass trivially otherwise)
    assert not torch.allclose(grads["dense"][1], torch.zeros_like(grads["dense"][1]))


def test_in_place_path_adds_exactly_the_digit_gradient():
    torch.manual_seed(4)
    labels = encode("3.14 and 27")[None]
    places = number_places(labels, VOCAB)
    logits = torch.randn(*labels.shape, V, requires_grad=True)
    from del_plugin.core import del_token_losses, place_weights

    def digit_term(path):
        return del_token_losses(gather_digit_targets(logits, labels, VOCAB, gradient=path), place_weights(places)).sum()

    ce = lambda: F.cross_entropy(logits.view(-1, V), labels.view(-1))  # noqa: E731
    (g_ce,) = torch.autograd.grad(ce(), logits)
    (g_dense,) = torch.autograd.grad(ce() + digit_term("dense"), logits)
    (g_in_place,) = torch.autograd.grad(ce() + digit_term("in_place"), logits)
    torch.testing.assert_close(g_in_place, g_dense)
    assert not torch.allclose(g_in_place, g_ce)
    # alone, without another loss on the logits, there is no gradient to add into: a clear error, not a silent 0
    with pytest.raises(RuntimeError, match="use gradient='sparse' for DEL alone"):
        torch.autograd.grad(digit_term("in_place"), logits)
    with pytest.raises(ValueError, match="gradient must be"):
        gather_digit_targets(logits, labels, VOCAB, gradient="fast")


def test_no_digit_gives_zero_not_nan():
    labels = encode("no numbers here")
    places = number_places(labels, VOCAB)
    assert (places == NOT_A_DIGIT).all()
    logits = torch.randn(*labels.shape, V, requires_grad=True)
    loss = digit_entropy_loss(logits, labels, places, VOCAB)
    assert loss.item() == 0.0
    loss.backward()
    assert torch.isfinite(logits.grad.to_dense()).all()
    empty = torch.zeros(0, V, requires_grad=True)
    assert digit_entropy_loss(empty, torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.int32), VOCAB).item() == 0.0


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
    assert logits.grad.dtype == dtype and torch.isfinite(logits.grad.to_dense()).all()


def test_misaligned_inputs_are_refused():
    with pytest.raises(ValueError, match="aligned"):
        gather_digit_targets(torch.zeros(1, 4, V), torch.zeros(1, 5, dtype=torch.long), VOCAB)
