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
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

__all__ = [
    "Job",
    "Setting",
    "SweepMismatch",
    "main",
    "parse_setting",
    "plan",
    "hms",
    "read_record",
    "record_done",
    "run_jobs",
    "run_state",
    "sha256_of",
    "write_once",
    "write_record",
    "DEFAULT_SETTINGS",
    "DEFAULT_SEEDS",
]

# DEL at six weights, then the two distance-aware baselines at the weights docs/criteria.md gives them: NTL-WAS
# 0.3 (its authors' recommendation, same normalisation as here) and DIST2 1.28 (the weight every digit criterion
# gets in the ablation configs; no DIST2-specific weight is published).
DEFAULT_SETTINGS = ("del:0", "del:0.03", "del:0.1", "del:0.3", "del:1", "del:3", "ntl_was:0.3", "dist2:1.28")
DEFAULT_SEEDS = (42, 43, 44)
REFERENCE = "del:0"
RUN_FILE = "run.json"


class SweepMismatch(RuntimeError):
    """A run folder holds a run made with other settings."""


@dataclass(frozen=True)
class Setting:
    criterion: str
    alpha: float

    @property
    def key(self) -> str:
        """``del:0.1``: the CLI spelling, the table label and (with ':' as '-') the folder name."""
        return f"{self.criterion}:{self.alpha:g}"

    @property
    def folder(self) -> str:
        return self.key.replace(":", "-a")

    def as_dict(self) -> dict:
        return {"label": self.key, "criterion": self.criterion, "alpha": self.alpha}


def parse_setting(text: str) -> Setting:
    criterion, sep, alpha = text.partition(":")
    from del_plugin.core.criteria import DIGIT_CRITERIA

    if not sep or criterion not in DIGIT_CRITERIA:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected CRITERION:ALPHA with CRITERION one of {', '.join(DIGIT_CRITERIA)} (e.g. del:0.3)"
        )
    try:
        value = float(alpha)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: {alpha!r} is not a number") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: del_alpha must be >= 0")
    return Setting(criterion, value)


def plan(settings: list[Setting], seeds: list[int]) -> list[tuple[Setting, int]]:
    """Seed-major order: every setting on the first seed, then on the next, so that a sweep stopped early already
    has complete paired comparisons."""
    return [(setting, seed) for seed in seeds for setting in settings]


def run_state(run_dir: Path, spec: dict, eval_spec: dict | None = None) -> str:
    """``done`` (trained and evaluated), ``trained`` (trained, evaluation missing, unfinished or made with another
    ``eval_spec``) or ``new`` (nothing usable: absent, or stopped during training). What a trained run leaves is the
    record's ``artefact`` (a path in ``run_dir``; a LoRA adapter's ``adapter/adapter_config.json`` by default).
    Raises :class:`SweepMismatch` when ``run_dir`` holds a run with another spec."""
    path = run_dir / RUN_FILE
    if not path.is_file():
        return "new"
    record = json.loads(path.read_text(encoding="utf-8"))
    if record.get("spec") != spec:
        old = record.get("spec") or {}
        changed = sorted(k for k in old.keys() | spec.keys() if old.get(k) != spec.get(k))
        differences = ", ".join(f"{k}: {old.get(k)!r} -> {spec.get(k)!r}" for k in changed)
        raise SweepMismatch(
            f"{run_dir} holds a run made with other settings ({differences}); give another --out, or "
            "delete that folder to redo it"
        )
    state = record.get("state")
    evaluated = (run_dir / "eval" / "report.json").is_file() and (
        eval_spec is None or record.get("evaluated_with") == eval_spec
    )
    if state == "done" and evaluated:
        return "done"
    artefact = record.get("artefact", "adapter/adapter_config.json")
    if state in ("done", "trained") and (spec.get("train") is None or (run_dir / artefact).is_file()):
        return "trained"
    return "new"


