"""``del-eval score --lm-eval-samples DIR``: the generations lm-evaluation-harness logged (``lm_eval ...
--log_samples --output_path DIR``) scored by del-plugin's readers, into the report ``del-eval run`` and ``del-eval
score`` write, so that ``del-eval compare`` puts an lm-eval run (any backend: hf, vLLM) beside a ``del-eval run``.

lm-eval writes, per run, ``samples_<task>_<date>.jsonl`` (one line per doc: the doc, the prompt sent, the
generation ``resps``) and ``results_<date>.json`` (the task configs, the model), under a folder per model; DIR
may be any folder above them. Read are:

* the tasks of ``del-eval lm-eval-tasks`` (``del_gsm8k`` … ``del_mmlu_math``): a doc's ``id`` is its problem's
  index in the set's file; its question and reference must be those of that problem (else the tasks were written
  from another file: an error). lm-eval's own verdicts (``acc``, the same reader, and ``math_verify`` where the
  tasks have it) are compared with these, and the prompt with what the task's prompt format sends: a difference
  is a warning in the report;
* lm-eval's own GSM8K tasks (:data:`LM_EVAL_GSM8K_TASKS`, on the same test set): their docs are matched to GSM8K's
  problems by question text, and the raw generation is scored with the paper's GSM8K reader (lm-eval's prompt is
  its own, few-shot: the report says so).

Per task the newest run in DIR is read (the others are named in the log). Nothing else in DIR is read.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..benchmarks.sets import BENCHMARKS
from ..errors import UnusableInput, decode_text, is_unicode_text, json_value, read_input_bytes
from ..eval_extra import require_eval_extra
from ..reports.run_report import RunReport
from ..run.score import score_outputs
from ..scoring.tasks import EvalTask, benchmark_task, refuse_modified_sets
from .tasks import METRIC, METRIC_MATH_VERIFY, benchmark_of_task

LOG = logging.getLogger(__name__)

__all__ = [
    "LM_EVAL_GSM8K_TASKS",
    "LmEvalSet",
    "find_lm_eval_samples",
    "model_of_run",
    "read_lm_eval_samples",
    "score_lm_eval_samples",
]

# lm-eval's tasks whose docs are GSM8K's test set, one generation per doc
LM_EVAL_GSM8K_TASKS = ("gsm8k", "gsm8k_cot", "gsm8k_cot_zeroshot", "gsm8k_cot_llama")
_SAMPLES = re.compile(r"samples_(?P<task>.+)_(?P<date>\d{4}-\d{2}-\d{2}T[0-9.\-]+)\.jsonl")


@dataclass
class LmEvalSet:
    """The generations of one lm-eval task, for one of the paper's sets: ``outputs`` by problem id, and what the
    run's ``results_<date>.json`` says of it (``config``: the task's config; ``run``: the model and settings)."""

    benchmark: str
    task: str
    path: Path
    outputs: dict[int, str]
    lm_eval_verdicts: dict[int, float] = field(default_factory=dict)
    lm_eval_math_verify: dict[int, float] = field(default_factory=dict)
    prompts: dict[int, str] = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    run: dict = field(default_factory=dict)

    @property
    def ours(self) -> bool:
        return self.task.startswith("del_")


def find_lm_eval_samples(folder: str | Path) -> dict[str, Path]:
    """``{task: samples file}`` for the tasks read (see the module docs), the newest run of each, found anywhere
    under ``folder``. A folder without any is a FileNotFoundError."""
    root = Path(folder)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such folder (give the --output_path of `lm_eval ... --log_samples`)")
    runs: dict[str, list[tuple[str, Path]]] = {}
    for path in sorted(root.rglob("samples_*.jsonl")):
        match = _SAMPLES.fullmatch(path.name)
        if match and (benchmark_of_task(match["task"]) or match["task"] in LM_EVAL_GSM8K_TASKS):
            runs.setdefault(match["task"], []).append((match["date"], path))
    if not runs:
        raise FileNotFoundError(
            f"{root}: no lm-eval samples of the del_* tasks or of {', '.join(LM_EVAL_GSM8K_TASKS)} "
            "(samples_<task>_<date>.jsonl: run lm_eval with --log_samples --output_path)"
        )
    newest = {}
    for task, found in sorted(runs.items()):
        found.sort()
        newest[task] = found[-1][1]
        if len(found) > 1:
            LOG.info(
                "%s: reading the newest run, %s (older: %s)",
                task,
                found[-1][1],
                ", ".join(str(p) for _, p in found[:-1]),
            )
    return newest


def _results_of(samples: Path, task: str) -> tuple[dict, dict]:
    """The task's config and the run's model settings from the ``results_<date>.json`` beside ``samples``."""
    date = _SAMPLES.fullmatch(samples.name)["date"]
    path = samples.with_name(f"results_{date}.json")
    if not path.is_file():
        return {}, {}
    results = _json_object(decode_text(read_input_bytes(path, "lm-eval results file"), path, "results file"), path)
    config = _object_at(results, "config", path)
    model_args = config.get("model_args")
    if isinstance(model_args, str):  # "pretrained=...,dtype=..." in some lm-eval versions
        model_args = dict(part.split("=", 1) for part in model_args.split(",") if "=" in part)
    elif model_args is not None and not isinstance(model_args, dict):
        raise UnusableInput(
            f"{path}: `config.model_args` is {type(model_args).__name__}, not lm-eval's: {_NOT_LM_EVAL}"
        )
    run = {
        "results": str(path),
        "model": config.get("model"),
        "model_args": model_args,
        "chat_template_applied": results.get("chat_template") is not None,
        "lm_eval_version": results.get("lm_eval_version"),
    }
    task_config = _object_at(_object_at(results, "configs", path), task, path)
    if not isinstance(task_config.get("metadata", {}), dict):
        raise UnusableInput(f"{path}: `configs.{task}.metadata` is not an object: {_NOT_LM_EVAL}")
    return task_config, run


_NOT_LM_EVAL = "not a file lm-eval wrote (give the --output_path of `lm_eval ... --log_samples`)"


def _json_object(text: str, where) -> dict:
    try:
        value = json_value(text)
    except ValueError as err:
        raise UnusableInput(f"{where}: {err}: {_NOT_LM_EVAL}") from None
    if not isinstance(value, dict):
        raise UnusableInput(f"{where}: a JSON {type(value).__name__}, not an object: {_NOT_LM_EVAL}")
    return value


def _object_at(parent: dict, key: str, where) -> dict:
    """``parent[key]``, an object (absent or null: an empty one); anything else is not lm-eval's."""
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UnusableInput(f"{where}: `{key}` is {type(value).__name__}, not an object: {_NOT_LM_EVAL}")
    return value


