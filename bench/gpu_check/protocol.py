"""The parent's side of a child process: the command that starts it (``python -m bench.gpu_check --child ...``
from the clone's root, so that Axolotl imports this clone's ``del_plugin`` by name), its time limit, and the one
result line it prints; and the child's side, printing that line."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from .pairs import PAIR_TITLES

REPO_ROOT = Path(__file__).resolve().parents[2]
RESULT_TAG = "GPU_CHECK_RESULT "
FORWARDED = ("steps", "warmup", "seq_len", "micro_batch", "grad_accum", "del_alpha")  # a run's arguments


def emit_result(payload: dict) -> None:
    """The child's result, one line on stdout for the parent (whatever else the child prints around it)."""
    print(RESULT_TAG + json.dumps(payload), flush=True)


def child_command(*arguments: str) -> list[str]:
    return [sys.executable, "-m", "bench.gpu_check", *arguments]


def child_env(cpu_smoke: bool) -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "AXOLOTL_DO_NOT_TRACK": "1", "TOKENIZERS_PARALLELISM": "false"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    if cpu_smoke:
        env["CUDA_VISIBLE_DEVICES"] = ""  # Axolotl would otherwise put the model on a GPU if there is one
    return env


def run_child(cmd: list[str], env: dict[str, str], timeout: int, what: str, option: str) -> dict:
    """Runs one child; its result line as a dict with ``wall_s`` added, or ``{"error": ..., "wall_s": ...}`` when it
    failed, printed no result or ran past ``timeout`` (``option``: the argument that sets it)."""
    started = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO_ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"{what} took longer than {timeout} s ({option})", "wall_s": time.perf_counter() - started}
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_TAG)]
    if done.returncode != 0 or not lines:
        tail = "\n".join((done.stdout + "\n" + done.stderr).strip().splitlines()[-40:])
        return {"error": f"{what} failed (exit {done.returncode}):\n{tail}", "wall_s": time.perf_counter() - started}
    result = json.loads(lines[-1][len(RESULT_TAG) :])
    result["wall_s"] = time.perf_counter() - started
    return result


def launch(args: argparse.Namespace, workdir: Path, pair: str, variant: str) -> dict:
    """One training run (``variant``: DEL "off" or "on") of ``pair``, in its own process."""
    cmd = child_command("--child", variant, "--pair", pair, "--workdir", str(workdir))
    for key in FORWARDED:
        cmd += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    if args.cpu_smoke:
        cmd.append("--cpu-smoke")
    what = f"the {PAIR_TITLES[pair]}, DEL-{variant} run"
    return run_child(cmd, child_env(args.cpu_smoke), args.timeout, what, "--timeout")


def run_loss_step(args: argparse.Namespace, workdir: Path) -> dict:
    """The loss-step child, in its own process (its own CUDA memory), stopped after --loss-step-timeout."""
    cmd = child_command("--child", "loss-step", "--workdir", str(workdir))
    return run_child(cmd, child_env(False), args.loss_step_timeout, "the loss step", "--loss-step-timeout")
