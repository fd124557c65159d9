"""The token criteria: per-position losses that *replace* cross-entropy over all target tokens, from the full
``[..., V]`` logits (so no fused cross-entropy kernel can run beside them). ``alpha`` interpolates:
``l_t = (1 - alpha) * NLL_t + alpha * criterion_t`` (``alpha = 1``: the criterion as published).

- ``mixce``: ``eta * NLL_t + (1 - eta) * sg[exp(-NLL_t)] * NLL_t``
- ``emo``:   ``0.5 * (NLL_t + sg[NLL_t / emo_t] * emo_t)``, ``emo_t = 1 - <e_y, E^T q>`` with ``E`` the frozen,
  row-L2-normalised initial output embedding and ``q = p - sg[p_y] onehot(y)`` (the model distribution less the
  detached target mass, *not* renormalised; the gradient still flows through ``p_y``).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

__all__ = [
    "EMO_EPS",
    "TokenCriterionTerms",
    "emo_cost_embedding",
    "emo_token_losses",
    "mixce_token_losses",
    "token_nll",
]

# EMO's guard against a zero transport cost in sg[NLL / emo] (the reference implementation's value).
EMO_EPS = 1e-10


class TokenCriterionTerms(NamedTuple):
    """Per-position terms of a criterion that replaces cross-entropy, all float32, 0 off the targets.

    ``loss`` is what is minimised (``(1 - alpha) * nll + alpha * criterion``); ``nll`` the plain cross-entropy
    (for logging); ``mask`` marks the targets (labels != ``ignore_index``); ``extras`` are the criterion's own
    per-position values worth logging, by log name (EMO's transport cost ``emo_cost``), each logged as its mean
    over the target tokens.
    """

    loss: torch.Tensor
    nll: torch.Tensor
    mask: torch.Tensor
    extras: dict[str, torch.Tensor]


def _check_alpha(alpha: float) -> None:
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha interpolates cross-entropy and the criterion; it must be in [0, 1], got {alpha}")


def _safe_targets(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int):
    if logits.shape[:-1] != labels.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and labels {tuple(labels.shape)} are not aligned: "
            "logits[..., t, :] must predict labels[..., t] (shift them before calling)"
        )
    mask = labels != ignore_index
    return torch.where(mask, labels, 0), mask


def token_nll(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """Cross-entropy per position in float32 (0 where ``labels == ignore_index``), from ``[..., V]`` logits."""
    _safe_targets(logits, labels, ignore_index)
    vocab_size = logits.shape[-1]
    nll = F.cross_entropy(
        logits.float().reshape(-1, vocab_size), labels.reshape(-1), ignore_index=ignore_index, reduction="none"
    )
    return nll.view(labels.shape)


def mixce_token_losses(
    logits: torch.Tensor, labels: torch.Tensor, eta: float = 0.5, alpha: float = 1.0, ignore_index: int = -100
) -> TokenCriterionTerms:
    """MixCE per target token: ``eta * NLL + (1 - eta) * sg[exp(-NLL)] * NLL``, interpolated with CE by ``alpha``.

    ``exp(-NLL_t)`` is the model's probability of the target, detached: the reverse cross-entropy's gradient
    estimate of the MixCE paper. With ``alpha`` the per-token loss is ``(1 - alpha(1 - eta)) NLL + alpha(1 - eta)
    sg[p_y] NLL``: MixCE with ``eta' = 1 - alpha (1 - eta)``.
    """
    if not 0.0 <= eta <= 1.0:
        raise ValueError(f"MixCE eta must be in [0, 1], got {eta}")
    _check_alpha(alpha)
    _, mask = _safe_targets(logits, labels, ignore_index)
    nll = token_nll(logits, labels, ignore_index)
    mixce = eta * nll + (1.0 - eta) * torch.exp(-nll.detach()) * nll
    loss = torch.where(mask, (1.0 - alpha) * nll + alpha * mixce, 0.0)
    return TokenCriterionTerms(loss, torch.where(mask, nll, 0.0), mask, {})


@torch.no_grad()
def emo_cost_embedding(output_embedding: torch.Tensor) -> torch.Tensor:
    """EMO's frozen cost embedding: a float32, row-L2-normalised copy of the ``[V, H]`` output embedding.

    Rows of norm 0 (padding rows of an enlarged vocabulary) stay 0 instead of becoming NaN. Memory: ``V * H * 4``
    bytes (0.93 GB for Qwen2.5-1.5B, V = 151936, H = 1536).
    """
    if output_embedding.dim() != 2 or output_embedding.numel() == 0:
        raise ValueError(
            f"EMO needs the full [vocab, hidden] output embedding, got shape {tuple(output_embedding.shape)} "
            "(a weight sharded by DeepSpeed ZeRO-3 or FSDP is not supported)"
        )
    return F.normalize(output_embedding.detach().float(), p=2.0, dim=1).clone()


def emo_token_losses(
    logits: torch.Tensor,
    labels: torch.Tensor,
    cost_embedding: torch.Tensor,
    alpha: float = 1.0,
    ignore_index: int = -100,
) -> TokenCriterionTerms:
    """EMO per target token: ``0.5 * (NLL + sg[NLL / (emo + 1e-10)] * emo)``, interpolated with CE by ``alpha``.

    ``emo_t = 1 - <e_y, E^T q>`` with ``E`` = ``cost_embedding`` (:func:`emo_cost_embedding`) and
    ``q = p - sg[p_y] onehot(y)``: the value has the target's mass removed, the gradient is the full softmax's.
    Since ``<e_y, E^T onehot(y)> = |e_y|^2``, this is computed as ``1 - <e_y, E^T p> + sg[p_y] |e_y|^2`` with no
    ``[N, V]`` one-hot. The forward value of the EMO term equals NLL (up to the 1e-10 guard); only its gradient
    differs. Extra memory over cross-entropy: the softmax ``p`` (``[N, V]`` float32, kept for the backward pass)
    and the ``[N, V] @ [V, H]`` product.
    """
    _check_alpha(alpha)
    safe, mask = _safe_targets(logits, labels, ignore_index)
    vocab_size = logits.shape[-1]
    if cost_embedding.dim() != 2 or cost_embedding.shape[0] != vocab_size:
        raise ValueError(
            f"the EMO cost embedding is {tuple(cost_embedding.shape)} but the logits have {vocab_size} entries: "
            "it must be the [vocab, hidden] output embedding of the same model"
        )
    log_p = torch.log_softmax(logits.float(), dim=-1)
    nll = -log_p.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    p = log_p.exp()
    cost = cost_embedding.to(device=p.device, dtype=p.dtype)
    e_y = cost[safe]  # [..., H]
    expected_embedding = p.reshape(-1, vocab_size) @ cost  # [N, H]
    overlap = (expected_embedding.view(e_y.shape) * e_y).sum(-1)
    target_mass = torch.exp(-nll.detach())
    emo = 1.0 - overlap + target_mass * (e_y * e_y).sum(-1)
    emo_loss = 0.5 * (nll + (nll / (emo + EMO_EPS)).detach() * emo)
    loss = torch.where(mask, (1.0 - alpha) * nll + alpha * emo_loss, 0.0)
    return TokenCriterionTerms(loss, torch.where(mask, nll, 0.0), mask, {"emo_cost": torch.where(mask, emo, 0.0)})
