"""The demo: generate arithmetic word problems, fine-tune SmolLM2-135M-Instruct with LoRA twice through Axolotl
(MLE: cross-entropy only; DEL: cross-entropy + Digit Entropy Loss), evaluate the base model and both fine-tunes on
a held-out set with del-eval, and write a side-by-side table, plots and what was found.

Everything runs offline on a CPU. Defaults are sized to finish in under 15 minutes on 2 dedicated cores (model
set-up excluded); ``--steps``, ``--eval-size`` and ``--max-new-tokens`` trade time for signal.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import textwrap
import time
from pathlib import Path

from del_plugin.hf.settings import DEFAULT_ALPHA  # the DEL run uses the plugin's default weight (docs/efficacy.md)

from .demo_report import DemoRun, minutes, write_results
from .options import add_run_options
from .runs import publish_files

__all__ = ["build_parser", "compare_demo_runs", "main"]


def _cpu_seconds() -> float:
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(u.ru_utime + u.ru_stime for u in usage)


class _Stages:
    def __init__(self, total: int):
        self.total, self.done, self.timing = total, 0, {}
        self._start = None
        self._name = None

    def start(self, name: str, title: str) -> None:
        self.finish()
        self.done += 1
        self._name, self._start = name, time.perf_counter()
        print(f"\n=== [{self.done}/{self.total}] {title} ===", flush=True)

    def finish(self) -> None:
        if self._name is not None:
            elapsed = time.perf_counter() - self._start
            self.timing[self._name] = round(elapsed, 1)
            print(f"--- {self._name}: {minutes(elapsed)}", flush=True)
            self._name = None


COMMANDS = {
    "sweep": "the efficacy sweep: the demo's fine-tune over del_alpha settings and seeds, with intervals "
    "(docs/efficacy.md, set-ups 1-2)",
    "paper": "the paper's regime (full fine-tune at lr 5e-6) beside the LoRA one, on GSM8K, scored on the "
    "paper's benchmarks (docs/efficacy.md, set-up 3)",
}


def build_parser() -> argparse.ArgumentParser:
    indent = " " * 6
    commands = "\n".join(
        f"  python -m experiments {name} [--help]\n"
        + textwrap.fill(text, 100, initial_indent=indent, subsequent_indent=indent)
        for name, text in COMMANDS.items()
    )
    parser = argparse.ArgumentParser(
        prog="python -m experiments",
        usage="python -m experiments [sweep | paper] [options]",
        description=__doc__,
        epilog=f"commands (each with its own options):\n{commands}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--out",
        default="runs/demo",
        help="working folder for data, adapters and reports (default: runs/demo, git-ignored)",
    )
    parser.add_argument(
        "--publish",
        help="also copy the table, findings, plots and summary into this folder "
        "(the committed results live in docs/demo)",
    )
    add_run_options(parser)
    parser.add_argument(
        "--alpha",
        type=float,
        default=DEFAULT_ALPHA,
        help=f"del_alpha of the DEL run (default: the plugin's, {DEFAULT_ALPHA:g})",
    )
    parser.add_argument("--seed", type=int, default=42, help="seed of the problems, the LoRA init and the data order")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.steps < 1 or args.eval_size < 1 or args.micro_batch_size < 1:
        raise SystemExit("error: --steps, --eval-size and --micro-batch-size must be >= 1")

    from del_plugin.evaluation.cli import stop_cleanly_on_sigterm
    from tools.assets import smollm2_dir

    stop_cleanly_on_sigterm()

    print("Setting up SmolLM2-135M-Instruct (fetched and dequantised once, then cached) ...", flush=True)
    model_dir = smollm2_dir()
    out = Path(args.out)
    run, comparison = _run(args, argv, model_dir, out)
    findings, files = write_results(out, run)
    if args.publish:
        files = publish_files(files, Path(args.publish))

    print("\n" + comparison.read_text(encoding="utf-8"))
    if run.verdict_refused:
        print(run.verdict_refused + "\n")
    print("What the demo found:")
    for line in findings:
        print(f"  - {line}")
    print(f"\nWall time {minutes(run.wall)} (set-up excluded); CPU time {minutes(run.cpu)}.")
    print("Results:")
    for path in files:
        print(f"  {path}")
    print(f"Per-model reports and generations: {out / 'eval'}/<base|MLE|DEL>/")
    return 0


def _run(args, argv: list[str], model_dir: Path, out: Path) -> tuple[DemoRun, Path]:
    """The demo's seven stages: the problems, del-eval on the base model, each fine-tune and its del-eval, then del-eval
    compare; the run for its report, and compare's comparison.md."""
    from del_plugin.evaluation import EvalSettings, evaluate

    from .training import TrainSettings, axolotl_config, train_lora

    started, cpu_started, load = time.perf_counter(), _cpu_seconds(), os.getloadavg()
    out.mkdir(parents=True, exist_ok=True)
    stages = _Stages(total=7)
    train_settings = TrainSettings(
        steps=args.steps, micro_batch_size=args.micro_batch_size, learning_rate=args.learning_rate, seed=args.seed
    )
    eval_settings = EvalSettings(
        batch_size=args.eval_batch_size, max_new_tokens=args.max_new_tokens, prompt_format="chat"
    )
    stages.start("data", "generating the problems")
    train_file, eval_file = _write_problems(out, train_settings.examples, args.eval_size, args.seed)
    reports: dict[str, dict] = {}
    generations: dict[str, Path] = {}
    histories: dict[str, list[dict]] = {}

    def run_eval(label: str, model: Path) -> None:
        eval_dir = out / "eval" / label
        shutil.rmtree(eval_dir, ignore_errors=True)
        reports[label] = evaluate(model, [eval_file], eval_dir, name=label, settings=eval_settings)
        reports[label]["_path"] = str(eval_dir / "report.json")  # where compare's verdict finds its generations
        generations[label] = eval_dir / "generations.jsonl"

    stages.start("eval base", "del-eval on the base model")
    run_eval("base", model_dir)
    for label, alpha in (("MLE", 0.0), ("DEL", args.alpha)):
        run_dir = out / "runs" / label.lower()
        shutil.rmtree(run_dir, ignore_errors=True)
        stages.start(f"train {label}", f"Axolotl LoRA fine-tune, {label} (del_alpha: {alpha})")
        adapter, histories[label] = train_lora(
            axolotl_config(model_dir, train_file, run_dir, alpha, train_settings), run_dir
        )
        stages.start(f"eval {label}", f"del-eval on the {label} fine-tune")
        run_eval(label, adapter)

    stages.start("compare", "the verdict, the side-by-side table and plots")
    comparison, refused = compare_demo_runs(reports, out / "comparison")
    stages.finish()
    wall, cpu = time.perf_counter() - started, _cpu_seconds() - cpu_started
    run = DemoRun(args, argv, train_settings, reports, generations, histories, stages.timing, wall, cpu, load, refused)
    return run, comparison


