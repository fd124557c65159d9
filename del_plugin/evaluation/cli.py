"""del-eval: numeric evaluation of a (fine-tuned) causal LM, on your JSONL files and on the DEL paper's seven
benchmarks, and side-by-side comparison of reports.

  del-eval run --model MODEL [--adapter ADAPTER] --data test.jsonl [more.jsonl ...] --out DIR [--limit N]
  del-eval run --model MODEL --benchmarks all --benchmark-dir DIR --out DIR [--program-of-thought]
  del-eval score --benchmark gsm8k --predictions preds.jsonl --out DIR
  del-eval compare DIR_OR_REPORT.json [...] --out DIR [--labels base MLE DEL]

run writes DIR/report.json, report.md, generations.jsonl and plots, and resumes a stopped run in the same DIR.
score scores generations made elsewhere ({"id", "output"} per line) without a model. compare writes
DIR/comparison.md, comparison.json and the same plots with one entry per report. docs/evaluation.md has the
details: the scoring rules per benchmark, the report schema, the program-of-thought sandbox and its limits.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

__all__ = ["main", "build_parser", "stop_cleanly_on_sigterm"]

_BENCHMARKS_HELP = "gsm8k, math, svamp, simuleq, aqua, sat, mmlu_math"
_UNSANDBOXED_HELP = (
    "with --program-of-thought: run the programs WITHOUT the sandbox (only CPU, memory and output limits; they "
    "can read your files and use the network), e.g. inside a disposable container where no sandbox works"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="del-eval", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{run,score,compare}")

    run = commands.add_parser(
        "run",
        help="evaluate one model on JSONL files and/or the paper's benchmarks",
        description="Greedy generation, scored, and teacher-forced digit metrics, on JSONL files (GSM8K "
        "'question'/'answer' with '#### N', or plain numeric answers) and/or the DEL paper's seven benchmarks.",
    )
    run.add_argument(
        "--model", required=True, help="model folder (or hub id), or an adapter folder such as Axolotl's output_dir"
    )
    run.add_argument("--adapter", help="LoRA adapter folder to apply to --model")
    run.add_argument("--data", nargs="+", default=[], help="JSONL files, one problem per line")
    run.add_argument(
        "--benchmarks",
        help=f"comma-separated benchmarks of the paper, or all: {_BENCHMARKS_HELP}",
    )
    run.add_argument(
        "--benchmark-dir",
        help="folder with the sets that do not ship with del-plugin: simuleq/simuleq.json and sat/sat.json",
    )
    run.add_argument("--out", required=True, help="output folder (a stopped run there is resumed)")
    run.add_argument("--name", help="name of this model in reports (default: the model/adapter folder name)")
    run.add_argument("--limit", type=int, help="evaluate the first N problems of each set (default: all)")
    run.add_argument(
        "--batch-size", type=int, default=16, help="prompts per generation / teacher-forcing batch (default: 16)"
    )
    run.add_argument(
        "--max-new-tokens",
        type=int,
        default=256,
        help="longest generation; longer ones are cut and counted in the report (default: 256; the paper allows 1500)",
    )
    run.add_argument(
        "--prompt-format",
        choices=("auto", "chat", "alpaca"),
        default="auto",
        help="chat template, Axolotl's alpaca prompt, or auto: the format in the Axolotl config saved with the "
        "model, else chat when the tokenizer has a template (default: auto)",
    )
    run.add_argument(
        "--program-of-thought",
        action="store_true",
        help="run gsm8k, math, svamp and simuleq as the paper does: ask for a Python program, EXECUTE it in a "
        "sandbox (bwrap or Linux namespaces: see docs/evaluation.md), chain-of-thought as the fallback",
    )
    run.add_argument("--unsandboxed-programs", action="store_true", help=_UNSANDBOXED_HELP)
    run.add_argument("--overwrite", action="store_true", help="replace a report of another run in --out")
    run.add_argument("--no-generate", action="store_true", help="teacher-forced digit metrics only")
    run.add_argument("--no-teacher-forced", action="store_true", help="generation metrics only")
    run.add_argument(
        "--dtype",
        choices=("auto", "float32", "bfloat16", "float16"),
        default="auto",
        help="auto: float32 on CPU, bfloat16 (or float16) on GPU (default: auto)",
    )
    run.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ... (default: auto)")

    score = commands.add_parser(
        "score",
        help="score generations made elsewhere against one of the paper's benchmarks",
        description='Score a JSONL of {"id": problem index (0-based) in the set\'s file, "output": text} '
        "against a benchmark, without a model; writes the report del-eval run writes.",
    )
    score.add_argument("--benchmark", required=True, help=_BENCHMARKS_HELP)
    score.add_argument("--predictions", required=True, help='JSONL file, one {"id", "output"} per line')
    score.add_argument("--out", required=True, help="output folder (a report there is replaced)")
    score.add_argument("--benchmark-dir", help="folder with simuleq/simuleq.json and sat/sat.json")
    score.add_argument("--name", help="name in reports (default: the predictions file name)")
    score.add_argument(
        "--program-of-thought",
        action="store_true",
        help="EXECUTE outputs that hold a Python program (in a sandbox: bwrap or Linux namespaces) and read "
        "what they print as the answer",
    )
    score.add_argument("--unsandboxed-programs", action="store_true", help=_UNSANDBOXED_HELP)

    compare = commands.add_parser("compare", help="side-by-side tables and plots of several reports")
    compare.add_argument("reports", nargs="+", help="report.json files or the folders del-eval run/score wrote")
    compare.add_argument("--out", required=True, help="output folder")
    compare.add_argument("--labels", nargs="+", help="one label per report (default: the reports' names)")
    return parser


def _run(args: argparse.Namespace) -> int:
    from .runner import EvalSettings, evaluate

    if not args.data and not args.benchmarks:
        raise ValueError("nothing to evaluate: give --data files and/or --benchmarks (e.g. --benchmarks all)")
    settings = EvalSettings(
        batch_size=args.batch_size,
        max_new_tokens=args.max_new_tokens,
        prompt_format=args.prompt_format,
        limit=args.limit,
        generate=not args.no_generate,
        teacher_forced=not args.no_teacher_forced,
        program_of_thought=args.program_of_thought,
        unsandboxed_programs=args.unsandboxed_programs,
        dtype=args.dtype,
        device=args.device,
    )
    out = Path(args.out)
    report = evaluate(
        args.model,
        args.data,
        out,
        benchmarks=args.benchmarks or (),
        benchmark_dir=args.benchmark_dir,
        adapter=args.adapter,
        name=args.name,
        settings=settings,
        overwrite=args.overwrite,
    )
    _print_written(report, out)
    skipped = sum(d["skipped"] for d in report["datasets"])
    if skipped:
        print(f"{skipped} line(s) skipped: see the warnings above or report.json", file=sys.stderr)
    return 0


def _print_written(report: dict, out: Path) -> None:
    print((out / "report.md").read_text(encoding="utf-8"))
    print(f"report: {out / 'report.json'}\ntable:  {out / 'report.md'}")
    for plot in report["files"]["plots"]:
        print(f"plot:   {out / plot}")
    print(f"generations: {out / report['files']['generations']}")


def _score(args: argparse.Namespace) -> int:
    from .score import score_predictions

    out = Path(args.out)
    report = score_predictions(
        args.benchmark,
        args.predictions,
        out,
        benchmark_dir=args.benchmark_dir,
        name=args.name,
        program_of_thought=args.program_of_thought,
        unsandboxed_programs=args.unsandboxed_programs,
    )
    _print_written(report, out)
    return 0


def _compare(args: argparse.Namespace) -> int:
    from .report import compare_reports, load_report

    reports = [load_report(p) for p in args.reports]
    written = compare_reports(reports, Path(args.out), args.labels)
    print(written["markdown"].read_text(encoding="utf-8"))
    for kind, path in written.items():
        print(f"{kind}: {path}")
    return 0


def stop_cleanly_on_sigterm():
    """Turn SIGTERM (kill, a scheduler's time limit) into SystemExit, so that a run being stopped still writes
    its partial report instead of vanishing. Returns the previous handler (None off the main thread)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def _exit(signum, _frame):
        raise SystemExit(128 + signum)

    return signal.signal(signal.SIGTERM, _exit)


def main(argv: list[str] | None = None) -> int:
    import signal

    from .report import require_eval_extra

    args = build_parser().parse_args(argv)
    try:
        require_eval_extra()  # before any work: not at the plot after an hour of generation
    except ImportError as err:
        print(f"del-eval: error: {err}", file=sys.stderr)
        return 2
    previous_handler = stop_cleanly_on_sigterm()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        return {"run": _run, "score": _score, "compare": _compare}[args.command](args)
    except (FileNotFoundError, ValueError) as err:
        # bad input: a clear message, not a traceback (a partial report, if any, is already written)
        print(f"del-eval: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("del-eval: interrupted; the partial report is saved", file=sys.stderr)
        return 130
    finally:
        if previous_handler is not None:
            signal.signal(signal.SIGTERM, previous_handler)


if __name__ == "__main__":
    sys.exit(main())
