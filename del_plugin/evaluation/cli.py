"""del-eval: numeric evaluation of a (fine-tuned) causal LM, on your JSONL files and on the DEL paper's seven
benchmarks, and side-by-side comparison of reports.

  del-eval run --model MODEL [--adapter ADAPTER] --data test.jsonl [more.jsonl ...] --out DIR [--limit N]
  del-eval run --model MODEL --benchmarks all --benchmark-dir DIR --out DIR [--program-of-thought]
  del-eval score --benchmark gsm8k --predictions preds.jsonl --out DIR
  del-eval compare DIR_OR_REPORT.json [...] --out DIR [--labels base MLE DEL]
  del-eval lm-eval-tasks --out TASKS_DIR --benchmark-dir DIR [--prompt-format alpaca|chat]
  del-eval lm-eval-tasks --out TASKS_DIR --benchmarks gsm8k,math,svamp,aqua,mmlu_math [--prompt-format alpaca|chat]
  del-eval compare --baseline MLE_SEED1 MLE_SEED2 --candidate DEL_SEED1 DEL_SEED2 --out DIR [--labels MLE DEL]
  del-eval score --lm-eval-samples LM_EVAL_OUT --out DIR

run writes DIR/report.json, report.md, generations.jsonl and plots, and resumes a stopped (or killed) run in the
same DIR; a report of another run there is kept unless --overwrite. score scores generations made elsewhere
({"id", "output"} per line) without a model. compare writes DIR/comparison.md, comparison.json and the same plots
with one entry per report; for two reports (or --baseline/--candidate runs) the verdict first: the paired
difference per set and in mACC with 95 % intervals, McNemar's p and whether the sample resolves it. Models are
read from a folder or the Hugging Face cache: nothing is downloaded.
docs/evaluation.md has the details: the scoring rules per benchmark, the report schema, the program-of-thought
sandbox and its limits.

lm-eval-tasks writes the seven sets as lm-evaluation-harness tasks (lm_eval --tasks del_paper --include_path DIR);
score --lm-eval-samples scores what `lm_eval ... --log_samples` wrote.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from .benchmarks.program import SandboxUnavailableError
from .benchmarks.sets import SHIPPED_NAMES
from .errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNUSABLE_INPUT,
    EXIT_UNWRITABLE_OUTPUT,
    EXIT_USAGE,
    OutputError,
    UnusableInput,
    UsageError,
    exit_status_help,
)
from .generation import MAX_NEW_TOKENS

__all__ = ["main", "build_parser", "stop_cleanly_on_sigterm"]

_BENCHMARKS_HELP = "gsm8k, math, svamp, simuleq, aqua, sat, mmlu_math"
_OVERWRITE_HELP = (
    "replace the report of another run in --out (it stays until this run's report is complete); without it, such a "
    "report is an error"
)
_ALLOW_MODIFIED_HELP = (
    "score a SimulEq or SAT file that is not the authors' (its sha256 differs): without it that is an error, since "
    "its numbers are not comparable with the paper's; the report marks it"
)
_UNSANDBOXED_HELP = (
    "with --program-of-thought: run the programs WITHOUT the sandbox (only CPU, memory and output limits; they "
    "can read your files and use the network), e.g. inside a disposable container where no sandbox works"
)


def build_parser() -> argparse.ArgumentParser:
    formatting = {"formatter_class": argparse.RawDescriptionHelpFormatter, "epilog": exit_status_help()}
    parser = argparse.ArgumentParser(prog="del-eval", description=__doc__, **formatting)
    commands = parser.add_subparsers(dest="command", required=True, metavar="{run,score,compare,lm-eval-tasks}")

    run = commands.add_parser(
        "run",
        help="evaluate one model on JSONL files and/or the paper's benchmarks",
        description="Greedy generation, scored, and teacher-forced digit metrics, on JSONL files (GSM8K "
        "'question'/'answer' with '#### N', plain numeric answers, or chat 'messages') and/or the DEL paper's seven "
        "benchmarks.",
        **formatting,
    )
    run.add_argument(
        "--model",
        required=True,
        help="model folder, or an adapter folder such as Axolotl's output_dir, or the hub id of a model already in "
        "the Hugging Face cache (nothing is downloaded)",
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
    run.add_argument("--allow-modified", action="store_true", help=_ALLOW_MODIFIED_HELP)
    run.add_argument("--out", required=True, help="output folder (a stopped run there is resumed)")
    run.add_argument("--name", help="name of this model in reports (default: the model/adapter folder name)")
    run.add_argument("--limit", type=int, help="evaluate the first N problems of each set (default: all)")
    run.add_argument(
        "--batch-size", type=int, default=16, help="prompts per generation / teacher-forcing batch (default: 16)"
    )
    run.add_argument(
        "--max-new-tokens",
        type=int,
        default=MAX_NEW_TOKENS,
        help="longest generation; longer ones are cut and counted in the report (default: %(default)s; the paper "
        "allows 1500)",
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
    run.add_argument("--overwrite", action="store_true", help=_OVERWRITE_HELP)
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
        "against a benchmark, without a model; writes the report del-eval run writes. The report says how many of "
        "the set's problems were scored (partial coverage: mACC marked partial).",
        **formatting,
    )
    score.add_argument("--benchmark", help=_BENCHMARKS_HELP)
    score.add_argument("--predictions", help='JSONL file, one {"id", "output"} per line')
    score.add_argument(
        "--lm-eval-samples",
        metavar="DIR",
        help="instead of --benchmark/--predictions: the --output_path of `lm_eval ... --log_samples` run on the "
        "del_* tasks of `del-eval lm-eval-tasks` (or on lm-eval's gsm8k); every set found there is scored",
    )
    score.add_argument("--out", required=True, help="output folder")
    score.add_argument("--overwrite", action="store_true", help=_OVERWRITE_HELP)
    score.add_argument("--benchmark-dir", help="folder with simuleq/simuleq.json and sat/sat.json")
    score.add_argument("--allow-modified", action="store_true", help=_ALLOW_MODIFIED_HELP)
    score.add_argument("--name", help="name in reports (default: the predictions file name)")
    score.add_argument(
        "--program-of-thought",
        action="store_true",
        help="EXECUTE outputs that hold a Python program (in a sandbox: bwrap or Linux namespaces) and read "
        "what they print as the answer",
    )
    score.add_argument("--unsandboxed-programs", action="store_true", help=_UNSANDBOXED_HELP)

    lm_eval_tasks = commands.add_parser(
        "lm-eval-tasks",
        # the default, all seven sets, needs --benchmark-dir (SimulEq and SAT are not shipped): not optional there
        usage="del-eval lm-eval-tasks --out TASKS_DIR --benchmark-dir DIR [options]\n"
        f"       del-eval lm-eval-tasks --out TASKS_DIR --benchmarks {','.join(SHIPPED_NAMES)} [options]",
        help="write the paper's seven sets as lm-evaluation-harness tasks",
        description="Task YAMLs del_gsm8k ... del_mmlu_math and the group del_paper (its acc is mACC), with "
        "del-eval run's prompts, greedy decoding, stop strings and answer readers, reading the same local files. "
        "Run them with: lm_eval --model hf|vllm --model_args pretrained=MODEL --tasks del_paper --include_path DIR "
        "(--apply_chat_template for --prompt-format chat) --log_samples --output_path OUT, then "
        "del-eval score --lm-eval-samples OUT.",
        **(formatting | {"epilog": exit_status_help("lm-eval-tasks")}),
    )
    lm_eval_tasks.add_argument("--out", required=True, help="folder the tasks are written to")
    lm_eval_tasks.add_argument(
        "--benchmarks", default="all", help=f"comma-separated sets, or all (default): {_BENCHMARKS_HELP}"
    )
    lm_eval_tasks.add_argument(
        "--benchmark-dir",
        help="folder with simuleq/simuleq.json and sat/sat.json (needed for those two sets, so for the default all; "
        f"without it give --benchmarks {','.join(SHIPPED_NAMES)})",
    )
    lm_eval_tasks.add_argument(
        "--prompt-format",
        choices=("alpaca", "chat"),
        default="alpaca",
        help="alpaca: Axolotl's alpaca prompt, the paper's (default); chat: the model's chat template, applied by "
        "lm_eval --apply_chat_template",
    )
    lm_eval_tasks.add_argument(
        "--max-new-tokens",
        type=int,
        default=MAX_NEW_TOKENS,
        help="longest generation, as del-eval run's (default: %(default)s)",
    )
    lm_eval_tasks.add_argument("--allow-modified", action="store_true", help=_ALLOW_MODIFIED_HELP)

    compare = commands.add_parser(
        "compare",
        help="the verdict of two runs (or two groups of seeds) and side-by-side tables of several reports",
        description="The verdict first: for two reports, or --baseline and --candidate runs (several seeds an arm), "
        "paired by problem on the problems every run scored, per set each accuracy with its standard error, the "
        "difference with a 95 % interval (paired bootstrap over problems and seeds), McNemar's exact p "
        "(Holm-adjusted over the sets), the smallest difference the sample detects, the same for mACC, and one "
        "line saying whether the difference is resolved. Then the reports side by side; only a resolved "
        "difference is in bold, and only where the reports scored the same problems.",
        **(formatting | {"epilog": exit_status_help("compare")}),
    )
    compare.add_argument(
        "reports", nargs="*", help="report.json files or the folders del-eval run/score wrote (two: baseline first)"
    )
    compare.add_argument("--baseline", nargs="+", metavar="RUN", help="the baseline's runs (e.g. one per seed)")
    compare.add_argument("--candidate", nargs="+", metavar="RUN", help="the candidate's runs (e.g. one per seed)")
    compare.add_argument("--out", required=True, help="output folder")
    compare.add_argument(
        "--labels",
        nargs="+",
        help="one label per report; with --baseline/--candidate: the two arms' labels (default: the reports' names)",
    )
    compare.add_argument(
        "--scorer",
        choices=("paper", "math-verify"),
        default="paper",
        help="whose verdict on each answer the comparison counts: the paper's exact rules, or math-verify's "
        "equivalence (reports scored by a del-eval that records it) (default: paper)",
    )
    compare.add_argument(
        "--resamples", type=int, default=2000, help="bootstrap resamples (default: %(default)s; seeded)"
    )
    return parser


def _with_benchmarks(argv: Sequence[str], names: Sequence[str]) -> str:
    """The command line ``argv`` (del-eval's arguments) with ``--benchmarks`` set to ``names``, for the user to
    copy."""
    argv, value = list(argv), ",".join(names)
    for i, arg in enumerate(argv):
        if arg == "--benchmarks" and i + 1 < len(argv):
            argv[i + 1] = value
            break
        if arg.startswith("--benchmarks="):
            argv[i] = f"--benchmarks={value}"
            break
    else:
        argv += ["--benchmarks", value]
    return shlex.join(["del-eval", *argv])


def _refuse_missing_benchmarks(args: argparse.Namespace, benchmarks: str) -> None:
    """Every set asked for that is not here (SimulEq and SAT without --benchmark-dir), named at once with the
    command that runs the others, before anything is read or loaded."""
    from .benchmarks.sets import missing_benchmarks, resolve_benchmark_names

    names = resolve_benchmark_names(benchmarks)
    missing = missing_benchmarks(names, args.benchmark_dir, run_instead=lambda ok: _with_benchmarks(args.argv, ok))
    if missing is not None:
        raise missing


def _run(args: argparse.Namespace) -> int:
    from .runner import EvalSettings, evaluate

    if not args.data and not args.benchmarks:
        raise UsageError("nothing to evaluate: give --data files and/or --benchmarks (e.g. --benchmarks all)")
    if args.benchmarks:
        _refuse_missing_benchmarks(args, args.benchmarks)
    try:
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
    except ValueError as err:  # e.g. --limit 0: the command line asks for nothing
        raise UsageError(str(err)) from None
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
        allow_modified=args.allow_modified,
    )
    _print_written(report, out)
    skipped = sum(d["skipped"] for d in report["datasets"])
    if skipped:
        print(f"{skipped} line(s) skipped: see the warnings above or report.json", file=sys.stderr)
    return EXIT_OK


def _print_written(report: dict, out: Path) -> None:
    print((out / "report.md").read_text(encoding="utf-8"))
    print(f"report: {out / 'report.json'}\ntable:  {out / 'report.md'}")
    for plot in report["files"]["plots"]:
        print(f"plot:   {out / plot}")
    print(f"generations: {out / report['files']['generations']}")


def _score(args: argparse.Namespace) -> int:
    from .score import score_predictions

    out = Path(args.out)
    if args.lm_eval_samples:
        if args.benchmark or args.predictions or args.program_of_thought or args.unsandboxed_programs:
            raise UsageError(
                "--lm-eval-samples reads the sets and generations from lm-eval's samples: give it without "
                "--benchmark, --predictions, --program-of-thought and --unsandboxed-programs"
            )
        from .lm_eval_samples import score_lm_eval_samples

        report = score_lm_eval_samples(
            args.lm_eval_samples,
            out,
            benchmark_dir=args.benchmark_dir,
            name=args.name,
            overwrite=args.overwrite,
            allow_modified=args.allow_modified,
        )
        _print_written(report, out)
        return EXIT_OK
    if not (args.benchmark and args.predictions):
        raise UsageError("score needs --benchmark and --predictions (or --lm-eval-samples DIR)")
    report = score_predictions(
        args.benchmark,
        args.predictions,
        out,
        benchmark_dir=args.benchmark_dir,
        name=args.name,
        program_of_thought=args.program_of_thought,
        overwrite=args.overwrite,
        allow_modified=args.allow_modified,
        unsandboxed_programs=args.unsandboxed_programs,
    )
    _print_written(report, out)
    return EXIT_OK


def _lm_eval_tasks(args: argparse.Namespace) -> int:
    from .lm_eval_tasks import GROUP, write_lm_eval_tasks

    _refuse_missing_benchmarks(args, args.benchmarks)
    written = write_lm_eval_tasks(
        args.out,
        benchmarks=args.benchmarks,
        benchmark_dir=args.benchmark_dir,
        prompt_format=args.prompt_format,
        max_new_tokens=args.max_new_tokens,
        allow_modified=args.allow_modified,
    )
    for path in written:
        print(f"wrote {path}")
    # a chat template writes its own special tokens: del-eval run adds none to it
    chat = ",add_bos_token=False --apply_chat_template" if args.prompt_format == "chat" else ""
    sets = f" --benchmark-dir {args.benchmark_dir}" if args.benchmark_dir else ""
    print(
        f"run: lm_eval --model hf --model_args pretrained=MODEL,dtype=DTYPE{chat} --tasks {GROUP} --include_path "
        f"{args.out} --log_samples --output_path OUT\n     (DTYPE as del-eval run loads it: bfloat16 on a GPU, "
        f"float32 on a CPU)\nthen: del-eval score --lm-eval-samples OUT{sets} --out REPORT_DIR"
    )
    return EXIT_OK


def _compare(args: argparse.Namespace) -> int:
    from .report import compare_reports, load_report

    if args.resamples < 100:
        raise UsageError(f"--resamples {args.resamples}: give at least 100 (2,000 is the default)")
    arms = {}
    if args.baseline or args.candidate:
        if args.reports or not (args.baseline and args.candidate):
            raise UsageError(
                "give --baseline RUN ... and --candidate RUN ... together, without reports before them "
                "(or two reports, baseline first)"
            )
        paths = [*args.baseline, *args.candidate]
        arms["arms"] = (range(len(args.baseline)), range(len(args.baseline), len(paths)))
        labels = None
        if args.labels:
            if len(args.labels) != 2:
                raise UsageError(f"--labels: give the two arms' labels, baseline first ({len(args.labels)} given)")
            arms["arm_labels"] = args.labels
            labels = [f"{args.labels[0]} {i + 1}" for i in range(len(args.baseline))]
            labels += [f"{args.labels[1]} {i + 1}" for i in range(len(args.candidate))]
    else:
        if not args.reports:
            raise UsageError("compare needs reports: two (baseline first), or --baseline RUN ... --candidate RUN ...")
        paths, labels = args.reports, args.labels
        if labels and len(labels) != len(paths):
            raise UsageError(f"--labels: {len(labels)} given for {len(paths)} reports; give one label per report")
    reports = [load_report(p) for p in paths]
    written = compare_reports(reports, Path(args.out), labels, scorer=args.scorer, resamples=args.resamples, **arms)
    print(written["markdown"].read_text(encoding="utf-8"))
    for kind, path in written.items():
        print(f"{kind}: {path}")
    return EXIT_OK


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


def _raised_by_del_eval(err: BaseException) -> bool:
    """Whether ``err`` was raised in del_plugin's own code (its checks and readers name the input and the fix),
    not inside a library it called."""
    frame = err.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    package = str(Path(__file__).resolve().parents[1])
    return frame is not None and str(Path(frame.tb_frame.f_code.co_filename).resolve()).startswith(package + os.sep)


def main(argv: list[str] | None = None) -> int:
    """del-eval; returns its exit status (:mod:`del_plugin.inputs` defines them; ``--help`` lists them)."""
    import signal

    from ..host_notices import hold_back_import_notices
    from .report import require_eval_extra

    hold_back_import_notices()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # to write back a corrected command
    try:
        require_eval_extra()  # before any work: not at the plot after an hour of generation
    except ImportError as err:
        print(f"del-eval: error: {err}", file=sys.stderr)
        return EXIT_UNUSABLE_INPUT
    previous_handler = stop_cleanly_on_sigterm()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        commands = {"run": _run, "score": _score, "compare": _compare, "lm-eval-tasks": _lm_eval_tasks}
        return commands[args.command](args)
    except (UsageError, SandboxUnavailableError) as err:
        print(f"del-eval: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except OutputError as err:
        # --out cannot be used or written; a report already there is kept
        print(f"del-eval: error: {err}", file=sys.stderr)
        return EXIT_UNWRITABLE_OUTPUT
    except (OSError, ValueError, ImportError) as err:
        if not (isinstance(err, (UnusableInput, ImportError)) or _raised_by_del_eval(err)):
            raise  # from inside a library (transformers, torch) during the run: exit 1, with its traceback
        # an input that cannot be used, as del-eval's checks and readers say: a clear message, not a traceback
        print(f"del-eval: error: {err}", file=sys.stderr)
        return EXIT_UNUSABLE_INPUT
    except KeyboardInterrupt:
        print("del-eval: interrupted; the partial report is saved (the same command resumes it)", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if previous_handler is not None:
            signal.signal(signal.SIGTERM, previous_handler)


if __name__ == "__main__":
    sys.exit(main())
