"""``python -m experiments sweep``: does DEL help, and at which ``del_alpha``? The demo's set-up (SmolLM2-135M-
Instruct, Axolotl LoRA, the generated arithmetic problems, del-eval on the held-out ones), trained once per setting
and seed, then mean and 95 % intervals over seeds and paired comparisons against ``del_alpha: 0``.

Settings are ``criterion:alpha`` (``del:0`` is plain cross-entropy, the demo's MLE). The problems are drawn once,
from ``--data-seed``; a seed sets the LoRA initialisation and the order of the training rows, the same for every
setting, so two settings on one seed differ in the loss only. Every run is trained and evaluated in a child
process of its own, one at a time.

Resumable: each run keeps ``RUN/run.json`` (its settings and state). A finished run is never redone; a run whose
training finished is only evaluated; a run stopped half-way is started again. Re-running with different settings
into the same ``--out`` stops with the difference named (use another ``--out``). ``--status`` lists the runs,
``--report-only`` rewrites the tables and plots from the finished ones.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from .jobs import Job, hms, run_jobs
from .runs import SweepMismatch, parse_setting, run_state, write_once, write_record
from .sweep_plan import DEFAULT_SEEDS, DEFAULT_SETTINGS, REFERENCE, run_dir, run_name, specs

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    from .options import add_run_options

    parser = argparse.ArgumentParser(
        prog="python -m experiments sweep",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", default="runs/efficacy", help="working folder (default: runs/efficacy, git-ignored)")
    parser.add_argument("--publish", help="also copy results.md, summary.json, runs.csv and the plot into this folder")
    parser.add_argument(
        "--settings",
        nargs="+",
        type=parse_setting,
        default=None,
        metavar="CRITERION:ALPHA",
        help=f"default: {' '.join(DEFAULT_SETTINGS)}; {REFERENCE} (cross-entropy only) is always "
        "added, as the reference",
    )
    parser.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        default=list(DEFAULT_SEEDS),
        help="training seeds: LoRA init and data order (default: 42 43 44; 42 is the demo's)",
    )
    parser.add_argument(
        "--data-seed", type=int, default=42, help="seed of the generated problems (default: the demo's)"
    )
    add_run_options(parser)
    parser.add_argument("--no-base", action="store_true", help="skip del-eval of the base model")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of each run (default 2)")
    parser.add_argument("--status", action="store_true", help="list the runs and their state, run nothing")
    parser.add_argument("--report-only", action="store_true", help="rewrite the tables and plots from finished runs")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # a run folder: train and evaluate it, in this process
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.worker:
        from .sweep_worker import work

        return work(Path(args.worker))
    if args.steps < 1 or args.eval_size < 1 or args.micro_batch_size < 1 or not args.seeds:
        raise SystemExit("error: --steps, --eval-size and --micro-batch-size must be >= 1, and one seed is needed")
    if len(set(args.seeds)) != len(args.seeds):
        raise SystemExit("error: --seeds repeats a seed")
    out = Path(args.out)
    try:
        settings, planned = _plan(args, out)
        states = [run_state(run_dir(out, s, seed), spec) for s, seed, spec in planned]
    except SweepMismatch as err:
        raise SystemExit(f"error: {err}") from None
    if args.status:
        for (setting, seed, _), state in zip(planned, states):
            print(f"{state:8s} {run_name(setting, seed)}")
        return 0
    pending = [] if args.report_only else [(p, state) for p, state in zip(planned, states) if state != "done"]
    print(
        f"{len(planned)} runs, {len(planned) - len(pending) if not args.report_only else states.count('done')} "
        f"already done, {len(pending)} to run; working folder {out}",
        flush=True,
    )
    from .sweep_report import write_results

    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    started = time.perf_counter()
    failed = run_jobs(
        _jobs(out, pending), env, after_each=lambda: write_results(out, args, argv, settings, planned, None)
    )
    wall = None if args.report_only else time.perf_counter() - started
    files = write_results(out, args, argv, settings, planned, wall)
    if files:
        print("\n" + (out / "results.md").read_text(encoding="utf-8"))
        print("Results:\n" + "\n".join(f"  {p}" for p in files))
    if wall is not None:
        print(f"Wall time {hms(wall)}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def _plan(args, out: Path):
    """The problems written under ``out`` (once: a second sweep there must draw the same ones), then the settings
    and every planned run."""
    from .problems import make_splits, write_chat_jsonl, write_eval_jsonl

    train, held_out = make_splits(args.steps * args.micro_batch_size, args.eval_size, seed=args.data_seed)
    train_file = write_once(out / "data" / "train.jsonl", lambda path: write_chat_jsonl(path, train))
    eval_file = write_once(out / "data" / "heldout.jsonl", lambda path: write_eval_jsonl(path, held_out))
    return specs(args, train_file, eval_file)


def _jobs(out: Path, pending: list[tuple[tuple, str]]) -> list[Job]:
    """A job per run still to do; a new run gets its record first."""
    jobs = []
    for (setting, seed, spec), state in pending:
        folder = run_dir(out, setting, seed)
        if state == "new":
            write_record(
                folder,
                {"setting": "base" if setting is None else setting.key, "seed": seed, "spec": spec, "state": "new"},
            )
        trains = setting is not None and state == "new"
        jobs.append(
            Job(
                name=run_name(setting, seed),
                run_dir=folder,
                argv=[sys.executable, "-m", "experiments", "sweep", "--worker", str(folder)],
                action="training and evaluating" if trains else "evaluating",
                trains=trains,
            )
        )
    return jobs
