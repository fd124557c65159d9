"""Shared pieces of the benchmarks: machine description, peak-memory measurement, interleaved timing, output.

Peak memory on the CPU cannot come from ``tracemalloc`` (it sees Python's allocator, not torch's ``posix_memalign``
of tensor storage). :func:`peak_live_bytes` replays the allocation and free events that
``torch.profiler.profile(profile_memory=True)`` records for every torch CPU allocation, in time order: the maximum
of the running sum is the exact peak of live tensor bytes above what was live when the step started.
:func:`validate_memory_measurement` checks it on allocations of known sizes (and against the process's RSS
high-water mark) before any number is reported. On CUDA it is ``torch.cuda.max_memory_allocated``.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
# measure the del_plugin of this checkout, not whichever one the environment has installed (an editable install
# of another checkout sharing the virtual environment, or a wheel)
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
RESULTS_DIR = REPO_ROOT / "bench" / "results"
MiB = 2**20


# ---------------------------------------------------------------------------------------------------- machine
def _lscpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown"
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(
            # the results a run rewrites as it goes are not a change to what it measures
            [
                "git",
                "-C",
                str(REPO_ROOT),
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                ".",
                ":(exclude)bench/results",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return out.stdout.strip() + ("+modified" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def _mem_total_gib() -> float | None:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        return None
    return None


def mem_available_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _relative(arg: str) -> str:
    """A path inside the repository as the reader's clone would name it; anything else unchanged."""
    for prefix in ("", "--out="):
        if arg.startswith(prefix + "/"):
            path = Path(arg[len(prefix) :])
            if path.is_relative_to(REPO_ROOT):
                return prefix + str(path.relative_to(REPO_ROOT))
    return arg


def machine_info() -> dict:
    """What a reader needs to compare numbers: CPU, cores, load, memory, versions, commit."""
    info = {
        "cpu": _lscpu_model(),
        "logical_cpus_available": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "mem_total_gib": _mem_total_gib(),
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": _version("transformers"),
        "axolotl": _version("axolotl"),
        "ntloss": _version("ntloss"),
        "del_plugin": _version("del-plugin"),
        "git_commit": _git_commit(),
        "THP_MEM_ALLOC_ENABLE": os.environ.get("THP_MEM_ALLOC_ENABLE"),
        "command": " ".join([Path(sys.executable).name] + [_relative(arg) for arg in sys.argv]),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


# ---------------------------------------------------------------------------------------------------- memory
def _profiled_allocations(fn: Callable[[], object]) -> list[tuple[int, int, str]]:
    """``(size, address, where)`` of the torch CPU allocation events while ``fn`` runs, in time order: sizes in
    bytes, negative for frees (a free names the address of its allocation; the profiler's allocation ids are not
    always set on frees); ``where`` the ops around the event, outermost first
    (``"autograd::engine::evaluate_function: MmBackward0 > MmBackward0 > aten::mm"``)."""
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=False)
    with quiet_native_stderr():  # Kineto logs "profiler_start/stop" lines from C++ on every use
        prof.start()
    try:
        fn()
    finally:
        with quiet_native_stderr():
            prof.stop()
    events = []
    stack = [(node, ()) for node in prof.profiler.kineto_results.experimental_event_tree()]
    while stack:
        node, around = stack.pop()
        if node.tag == _EventType.Allocation and node.extra_fields.device.type == "cpu":
            fields = node.extra_fields
            events.append((node.start_time_ns, fields.id, fields.ptr, fields.alloc_size, " > ".join(around)))
        stack.extend((child, around + (node.name,)) for child in node.children)
    events.sort(key=lambda e: (e[0], e[1] if e[1] is not None else -1))
    return [(size, ptr, where) for _, _, ptr, size, where in events]


