"""del-eval's entry point: the command line read by :mod:`.cli_parser` (whose text ``--help`` prints), each
command run, and what stops it turned into one line and an exit status (:mod:`.errors`)."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from .benchmarks.program import SandboxUnavailableError
from .cli_parser import build_parser
from .errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNUSABLE_INPUT,
    EXIT_UNWRITABLE_OUTPUT,
    EXIT_USAGE,
    OutputError,
    UnusableInput,
    UsageError,
)

__all__ = ["main", "build_parser", "stop_cleanly_on_sigterm"]


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
    from .benchmarks.names import missing_benchmarks, resolve_benchmark_names

    names = resolve_benchmark_names(benchmarks)
    missing = missing_benchmarks(names, args.benchmark_dir, run_instead=lambda ok: _with_benchmarks(args.argv, ok))
    if missing is not None:
        raise missing


def _run(args: argparse.Namespace) -> int:
    from .run.runner import EvalSettings, evaluate

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
    if args.estimate:
        return _estimate(args, settings)
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


def _estimate(args: argparse.Namespace, settings) -> int:
    """``run --estimate``: the expected time of the run, from a probe; nothing written."""
    from .run.estimate import estimate_run, format_estimate

    tasks, probe, seconds = estimate_run(
        args.model,
        args.data,
        benchmarks=args.benchmarks or (),
        benchmark_dir=args.benchmark_dir,
        adapter=args.adapter,
        settings=settings,
        allow_modified=args.allow_modified,
    )
    print(format_estimate(tasks, probe, seconds, settings.max_new_tokens))
    return EXIT_OK


def _print_written(report: dict, out: Path) -> None:
    print((out / "report.md").read_text(encoding="utf-8"))
    print(f"report: {out / 'report.json'}\ntable:  {out / 'report.md'}")
    for plot in report["files"]["plots"]:
        print(f"plot:   {out / plot}")
    print(f"generations: {out / report['files']['generations']}")


def _score(args: argparse.Namespace) -> int:
    from .run.score import score_predictions

    out = Path(args.out)
    if args.lm_eval_samples:
        if args.benchmark or args.predictions or args.program_of_thought or args.unsandboxed_programs:
            raise UsageError(
                "--lm-eval-samples reads the sets and generations from lm-eval's samples: give it without "
                "--benchmark, --predictions, --program-of-thought and --unsandboxed-programs"
            )
        from .lm_eval.samples import score_lm_eval_samples

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
    from .lm_eval.tasks import GROUP, write_lm_eval_tasks

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
    from .compare.comparison import compare_reports
    from .reports.files import load_report

    if args.resamples is not None:
        logging.getLogger(__name__).warning(
            "--resamples %d: the verdict no longer resamples (score intervals and t tests); ignored", args.resamples
        )
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
    written = compare_reports(
        reports, Path(args.out), labels, scorer=args.scorer, intersection=args.intersection, **arms
    )
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
    from .eval_extra import require_eval_extra

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
