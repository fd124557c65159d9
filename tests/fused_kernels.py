"""Eager stand-ins for the GPU kernels of the fused cross-entropy losses, so that their real forwards run on a CPU.

Liger-Kernel (0.8.4, installed with Axolotl): its fused linear cross-entropy is torch code (chunking, the head
matmul, the gradients of the input and weight) around two Triton kernels, which fail here ("0 active drivers"):
``liger_cross_entropy_kernel`` (per-row loss, and the logits' gradient written over the logits in place) and
``element_mul_kernel`` (scales the stored gradients by the incoming one). :func:`liger_on_cpu` replaces exactly
those two module globals with eager torch versions of the same contract, for the options the llama / mistral /
qwen2 forwards use (no class weights, softcapping, z-loss or label smoothing: anything else raises). Everything
else, ``lce_forward``, ``LigerForCausalLMLoss`` and the autograd function, is Liger's own code.

Cut Cross Entropy: Axolotl 0.21's plugin needs Axolotl's fork of ``cut-cross-entropy``
(``cut_cross_entropy.transformers``, installed from GitHub), which is not on PyPI; PyPI's ``cut-cross-entropy``
is Apple's original without the model patches. :func:`cce_style_forward` is therefore a faithful copy of what
the fork's patched ``LlamaForCausalLM.forward`` (used for llama, mistral and qwen2) does: run the decoder, pass
the final hidden states and ``self.lm_head.weight`` to the fused loss, never call the head, return
``logits=None`` whenever there are labels, in training and in evaluation. Its loss is the exact cross-entropy of
``hidden @ weight.T`` (what CCE computes, without materialising the logits on a GPU).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F

# launches of each stand-in, so that a test can tell the fused path really ran
CALLS: dict[str, int] = {"liger_cross_entropy_kernel": 0, "element_mul_kernel": 0, "cce_style_forward": 0}


class _Launcher:
    """``kernel[grid](**kwargs)`` as Triton launches a kernel, calling an eager function once for the whole grid."""

    def __init__(self, name, fn):
        self.name, self.fn = name, fn

    def __getitem__(self, grid):
        CALLS[self.name] += 1
        return self.fn


def _eager_cross_entropy_kernel(
    *,
    X_ptr,
    Y_ptr,
    weight_ptr,
    loss_ptr,
    z_loss_ptr,
    token_accuracy_ptr,
    predicted_tokens_ptr,
    n_cols,
    n_non_ignore,
    ignore_index,
    lse_square_scale,
    label_smoothing,
    reduction,
    softcap,
    RETURN_Z_LOSS,
    RETURN_TOKEN_ACCURACY,
    RETURN_PREDICTED_TOKENS,
    HAS_WEIGHT,
    HAS_SOFTCAPPING,
    HAS_GRADIENTS,
    **_launch,
) -> None:
    """Liger's ``liger_cross_entropy_kernel`` (ops/cross_entropy.py): per row, ``loss = lse(x) - x[y]`` (0 where
    ``y == ignore_index``), divided by ``n_non_ignore`` for "mean"; with gradients, the row of ``X`` is overwritten
    by ``softmax(x) - onehot(y)`` (same scaling; 0 on ignored rows), in ``X``'s dtype."""
    if HAS_WEIGHT or HAS_SOFTCAPPING or RETURN_Z_LOSS or label_smoothing or lse_square_scale:
        raise NotImplementedError("the eager Liger stand-in covers plain cross-entropy only")
    x = X_ptr.float()
    ignored = Y_ptr == ignore_index
    y = torch.where(ignored, 0, Y_ptr)
    lse = torch.logsumexp(x, dim=-1)
    loss = torch.where(ignored, 0.0, lse - x.gather(-1, y[:, None]).squeeze(-1))
    scale = 1.0 / n_non_ignore if reduction == "mean" else 1.0
    loss_ptr.copy_(loss * scale)
    if RETURN_TOKEN_ACCURACY:
        token_accuracy_ptr.copy_(torch.where(ignored, 0.0, (x.argmax(-1) == y).float()))
    if RETURN_PREDICTED_TOKENS:
        predicted_tokens_ptr.copy_(torch.where(ignored, -1, x.argmax(-1)))
    if HAS_GRADIENTS:
        grad = torch.softmax(x, dim=-1) - F.one_hot(y, n_cols).float()
        X_ptr.copy_(torch.where(ignored[:, None], 0.0, grad * scale))


