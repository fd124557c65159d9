"""``del-eval``: numeric evaluation of a (fine-tuned) causal LM, and side-by-side comparison of reports.

    del-eval run --model MODEL [--adapter ADAPTER] --data test.jsonl [more.jsonl ...] --out DIR [--limit N]
    del-eval compare DIR_OR_REPORT.json [...] --out DIR [--labels base MLE DEL]

``run`` writes DIR/report.json (schema in docs/evaluation.md), report.md, generations.jsonl,
entropy_histogram.png and place_accuracy.png. ``compare`` writes DIR/comparison.md, comparison.json and the
same plots with one curve per report.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

__all__ = ["main", "build_parser", "stop_cleanly_on_sigterm"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="del-eval", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{run,compare}")

    run = commands.add_parser(
        "run",
        help="evaluate one model on JSONL sets",
        description="Greedy generation + teacher-forced digit metrics on JSONL sets "
        "(GSM8K `question`/`answer` with '#### N', or plain numeric answers).",
    )
    run.add_argument(
        "--model", required=True, help="model folder (or hub id), or an adapter folder such as Axolotl's output_dir"
    )
    run.add_argument("--adapter", help="LoRA adapter folder to apply to --model")
    run.add_argument("--data", required=True, nargs="+", help="JSONL files, one problem per line")
    run.add_argument("--out", required=True, help="output folder")
    run.add_argument("--name", help="name of this model in reports (default: the model/adapter folder name)")
    run.add_argument("--limit", type=int, help="evaluate the first N usable problems of each set")
    run.add_argument("--batch-size", type=int, default=16)
    run.add_argument("--max-new-tokens", type=int, default=256)
    run.add_argument(
        "--prompt-format",
        choices=("auto", "chat", "alpaca"),
        default="auto",
        help="chat template, Axolotl's alpaca prompt, or auto (chat when the tokenizer has a template)",
    )
    run.add_argument("--no-generate", action="store_true", help="teacher-forced digit metrics only")
    run.add_argument("--no-teacher-forced", action="store_true", help="generation metrics only")
    run.add_argument(
        "--dtype",
        choices=("auto", "float32", "bfloat16", "float16"),
        default="auto",
        help="auto: float32 on CPU, bfloat16 (or float16) on GPU",
    )
    run.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, …")

    compare = commands.add_parser("compare", help="side-by-side table and overlaid plots of several reports")
    compare.add_argument("reports", nargs="+", help="report.json files or the folders `del-eval run` wrote")
    compare.add_argument("--out", required=True, help="output folder")
    compare.add_argument("--labels", nargs="+", help="one label per report (default: the reports' names)")
    return parser


def _run(args: argparse.Namespace) -> int:
    from .data import check_files_exist
    from .runner import EvalSettings, evaluate

    settings = EvalSettings(
        batch_size=args.batch_size,
        max_new_tokens=args.max_new_tokens,
        prompt_format=args.prompt_format,
        limit=args.limit,
        generate=not args.no_generate,
        teacher_forced=not args.no_teacher_forced,
        dtype=args.dtype,
        device=args.device,
    )
    check_files_exist(args.data)
    report = evaluate(args.model, args.data, Path(args.out), adapter=args.adapter, name=args.name, settings=settings)
    out = Path(args.out)
    print((out / "report.md").read_text(encoding="utf-8"))
    print(f"report: {out / 'report.json'}\ntable:  {out / 'report.md'}")
    for plot in report["files"]["plots"]:
        print(f"plot:   {out / plot}")
    if settings.generate:
        print(f"generations: {out / 'generations.jsonl'}")
    skipped = sum(d["skipped"] for d in report["datasets"])
    if skipped:
        print(f"{skipped} line(s) skipped: see the warnings above or report.json", file=sys.stderr)
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
    """Turn SIGTERM (``kill``, a scheduler's time limit) into SystemExit, so that a run being stopped still writes
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

    args = build_parser().parse_args(argv)
    previous_handler = stop_cleanly_on_sigterm()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "run":
            return _run(args)
        return _compare(args)
    except (FileNotFoundError, ValueError) as err:
        # bad input: a clear one-line message, not a traceback (a partial report, if any, is already written)
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