def write_record(run_dir: Path, record: dict) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / (RUN_FILE + ".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, run_dir / RUN_FILE)


def record_done(run_dir: Path, timing: dict, metrics: dict, **extra) -> None:
    """Marks the run in ``run_dir`` evaluated: its timing, its metrics, where its generations are, when."""
    write_record(
        run_dir,
        read_record(run_dir)
        | {
            "state": "done",
            "timing": timing,
            "metrics": metrics,
            "generations": "eval/generations.jsonl",
            "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        | extra,
    )


def read_record(run_dir: Path) -> dict:
    return json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8"))


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_once(path: Path, write) -> Path:
    """``write(tmp)``, then move it to ``path``; if ``path`` exists it must hold the same bytes (the runs of a
    sweep folder all use one data set; a sweep running there may be reading it)."""
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    write(tmp)
    if path.is_file():
        same = sha256_of(path) == sha256_of(tmp)
        tmp.unlink()
        if not same:
            raise SweepMismatch(
                f"{path} holds other problems than these settings generate (another --steps, "
                "--micro-batch-size, --eval-size or --data-seed?); give another --out"
            )
        return path
    os.replace(tmp, path)
    return path


@dataclass(frozen=True)
class Job:
    """One run for :func:`run_jobs`: ``argv`` trains and/or evaluates the run in ``run_dir`` (its ``run.json``
    holds the metrics afterwards)."""

    name: str
    run_dir: Path
    argv: list[str]
    action: str  # what the progress line says it does
    trains: bool  # counted in the time-left estimate
    goal: str = "done"  # the state the run is in when the job succeeded


def _stop_with_parent(parent: int):
    """What a job's child runs before its program (Linux): a SIGTERM when ``parent`` dies, so that a sweep killed
    hard (SIGKILL) does not leave its run going on unseen beside the next invocation's; the run then writes its
    partial report and stops, and the next invocation resumes it."""
    if not sys.platform.startswith("linux"):
        return None

    def arm() -> None:
        import ctypes
        import signal

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:  # the parent died before the signal was armed
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


def run_jobs(jobs: list[Job], env: dict, after_each=None) -> list[str]:
    """Runs each job in a child process of its own, one after the other, printing progress and an estimate of the
    time left; a failed job is reported and the next one runs, an interrupted one stops them all. ``after_each()``
    runs after every successful job (e.g. to rewrite the tables). Returns the names of the failed jobs."""
    started = time.perf_counter()
    durations: list[float] = []
    failed: list[str] = []
    for k, job in enumerate(jobs, 1):
        eta = ""
        trainings = sum(1 for j in jobs[k - 1 :] if j.trains)
        if durations and trainings:
            eta = f"; about {hms(sum(durations) / len(durations) * trainings)} left"
        print(
            f"\n##### [{k}/{len(jobs)}] {job.name}: {job.action} "
            f"(elapsed {hms(time.perf_counter() - started)}{eta}) #####",
            flush=True,
        )
        run_started = time.perf_counter()
        rc = subprocess.call(job.argv, env=env, preexec_fn=_stop_with_parent(os.getpid()))
        elapsed = time.perf_counter() - run_started
        if rc != 0:
            failed.append(job.name)
            print(f"##### {job.name} FAILED (exit status {rc}) after {hms(elapsed)}; going on #####", flush=True)
            if rc in (-2, 130, 143, -15):  # interrupted: stop the sweep too
                break
            continue
        if job.trains:
            durations.append(elapsed)
        metrics = read_record(job.run_dir).get("metrics") or {}
        print(
            f"##### {job.name} {job.goal} in {hms(elapsed)}"
            + (": " + ", ".join(f"{key} {value:.4g}" for key, value in metrics.items() if value is not None))
            * bool(metrics and job.goal == "done")
            + " #####",
            flush=True,
        )
        if after_each is not None:
            after_each()
    return failed


def build_parser() -> argparse.ArgumentParser:
    from .pipeline import add_run_options

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


Planned = list[tuple[Setting | None, int | None, dict]]  # (setting, seed, spec); setting None: the base model


def _specs(args, train_file: Path, eval_file: Path) -> tuple[list[Setting], Planned]:
    from .training import TrainSettings

    settings = list(
        dict.fromkeys([parse_setting(REFERENCE)] + list(args.settings or map(parse_setting, DEFAULT_SETTINGS)))
    )
    data = {"data_seed": args.data_seed, "train_sha256": sha256_of(train_file), "heldout_sha256": sha256_of(eval_file)}
    evaluation = {
        "eval_size": args.eval_size,
        "max_new_tokens": args.max_new_tokens,
        "eval_batch_size": args.eval_batch_size,
    }

    def spec(criterion: str | None, alpha: float | None, seed: int | None, train: dict | None) -> dict:
        return {
            "model": "SmolLM2-135M-Instruct",
            "criterion": criterion,
            "alpha": alpha,
            "seed": seed,
            "train": train,
            **data,
            **evaluation,
        }

    runs: Planned = [] if args.no_base else [(None, None, spec(None, None, None, None))]
    for setting, seed in plan(settings, args.seeds):
        train = TrainSettings(
            steps=args.steps, micro_batch_size=args.micro_batch_size, learning_rate=args.learning_rate, seed=seed
        )
        runs.append((setting, seed, spec(setting.criterion, setting.alpha, seed, asdict(train))))
    return settings, runs


def _run_dir(out: Path, setting: Setting | None, seed: int | None) -> Path:
    return out / "runs" / ("base" if setting is None else f"{setting.folder}/seed{seed}")


def hms(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    return f"{seconds // 60} min {seconds % 60:02d} s"


def _work(run_dir: Path) -> int:
    """Child process: train (unless the adapter is there) and evaluate the run in ``run_dir``."""
    import torch

    from del_plugin.evaluation import EvalSettings, evaluate
    from del_plugin.evaluation.cli import stop_cleanly_on_sigterm
    from tools.assets import smollm2_dir

    from .efficacy import run_metrics
    from .training import TrainSettings, axolotl_config, train_lora

    stop_cleanly_on_sigterm()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    record = read_record(run_dir)
    spec = record["spec"]
    out = run_dir.parents[2] if spec["train"] else run_dir.parents[1]
    train_file, eval_file = out / "data" / "train.jsonl", out / "data" / "heldout.jsonl"
    if sha256_of(train_file) != spec["train_sha256"] or sha256_of(eval_file) != spec["heldout_sha256"]:
        raise SweepMismatch(f"{out / 'data'} changed since {run_dir} was planned")
    model_dir = smollm2_dir()
    timing = dict(record.get("timing") or {})
    adapter = None
    if spec["train"] is not None:
        adapter = run_dir / "adapter"
        if run_state(run_dir, spec) == "new":
            for stale in ("adapter", "prepared", "eval"):
                shutil.rmtree(run_dir / stale, ignore_errors=True)
            started = time.perf_counter()
            config = axolotl_config(
                model_dir,
                train_file,
                run_dir,
                spec["alpha"],
                TrainSettings(**spec["train"]),
                criterion=spec["criterion"],
            )
            adapter, _ = train_lora(config, run_dir)
            timing["train_s"] = round(time.perf_counter() - started, 1)
            write_record(run_dir, record | {"state": "trained", "timing": timing})
            shutil.rmtree(run_dir / "prepared", ignore_errors=True)  # the tokenised data; the next run redoes it
    eval_dir = run_dir / "eval"
    shutil.rmtree(eval_dir, ignore_errors=True)
    started = time.perf_counter()
    settings = EvalSettings(
        batch_size=spec["eval_batch_size"], max_new_tokens=spec["max_new_tokens"], prompt_format="chat"
    )
    report = evaluate(model_dir, [eval_file], eval_dir, adapter=adapter, name=record["setting"], settings=settings)
    if report["status"] != "complete":
        raise RuntimeError(f"del-eval did not finish: {report['error']}")
    timing["eval_s"] = round(time.perf_counter() - started, 1)
    record_done(run_dir, timing, run_metrics(report))
    return 0


def _finished(out: Path, planned: Planned) -> tuple[list[dict], dict | None]:
    runs, base = [], None
    for setting, seed, spec in planned:
        run_dir = _run_dir(out, setting, seed)
        if run_state(run_dir, spec) != "done":
            continue
        record = read_record(run_dir)
        record["generations"] = str(run_dir / record["generations"])
        if setting is None:
            base = record["metrics"]
        else:
            runs.append(record)
    return runs, base


def _write_results(out: Path, args, argv, settings, planned, wall: float | None) -> list[Path]:
    from .efficacy import METRICS, aggregate, paired_comparisons, plot_sweep, results_markdown

    runs, base = _finished(out, planned)
    if not runs:
        return []
    command = "python -m experiments sweep" + ("" if not argv else " " + " ".join(argv))
    steps = args.steps
    train_s, eval_s = (sum((r.get("timing") or {}).get(k) or 0.0 for r in runs) for k in ("train_s", "eval_s"))
    header = [
        "# Efficacy sweep on SmolLM2-135M-Instruct: " + ", ".join(s.key for s in settings),
        "",
        f"Written by `{command}` ({platform.machine()}, {os.cpu_count()} CPU cores, torch threads {args.threads}) "
        f"from {len(runs)} of {len(planned) - (0 if args.no_base else 1)} runs finished; their fine-tunes took "
        f"{hms(train_s)} and their evaluations {hms(eval_s)}, one run at a time"
        + (f"; this invocation's wall time {hms(wall)}" if wall is not None else "")
        + ".",
        "",
        f"Set-up: the demo's (`python -m experiments`): LoRA r 16 on all linear layers, {steps} steps x "
        f"{args.micro_batch_size} problems, lr {args.learning_rate} cosine, {args.eval_size} held-out problems, "
        f"greedy, at most {args.max_new_tokens} new tokens. Problems from seed {args.data_seed}; the training seed "
        "sets the LoRA init and the data order, the same for every setting. TF = teacher-forced on the reference "
        "answers. Intervals: 95 % Student t over seeds (with 3 seeds the half-width is 2.48 standard deviations).",
        "",
        "",
    ]
    (out / "results.md").write_text("\n".join(header) + results_markdown(runs, REFERENCE, base), encoding="utf-8")
    summary = {
        "command": command,
        "settings": [s.as_dict() for s in settings],
        "seeds": args.seeds,
        "reference": REFERENCE,
        "base": base,
        "aggregate": {k: {"seeds": v["seeds"], "stats": v["stats"]} for k, v in aggregate(runs).items()},
        "paired": paired_comparisons(runs, REFERENCE),
        "runs": [{k: r[k] for k in ("setting", "seed", "metrics", "timing")} for r in runs],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    with open(out / "runs.csv", "w", encoding="utf-8") as handle:
        handle.write(
            ",".join(["setting", "criterion", "alpha", "seed"] + [m.key for m in METRICS] + ["train_s", "eval_s"])
            + "\n"
        )
        for r in runs:
            values = [r["setting"], r["spec"]["criterion"], f"{r['spec']['alpha']:g}", str(r["seed"])]
            values += ["" if r["metrics"].get(m.key) is None else repr(r["metrics"][m.key]) for m in METRICS]
            values += [str((r.get("timing") or {}).get(k, "")) for k in ("train_s", "eval_s")]
            handle.write(",".join(values) + "\n")
    files = [out / "results.md", out / "summary.json", out / "runs.csv"]
    plot = plot_sweep(runs, [s.as_dict() for s in settings], REFERENCE, out / "metrics_vs_alpha.png", base)
    if plot is not None:
        files.append(plot)
    if args.publish:
        from .pipeline import publish_files

        files = publish_files(files, Path(args.publish))
    return files


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.worker:
        return _work(Path(args.worker))
    if args.steps < 1 or args.eval_size < 1 or args.micro_batch_size < 1 or not args.seeds:
        raise SystemExit("error: --steps, --eval-size and --micro-batch-size must be >= 1, and one seed is needed")
    if len(set(args.seeds)) != len(args.seeds):
        raise SystemExit("error: --seeds repeats a seed")

    from .problems import make_splits, write_chat_jsonl, write_eval_jsonl

    out = Path(args.out)
    train, held_out = make_splits(args.steps * args.micro_batch_size, args.eval_size, seed=args.data_seed)
    try:
        train_file = write_once(out / "data" / "train.jsonl", lambda path: write_chat_jsonl(path, train))
        eval_file = write_once(out / "data" / "heldout.jsonl", lambda path: write_eval_jsonl(path, held_out))
    except SweepMismatch as err:
        raise SystemExit(f"error: {err}") from None
    settings, planned = _specs(args, train_file, eval_file)
    try:
        states = [run_state(_run_dir(out, s, seed), spec) for s, seed, spec in planned]
    except SweepMismatch as err:
        raise SystemExit(f"error: {err}") from None

    def name(setting, seed):
        return "base model" if setting is None else f"{setting.key} seed {seed}"

    if args.status:
        for (setting, seed, _), state in zip(planned, states):
            print(f"{state:8s} {name(setting, seed)}")
        return 0
    pending = [(p, state) for p, state in zip(planned, states) if state != "done"]
    if args.report_only:
        pending = []
    print(
        f"{len(planned)} runs, {len(planned) - len(pending) if not args.report_only else states.count('done')} "
        f"already done, {len(pending)} to run; working folder {out}",
        flush=True,
    )
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    started = time.perf_counter()
    jobs = []
    for (setting, seed, spec), state in pending:
        run_dir = _run_dir(out, setting, seed)
        if state == "new":
            write_record(
                run_dir,
                {"setting": "base" if setting is None else setting.key, "seed": seed, "spec": spec, "state": "new"},
            )
        trains = setting is not None and state == "new"
        jobs.append(
            Job(
                name=name(setting, seed),
                run_dir=run_dir,
                argv=[sys.executable, "-m", "experiments", "sweep", "--worker", str(run_dir)],
                action="training and evaluating" if trains else "evaluating",
                trains=trains,
            )
        )
    failed = run_jobs(jobs, env, after_each=lambda: _write_results(out, args, argv, settings, planned, None))
    wall = None if args.report_only else time.perf_counter() - started
    files = _write_results(out, args, argv, settings, planned, wall)
    if files:
        print("\n" + (out / "results.md").read_text(encoding="utf-8"))
        print("Results:\n" + "\n".join(f"  {p}" for p in files))
    if wall is not None:
        print(f"Wall time {hms(wall)}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0