def _eager_element_mul_kernel(X_ptr, X_stride, grad_output_ptr, n_cols, **_launch) -> None:
    """Liger's ``element_mul_kernel`` (ops/utils.py): ``X *= grad_output`` in place."""
    X_ptr.mul_(grad_output_ptr)


@contextlib.contextmanager
def liger_on_cpu() -> Iterator[None]:
    """Swap Liger's two Triton kernels for the eager stand-ins above, in the fused linear cross-entropy and in the
    plain cross-entropy (``liger_cross_entropy``), and back afterwards."""
    from liger_kernel.ops import cross_entropy, fused_linear_cross_entropy

    modules = (cross_entropy, fused_linear_cross_entropy)
    saved = [(m.liger_cross_entropy_kernel, m.element_mul_kernel) for m in modules]
    for module in modules:
        module.liger_cross_entropy_kernel = _Launcher("liger_cross_entropy_kernel", _eager_cross_entropy_kernel)
        module.element_mul_kernel = _Launcher("element_mul_kernel", _eager_element_mul_kernel)
    try:
        yield
    finally:
        for module, (kernel, mul) in zip(modules, saved):
            module.liger_cross_entropy_kernel, module.element_mul_kernel = kernel, mul


@contextlib.contextmanager
def restored_forwards() -> Iterator[None]:
    """Undo the class-level forward patches (Liger's ``apply_liger_kernel_to_*``, the CCE-style forward) of the
    llama / mistral / qwen2 causal LMs, and transformers' causal-LM loss, when the block ends."""
    from transformers import LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM
    from transformers.loss import loss_utils

    classes = (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM)
    saved = [cls.__dict__["forward"] for cls in classes]
    saved_loss = dict(loss_utils.LOSS_MAPPING), loss_utils.ForCausalLMLoss, loss_utils.nn.functional.cross_entropy
    try:
        yield
    finally:
        for cls, forward in zip(classes, saved):
            cls.forward = forward
        loss_utils.LOSS_MAPPING.clear()
        loss_utils.LOSS_MAPPING.update(saved_loss[0])
        loss_utils.ForCausalLMLoss, loss_utils.nn.functional.cross_entropy = saved_loss[1:]


def cce_style_forward(
    self,
    input_ids=None,
    attention_mask=None,
    position_ids=None,
    past_key_values=None,
    inputs_embeds=None,
    labels=None,
    use_cache=None,
    logits_to_keep=0,
    **kwargs,
):
    """The Cut Cross Entropy fork's patched causal-LM forward, on a CPU (module docstring)."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    CALLS["cce_style_forward"] += labels is not None
    outputs = self.model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        past_key_values=past_key_values,
        inputs_embeds=inputs_embeds,
        use_cache=use_cache,
        **kwargs,
    )
    hidden = outputs.last_hidden_state
    keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
    loss = logits = None
    if labels is not None:
        # the fork's apply_lce: shift inside, "sum" / num_items_in_batch when given, else the token mean
        e = hidden[:, keep, :][:, :-1].reshape(-1, hidden.shape[-1])
        targets = labels[:, 1:].reshape(-1)
        num_items = kwargs.get("num_items_in_batch")
        nll = F.cross_entropy(
            (e @ self.lm_head.weight.t()).float(),
            targets,
            ignore_index=-100,
            reduction="sum" if num_items is not None else "mean",
        )
        loss = nll / num_items if num_items is not None else nll
    else:
        logits = self.lm_head(hidden[:, keep, :])
    return CausalLMOutputWithPast(
        loss=loss,
        logits=logits,
        past_key_values=outputs.past_key_values,
        hidden_states=outputs.hidden_states,
        attentions=outputs.attentions,
    )
