"""The head weight's gradient on the rows DEL reads, added outside autograd: never a ``[V, H]`` zero gradient.

What it adds. DEL reads a few rows of the LM head's ``[V, H]`` weight (``10F`` digit rows, or Llama-3's 1,110 number
rows): :mod:`~del_plugin.core.hidden` multiplies the hidden states by them, :mod:`~del_plugin.core.head_rows` copies
them. Their weight gradient is ``[R, H]``. Returned through autograd it would have to be a ``[V, H]`` tensor, zero
outside those rows (1 GiB in bf16 for Qwen2.5-7B, beside the cross-entropy's own ``[V, H]`` gradient). Instead, for
a parameter (a leaf tensor that requires a gradient, as a model's head weight is, FSDP2's gathered one included),
:func:`row_gradient_sink` registers a hook on the weight, and each backward of DEL's autograd functions hands its
rows to the sink (:meth:`RowGradientSink.add`). The sink adds them in place into the weight's gradient:

- when another loss reaches the weight (the cross-entropy always does): inside the same backward pass, in the
  weight's hook, into the gradient summed over its uses before it is accumulated into ``.grad`` (so gradient
  accumulation, DDP's and FSDP's reductions see one gradient). That costs ``R x H``.
- when nothing else reaches it (a digit loss on its own): at the end of the backward pass, into ``.grad`` (created
  as a zero ``[V, H]`` tensor when it is None, the one case that needs one). Refused under DeepSpeed ZeRO-3 (a
  weight with a ``ds_id``), which reduces a weight's gradient inside the backward pass.

A weight computed from a parameter (a cast, a view) gets no sink: :func:`dense_row_gradient` builds its ordinary
``[V, H]`` gradient, returned through autograd.

Why outside autograd: an autograd function must return a gradient of its input's full shape; only a hook on the leaf
may change the gradient that is accumulated, and only a callback queued on autograd's engine runs once the backward
pass has ended (when it is known that no other gradient reached the weight).

What it assumes of torch (checked by ``tests/core/test_row_gradient.py``):

- a hook registered with ``Tensor.register_hook`` on a leaf runs once per backward pass, with the gradient summed over
  the leaf's uses, before it is accumulated into ``.grad``, and the tensor it returns is what is accumulated;
- the private ``torch.autograd.Variable._execution_engine.queue_callback(callback)``, called inside a backward pass,
  runs ``callback()`` once that backward pass has ended (after every leaf's gradient is accumulated). It is the only
  private torch API of the package and is called in :func:`queue_at_end_of_backward` alone, which names it in a clear
  error when it is missing.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
from torch.autograd import Variable

__all__ = ["RowGradientSink", "dense_row_gradient", "queue_at_end_of_backward", "row_gradient_sink"]

ENGINE_API = "torch.autograd.Variable._execution_engine.queue_callback"


def queue_at_end_of_backward(callback: Callable[[], None]) -> None:
    """Run ``callback()`` when the running backward pass ends (``ENGINE_API``, a private torch API: module
    docstring). Call it from inside a backward pass only."""
    engine = getattr(Variable, "_execution_engine", None)
    queue = getattr(engine, "queue_callback", None)
    if not callable(queue):
        raise RuntimeError(
            f"{ENGINE_API} is missing in torch {torch.__version__}: DEL adds the LM head's digit-row gradient at the "
            "end of the backward pass through this private torch API (del_plugin/core/row_gradient.py). Use a torch "
            "release that has it (DEL is tested with torch 2.14.1)"
        )
    try:
        queue(callback)
    except TypeError as error:  # another signature than queue_callback(callback)
        raise RuntimeError(
            f"{ENGINE_API}(callback) failed in torch {torch.__version__} ({error}): DEL adds the LM head's digit-row "
            "gradient at the end of the backward pass through this private torch API "
            "(del_plugin/core/row_gradient.py), whose signature has changed"
        ) from error


class RowGradientSink:
    """Adds ``[R, H]`` row gradients into a parameter's summed gradient, in the same backward pass (module
    docstring). One sink per weight and forward; :meth:`add` is called from a backward."""

    def __init__(self, weight: torch.Tensor):
        self.pending: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.weight = weakref.ref(weight)
        self.handle = weight.register_hook(self)

    def add(self, row_ids: torch.Tensor, rows: torch.Tensor) -> None:
        """Add ``rows`` ``[R, H]`` at the weight's rows ``row_ids``: in the weight's hook when another gradient
        reaches it in this backward pass, else when the backward pass ends."""
        self.pending.append((row_ids, rows))
        queue_at_end_of_backward(self.end_of_backward)

    def _add_pending(self, grad: torch.Tensor) -> None:
        while self.pending:
            ids, rows = self.pending.pop()
            grad.index_add_(0, ids, rows.to(grad.dtype))

    def __call__(self, grad: torch.Tensor | None) -> torch.Tensor | None:
        self.handle.remove()
        if grad is None and self.pending and hasattr(self.weight(), "ds_id"):
            self.pending.clear()
            # a None gradient cannot be replaced here, and DeepSpeed ZeRO-3 reduces a parameter's gradient right
            # after this hook, in the backward pass: the rows cannot wait for end_of_backward
            raise RuntimeError(
                "DEL's digit rows are the only gradient of the LM head weight in this backward pass, and DeepSpeed "
                "ZeRO-3 reduces the weight's gradient when it is accumulated, which needs another loss through the "
                "head (the model's cross-entropy): under ZeRO-3 train DEL beside the cross-entropy, or freeze the head"
            )
        if grad is None or not self.pending:  # None: nothing else reached the weight; see end_of_backward
            return grad
        if 0 in grad.stride():  # an expanded (broadcast) gradient: writing into it would write many places
            grad = grad.contiguous()
        self._add_pending(grad)
        return grad

    def end_of_backward(self) -> None:
        """Queued by :meth:`add`. Rows still pending mean no other loss reached the weight (DEL on its own):
        accumulate them into the leaf's ``.grad`` directly, the one case that needs a ``[V, H]`` zero."""
        if not self.pending:
            return
        self.handle.remove()
        weight = self.weight()
        if weight is None:
            self.pending.clear()
            return
        with torch.no_grad():
            if weight.grad is None:
                weight.grad = torch.zeros_like(weight)
            self._add_pending(weight.grad)


def row_gradient_sink(weight: torch.Tensor) -> RowGradientSink | None:
    """The sink of ``weight`` for this forward when it is a parameter whose gradient is taken now (a leaf that
    requires a gradient, with gradients enabled), else None (then :func:`dense_row_gradient`)."""
    if weight.requires_grad and weight.is_leaf and torch.is_grad_enabled():
        return RowGradientSink(weight)
    return None


def dense_row_gradient(
    shape: torch.Size, dtype: torch.dtype, row_ids: torch.Tensor, rows: torch.Tensor
) -> torch.Tensor:
    """The ordinary ``shape`` gradient of a weight computed from a parameter (a cast, a view), which has no sink:
    zero except ``rows`` at ``row_ids``. ``row_ids``: int64 ``[R]``; ``rows``: ``[R, H]`` of any float dtype (cast
    to ``dtype``); returns ``shape`` (``[V, H]``) in ``dtype`` on the device of ``rows``."""
    grad = torch.zeros(shape, dtype=dtype, device=rows.device)
    return grad.index_add_(0, row_ids, rows.to(dtype))