# where lm-eval's model_args name a LoRA adapter: the hf backend's peft, the vllm backend's lora_local_path
_ADAPTER_ARGS = ("peft", "lora_local_path")


def model_of_run(model_args: dict | None) -> tuple[str | None, str | None]:
    """``(base model, adapter)`` of an lm-eval run, from its ``model_args`` (``pretrained=``, ``peft=``), either
    None where not given."""
    model_args = model_args if isinstance(model_args, dict) else {}
    base = model_args.get("pretrained")
    adapter = next((model_args[k] for k in _ADAPTER_ARGS if model_args.get(k)), None)
    return (None if base is None else str(base)), (None if adapter is None else str(adapter))


def _read_lines(path: Path) -> list[dict]:
    text = decode_text(read_input_bytes(path, "lm-eval samples file"), path, "lm-eval samples file")
    return [_json_object(line, f"{path}:{number}") for number, line in enumerate(text.split("\n"), 1) if line.strip()]


def _generation(row: dict, where: str) -> str:
    resps = row.get("resps")
    if not (isinstance(resps, list) and resps and isinstance(resps[0], list) and resps[0]):
        shape = "missing" if resps is None else json.dumps(resps)[:40]
        raise UnusableInput(
            f"{where}: no generation (`resps` is {shape}, not lm-eval's list of lists of texts): not the samples of a "
            "generation task"
        )
    text = resps[0][0]
    if not isinstance(text, str):
        raise UnusableInput(f"{where}: the generation is {type(text).__name__}, not text")
    if not is_unicode_text(text):
        raise UnusableInput(f"{where}: the generation holds a lone surrogate escape (\\ud800-\\udfff), not text")
    return text


def _prompt(row: dict) -> str | None:
    """The prompt lm-eval sent: ``arguments.gen_args_0.arg_0``, or ``arguments[0][0]`` (older versions logged a
    list of ``[prompt, generation settings]``); None when neither."""
    arguments = row.get("arguments")
    if isinstance(arguments, dict):
        first = arguments.get("gen_args_0")
        prompt = first.get("arg_0") if isinstance(first, dict) else None
    elif isinstance(arguments, list) and arguments and isinstance(arguments[0], list) and arguments[0]:
        prompt = arguments[0][0]
    else:
        prompt = None
    return prompt if isinstance(prompt, str) else None


