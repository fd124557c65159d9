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

from .benchmarks.names import MAX_NEW_TOKENS, SHIPPED_NAMES, resolve_benchmark_names
from .errors import exit_status_help

__all__ = ["build_parser"]

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


def _benchmark_list(value: str) -> str:
    """``--benchmarks``' value, checked as the command line is read: an unknown name (``svmap``) is a wrong command
    line, exit status 2 with the closest name, as argparse's own errors."""
    try:
        resolve_benchmark_names(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return value


def build_parser() -> argparse.ArgumentParser:
    """del-eval's parser: its description is this module's text, a subcommand each (run, score, lm-eval-tasks,
    compare), the exit statuses as the epilog."""
    formatting = {"formatter_class": argparse.RawDescriptionHelpFormatter, "epilog": exit_status_help()}
    parser = argparse.ArgumentParser(prog="del-eval", description=__doc__, **formatting)
    commands = parser.add_subparsers(dest="command", required=True, metavar="{run,score,compare,lm-eval-tasks}")
    _add_run(commands, formatting)
    _add_score(commands, formatting)
    _add_lm_eval_tasks(commands, formatting)
    _add_compare(commands, formatting)
    return parser


def _add_run(commands, formatting: dict) -> None:
    """``run``: what to evaluate and where the report goes; then :func:`_add_run_options`."""
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
        type=_benchmark_list,
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
    _add_run_options(run)


def _add_run_options(run: argparse.ArgumentParser) -> None:
    """How ``run`` generates and scores (batches, token limit, prompt format, program-of-thought, what it leaves
    out, dtype, device) and whether it replaces another run's report; in --help's order."""
    run.add_argument(
        "--batch-size",
        type=int,
        help="prompts per generation / teacher-forcing batch (default: 16 on a GPU, 4 on a CPU)",
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
    run.add_argument(
        "--estimate",
        action="store_true",
        help="print how long this run would take here (the model loaded and timed on a few tokens; nothing is "
        "written), and stop",
    )
    run.add_argument("--no-generate", action="store_true", help="teacher-forced digit metrics only")
    run.add_argument("--no-teacher-forced", action="store_true", help="generation metrics only")
    run.add_argument(
        "--dtype",
        choices=("auto", "float32", "bfloat16", "float16"),
        default="auto",
        help="auto: float32 on CPU, bfloat16 (or float16) on GPU (default: auto)",
    )
    run.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ... (default: auto)")


def _add_score(commands, formatting: dict) -> None:
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


def _add_lm_eval_tasks(commands, formatting: dict) -> None:
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
        "--benchmarks",
        type=_benchmark_list,
        default="all",
        help=f"comma-separated sets, or all (default): {_BENCHMARKS_HELP}",
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


def _add_compare(commands, formatting: dict) -> None:
    compare = commands.add_parser(
        "compare",
        help="the verdict of two runs (or two groups of seeds) and side-by-side tables of several reports",
        description="The verdict first: for two reports, or --baseline and --candidate runs (several seeds an arm), "
        "paired by problem on the problems every run scored, per set each accuracy with its standard error, the "
        "difference with a 95 % interval (one run an arm: Tango's score interval and McNemar's exact p, two "
        "checkpoints compared; several runs an arm: the training run as the replicate, Welch's t) (p Holm-adjusted "
        "over the sets), the smallest difference the sample detects, the same for mACC, and one "
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
        "--intersection",
        action="store_true",
        help="pair runs that scored different problems on the problems they all scored (the verdict line says how "
        "many each arm dropped); without it such runs are refused",
    )
    compare.add_argument(
        "--resamples",
        type=_resamples,
        default=None,
        help="has no effect: accepted (100 to 100,000, with a warning) so that older scripts still run; the "
        "verdict no longer resamples",
    )


def _resamples(text: str) -> int:
    """--resamples: an integer from 100 to 100,000 (it no longer changes the verdict; bounded all the same)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 100 <= value <= 100_000:
        raise argparse.ArgumentTypeError(f"{value}: give 100 to 100,000")
    return value