@contextlib.contextmanager
def quiet_native_stderr():
    """Silence file descriptor 2 (C++ logging that Python cannot filter) for the duration."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_live_bytes(fn: Callable[[], object], device: torch.device) -> int:
    """Peak of live tensor bytes during ``fn()``, above those live when it started.

    Tensors that existed before and are freed inside ``fn`` are not subtracted (their frees are not recorded), so
    the peak can only be overestimated by them, never underestimated.
    """
    return peak_and_allocations(fn, device)[0]


def peak_and_allocations(fn: Callable[[], object], device: torch.device) -> tuple[int, list[int]]:
    """(:func:`peak_live_bytes` of ``fn()``, the sizes of the allocations it made, in order). On CUDA the sizes are
    not recorded (an empty list)."""
    profile = memory_profile(fn, device)
    return profile.peak, profile.sizes


@dataclass
class MemoryProfile:
    """What :func:`memory_profile` saw: the peak of live bytes (above those live at the start), the size of every
    allocation in order, and the allocations live at the (first) peak as ``(bytes, where)``, largest first (CPU
    only; on CUDA only the peak)."""

    peak: int
    sizes: list[int]
    live_at_peak: list[tuple[int, str]]


def memory_profile(fn: Callable[[], object], device: torch.device) -> MemoryProfile:
    """:func:`peak_live_bytes` with the allocations behind it (:class:`MemoryProfile`)."""
    if device.type == "cuda":
        gc.collect()
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize(device)
        return MemoryProfile(torch.cuda.max_memory_allocated(device) - base, [], [])
    gc.collect()
    events = _profiled_allocations(fn)
    live = peak = 0
    peak_at = -1
    sizes = []
    for i, (size, _, _) in enumerate(events):
        live += size
        if live > peak:
            peak, peak_at = live, i
        if size > 0:
            sizes.append(size)
    alive: dict[int, tuple[int, str]] = {}  # address -> allocation, in time order (an address is reused after free)
    for size, ptr, where in events[: peak_at + 1]:
        if size > 0:
            alive[ptr] = (size, where)
        else:
            alive.pop(ptr, None)  # absent: a tensor from before fn, never counted
    return MemoryProfile(peak, sizes, sorted(alive.values(), key=lambda a: -a[0]))


def live_difference(
    live: list[tuple[int, str]], baseline: list[tuple[int, str]]
) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(allocations live at ``live``'s peak and not at ``baseline``'s, the reverse), matched by size and where they
    were made: what a method adds to its baseline's peak, when both peak at the same point of the step (the
    second list then is empty)."""
    from collections import Counter

    a, b = Counter(live), Counter(baseline)
    added, removed = a - b, b - a
    order = lambda c: sorted(c.elements(), key=lambda x: (-x[0], x[1]))  # noqa: E731
    return order(added), order(removed)


def summarize_live(live: list[tuple[int, str]], top: int = 12) -> list[dict]:
    """The ``top`` largest of :attr:`MemoryProfile.live_at_peak`, then the rest summed as one entry."""
    out = [{"bytes": size, "where": where} for size, where in live[:top]]
    rest = live[top:]
    if rest:
        out.append({"bytes": sum(s for s, _ in rest), "where": f"{len(rest)} smaller allocations"})
    return out


def _rss_high_water_bytes() -> tuple[int, int]:
    rss = hwm = 0
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) * 1024
    return rss, hwm


def rss_peak_bytes(fn: Callable[[], object]) -> int | None:
    """Peak resident set growth during ``fn()`` (Linux: reset VmHWM through /proc/self/clear_refs), or None."""
    try:
        gc.collect()
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        base, _ = _rss_high_water_bytes()
        fn()
        _, hwm = _rss_high_water_bytes()
        return hwm - base
    except OSError:
        return None