def compare_demo_runs(reports: dict[str, dict], out_dir: Path) -> tuple[Path, str | None]:
    """del-eval compare on the demo's reports (base, MLE, DEL), the verdict DEL against MLE; returns comparison.md
    and, where compare refuses to pair the two runs, the verdict's "cannot be tested" line (the reason is compare's:
    identical generations, as when a DEL weight too small to change a greedy answer gives MLE's run again, or
    runs that scored different problems), the side-by-side tables then written without a verdict. A report compare
    cannot read at all is still an error."""
    from del_plugin.evaluation import compare_reports

    labels = list(reports)
    arms = ([labels.index("MLE")], [labels.index("DEL")])
    try:
        return compare_reports([reports[k] for k in labels], out_dir, labels, arms=arms)["markdown"], None
    except ValueError as err:  # compare's refusals (UsageError, UnusableInput), said in the line as the sweeps do
        refused = f"DEL - MLE: cannot be tested: {err}"
    written = compare_reports([reports[k] for k in labels], out_dir, labels)
    return written["markdown"], refused


def _write_problems(out: Path, train_size: int, eval_size: int, seed: int) -> tuple[Path, Path]:
    from .problems import make_splits, write_chat_jsonl, write_eval_jsonl

    train, held_out = make_splits(train_size, eval_size, seed=seed)
    train_file = write_chat_jsonl(out / "data" / "train.jsonl", train)
    eval_file = write_eval_jsonl(out / "data" / "heldout.jsonl", held_out)
    print(f"{len(train)} training problems -> {train_file}\n{len(held_out)} held-out problems -> {eval_file}")
    print(f"e.g. {train[0].question!r} -> {train[0].answer_text!r}")
    return train_file, eval_file
