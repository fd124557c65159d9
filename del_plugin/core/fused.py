"""DEL's small ops as one compiled program on a GPU.

Beside the cross-entropy, DEL's work per position is ten logits: the criterion, its place weights, the slot
marginals of number tokens and the logged statistics are a few hundred element-wise ops on ``[N, 10]`` tensors. On
a GPU each op is a kernel launch of a few microseconds that does almost nothing, so run one by one they cost
milliseconds; run as one program (``torch.compile(fullgraph=True, dynamic=True)``: a few fused kernels forward and
backward, no graph break, any batch shape) they cost tens of microseconds. :class:`fused` marks such a function.

When it compiles, by the environment variable ``DEL_PLUGIN_COMPILE``:

* ``auto`` (default): when the function's tensors are on a CUDA device. On the CPU the ops are cheap and
  compiling costs seconds per process, so they run as written (which the exactness tests check);
* ``1``: always (the CPU tests of the compiled path);
* ``0``: never.

Inside a function that torch.compile is already tracing (a compiled model's forward) the function is traced with
it. A function that fails to compile is logged once, with the reason, and from then on runs as written.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["COMPILE_ENV", "compile_mode", "fused"]

LOG = logging.getLogger(__name__)
COMPILE_ENV = "DEL_PLUGIN_COMPILE"
_MODES = ("auto", "1", "0")


def compile_mode() -> str:
    """``DEL_PLUGIN_COMPILE``: ``auto`` (default), ``1`` or ``0``."""
    mode = os.environ.get(COMPILE_ENV, "auto").strip().lower() or "auto"
    if mode not in _MODES:
        raise ValueError(f"{COMPILE_ENV}={mode!r}: use auto (compile on CUDA, the default), 1 (always) or 0 (never)")
    return mode


def _on_cuda(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.is_cuda
    if isinstance(value, (tuple, list)):  # NamedTuples (DigitTargets) and lists of tensors
        return any(_on_cuda(v) for v in value)
    return False


# Sizes are symbols, but torch.compile still gives a size of 0 or 1 (a number group with no or one target in a
# batch) and two sizes that happen to be equal programs of their own: a few per run, each compiled once.
RECOMPILE_LIMIT = 32


def _compile(fn: Callable) -> Callable:
    try:
        return torch.compile(fn, fullgraph=True, dynamic=True, recompile_limit=RECOMPILE_LIMIT)
    except TypeError:  # a torch without the per-function limit
        return torch.compile(fn, fullgraph=True, dynamic=True)


class fused:  # noqa: N801 (a decorator, named as one)
    """``fn`` compiled with ``torch.compile(fullgraph=True, dynamic=True)`` where :func:`compile_mode` says so
    (module docstring), else ``fn`` itself. ``fn`` takes tensors (or NamedTuples and lists of them) and values
    that stay the same from call to call (a criterion function, a weighting), on which the compiled program is
    specialised."""

    def __init__(self, fn: Callable):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.compiled: Callable | None = None
        self.failure: str | None = None

    def wanted(self, args: tuple, kwargs: dict) -> bool:
        if self.failure is not None or torch.compiler.is_compiling():
            return False
        mode = compile_mode()
        if mode != "auto":
            return mode == "1"
        return _on_cuda(args) or _on_cuda(tuple(kwargs.values()))

    def __call__(self, *args, **kwargs):
        if not self.wanted(args, kwargs):
            return self.fn(*args, **kwargs)
        if self.compiled is None:
            self.compiled = _compile(self.fn)
        try:
            # floats (a place weighting, a criterion's parameters) are constants of the program: made inputs, as
            # torch.compile makes them by default, they would be turned into tensors on every call
            with torch._dynamo.config.patch(specialize_float=True):
                return self.compiled(*args, **kwargs)
        except torch._dynamo.exc.TorchDynamoException as error:
            # a compiler failure, or an error of the function itself raised while tracing it: either way the
            # function runs as written from now on (and raises that error itself, if it is its own)
            self.failure = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            LOG.warning(
                "DEL: torch.compile of %s failed (%s); it runs op by op from now on (%s=0 skips compiling)",
                self.fn.__qualname__,
                self.failure,
                COMPILE_ENV,
            )
            return self.fn(*args, **kwargs)