def read_lm_eval_samples(folder: str | Path, benchmark_dir: str | Path | None = None) -> list[LmEvalSet]:
    """The sets in ``folder``'s lm-eval samples (see the module docs), in the paper's order. Raises
    FileNotFoundError (nothing to read, a set's file missing) or ValueError (a sample that is not one of the set's
    problems)."""
    from ..benchmarks.sets import load_benchmark

    found = find_lm_eval_samples(folder)
    by_benchmark: dict[str, list[str]] = {}
    for task in found:
        by_benchmark.setdefault(benchmark_of_task(task) or "gsm8k", []).append(task)
    sets = []
    for benchmark, tasks in by_benchmark.items():
        # the del_ task first: it is the paper's prompt
        tasks.sort(key=lambda t: (benchmark_of_task(t) is None, t))
        task = tasks[0]
        if len(tasks) > 1:
            LOG.warning("%s: scoring %s; the samples of %s are not scored", benchmark, task, ", ".join(tasks[1:]))
        loaded = load_benchmark(benchmark, benchmark_dir)
        problems = loaded.problems
        path = found[task]
        config, run = _results_of(path, task)
        chosen = LmEvalSet(benchmark, task, path, {}, config=config, run=run)
        by_question = None if chosen.ours else {p.question: p for p in problems}
        for number, row in enumerate(_read_lines(path), 1):
            where = f"{path}:{number}"
            doc = row.get("doc") if isinstance(row, dict) else None
            if not isinstance(doc, dict):
                raise ValueError(f"{where}: no `doc`: not an lm-eval samples file")
            if chosen.ours:
                problem_id = doc.get("id")
                if isinstance(problem_id, bool) or not isinstance(problem_id, int):
                    raise ValueError(f"{where}: doc id {problem_id!r} is not a problem index of {benchmark}")
                if not 0 <= problem_id < len(problems):
                    raise ValueError(f"{where}: doc id {problem_id!r} is not a problem of {benchmark}")
                problem = problems[problem_id]
                if doc.get("question") != problem.question or doc.get("reference") != problem.reference:
                    raise ValueError(
                        f"{where}: doc {problem_id} is not {benchmark}'s problem {problem_id} in {loaded.path}: the "
                        "tasks were written from another file"
                    )
            else:
                problem = by_question.get(str(doc.get("question", "")).strip())
                if problem is None:
                    raise ValueError(f"{where}: the question is not one of GSM8K's test problems")
            text = _generation(row, where)
            if chosen.outputs.get(problem.id, text) != text:
                raise ValueError(f"{where}: problem {problem.id} has two different generations")
            chosen.outputs[problem.id] = text
            if chosen.ours and isinstance(row.get(METRIC), (int, float)):
                chosen.lm_eval_verdicts[problem.id] = float(row[METRIC])
            if chosen.ours and isinstance(row.get(METRIC_MATH_VERIFY), (int, float)):
                chosen.lm_eval_math_verify[problem.id] = float(row[METRIC_MATH_VERIFY])
            prompt = _prompt(row)
            if prompt is not None:
                chosen.prompts[problem.id] = prompt
        if not chosen.outputs:
            raise ValueError(f"{path}: no samples")
        sets.append(chosen)
    order = list(BENCHMARKS)
    return sorted(sets, key=lambda s: order.index(s.benchmark))


def _prompt_warning(found: LmEvalSet, task: EvalTask) -> str | None:
    """What is wrong with the prompts lm-eval sent for a del_ task, given its prompt format (None: nothing). An
    alpaca prompt is known exactly; a chat prompt must hold the question inside a template (and end with the
    response prefix of the option sets)."""
    prompt_format = (found.config.get("metadata") or {}).get("prompt_format")
    if not found.ours or prompt_format not in ("alpaca", "chat") or not found.prompts:
        return None
    from .tasks import lm_eval_prompt

    prefix = task.response_prefix
    wrong = 0
    for problem in task.problems:
        sent = found.prompts.get(problem.id)
        if sent is None:
            continue
        if prompt_format == "alpaca":
            wrong += sent != lm_eval_prompt(problem.question, prefix, "alpaca")
        else:
            wrong += sent.strip() == problem.question.strip() or problem.question not in sent
            wrong += bool(prefix) and not sent.endswith(prefix)
    if not wrong:
        return None
    fix = (
        "run lm_eval with --apply_chat_template for chat tasks"
        if prompt_format == "chat"
        else "run lm_eval without --apply_chat_template for alpaca tasks"
    )
    return (
        f"{task.name}: lm-eval's prompts are not what a {prompt_format} task sends ({fix}): these numbers are not "
        "comparable with del-eval run's"
    )


