"""bench/loss_step.py's measurements of one case: the methods' memory profiles and rows, the check that every
method computes the same term, and the digit term alone (its time, memory, kernel launches and host
synchronisations)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

import benchlib
import op_census
from loss_step_cases import Case, method_name


def profile_methods(case: Case, fns: dict, label: str, device, head_bytes: int, bar) -> dict[str, dict]:
    """The first run of each method, profiled for its memory (also the first warm-up: caches, heap growth): per
    kind ("memory", "head_sized", "values", "live"), the value of each method."""
    profiles = {"memory": {}, "head_sized": {}, "values": {}, "live": {}}
    for name, fn in fns.items():
        bar.set_postfix_str(f"{label} memory {name}")
        box = {}
        profile = benchlib.memory_profile(lambda box=box, fn=fn: box.setdefault("v", fn()), device)
        profiles["memory"][name] = profile.peak
        profiles["live"][name] = profile.live_at_peak
        profiles["head_sized"][name] = (
            sum(1 for s in profile.sizes if s == head_bytes) if device.type == "cpu" else None
        )
        profiles["values"][name] = float(box["v"])
        case.clear_grad()
    return profiles


def method_row(name: str, timings, profiles: dict[str, dict]) -> dict:
    """One method's times and memory, each beside its CE's (same kernel, same head)."""
    memory, live = profiles["memory"], profiles["live"]
    kind, rest = name.split(" CE, ", 1)
    head, loss = rest.split(" head: ", 1)
    baseline = method_name(kind, head, "ce")
    return {
        "ce": kind,
        "head": head,
        "loss": loss,
        "baseline": baseline,
        "median_wall_s": timings.median(name, "wall"),
        "median_cpu_s": timings.median(name, "cpu"),
        "median_user_s": timings.median(name, "user"),
        "time_ratio_wall": timings.ratio(name, baseline, "wall"),
        "time_ratio_cpu": timings.ratio(name, baseline, "cpu"),
        "time_ratio_user": timings.ratio(name, baseline, "user"),
        "peak_bytes": memory[name],
        "memory_ratio": memory[name] / memory[baseline],
        "extra_peak_bytes": memory[name] - memory[baseline],
        "head_sized_allocations": profiles["head_sized"][name],
        # what is live at the peak (CPU): the largest allocations and where they were made; beside CE, the
        # ones this method adds to CE's peak (and CE's that are not live at this one's: the peak moved)
        "live_at_peak": benchlib.summarize_live(live[name]),
        **extra_live(live[name], live[baseline], name == baseline),
        "value": profiles["values"][name],
        "wall_s": timings.wall[name],
        "cpu_s": timings.cpu[name],
        "user_s": timings.user[name],
    }


def extra_live(live: list, baseline: list, is_baseline: bool) -> dict:
    if is_baseline:
        return {}
    added, removed = benchlib.live_difference(live, baseline)
    return {
        "extra_live_at_peak": benchlib.summarize_live(added, top=20),
        "baseline_live_not_at_peak": benchlib.summarize_live(removed, top=5),
    }


def check_same_terms(values: dict[str, float], label: str) -> None:
    """CE + DEL minus CE, for every kernel and head, and the logits-fed DEL terms must agree (to 1e-3; the logits
    API on bfloat16 logits differed from DEL's float32 product by 1.6e-4 at 2,048 x 128,256, H 4,096)."""
    terms = {}
    for name, value in values.items():
        kind, rest = name.split(" CE, ", 1)
        head, loss = rest.split(" head: ", 1)
        if loss in ("ce+del", "ce+del (logits API)", "ce+naive"):
            terms[name] = value - values[method_name(kind, head, "ce")]
    reference = terms[method_name("plain", "frozen", "ce+del")]
    for name, term in terms.items():
        if not math.isclose(term, reference, rel_tol=1e-3, abs_tol=1e-5):
            raise AssertionError(f"{label}: {name} adds {term}, plain CE + DEL from the hidden states {reference}")


def term_only(case: Case, label: str, bar, rounds: int, extras: bool) -> dict:
    logits_leaf = None
    if extras:
        logits_leaf = F.linear(case.hidden.detach(), case.head["frozen"]).view(*case.batch_shape, -1)
        logits_leaf.requires_grad_(True)

    def clear():
        case.clear_grad()
        if logits_leaf is not None:
            logits_leaf.grad = None

    fns = case.term_fns(logits_leaf)
    memory, values, live, allocated = term_memory(fns, case.hidden.device, label, bar, clear)
    # what a GPU would launch and wait for (op_census.op_census): on a GPU the term is small ops, not arithmetic
    census = {}
    for name, fn in fns.items():
        bar.set_postfix_str(f"{label} term only, ops {name}")
        census[name] = op_census.op_census(fn).as_dict()
        clear()
    sync_free = None
    if case.hidden.device.type == "cuda":  # any call that waits for the device raises, forward or backward
        sync_free = cuda_sync_free(fns["del"])
        clear()
    naive = values.get("naive (from logits)", values["del"])
    if not math.isclose(naive, values["del"], rel_tol=1e-4, abs_tol=1e-6):
        raise AssertionError(f"{label}: naive term {naive} != our DEL term {values['del']}")
    # ours costs milliseconds, so one stall of the machine moves its median: at least five rounds
    timings = benchlib.interleaved_rounds(
        fns,
        rounds,
        case.hidden.device,
        after_each=clear,
        progress=lambda s: bar.set_postfix_str(f"{label} term only {s}"),
    )
    out = {
        name: {
            "median_wall_s": timings.median(name, "wall"),
            "median_cpu_s": timings.median(name, "cpu"),
            "median_user_s": timings.median(name, "user"),
            "peak_bytes": memory[name],
            "allocated_bytes": allocated[name],
            "live_at_peak": benchlib.summarize_live(live[name]),
            "value": values[name],
            "launches": census[name]["launches"],
            "host_syncs": census[name]["syncs"] + census[name]["host_reads"],
            "ops": census[name],
        }
        for name in fns
    }
    out["del"]["cuda_sync_free"] = sync_free
    if logits_leaf is not None:
        out["naive_over_ours_cpu"] = timings.ratio("naive (from logits)", "del", "cpu")
        out["naive_over_ours_wall"] = timings.ratio("naive (from logits)", "del", "wall")
        out["naive_over_ours_user"] = timings.ratio("naive (from logits)", "del", "user")
    return out


def term_memory(fns: dict, device, label: str, bar, clear: Callable[[], None]) -> tuple[dict, dict, dict, dict]:
    """Each term's first run, profiled: (peak bytes, value, live at the peak, bytes allocated), per term."""
    memory, values, live, allocated = {}, {}, {}, {}
    for name, fn in fns.items():
        bar.set_postfix_str(f"{label} term only, memory {name}")
        box = {}
        profile = benchlib.memory_profile(lambda box=box, fn=fn: box.setdefault("v", fn()), device)
        memory[name], live[name], allocated[name] = profile.peak, profile.live_at_peak, sum(profile.sizes)
        values[name] = float(box["v"])
        clear()
    return memory, values, live, allocated


def cuda_sync_free(fn: Callable[[], object]) -> bool | str:
    """Run ``fn`` once under ``torch.cuda.set_sync_debug_mode("error")``: True when nothing in it (forward, and the
    backward on autograd's device thread) waited for the device, else the error that named the first wait."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn()
    except RuntimeError as error:
        if "synchroniz" not in str(error):
            raise
        return str(error).splitlines()[0]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return True
