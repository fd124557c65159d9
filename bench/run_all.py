"""Run every benchmark (``make bench``): loss step, collation, training step; results in ``bench/results/``.

``--only number_tokens`` also runs (or only runs) ``bench/number_tokens.py``, Llama-3's number tokens at
Llama-3-8B's LM head (~15 min of CPU; not in the default set).

Each benchmark runs in its own process (fresh allocator and autograd state), one after the other, so they never
compete for the cores. Writes ``bench/results/<name>.json`` and ``.md`` per benchmark and ``summary.md`` with
every table, the machine and the load before and after. Options after ``--`` are not used; pass ``--quick`` for
a smoke run (small shapes, few rounds: checks that everything works, its numbers are not the published ones).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent
ENV = {
    "HF_HUB_OFFLINE": "1",
    "AXOLOTL_DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "TRL_EXPERIMENTAL_SILENCE": "1",
    "TORCH_CPP_LOG_LEVEL": "ERROR",
}
QUICK = {
    "loss_step": ["--shapes", "2048x32000", "--rounds", "2"],
    "collation": ["--samples", "256", "--passes", "1"],
    "train_step": ["--rounds", "1", "--steps-per-call", "4", "--samples", "64"],
    "number_tokens": ["--hidden", "256", "--rounds", "1"],
}
DEFAULT = ["loss_step", "collation", "train_step"]


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--only",
        nargs="+",
        choices=DEFAULT + ["number_tokens"],
        default=DEFAULT,
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: small shapes, few rounds")
    parser.add_argument("--out-dir", type=Path, default=benchlib.RESULTS_DIR)
    args = parser.parse_args(argv)

    env = {**os.environ, **ENV}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    load_before = uptime()
    print(f"bench: {load_before}", flush=True)
    durations, failures = {}, []
    for name in args.only:
        out = args.out_dir / f"{name}.json"
        cmd = [sys.executable, str(BENCH_DIR / f"{name}.py"), "--out", str(out)]
        if args.quick:
            cmd += QUICK[name]
        print(f"\n=== {name}: {' '.join(Path(c).name if c == sys.executable else c for c in cmd)}", flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env)
        durations[name] = time.perf_counter() - t0
        if proc.returncode != 0:
            failures.append(f"{name} (exit {proc.returncode})")
    load_after = uptime()
    total = time.perf_counter() - started

    parts = [
        f"# Benchmark results\n\nBefore: `{load_before}`  \nAfter: `{load_after}`  \n"
        f"Total {total / 60:.1f} min ({', '.join(f'{k} {v:.0f} s' for k, v in durations.items())})\n"
    ]
    for name in args.only:
        out = args.out_dir / f"{name}.json"
        if not out.exists():
            continue
        results = json.loads(out.read_text())
        parts.append(
            f"## {name}\n\n{benchlib.machine_line(results['machine'])}  \n"
            f"Command: `{results['machine']['command']}`\n\n{out.with_suffix('.md').read_text()}\n"
            f"Targets: `{json.dumps(results.get('targets'))}`\n"
        )
    summary = args.out_dir / "summary.md"
    summary.write_text("\n".join(parts), encoding="utf-8")
    print(f"\nbench: {load_after}\nbench: {total / 60:.1f} min; summary in {summary}")
    if failures:
        print(f"bench: FAILED: {', '.join(failures)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
