"""The GPU kernels of the fused cross-entropy losses (and Liger's other kernels), for real on a CPU: Triton's
interpreter (``TRITON_INTERPRET=1``, set in tests/conftest.py before triton is imported) runs their Triton code with
numpy, program by program. No kernel is replaced by an eager stand-in.

Four interpreter limitations stop real kernels; :func:`interpreter_shims` gets past them for the tests, changing
the interpreter (Triton 3.8.0), never a kernel:

* a Python ``float`` kernel argument stays a Python float (``triton.runtime.interpreter._implicit_cvt`` converts
  bools, ints and tensors only), while compiled Triton passes it as an fp32 scalar: ``eps.to(tl.float32)`` in
  Liger's RMSNorm, ``gate_multiplier.to(tl.float32)`` in its SwiGLU and ``softcap.to(...)`` in its cross-entropy
  fail with ``AttributeError: 'float' object has no attribute 'to'`` (what stops ``liger_rms_norm`` and
  ``liger_glu_activation``; ``liger_rope`` runs unshimmed). The shim converts floats as compiled Triton does
  (``mangle_type``: fp32);
* ``triton.language.extra.libdevice`` (CUDA's libdevice externs: ``rsqrt``, ``tanh``, ``log1p``) are empty stubs the
  interpreter evaluates to ``None``: Liger's RMSNorm (``rsqrt``), the soft cap of its cross-entropy (``tanh``) and
  Cut Cross Entropy's ``tl_logaddexp`` (``log1p``, in ``_cce_lse_forward_kernel``: ``AttributeError: 'NoneType'
  object has no attribute 'type'``). The shim rebinds those names in the kernels' modules to the same functions in
  ``tl`` operations (``tl.rsqrt``, ``2 sigmoid(2x) - 1``, ``log(1 + x)``);
* bfloat16 values are stored as their uint16 bit patterns, and ``tl.dot`` and the element-wise arithmetic operate on
  those integers (a bf16 ``tl.dot`` or ``e * c`` returns garbage: CCE's bf16 loss was 4e10). The shim computes bf16
  dots in float32 (what tensor cores do: exact products, fp32 accumulation) and bf16 element-wise arithmetic in
  float32 rounded back to bf16 (round to nearest even).

:func:`liger_on_cpu` runs Liger's real kernels with those shims and counts their launches (``CALLS``), so that a
test can tell that the fused path really ran. :func:`restored_forwards` undoes Liger's and the CCE-style patches.

Cut Cross Entropy: Axolotl 0.21's plugin needs Axolotl's fork of ``cut-cross-entropy``
(``cut_cross_entropy.transformers``, installed from GitHub), which is not on PyPI, and whose
``cce_linear_cross_entropy`` raises "Cut Cross Entropy requires an ampere GPU or newer" before any kernel on a machine
without one (checked on a source snapshot of axolotl-ai-cloud/ml-cross-entropy, commit 5f0c7a7). PyPI's ``cut-cross-
entropy`` 25.1.1 is Apple's original, without the model patches and without that check; its kernels (an older version of
the fork's) run here under the shims, bf16 only (its backward asserts bf16 / fp16 embeddings). :func:`cce_style_forward`
is what the fork's patched ``LlamaForCausalLM.forward`` (used for llama, mistral and qwen2) does: run the decoder, pass
the final hidden states and the head (``apply_lce_lm_head``: its weight, with a LoRA adapter folded in,
:func:`fold_lora_head`) to the fused loss, never call the head, return ``logits=None`` whenever there are labels, in
training and in evaluation. Its loss is Apple's real CCE kernel where it can run (bf16 hidden states and weight, inside
``interpreter_shims()``, which the backward needs as well; ``CCE_KERNEL["on"]``), else the exact cross-entropy of
``hidden @ weight.T`` (float32 models: what CCE computes, without materialising the logits on a GPU).
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F

# launches of each kernel (and calls of the CCE-style forward), so that a test can tell the fused path really ran
CALLS: dict[str, int] = {
    "liger_cross_entropy_kernel": 0,
    "element_mul_kernel": 0,
    "rms_norm": 0,
    "rope": 0,
    "swiglu": 0,
    "cce_style_forward": 0,
    "cce_kernel": 0,
}
# whether cce_style_forward calls Apple's CCE kernel (bf16 inputs) or the exact torch cross-entropy; "shims": how
# many interpreter_shims blocks are open (the kernels' backward runs later, at loss.backward(): it needs them too)
# "filter_eps": CCE's gradient filtering (skips softmax entries below it), "auto" as the fork's cce_patch sets it
CCE_KERNEL = {"on": True, "shims": 0, "filter_eps": "auto"}


# ------------------------------------------------------------------------------------------ interpreter shims
def _tanh(x):
    import triton.language as tl

    return 2.0 * tl.sigmoid(2.0 * x) - 1.0


def _log1p(x):
    import triton.language as tl

    return tl.log(1.0 + x)


def _rsqrt(x):
    import triton.language as tl

    return tl.rsqrt(x)


LIBDEVICE = {"tanh": _tanh, "log1p": _log1p, "rsqrt": _rsqrt}
KERNEL_PACKAGES = ("liger_kernel.", "cut_cross_entropy.")


def _bf16_to_f32(data: np.ndarray) -> np.ndarray:
    return (data.astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16(data: np.ndarray) -> np.ndarray:
    t = torch.from_numpy(np.ascontiguousarray(data, dtype=np.float32))
    return t.bfloat16().view(torch.int16).numpy().view(np.uint16)


@contextlib.contextmanager
def interpreter_shims() -> Iterator[None]:
    """The interpreter fixes of the module docstring, for every kernel launched inside the block (Liger's and CCE's
    modules are imported first, so that their libdevice names are rebound)."""
    import importlib.util

    for package in ("liger_kernel.transformers", "cut_cross_entropy"):
        if importlib.util.find_spec(package.split(".")[0]) is not None:
            importlib.import_module(package)
    import triton.language as tl
    from triton.language.extra import libdevice
    from triton.language.extra.cuda import libdevice as cuda_libdevice
    from triton.runtime import interpreter
    from triton.runtime.jit import mangle_type

    builder, cvt = interpreter.InterpreterBuilder, interpreter._implicit_cvt
    dot, binary_op = builder.create_dot, builder.binary_op

    def implicit_cvt(arg):
        if isinstance(arg, float):
            ty = tl.str_to_ty(mangle_type(arg), None)
            data = np.array([arg], dtype=np.float32 if ty == tl.float32 else np.float64)
            return tl.tensor(interpreter.TensorHandle(data, ty), ty)
        return cvt(arg)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        def f32(h):
            if h.dtype.scalar != tl.bfloat16:
                return h
            return interpreter.TensorHandle(_bf16_to_f32(h.data), tl.float32)

        return dot(self, f32(a), f32(b), d, input_precision, max_num_imprecise_acc)

    def bf16_binary_op(self, lhs, rhs, op):
        if lhs.dtype.scalar != tl.bfloat16 or op in (np.equal, np.not_equal):
            return binary_op(self, lhs, rhs, op)
        out = op(_bf16_to_f32(lhs.data), _bf16_to_f32(rhs.data))
        if out.dtype == np.bool_:
            return interpreter.TensorHandle(out, tl.int1)
        return interpreter.TensorHandle(_f32_to_bf16(out), tl.bfloat16)

    stubs = {
        id(fn): LIBDEVICE[name]
        for module in (libdevice, cuda_libdevice)
        for name, fn in vars(module).items()
        if name in LIBDEVICE
    }
    namespace = types.SimpleNamespace(**LIBDEVICE)
    saved = []
    for module_name, module in list(sys.modules.items()):
        if module is None or not module_name.startswith(KERNEL_PACKAGES):
            continue
        for name, value in list(vars(module).items()):
            if id(value) in stubs:
                saved.append((module, name, value))
                setattr(module, name, stubs[id(value)])
            elif value is libdevice or value is cuda_libdevice:  # CCE: `from ...extra import libdevice as tl_libdevice`
                saved.append((module, name, value))
                setattr(module, name, namespace)
    interpreter._implicit_cvt, builder.create_dot, builder.binary_op = implicit_cvt, create_dot, bf16_binary_op
    CCE_KERNEL["shims"] += 1
    try:
        yield
    finally:
        CCE_KERNEL["shims"] -= 1
        interpreter._implicit_cvt, builder.create_dot, builder.binary_op = cvt, dot, binary_op
        for module, name, value in reversed(saved):
            setattr(module, name, value)


class _Counted:
    """A Triton kernel as its module sees it, counting its launches (``kernel[grid](...)``)."""

    def __init__(self, name, kernel):
        self.name, self.kernel = name, kernel

    def __getitem__(self, grid):
        CALLS[self.name] += 1
        return self.kernel[grid]


# (module, global, CALLS key): the launch sites of Liger's kernels that the tests count
_LIGER_KERNELS = [
    ("liger_kernel.ops.cross_entropy", "liger_cross_entropy_kernel", "liger_cross_entropy_kernel"),
    ("liger_kernel.ops.cross_entropy", "element_mul_kernel", "element_mul_kernel"),
    ("liger_kernel.ops.fused_linear_cross_entropy", "liger_cross_entropy_kernel", "liger_cross_entropy_kernel"),
    ("liger_kernel.ops.fused_linear_cross_entropy", "element_mul_kernel", "element_mul_kernel"),
    ("liger_kernel.ops.rms_norm", "_rms_norm_forward_kernel", "rms_norm"),
    ("liger_kernel.ops.rms_norm", "_block_rms_norm_forward_kernel", "rms_norm"),
    ("liger_kernel.ops.rope", "_triton_rope", "rope"),
    ("liger_kernel.ops.swiglu", "_swiglu_forward_kernel", "swiglu"),
]


@contextlib.contextmanager
def liger_on_cpu() -> Iterator[None]:
    """Liger's real Triton kernels under the interpreter (with :func:`interpreter_shims`), their launches counted in
    ``CALLS``."""
    import importlib

    saved = []
    for module_name, name, key in _LIGER_KERNELS:
        module = importlib.import_module(module_name)
        kernel = getattr(module, name, None)
        if kernel is not None and not isinstance(kernel, _Counted):
            saved.append((module, name, kernel))
            setattr(module, name, _Counted(key, kernel))
    try:
        with interpreter_shims():
            yield
    finally:
        for module, name, kernel in reversed(saved):
            setattr(module, name, kernel)


@contextlib.contextmanager
def restored_forwards() -> Iterator[None]:
    """Undo what Liger's ``apply_liger_kernel_to_*`` and the CCE-style forward patch in the llama / mistral / qwen2
    causal LMs when the block ends: the classes' forwards, the modeling modules' globals (Liger replaces the RMSNorm
    and MLP classes and ``apply_rotary_pos_emb`` there) and transformers' causal-LM loss."""
    from transformers import LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM
    from transformers.loss import loss_utils

    classes = (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM)
    saved = [cls.__dict__["forward"] for cls in classes]
    modules = [sys.modules[cls.__module__] for cls in classes]
    saved_globals = [dict(vars(module)) for module in modules]
    saved_loss = dict(loss_utils.LOSS_MAPPING), loss_utils.ForCausalLMLoss, loss_utils.nn.functional.cross_entropy
    try:
        yield
    finally:
        for cls, forward in zip(classes, saved):
            cls.forward = forward
        for module, names in zip(modules, saved_globals):
            for name in [n for n in vars(module) if n not in names]:
                delattr(module, name)
            for name, value in names.items():
                if vars(module).get(name) is not value:
                    setattr(module, name, value)
        loss_utils.LOSS_MAPPING.clear()
        loss_utils.LOSS_MAPPING.update(saved_loss[0])
        loss_utils.ForCausalLMLoss, loss_utils.nn.functional.cross_entropy = saved_loss[1:]


