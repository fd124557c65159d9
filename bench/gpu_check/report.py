"""What the check prints (per pair DEL off, on and their ratio; the DEL metrics; the synchronisations; the loss
step) and what fails it."""

from __future__ import annotations

import argparse
import math

from .loss_step_child import LOSS_STEP_HIDDEN
from .pairs import FORWARD_MARKS, PAIR_TITLES

DEL_KEYS = ("ce_loss", "del_loss", "del_l_num", "digit_entropy", "digit_accuracy", "digit_targets")


def fmt(value: float | None, unit: str, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f} {unit}".strip()


def ratio(on: float | None, off: float | None) -> str:
    return "n/a" if not on or not off else f"{on / off:.3f}"


# ---------------------------------------------------------------------------------------------------- printed
def print_table(results: dict[str, dict], skipped: dict[str, str]) -> None:
    """Per pair: DEL off, DEL on, their ratio; then the DEL metrics of each pair's last logged step."""
    header = f"{'pair':20}{'DEL':8}{'step time (median)':>20}{'peak allocated':>18}{'peak reserved':>16}"
    print(header)
    print("-" * len(header))
    for pair, runs in results.items():
        if "error" in runs:
            print(f"{PAIR_TITLES[pair]:20}failed: {runs['error'].splitlines()[0]}")
        else:
            print_pair_rows(PAIR_TITLES[pair], runs["off"], runs["on"])
    for pair, reason in skipped.items():
        print(f"{PAIR_TITLES[pair]:20}skipped: {reason}")
    print_details({pair: runs for pair, runs in results.items() if "error" not in runs})


def print_pair_rows(title: str, off: dict, on: dict) -> None:
    for name, r in (("off", off), ("on", on)):
        print(
            f"{title:20}{name:8}{fmt(r['step_time_s'], 's'):>20}"
            f"{fmt(r['peak_allocated_gib'], 'GiB', 2):>18}{fmt(r['peak_reserved_gib'], 'GiB', 2):>16}"
        )
    print(
        f"{title:20}{'on/off':8}{ratio(on['step_time_s'], off['step_time_s']):>20}"
        f"{ratio(on['peak_allocated_gib'], off['peak_allocated_gib']):>18}"
        f"{ratio(on['peak_reserved_gib'], off['peak_reserved_gib']):>16}"
    )


def print_details(done: dict[str, dict]) -> None:
    """Of the pairs that ran: the forward each run used, DEL's metrics of the last step, the synchronisations."""
    for pair, runs in done.items():
        print(f"forward ({pair}): {runs['off']['forward']} (DEL off), {runs['on']['forward']} (DEL on)")
    for pair, runs in done.items():
        log = runs["on"]["last_log"]
        print(f"DEL on, last step ({pair}): " + ", ".join(f"{k}={log[k]:.4g}" for k in DEL_KEYS if k in log))
    for pair, runs in done.items():
        off, on = runs["off"].get("syncs_per_step"), runs["on"].get("syncs_per_step")
        if off is not None and on is not None:
            print(
                f"host synchronisations per step ({pair}): training_step {off:g} (DEL off), {on:g} (DEL on), of "
                f"which made by DEL's code {runs['on'].get('del_syncs_per_step') or 0:g}"
            )


def print_loss_step(result: dict) -> None:
    if "error" in result:
        skipped = result["error"].startswith("skipped")
        print(f"loss step: {'' if skipped else 'failed: '}{result['error'].splitlines()[0]}")
        return
    print(
        f"\nloss step at 7-8B heads (bench/loss_step.py, H {LOSS_STEP_HIDDEN:,}, bfloat16), {result['wall_s']:.0f} s:"
    )
    print(result["tables"])
    for row in result["summary"]:
        print(
            f"DEL's term alone at {row['shape']} ({row['tokenizer']}): {row['term_ms']:.3f} ms, "
            f"{row['term_over_fastest_ce']:.1%} of the fastest CE step, {row['term_kernels']} kernels, "
            f"no host synchronisation: {row['term_sync_free']}"
        )