def validate_memory_measurement(device: torch.device) -> dict:
    """Check :func:`peak_live_bytes` on allocations whose peak is known, and report the check.

    Known case: allocate 64 MiB and 32 MiB, free the 64 MiB, allocate 16 MiB: the peak is exactly 96 MiB. A tensor
    allocated before the measurement and freed inside it must not lower the peak. On the CPU the resident-set
    high-water mark of a touched 256 MiB tensor must agree with the profiler within 10%.
    """
    before = torch.empty(8 * MiB // 4, device=device)

    def known_pattern():
        nonlocal before
        a = torch.empty(64 * MiB // 4, device=device)
        b = torch.empty(32 * MiB // 4, device=device)
        del a
        before = None  # freed inside: must not count as -8 MiB
        c = torch.empty(16 * MiB // 4, device=device)
        del b, c

    measured = peak_live_bytes(known_pattern, device)
    expected = 96 * MiB
    report = {"known_pattern_expected_bytes": expected, "known_pattern_measured_bytes": measured}
    ok = measured == expected
    if device.type == "cpu":
        touched = 256 * MiB

        def touch():
            x = torch.ones(touched // 4)
            del x

        profiled = peak_live_bytes(touch, device)
        rss = rss_peak_bytes(touch)
        report.update({"touch_profiled_bytes": profiled, "touch_rss_peak_bytes": rss})
        ok = ok and profiled == touched and (rss is None or abs(rss - touched) <= 0.1 * touched)
    report["ok"] = ok
    if not ok:
        raise RuntimeError(f"the peak-memory measurement failed its validation: {report}")
    return report


# ---------------------------------------------------------------------------------------------------- timing
@dataclass
class Timings:
    """Per-method seconds of each round: wall, process CPU (user + system, all threads) and user CPU only.

    CPU time does not count the time other processes hold the cores; user time also leaves out the kernel's
    work (page faults, clearing and compacting fresh pages), which on a shared machine varies with the others'
    memory use far more than with ours.
    """

    wall: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)
    user: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, wall: float, cpu: float, user: float) -> None:
        self.wall.setdefault(name, []).append(wall)
        self.cpu.setdefault(name, []).append(cpu)
        self.user.setdefault(name, []).append(user)

    def median(self, name: str, kind: str = "wall") -> float:
        return statistics.median(getattr(self, kind)[name])

    def ratio(self, name: str, baseline: str, kind: str = "wall") -> float:
        """Median over rounds of the per-round ratio: both were measured in the same round, seconds apart."""
        series = getattr(self, kind)
        return statistics.median(a / b for a, b in zip(series[name], series[baseline]))


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_once(fn: Callable[[], object], device: torch.device) -> tuple[float, float, float]:
    """(wall, user + system CPU, user CPU) seconds of one call."""
    sync(device)
    before = resource.getrusage(resource.RUSAGE_SELF)
    wall0 = time.perf_counter()
    fn()
    sync(device)
    wall = time.perf_counter() - wall0
    after = resource.getrusage(resource.RUSAGE_SELF)
    user = after.ru_utime - before.ru_utime
    return wall, user + after.ru_stime - before.ru_stime, user


def interleaved_rounds(
    methods: dict[str, Callable[[], object]],
    rounds: int,
    device: torch.device,
    *,
    seed: int = 0,
    after_each: Callable[[], object] | None = None,
    progress: Callable[[str], object] | None = None,
    groups: Sequence[Sequence[str]] | None = None,
) -> Timings:
    """Run every method once per round, in a fresh random order each round, so that slow phases of a shared
    machine hit all methods alike; ``after_each`` (untimed) cleans up between runs.

    ``groups`` (each method in exactly one): the methods of a group run back to back, the groups and the order
    inside each shuffled every round, so that a method and its baseline in one group are timed seconds apart.
    """
    rng = random.Random(seed)
    timings = Timings()
    names = list(methods)
    if groups is None:
        groups = [names]
    else:
        groups = [list(g) for g in groups]
        if sorted(n for g in groups for n in g) != sorted(names):
            raise ValueError("groups must hold every method exactly once")
    for r in range(rounds):
        if len(groups) == 1:
            order = names[:]
            rng.shuffle(order)
        else:
            shuffled = [g[:] for g in groups]
            rng.shuffle(shuffled)
            order = []
            for group in shuffled:
                rng.shuffle(group)
                order += group
        for name in order:
            timings.add(name, *time_once(methods[name], device))
            if after_each is not None:
                after_each()
        if progress is not None:
            progress(f"round {r + 1}/{rounds}")
    return timings


# ---------------------------------------------------------------------------------------------------- output
def write_json(path: Path, payload: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    return path


def publish(out: Path, results: dict, tables: Callable[[dict], str]) -> dict:
    """Write ``out`` (JSON) and its markdown tables beside it, and print them."""
    write_json(out, results)
    text = tables(results)
    out.with_suffix(".md").write_text(text, encoding="utf-8")
    print(f"\n{machine_line(results['machine'])}\n\n{text}\ntargets: {results['targets']}\nwritten: {out}")
    return results


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(lines)


def machine_line(info: dict) -> str:
    gpu = f", GPU {info['gpu']}" if info.get("gpu") else ""
    return (
        f"{info['cpu']}, {info['logical_cpus_available']} cores ({info['torch_threads']} torch threads), "
        f"{info['mem_total_gib']} GiB{gpu}; load average {info['load_average_1_5_15']} at start; "
        f"python {info['python']}, torch {info['torch']}, transformers {info['transformers']}, "
        f"axolotl {info['axolotl']}, ntloss {info['ntloss']}, del-plugin {info['del_plugin']}"
    )
