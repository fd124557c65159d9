"""The paper's seven benchmarks as lm-evaluation-harness tasks: ``del-eval lm-eval-tasks`` writes them, and
lm-eval runs them with any of its backends (``--model hf`` or ``vllm``).

The folder written holds, per set, ``del_<set>.yaml`` (``del_gsm8k`` … ``del_mmlu_math``), the group
``del_paper.yaml`` (its ``acc`` is mACC: the unweighted mean of the sets' accuracies, as :func:`~..reports.summary.macc`
computes it) and ``del_paper_tasks.py``, the functions the YAMLs name with ``!function``. Those are del-plugin's
own, imported from this module, not copies:

* ``process_docs_<set>``: lm-eval reads the set's file (``dataset_path: json``, the file ``del-eval run`` reads:
  the package's gzipped copy, or the user's SimulEq/SAT under ``--benchmark-dir``); the docs are replaced by
  del-plugin's reading of the same file (:func:`~..benchmarks.sets.load_benchmark`, sha256 checked), one doc per
  problem: ``id`` (the problem's 0-based index in its file, as in del-eval's reports), ``question`` as the
  paper's harness writes it, ``reference`` in the form its scorer compares, ``solution`` (the reference solution
  where the set has one: math-verify reads MATH's answer there), and ``prompt``, what lm-eval sends;
* ``process_results_<set>``: the set's answer reader and scorer (:meth:`~..benchmarks.sets.Benchmark.score`), the
  metric ``acc`` (1 correct, 0 not); and, when math-verify is installed where the tasks are written, the metric
  ``math_verify``: math-verify's verdict on the same generation (:mod:`..scoring.math_verify_scoring`), as
  ``del-eval run`` reports it beside the paper's.

Prompts and decoding are ``del-eval run``'s: zero-shot, greedy (``do_sample: false``), the stop strings of
:data:`~..run.generation.STOP_STRINGS` (lm-eval adds the model's EOS), ``max_gen_toks`` = ``del-eval run
--max-new-tokens``. ``alpaca`` (the paper's format): ``prompt`` is Axolotl's alpaca text with the question, plus
the response prefix of the option sets. ``chat``: ``prompt`` is the question, which lm-eval puts into the model's
chat template as one user turn when run with ``--apply_chat_template``; the option sets' response prefix is the
task's ``gen_prefix``, which lm-eval writes after the template's generation prompt.

Program-of-thought (``del-eval run --program-of-thought``) is not among the tasks: they are chain-of-thought, as
``del-eval run`` is by default, since a program-of-thought task would execute model-written code inside lm-eval.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from ...version import __version__
from ..benchmarks.names import BENCHMARK_NAMES, MAX_NEW_TOKENS, missing_benchmarks, resolve_benchmark_names
from ..benchmarks.sets import BENCHMARKS, BenchmarkSet, load_benchmark, modified_set_error
from ..output import prepare_output_dir, write_text_atomic
from ..run.generation import ALPACA_PROMPT, STOP_STRINGS
from ..scoring.math_verify_scoring import math_verify_available, math_verify_verdict

__all__ = [
    "GROUP",
    "HELPERS_MODULE",
    "LM_EVAL_PROMPT_FORMATS",
    "METRIC",
    "METRIC_MATH_VERIFY",
    "benchmark_of_task",
    "docs_processor",
    "lm_eval_prompt",
    "results_processor",
    "task_name",
    "write_lm_eval_tasks",
]

GROUP = "del_paper"
TASK_PREFIX = "del_"
HELPERS_MODULE = "del_paper_tasks"
_HEADER_START = "# Written by `del-eval lm-eval-tasks`"
METRIC = "acc"
METRIC_MATH_VERIFY = "math_verify"
LM_EVAL_PROMPT_FORMATS = ("alpaca", "chat")
# the version of the task definitions (lm-eval reports it per task): raise it when what a task sends or scores changes
TASK_VERSION = 2


def task_name(benchmark: str) -> str:
    """``gsm8k`` -> ``del_gsm8k``."""
    return TASK_PREFIX + benchmark


def benchmark_of_task(task: str) -> str | None:
    """``del_gsm8k`` -> ``gsm8k``; None for a task that is not one of these."""
    if task.startswith(TASK_PREFIX) and task[len(TASK_PREFIX) :] in BENCHMARKS:
        return task[len(TASK_PREFIX) :]
    return None


def lm_eval_prompt(question: str, response_prefix: str, prompt_format: str) -> str:
    """The ``prompt`` field of a doc: for ``alpaca`` the whole text ``del-eval run`` sends (the alpaca prompt and
    the response prefix); for ``chat`` the user turn, the question (the template and the prefix are lm-eval's
    ``--apply_chat_template`` and the task's ``gen_prefix``)."""
    if prompt_format == "alpaca":
        return ALPACA_PROMPT.format(question=question) + response_prefix
    if prompt_format == "chat":
        return question
    raise ValueError(f"prompt format must be one of {', '.join(LM_EVAL_PROMPT_FORMATS)}, got {prompt_format!r}")


def docs_processor(benchmark: str, benchmark_dir: str | None, prompt_format: str) -> Callable:
    """The ``process_docs`` of task ``del_<benchmark>``: the docs lm-eval read from the set's file, replaced by
    del-plugin's problems of the same file (see the module docs)."""

    def process_docs(dataset):
        import datasets

        loaded = load_benchmark(benchmark, benchmark_dir)
        if len(dataset) != loaded.total:
            raise ValueError(
                f"{task_name(benchmark)}: lm-eval read {len(dataset)} rows from {loaded.path}, del-plugin "
                f"{loaded.total} problems: the file is not in the set's layout"
            )
        prefix = loaded.benchmark.response_prefix
        return datasets.Dataset.from_list(
            [
                {
                    "id": p.id,
                    "question": p.question,
                    "reference": p.reference,
                    "solution": p.solution or "",
                    "prompt": lm_eval_prompt(p.question, prefix, prompt_format),
                }
                for p in loaded.problems
            ]
        )

    return process_docs


def results_processor(benchmark: str, math_verify: bool = False) -> Callable:
    """The ``process_results`` of task ``del_<benchmark>``: the set's scorer on the generation, and with
    ``math_verify`` math-verify's verdict too."""
    scored = BENCHMARKS[benchmark]

    def process_results(doc: dict, results: Sequence[str]) -> dict:
        metrics = {METRIC: float(scored.score(results[0], doc["reference"]).correct)}
        if math_verify:
            equivalent = math_verify_verdict(
                results[0], doc["reference"], scored.scoring, scored.letters, doc.get("solution") or None
            )
            metrics[METRIC_MATH_VERIFY] = float(bool(equivalent))
        return metrics

    return process_results


def _metrics() -> tuple[str, ...]:
    """The tasks' metrics: ``acc``, and ``math_verify`` where math-verify is installed (when they are written)."""
    return (METRIC, METRIC_MATH_VERIFY) if math_verify_available() else (METRIC,)


def _quoted(text: str) -> str:
    # a JSON string is a YAML double-quoted scalar
    return json.dumps(text, ensure_ascii=False)


def _task_yaml(loaded: BenchmarkSet, prompt_format: str, max_new_tokens: int, header: str) -> str:
    benchmark = loaded.benchmark
    name = benchmark.name
    lines = [
        header,
        f"task: {task_name(name)}",
        "dataset_path: json",
        "dataset_kwargs:",
        "  data_files:",
        f"    test: {_quoted(loaded.path)}",
        "test_split: test",
        f"process_docs: !function {HELPERS_MODULE}.process_docs_{name}",
        "output_type: generate_until",
        'doc_to_text: "{{prompt}}"',
        "doc_to_target: reference",
    ]
    if prompt_format == "chat" and benchmark.response_prefix:
        lines.append(f"gen_prefix: {_quoted(benchmark.response_prefix)}")
    lines += [
        "num_fewshot: 0",
        "generation_kwargs:",
        "  until:",
        *[f"    - {_quoted(s)}" for s in STOP_STRINGS],
        "  do_sample: false",
        "  temperature: 0.0",
        f"  max_gen_toks: {max_new_tokens}",
        f"process_results: !function {HELPERS_MODULE}.process_results_{name}",
        "metric_list:",
        *[
            line
            for m in _metrics()
            for line in (f"  - metric: {m}", "    aggregation: mean", "    higher_is_better: true")
        ],
        "metadata:",
        f"  version: {TASK_VERSION}",
        f"  del_plugin_version: {_quoted(__version__)}",
        f"  benchmark: {name}",
        f"  prompt_format: {prompt_format}",
        f"  max_new_tokens: {max_new_tokens}",
        f"  source_sha256: {loaded.sha256}",
        f"  source_verified: {str(loaded.verified).lower()}",
    ]
    return "\n".join(lines) + "\n"


def _group_yaml(names: Sequence[str], header: str) -> str:
    return (
        "\n".join(
            [
                header,
                f"group: {GROUP}",
                "task:",
                *[f"  - {task_name(n)}" for n in names],
                "aggregate_metric_list:",
                *[
                    line
                    for m in _metrics()
                    for line in (f"  - metric: {m}", "    aggregation: mean", "    weight_by_size: false")
                ],
                "metadata:",
                f"  version: {TASK_VERSION}",
            ]
        )
        + "\n"
    )


def _helpers_py(names: Sequence[str], benchmark_dir: str | None, prompt_format: str) -> str:
    lines = [
        f'"""Written by `del-eval lm-eval-tasks` (del-plugin {__version__}): the docs and the scoring of the del_*',
        "tasks, del-plugin's own (del_plugin.evaluation.lm_eval.tasks), so lm-eval needs del-plugin installed.",
        'Write this folder again with that command rather than editing it."""',
        "",
        "from del_plugin.evaluation.lm_eval.tasks import docs_processor, results_processor",
        "",
        f"BENCHMARK_DIR = {benchmark_dir!r}",
        f"PROMPT_FORMAT = {prompt_format!r}",
        f"MATH_VERIFY = {METRIC_MATH_VERIFY in _metrics()!r}",
        "",
    ]
    for name in names:
        lines.append(f"process_docs_{name} = docs_processor({name!r}, BENCHMARK_DIR, PROMPT_FORMAT)")
        lines.append(f"process_results_{name} = results_processor({name!r}, MATH_VERIFY)")
    return "\n".join(lines) + "\n"


def write_lm_eval_tasks(
    out_dir: str | Path,
    *,
    benchmarks: str | Sequence[str] = "all",
    benchmark_dir: str | Path | None = None,
    prompt_format: str = "alpaca",
    max_new_tokens: int = MAX_NEW_TOKENS,
    allow_modified: bool = False,
) -> list[Path]:
    """Write the lm-eval tasks of ``benchmarks`` (names or ``"all"``) and the group ``del_paper`` into
    ``out_dir``; return the files written. Every set is read and checked first: a missing file is a
    FileNotFoundError naming the set and the path looked at, a SimulEq or SAT file that is not the authors' a
    :class:`~..benchmarks.sets.ModifiedBenchmarkError` unless ``allow_modified``, and nothing is written."""
    if prompt_format not in LM_EVAL_PROMPT_FORMATS:
        raise ValueError(
            f"--prompt-format must be one of {', '.join(LM_EVAL_PROMPT_FORMATS)} for lm-eval tasks, got "
            f"{prompt_format!r} (lm-eval has no model when the tasks are written, so there is no auto)"
        )
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be an integer >= 1, got {max_new_tokens!r}")
    names = resolve_benchmark_names(benchmarks)
    # every path first, so that all missing sets are named at once, then every file read and checked
    missing = missing_benchmarks(names, benchmark_dir)
    if missing is not None:
        raise missing
    directory = None if benchmark_dir is None else str(Path(benchmark_dir).resolve())
    loaded = [load_benchmark(name, directory) for name in names]
    for bench in loaded:
        if not bench.verified and not allow_modified:
            raise modified_set_error(bench.name, bench.path, bench.sha256, bench.benchmark.sha256)
    out = prepare_output_dir(out_dir)
    header = (
        f"{_HEADER_START} (del-plugin {__version__}), prompt format {prompt_format}: "
        f"lm_eval --tasks {GROUP} --include_path {out}"
    )
    # Tasks an earlier write made for other sets would name helpers this write no longer defines, and lm-eval reads
    # every YAML under --include_path: they go first. Then the helpers, the tasks and the group last, each by
    # rename: a write stopped half-way leaves no task naming a missing helper, no group naming a missing task.
    for name in set(BENCHMARK_NAMES) - set(names):
        stale = out / f"{task_name(name)}.yaml"
        if stale.is_file() and stale.read_text(encoding="utf-8").startswith(_HEADER_START):
            stale.unlink()
    files = {out / f"{HELPERS_MODULE}.py": _helpers_py(names, directory, prompt_format)}
    files |= {out / f"{task_name(s.name)}.yaml": _task_yaml(s, prompt_format, max_new_tokens, header) for s in loaded}
    files[out / f"{GROUP}.yaml"] = _group_yaml(names, header)
    for path, text in files.items():
        write_text_atomic(path, text)
    return list(files)