# ---------------------------------------------------------------------------------------------------- failures
def problems(results: dict[str, dict], loss_step: dict | None, args: argparse.Namespace) -> list[str]:
    """Everything that fails the check: failed runs, wrong results, synchronisations, the loss step's."""
    found = [
        f"{PAIR_TITLES[pair]}: {runs['error'].splitlines()[0]}" for pair, runs in results.items() if "error" in runs
    ]
    ran = {pair: runs for pair, runs in results.items() if "error" not in runs}
    found += [p for runs in ran.values() for r in (runs["off"], runs["on"]) for p in check_result(r, args)]
    found += [p for pair, runs in ran.items() for p in check_pair_syncs(pair, runs)]
    if loss_step is not None and not loss_step.get("error", "").startswith("skipped"):
        found += loss_step_problems(loss_step)
    return found


def check_result(result: dict, args: argparse.Namespace) -> list[str]:
    """What is wrong with a run's result, if anything."""
    name = f"{result.get('pair', 'plain')}, DEL {'on' if result['del'] else 'off'}"
    found = []
    expected_steps = args.warmup + args.steps
    if result["steps"] != expected_steps:
        found.append(f"{name}: {result['steps']} steps, not {expected_steps}")
    found += check_forward(name, result.get("pair", "plain"), result.get("forward", "?"))
    found += check_del_metrics(name, result)
    if result.get("del_syncs_per_step"):
        sites = ", ".join(f"{site} x{n}" for site, n in result.get("del_sync_sites", {}).items())
        found.append(
            f"{name}: DEL's code made the host wait for the GPU {result['del_syncs_per_step']:g} times per step"
            + (f" (at {sites} in all timed steps)" if sites else "")
        )
    return found


def check_forward(name: str, pair: str, forward: str) -> list[str]:
    """The causal LM's forward is the pair's kernel's (a fused kernel's plugin replaces it)."""
    if forward.startswith("?."):  # a forward without __module__ (a partial, say) cannot be told apart
        return []
    if pair in FORWARD_MARKS and FORWARD_MARKS[pair] not in forward:
        return [f"{name}: the model's forward is {forward}, not the {PAIR_TITLES[pair]} kernel's"]
    if pair == "plain" and any(mark in forward for mark in FORWARD_MARKS.values()):
        return [f"{name}: the model's forward is a fused kernel's ({forward})"]
    return []


def check_del_metrics(name: str, result: dict) -> list[str]:
    """DEL on: Axolotl's trainer is DEL's, and the last step logged finite DEL metrics over some digit targets;
    DEL off: no DEL metric."""
    log = result["last_log"]
    if not result["del"]:
        return (
            [f"{name}: DEL metrics were logged although the plugin was not listed"] if set(log) & set(DEL_KEYS) else []
        )
    found = []
    if result["trainer"] != "DELTrainer":
        found.append(f"{name}: Axolotl used {result['trainer']}, not DELTrainer")
    missing = [k for k in DEL_KEYS if k not in log or not math.isfinite(log[k])]
    if missing:
        found.append(f"{name}: no finite {', '.join(missing)} in the last log {log}")
    elif log["digit_targets"] <= 0:
        found.append(f"{name}: no digit targets in the last step")
    return found


def check_pair_syncs(pair: str, runs: dict) -> list[str]:
    """A DEL run's steps must not wait for the GPU more often than the run without DEL."""
    on, off = runs["on"].get("syncs_per_step"), runs["off"].get("syncs_per_step")
    if on is None or off is None or on <= off:
        return []
    return [f"{PAIR_TITLES[pair]}: {on:g} host synchronisations per step with DEL, {off:g} without"]


def loss_step_problems(result: dict) -> list[str]:
    if "error" in result:
        return [result["error"].splitlines()[0]]
    found = [
        f"loss step {row['shape']}: DEL's term alone waited for the GPU ({row['term_sync_free']})"
        for row in result["summary"]
        if row["term_sync_free"] is not True
    ]
    if not result["targets"].get("memory_le_1.02_every_case"):
        found.append("loss step: CE + DEL used more than 1.02x CE's peak memory at some head")
    return found