def fold_lora_head(e: torch.Tensor, head) -> tuple[torch.Tensor, torch.Tensor]:
    """What the fork Axolotl 0.21 installs hands its kernel for the head (``_lora_lm_head_inputs`` in
    cut_cross_entropy/transformers/utils.py, read on a source snapshot of axolotl-ai-cloud/ml-cross-entropy): for a
    PEFT LoRA head with active, unmerged adapters, ``e @ W.T + scaling * B(A(dropout(e)))`` as one wider product
    ``[e, scaling * A(dropout(e))] @ [W, B].T``, ``lora_A`` called as a module (its hooks run); else ``e`` and
    ``head.weight``. Plain LoRA without bias only (what these tests build)."""
    lora = all(hasattr(head, a) for a in ("lora_A", "lora_B", "scaling", "base_layer", "active_adapters"))
    if not lora or head.merged or head.disable_adapters:
        return e, head.weight
    e_blocks, c_blocks = [e], [head.get_base_layer().weight]
    for name in [a for a in head.active_adapters if a in head.lora_A]:
        e_blocks.append(head.lora_A[name](head.lora_dropout[name](e)) * head.scaling[name])
        c_blocks.append(head.lora_B[name].weight)
    return torch.cat(e_blocks, dim=-1), torch.cat(c_blocks, dim=-1)


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
        # the fork's apply_lce_lm_head: a LoRA head folded in; then apply_lce: shift inside, "sum" /
        # num_items_in_batch when given, else the token mean
        folded, weight = fold_lora_head(hidden[:, keep, :], self.lm_head)
        e = folded[:, :-1].reshape(-1, folded.shape[-1])
        targets = labels[:, 1:].reshape(-1)
        num_items = kwargs.get("num_items_in_batch")
        reduction = "sum" if num_items is not None else "mean"
        if CCE_KERNEL["on"] and e.dtype == weight.dtype == torch.bfloat16:
            from cut_cross_entropy import linear_cross_entropy

            # forward and backward need the shims: the caller holds them (a bf16 backward without them is garbage)
            assert CCE_KERNEL["shims"], "run CCE's kernel inside fused_kernels.interpreter_shims()"
            CALLS["cce_kernel"] += 1
            nll = linear_cross_entropy(
                e.contiguous(),
                weight,
                targets,
                ignore_index=-100,
                reduction=reduction,
                filter_eps=CCE_KERNEL["filter_eps"],
            )
        else:
            nll = F.cross_entropy((e @ weight.t()).float(), targets, ignore_index=-100, reduction=reduction)
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


def apply_liger(model_type: str, **kernels: bool) -> None:
    """Liger's ``apply_liger_kernel_to_<model_type>`` with the given kernels on and every other switch off (the
    switches' names differ between architectures: swiglu, geglu, layer_norm ...; they are read from its signature)."""
    import inspect

    from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN

    apply = MODEL_TYPE_TO_APPLY_LIGER_FN[model_type]
    switches = [p for p, v in inspect.signature(apply).parameters.items() if isinstance(v.default, bool)]
    unknown = sorted(set(kernels) - set(switches))
    if unknown:
        raise TypeError(f"apply_liger_kernel_to_{model_type} has no switch {', '.join(unknown)}")
    apply(**{p: bool(kernels.get(p, False)) for p in switches})
