"""One evaluation, phase by phase: plan the sets (read and checked before a model loads), open the report (resuming
the sets a stopped run already scored), load the model, then per set the teacher-forced digit metrics and the
generations, scored as they come.

Results are saved as they come: every generation is appended to ``generations.jsonl`` at once, ``report.json``
is rewritten (by rename) after every batch, and the report is finished even when the run stops half-way (an error,
Ctrl-C, SIGTERM), with ``"status": "partial"`` and the numbers of the finished problems. Run the same command again
with the same ``--out`` and it starts from the sets not yet complete; after a hard kill (SIGKILL) too, with every
problem in ``generations.jsonl`` once (:class:`~..reports.run_report.RunReport`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ..benchmarks.names import MAX_NEW_TOKENS
from ..benchmarks.program import PROGRAM_TIMEOUT_S, program_sandbox
from ..benchmarks.readers import Verdict
from ..benchmarks.sets import Problem
from ..errors import UnusableInput, UsageError
from ..eval_extra import require_eval_extra
from ..output import read_jsonl
from ..reports.files import GENERATIONS_FILE
from ..reports.run_report import RunReport
from ..scoring.metrics import GenerationMetrics, ProgramCounts
from ..scoring.tasks import EvalTask, generation_record, plan_tasks
from ..scoring.teacher_forced import TeacherForcedStats
from .score import program_verdicts

LOG = logging.getLogger(__name__)

__all__ = ["EvalSettings", "GENERATIONS_FILE", "evaluate", "for_device", "load_for_run", "read_generations"]


@dataclass(frozen=True)
class EvalSettings:
    """How to evaluate. ``limit``: the first N problems of each set. ``program_of_thought``: run GSM8K, MATH,
    SVAMP and SimulEq as the paper does, asking for a program and executing it (:mod:`..benchmarks.program`),
    chain-of-thought for the problems it leaves unanswered; off by default, since it executes model-written code.
    ``unsandboxed_programs``: run those programs without the sandbox (only the limits)."""

    batch_size: int | None = None  # None: chosen for the device (generation.DEVICE_BATCH_SIZES)
    max_new_tokens: int = MAX_NEW_TOKENS
    prompt_format: str = "auto"
    limit: int | None = None
    generate: bool = True
    teacher_forced: bool = True
    program_of_thought: bool = False
    program_timeout_s: float = PROGRAM_TIMEOUT_S
    unsandboxed_programs: bool = False
    dtype: str = "auto"
    device: str = "auto"

    def __post_init__(self) -> None:
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1, got {self.limit}")
        if self.program_timeout_s <= 0:
            raise ValueError(f"program_timeout_s must be > 0, got {self.program_timeout_s}")
        if self.unsandboxed_programs and not self.program_of_thought:
            raise UsageError("unsandboxed_programs (--unsandboxed-programs) needs program_of_thought")
        if not (self.generate or self.teacher_forced):
            raise ValueError("nothing to do: both generation and the teacher-forced metrics are off")

    def resume_key(self) -> dict:
        """The settings a resumed run must share with the run it continues (those that change its results)."""
        keys = ("max_new_tokens", "prompt_format", "limit", "generate", "teacher_forced", "program_of_thought")
        return {k: getattr(self, k) for k in keys} | {"dtype": self.dtype}


def evaluate(
    model: str | Path,
    data: Sequence[str | Path] = (),
    out_dir: str | Path | None = None,
    *,
    benchmarks: str | Sequence[str] = (),
    benchmark_dir: str | Path | None = None,
    adapter: str | Path | None = None,
    name: str | None = None,
    settings: EvalSettings = EvalSettings(),
    overwrite: bool = False,
    allow_modified: bool = False,
) -> dict:
    """Evaluate ``model`` (+ ``adapter``) on the JSONL ``data`` files and the paper's ``benchmarks`` (names, or
    ``"all"``; SimulEq and SAT read from ``benchmark_dir``); write ``out_dir``/report.json, report.md,
    generations.jsonl and plots; return the report (schema in docs/evaluation.md).

    Before anything is written or loaded: a missing or unreadable set, an unknown name, a user's SimulEq or SAT
    file that is not the authors' (unless ``allow_modified``), a model that is neither a folder nor in the Hugging
    Face cache (:class:`~..errors.UnusableInput`, a ValueError; FileNotFoundError) or a missing extra
    (``pip install del-plugin[eval]``, ImportError) is an error. ``out_dir`` holding the report of the same run
    resumes it (the complete sets are kept); holding another run's report it is an :class:`~..errors.OutputError`
    unless ``overwrite`` (the earlier report is then replaced when this run is complete, not before)."""
    from .generation import check_model_source

    if out_dir is None:
        raise ValueError("evaluate needs out_dir, the folder the report is written to")
    require_eval_extra()
    tasks = plan_tasks(data, benchmarks, benchmark_dir, settings.limit, allow_modified=allow_modified)
    warnings = _log_plan(tasks)
    runs_programs = settings.program_of_thought and settings.generate and any(t.runs_program_of_thought for t in tasks)
    sandbox = program_sandbox(settings.unsandboxed_programs) if runs_programs else None  # before the model loads
    source = check_model_source(model, adapter)
    name = name or (Path(adapter).name if adapter else Path(model).name)
    # the same command on weights trained again into the same folder is another run, not one to resume
    weights = {"weights": source.weights_fingerprint()}
    report = RunReport.open(
        Path(out_dir),
        command="run",
        name=name,
        model={"path": str(model), "adapter": None if adapter is None else str(adapter)},
        settings=asdict(settings) | {"program_sandbox": sandbox},
        resume_key={"model": str(model), "adapter": None if adapter is None else str(adapter)}
        | weights
        | settings.resume_key(),
        tasks=tasks,
        overwrite=overwrite,
    )
    for warning in warnings:
        report.warn(warning)
    with report.scoring():
        todo = [t for t in tasks if not report.is_complete(t.name)]
        for task in tasks:
            if report.is_complete(task.name):
                LOG.info("%s: already scored in %s, kept", task.name, report.json_path)
        if todo:
            lm, prompt_format, settings = _load(model, adapter, settings, report)
            for task in todo:
                _run_task(task, lm, prompt_format, settings, report)
    return report.data


def for_device(settings: EvalSettings, device: str) -> EvalSettings:
    """``settings`` with the batch size chosen for ``device`` where none was given (logged)."""
    from dataclasses import replace

    from .generation import device_batch_size

    if settings.batch_size is not None:
        return settings
    batch_size = device_batch_size(device)
    LOG.info("batch size %d (chosen for %s; --batch-size sets another)", batch_size, device)
    return replace(settings, batch_size=batch_size)


def _log_plan(tasks: Sequence[EvalTask]) -> list[str]:
    """Log what each set holds; returns the warnings the report must carry (a user's file that is not the
    authors')."""
    warnings = []
    for task in tasks:
        for issue in task.issues:
            LOG.warning("skipped %s", issue)
        what = f"{len(task.problems)} problems"
        if task.benchmark is not None:
            what += f" of {task.lines_read}"
            if task.source_warning():
                warnings.append(task.source_warning())
        else:
            what += f" ({len(task.issues)} lines skipped)"
        LOG.info("%s: %s, from %s", task.name, what, task.source["path"])
    return warnings


def _load(model, adapter, settings: EvalSettings, report: RunReport):
    """:func:`load_for_run`, recorded in the report; and ``settings`` with the batch size for the device."""
    started = time.perf_counter()
    lm, prompt_format, source = load_for_run(model, adapter, settings)
    report.set_model(
        base=lm.base,
        adapter=lm.adapter,
        prompt_format=prompt_format.kind,
        prompt_format_source=source,
        dtype=lm.dtype,
        device=lm.device,
    )
    report.add_time("load_s", time.perf_counter() - started)
    return lm, prompt_format, for_device(settings, lm.device)


def load_for_run(model, adapter, settings: EvalSettings):
    """The model, and its prompt format with where that came from (``--prompt-format``, the Axolotl config saved
    with the model, or the tokenizer): ``(lm, prompt_format, source)``."""
    from .axolotl_config import resolve_prompt_format
    from .generation import load_model

    try:
        lm = load_model(model, adapter, dtype=settings.dtype, device=settings.device)
    except (OSError, ValueError) as err:  # a folder transformers cannot load: the input, not the run, is at fault
        if isinstance(err, UnusableInput):
            raise
        what = f"--model {model}" + (f" with --adapter {adapter}" if adapter else "")
        raise UnusableInput(f"{what}: cannot be loaded ({type(err).__name__}: {err})") from err
    folders = [lm.adapter, str(model) if Path(model).is_dir() else None]
    prompt_format, source = resolve_prompt_format(settings.prompt_format, lm.tokenizer, folders)
    LOG.info("prompt format %s (%s)", prompt_format.kind, source)
    return lm, prompt_format, source


def _pad_id(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def _run_task(task: EvalTask, lm, prompt_format, settings: EvalSettings, report: RunReport) -> None:
    report.start_task(task)
    tf_values: dict[int, tuple[int, int, float]] = {}
    if settings.teacher_forced and task.has_solutions:
        tf_values = _teacher_force(task, lm, prompt_format, settings, report)
    if settings.generate:
        _generate(task, lm, prompt_format, settings, report, tf_values)
    report.complete_task(task.name)


def _teacher_force(task: EvalTask, lm, prompt_format, settings, report: RunReport) -> dict:
    """Teacher-forced digit metrics on the set's reference solutions; per problem id ``(digits, correct, entropy
    sum)``. A tokenizer DEL cannot read digits from skips them (with a warning)."""
    from tqdm.auto import tqdm

    from ...core import DigitVocab
    from ...core.vocab import DigitVocabError
    from ..scoring.teacher_forced import teacher_forced_batches

    try:
        vocab = DigitVocab.from_tokenizer(lm.tokenizer)
    except DigitVocabError as err:
        report.warn(f"teacher-forced digit metrics skipped: {err}")
        return {}
    started = time.perf_counter()
    problems = [p for p in task.problems if p.solution]
    sequences = [prompt_format.teacher_forcing_ids(p.question, p.solution, task.response_prefix) for p in problems]
    stats = TeacherForcedStats()
    values: dict[int, tuple[int, int, float]] = {}
    with tqdm(total=len(sequences), desc=f"{task.name}: teacher-forced", unit="problem") as bar:
        for indices, per_sequence, batch_stats in teacher_forced_batches(
            lm.model, sequences, vocab, batch_size=settings.batch_size, pad_id=_pad_id(lm.tokenizer), progress=bar
        ):
            stats.merge(batch_stats)
            for i, value in zip(indices, per_sequence):
                values[problems[i].id] = value
            report.set_teacher_forced(task.name, stats)
    report.add_time("teacher_forced_s", time.perf_counter() - started)
    return values


def _generate_batches(lm, prompts: list[list[int]], settings: EvalSettings, desc: str):
    """:func:`~.generation.generate_greedy` under a progress bar."""
    from tqdm.auto import tqdm

    from .generation import generate_greedy

    # the bar moves with every generated token (fractions of a batch): its count is shown to a tenth
    counted = "{l_bar}{bar}| {n:.1f}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]"
    with tqdm(total=len(prompts), desc=desc, unit="problem", bar_format=counted, mininterval=1.0) as bar:
        yield from generate_greedy(
            lm, prompts, batch_size=settings.batch_size, max_new_tokens=settings.max_new_tokens, progress=bar
        )


def _generate(task: EvalTask, lm, prompt_format, settings: EvalSettings, report: RunReport, tf_values) -> None:
    """Greedy generations of the set, scored and saved batch by batch. Program-of-thought first where asked and
    the paper runs it; chain-of-thought for the rest and for the problems the programs left unanswered."""
    started = time.perf_counter()
    metrics = GenerationMetrics(task.scoring)
    pot = settings.program_of_thought and task.runs_program_of_thought

    def save(problem: Problem, verdict: Verdict, text: str, n_tokens: int, finished: bool, mode: str, program):
        metrics.add(verdict, problem.reference, n_tokens, finished, problem.id)
        record = generation_record(
            task,
            problem,
            verdict,
            text,
            mode=mode,
            new_tokens=n_tokens,
            finished=finished,
            program=program,
            teacher_forced=tf_values.get(problem.id),
        )
        report.write_generation(record)

    # (problem, the program-of-thought attempt it falls back from) for every problem chain-of-thought answers
    pending: list[tuple[Problem, dict | None]] = [(p, None) for p in task.problems]
    if pot:
        pending = _program_of_thought(task, lm, prompt_format, settings, report, metrics, save)
    if pending:
        prompts = [prompt_format.prompt_ids(p.question, task.response_prefix) for p, _ in pending]
        desc = f"{task.name}: chain-of-thought" + (" fallback" if pot else "")
        for indices, texts, lengths, finished in _generate_batches(lm, prompts, settings, desc):
            for i, text, n_tokens, done in zip(indices, texts, lengths, finished):
                problem, attempt = pending[i]
                save(problem, task.score(text, problem), text, n_tokens, done, "chain-of-thought", attempt)
            report.set_generation(task.name, metrics)
    report.set_generation(task.name, metrics)
    report.add_time("generation_s", time.perf_counter() - started)
    if metrics.cut:
        report.warn(
            f"{task.name}: {metrics.cut} of {metrics.n} generations hit --max-new-tokens {settings.max_new_tokens} "
            "before ending; their answers may be cut off"
        )


def _program_of_thought(
    task: EvalTask, lm, prompt_format, settings: EvalSettings, report: RunReport, metrics: GenerationMetrics, save
) -> list[tuple[Problem, dict]]:
    """Ask every problem of the set for a program and run those written; ``save`` the problems they answer, count
    the programs in ``metrics``. Returns the problems left to chain-of-thought, each with its attempt."""
    metrics.programs = ProgramCounts()
    pending = []
    prompts = [prompt_format.prompt_ids(task.program_question(p)) for p in task.problems]
    batches = _generate_batches(lm, prompts, settings, f"{task.name}: program-of-thought")
    for indices, texts, lengths, finished in batches:
        problems = [task.problems[i] for i in indices]
        sandbox = program_sandbox(settings.unsandboxed_programs)
        outcomes = program_verdicts(task, problems, texts, settings.program_timeout_s, sandbox)
        for problem, text, n_tokens, done, (verdict, program) in zip(problems, texts, lengths, finished, outcomes):
            metrics.programs.asked += 1
            metrics.programs.programs += int(program is not None)
            metrics.programs.ran += int(program is not None and program["status"] == "ok")
            if verdict.answered:
                metrics.programs.answered += 1
                save(problem, verdict, text, n_tokens, done, "program-of-thought", program)
            else:
                metrics.programs.cot_fallback += 1
                pending.append((problem, {"output": text} | (program or {})))
        report.set_generation(task.name, metrics)
    return pending


def read_generations(out_dir: str | Path) -> list[dict]:
    """The records of ``out_dir``/generations.jsonl (a last line a hard kill cut is left out)."""
    path = Path(out_dir) / GENERATIONS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    return read_jsonl(path)