def _refuse_several_models(folder, found: list[LmEvalSet]) -> None:
    """One report is of one model: samples found under ``folder`` from runs of different models (lm-eval writes
    one folder per model under its --output_path) are an :class:`~..errors.UnusableInput`."""
    folders = {s.path.parent for s in found}
    unknown = [s for s in found if not s.run.get("model_args")]
    if len(folders) > 1 and unknown:  # a folder without its results file: its model cannot be told
        raise UnusableInput(
            f"{folder}: samples in {len(folders)} folders, and the model of {unknown[0].task} is not known (no "
            f"results_<date>.json beside {unknown[0].path}), so they cannot be told to be one model's; give the "
            "folder of one model's run (lm-eval writes one per model under its --output_path)"
        )
    models: dict[str, list[str]] = {}
    for lm_set in found:
        if lm_set.run.get("model_args"):
            key = json.dumps([lm_set.run.get("model"), lm_set.run["model_args"]], sort_keys=True)
            models.setdefault(key, []).append(f"{lm_set.task} ({lm_set.path.parent})")
    if len(models) > 1:
        listed = "; ".join(f"{json.loads(key)[1]}: {', '.join(tasks)}" for key, tasks in models.items())
        raise UnusableInput(
            f"{folder}: the samples found there come from {len(models)} models or model settings ({listed}); give "
            "the folder of one model's run (lm-eval writes one per model under its --output_path)"
        )


def score_lm_eval_samples(
    folder: str | Path,
    out_dir: str | Path,
    *,
    benchmark_dir: str | Path | None = None,
    name: str | None = None,
    overwrite: bool = False,
    allow_modified: bool = False,
) -> dict:
    """Score the lm-eval samples under ``folder`` (see the module docs); write ``out_dir``/report.json,
    report.md and generations.jsonl, as ``del-eval score`` does (the report of another run there is an
    :class:`~..errors.OutputError` unless ``overwrite``; a SimulEq or SAT file that is not the authors' is refused
    unless ``allow_modified``); return the report."""
    require_eval_extra()
    found = read_lm_eval_samples(folder, benchmark_dir)
    _refuse_several_models(folder, found)
    tasks = []
    for lm_set in found:
        task = benchmark_task(lm_set.benchmark, benchmark_dir, None)
        task.problems = [p for p in task.problems if p.id in lm_set.outputs]
        tasks.append(task)
    refuse_modified_sets(tasks, allow_modified)
    base, adapter = model_of_run(found[0].run.get("model_args"))
    report = RunReport.open(
        Path(out_dir),
        command="score",
        # named as del-eval run names a model: after the adapter, else the model (the twins of a sweep differ)
        name=name or Path(adapter or base or str(folder)).name,
        model={"path": base, "adapter": adapter, "predictions": str(folder)},
        settings=_settings(found),
        resume_key={"lm_eval_samples": {s.task: str(s.path) for s in found}},
        tasks=tasks,
        overwrite=overwrite,
    )
    with report.scoring():
        for lm_set, task in zip(found, tasks):
            if not report.is_complete(task.name):  # one scored before (the same samples) is kept as it is
                _score_set(lm_set, task, report)
    return report.data


def _settings(found: list[LmEvalSet]) -> dict:
    """The report's settings: the prompt format and token limit the tasks were written with (where they agree),
    and lm-eval's run."""
    first = found[0]
    metadata = [(s.config.get("metadata") or {}) for s in found]
    formats = {m.get("prompt_format") for m in metadata if m.get("prompt_format")}
    new_tokens = {m.get("max_new_tokens") for m in metadata if m.get("max_new_tokens")}
    return {
        "limit": None,
        "program_of_thought": False,
        "prompt_format": formats.pop() if len(formats) == 1 else None,
        "max_new_tokens": new_tokens.pop() if len(new_tokens) == 1 else None,
        "lm_eval": {
            "tasks": {s.benchmark: s.task for s in found},
            "samples": {s.benchmark: str(s.path) for s in found},
            **{k: v for k, v in first.run.items() if k != "results"},
        },
    }


def _score_set(lm_set: LmEvalSet, task: EvalTask, report: RunReport) -> None:
    """Score one set's samples into ``report``, warning where its prompts are not del-eval's or where lm-eval's
    logged verdicts differ from ours."""
    if task.source_warning():
        report.warn(task.source_warning())
    if not lm_set.ours:
        report.warn(
            f"{task.name}: scored from lm-eval's task {lm_set.task}, whose prompt is lm-eval's own "
            "(few-shot), not the paper's: the numbers are not comparable with del-eval run's"
        )
    warning = _prompt_warning(lm_set, task)
    if warning:
        report.warn(warning)
    verdicts = score_outputs(task, lm_set.outputs, report)
    for metric, theirs, ours in (
        (METRIC, lm_set.lm_eval_verdicts, {i: v.correct for i, v in verdicts.items()}),
        (METRIC_MATH_VERIFY, lm_set.lm_eval_math_verify, {i: v.math_verify for i, v in verdicts.items()}),
    ):
        differ = sum(i in theirs and ours[i] is not None and theirs[i] != float(ours[i]) for i in ours)
        if differ:
            report.warn(
                f"{task.name}: {differ} of {len(task.problems)} verdicts differ from the `{metric}` lm-eval "
                f"logged for {lm_set.task} (tasks written by another del-plugin version?)"
            )
