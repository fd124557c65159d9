"""The benchmarks' op census: what a step would launch and wait for on a GPU, counted on any device from the
profiler's aten ops (kernel launches, ops that synchronise with the host, host reads of device data); checked on
known cases in tests/bench/test_bench_smoke.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from benchlib import quiet_native_stderr

# Aten ops that launch no kernel: views, metadata, bare allocations, and conversions that found nothing to convert
# (a copying ``aten::to`` has an ``aten::_to_copy`` below it, which counts).
NO_KERNEL_OPS = frozenset(
    "aten::" + name
    for name in (
        "view _unsafe_view _reshape_alias as_strided as_strided_ t transpose permute expand expand_as slice select "
        "unsqueeze squeeze detach detach_ alias lift_fresh narrow split split_with_sizes unbind chunk unflatten "
        "flatten reshape view_as numpy_T diagonal resolve_conj resolve_neg empty empty_like empty_strided resize_ "
        "new_empty new_empty_strided set_ result_type promote_types real is_same_size to contiguous type_as"
    ).split()
)
# Aten ops that make the host wait for the device on CUDA: a value read on the host, or an output whose size
# depends on the data. One-hot's range checks read the data on the host on the CPU only (CUDA asserts on the device).
SYNC_OPS = frozenset(
    "aten::" + name
    for name in (
        "_local_scalar_dense nonzero masked_select unique _unique _unique2 unique_dim unique_consecutive "
        "bincount equal allclose repeat_interleave histc"
    ).split()
)
CPU_ONLY_CHECKS = frozenset({"aten::one_hot"})
# Python-level reads of tensor data on the host (the profiler records no aten op for them) and tensors made from
# host data (on CUDA a blocking copy to the device); .item() and bool() are seen as aten::_local_scalar_dense
HOST_READS = frozenset({"tolist", "numpy", "cpu", "tensor", "as_tensor"})


@dataclass
class OpCensus:
    """What :func:`op_census` counted: ``launches`` (on a GPU the kernels it ran; elsewhere the profiler's leaf
    aten ops that launch a kernel, plus the kernels of compiled graphs, a proxy for them), ``by_op`` (the aten ops
    and compiled kernels, per name); ``syncs`` (ops that make the
    host wait for a GPU, named with the ops around them, outermost first); ``cpu_only_checks`` (host reads that
    torch makes on the CPU only); ``host_reads`` (Python-level reads of tensor data, and tensors made from host
    data)."""

    launches: int
    by_op: dict[str, int]
    syncs: dict[str, int]
    cpu_only_checks: dict[str, int]
    host_reads: dict[str, int]

    @property
    def sync_count(self) -> int:
        return sum(self.syncs.values()) + sum(self.host_reads.values())

    def minus(self, other: OpCensus) -> OpCensus:
        """What this census has beyond ``other`` (op by op; an op ``other`` has more of counts negative)."""

        def sub(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
            out = {k: a.get(k, 0) - b.get(k, 0) for k in sorted(set(a) | set(b))}
            return {k: v for k, v in out.items() if v}

        return OpCensus(
            self.launches - other.launches,
            sub(self.by_op, other.by_op),
            sub(self.syncs, other.syncs),
            sub(self.cpu_only_checks, other.cpu_only_checks),
            sub(self.host_reads, other.host_reads),
        )

    def as_dict(self) -> dict:
        return {
            "launches": self.launches,
            "syncs": sum(self.syncs.values()),
            "host_reads": sum(self.host_reads.values()),
            "cpu_only_checks": sum(self.cpu_only_checks.values()),
            "sync_ops": self.syncs,
            "host_read_calls": self.host_reads,
            "cpu_only_check_ops": self.cpu_only_checks,
            "by_op": dict(sorted(self.by_op.items(), key=lambda kv: (-kv[1], kv[0]))),
        }


def _is_compiled_kernel(name: str) -> bool:
    # Inductor's kernels as its profiling records name them (``graph_0_cpp_fused_...`` on the CPU, Triton's on CUDA)
    return "cpp_fused" in name or name.startswith("triton_")


def op_census(fn: Callable[[], object], warmup: bool = True) -> OpCensus:
    """Count the kernel launches and the host synchronisations of ``fn()`` (forward and backward, whatever it runs),
    on any device, from the torch profiler's CPU events and a ``TorchFunctionMode`` that sees Python-level reads.

    A launch is a profiler event of an aten op with no aten child that launches one (so ``aten::to`` ->
    ``aten::_to_copy`` -> ``aten::copy_`` is one launch, ``aten::linear`` one ``aten::mm``), views and allocations
    excepted, or a kernel of a compiled graph (Inductor's kernel profiling is switched on for the call). With
    ``warmup``, ``fn()`` runs once before, under the same ``TorchFunctionMode`` (not counted)."""
    import torch._inductor.config as inductor_config

    host_reads: dict[str, int] = {}
    reads = host_reads_mode(host_reads)
    saved = inductor_config.cpp.enable_kernel_profile
    inductor_config.cpp.enable_kernel_profile = True
    try:
        if warmup:
            # a compiled function guards on the torch-function modes around it: compile it under this one first,
            # so that the counted call runs what a training step runs, not a recompilation
            with reads:
                fn()
            host_reads.clear()
        prof = profiled(fn, reads)
    finally:
        inductor_config.cpp.enable_kernel_profile = saved
    by_op, syncs, cpu_only = census_of_events(prof.events())
    launches = sum(by_op.values())
    if torch.cuda.is_available():  # the kernels the GPU ran, counted where they ran (memory copies and sets included)
        from torch.autograd import DeviceType

        kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
        if kernels:
            launches = len(kernels)
    return OpCensus(launches, by_op, syncs, cpu_only, host_reads)


def host_reads_mode(host_reads: dict[str, int]):
    """A ``TorchFunctionMode`` adding to ``host_reads`` each Python-level read of tensor data (HOST_READS) and each
    tensor made from host data."""
    from torch.overrides import TorchFunctionMode

    class HostReads(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", "")
            if name in HOST_READS and not (name in ("tensor", "as_tensor") and isinstance(args[0], torch.Tensor)):
                key = f"{name}()"
                host_reads[key] = host_reads.get(key, 0) + 1
            return func(*args, **(kwargs or {}))

    return HostReads()


def profiled(fn: Callable[[], object], mode):
    """``fn()`` once under ``mode`` and the torch profiler (CPU, and CUDA where there is one); the profiler."""
    from torch.profiler import ProfilerActivity, profile

    cuda = torch.cuda.is_available()
    prof = profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else []))
    with quiet_native_stderr():
        prof.start()
    try:
        with mode:
            fn()
    finally:
        with quiet_native_stderr():
            prof.stop()
    return prof


def census_of_events(events) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """(launches per op, host synchronisations named with the ops around them, CPU-only checks) of the
    profiler's events: see :func:`op_census`."""
    by_op: dict[str, int] = {}
    syncs: dict[str, int] = {}
    cpu_only: dict[str, int] = {}

    def launches_below(event) -> bool:
        return any(
            (c.name.startswith("aten::") and c.name not in NO_KERNEL_OPS) or launches_below(c)
            for c in event.cpu_children
        )

    def visit(event, around: tuple[str, ...]) -> None:
        name = event.name
        if name in SYNC_OPS:
            path = " > ".join(around[-2:] + (name,))
            target = cpu_only if any(a in CPU_ONLY_CHECKS for a in around) else syncs
            target[path] = target.get(path, 0) + 1
        counted = _is_compiled_kernel(name) or (
            name.startswith("aten::") and name not in NO_KERNEL_OPS and not launches_below(event)
        )
        if counted:
            by_op[name] = by_op.get(name, 0) + 1
        keep = around + ((name,) if name.startswith("aten::") else ())
        for child in event.cpu_children:
            visit(child, keep)

    for event in events:
        if event.cpu_parent is None:
            visit(event, ())
    return by_op, syncs, cpu_only
