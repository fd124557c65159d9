"""``del-eval score``: score generations made anywhere (vLLM, another harness) against one of the paper's
benchmarks, without a model. The predictions are JSONL, one ``{"id": 0-based index of the problem in the set's
file, "output": the model's text}`` a line; the problems scored are those whose ids are present. The report is the
one ``del-eval run`` writes (``report.json``, ``report.md``, ``generations.jsonl``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

from ..benchmarks.program import PROGRAM_TIMEOUT_S, extract_program, program_sandbox, run_programs
from ..benchmarks.readers import Verdict
from ..benchmarks.sets import BENCHMARKS
from ..errors import UnusableInput, UsageError, is_unicode_text, json_value, read_input_bytes
from ..eval_extra import require_eval_extra
from ..reports.run_report import RunReport
from ..scoring.metrics import GenerationMetrics, ProgramCounts
from ..scoring.tasks import EvalTask, benchmark_task, generation_record, refuse_modified_sets

__all__ = ["read_predictions", "score_predictions"]

_MAX_ERRORS_SHOWN = 10


def read_predictions(predictions: str | Path | Iterable[dict], n_problems: int) -> dict[int, str]:
    """``{id: output}`` from a JSONL file (or dicts). Every bad line is an error (:class:`~..errors.UnusableInput`
    listing them with their line numbers): not UTF-8, not JSON, no ``id`` or ``output``, an id that is not an integer
    in ``[0, n_problems)``, an id given twice. A file that cannot be read is one too."""
    where = str(predictions) if isinstance(predictions, (str, Path)) else "predictions"
    errors: list[str] = []
    if isinstance(predictions, (str, Path)):
        raw = read_input_bytes(predictions, "predictions file")
        rows = []
        for number, line in enumerate(raw.split(b"\n"), 1):
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as err:
                errors.append(
                    f"{where}:{number}: not UTF-8 (byte 0x{line[err.start]:02x} at column {err.start + 1}); save the "
                    "file as UTF-8"
                )
                continue
            if text.strip():
                rows.append((number, text))
    else:
        rows = [(number, row) for number, row in enumerate(predictions, 1)]
    outputs: dict[int, str] = {}
    for number, row in rows:
        if isinstance(row, str):
            try:
                row = json_value(row)
            except ValueError as err:
                errors.append(f"{where}:{number}: {err}")
                continue
        if not isinstance(row, dict) or "id" not in row or "output" not in row:
            errors.append(f"{where}:{number}: expected an object with `id` and `output`")
            continue
        problem_id, output = row["id"], row["output"]
        if isinstance(problem_id, bool) or not isinstance(problem_id, int) or not 0 <= problem_id < n_problems:
            errors.append(f"{where}:{number}: `id` {problem_id!r} is not a problem index 0..{n_problems - 1}")
        elif not isinstance(output, str):
            errors.append(f"{where}:{number}: `output` is {type(output).__name__}, not a string")
        elif not is_unicode_text(output):
            errors.append(f"{where}:{number}: `output` holds a lone surrogate escape (\\ud800-\\udfff): not text")
        elif problem_id in outputs:
            errors.append(f"{where}:{number}: `id` {problem_id} given twice")
        else:
            outputs[problem_id] = output
    if errors:
        shown = errors[:_MAX_ERRORS_SHOWN] + ([f"… {len(errors) - _MAX_ERRORS_SHOWN} more"] if errors[10:] else [])
        raise UnusableInput(f"{len(errors)} bad prediction line(s):\n" + "\n".join(shown))
    if not outputs:
        raise UnusableInput(f"{where}: no predictions")
    return outputs


def score_predictions(
    benchmark: str,
    predictions: str | Path | Iterable[dict],
    out_dir: str | Path,
    *,
    benchmark_dir: str | Path | None = None,
    name: str | None = None,
    program_of_thought: bool = False,
    program_timeout_s: float = PROGRAM_TIMEOUT_S,
    overwrite: bool = False,
    allow_modified: bool = False,
    unsandboxed_programs: bool = False,
) -> dict:
    """Score ``predictions`` (see the module docs) on ``benchmark``; write ``out_dir``/report.json, report.md
    and generations.jsonl; return the report. The report of another run in ``out_dir`` is an
    :class:`~..errors.OutputError` unless ``overwrite`` (it is then replaced once this one is written whole). With
    ``program_of_thought``, an output that holds a program is run (:mod:`..benchmarks.program`) and its printed
    output read as the answer; there is no chain-of-thought to fall back to here (``unsandboxed_programs``: run
    them without the sandbox). A user's SimulEq or SAT file that is not the authors' is refused unless
    ``allow_modified``."""
    require_eval_extra()
    if unsandboxed_programs and not program_of_thought:
        raise UsageError("--unsandboxed-programs needs --program-of-thought")
    task = _benchmark_task(benchmark, benchmark_dir, program_of_thought)
    sandbox = program_sandbox(unsandboxed_programs) if program_of_thought else None  # before any program runs
    refuse_modified_sets([task], allow_modified)
    outputs = read_predictions(predictions, len(task.problems))
    task.problems = [p for p in task.problems if p.id in outputs]
    source = str(predictions) if isinstance(predictions, (str, Path)) else None
    digest = hashlib.sha256(json.dumps(outputs, sort_keys=True).encode()).hexdigest()
    settings = {
        "limit": None,
        "program_of_thought": program_of_thought,
        "program_timeout_s": program_timeout_s,
        "program_sandbox": sandbox,
    }
    report = RunReport.open(
        Path(out_dir),
        command="score",
        name=name or (Path(source).stem if source else benchmark),
        model={"predictions": source},
        settings=settings,
        resume_key={
            "benchmark": task.name,
            "predictions": source,
            "predictions_sha256": digest,
            "program_of_thought": program_of_thought,
        },
        tasks=[task],
        overwrite=overwrite,
    )
    if task.source_warning():
        report.warn(task.source_warning())
    if report.is_complete(task.name):  # the same scoring, already in out_dir: written again as it is
        report.mark_complete()
        return report.finish()
    with report.scoring():
        score_outputs(task, outputs, report, program_of_thought, program_timeout_s, sandbox)
    return report.data


def _benchmark_task(benchmark: str, benchmark_dir: str | Path | None, program_of_thought: bool) -> EvalTask:
    """The task of ``benchmark``, all its problems; ``program_of_thought`` on a set the paper asks as
    chain-of-thought is a UsageError."""
    task = benchmark_task(benchmark, benchmark_dir, None)
    if program_of_thought and not task.runs_program_of_thought:
        runs = ", ".join(b.name for b in BENCHMARKS.values() if b.program_of_thought)
        raise UsageError(
            f"--program-of-thought: {task.name} is asked as chain-of-thought, never as a program (the paper runs "
            f"programs for {runs} only); score it without --program-of-thought"
        )
    return task


def answer_key(task: EvalTask) -> list[str]:
    """What a program of ``task`` must not see (besides the shipped sets, always hidden): the set's file and, for
    a set read from ``--benchmark-dir``, that whole folder (``<dir>/<set>/<file>``: every set in it)."""
    path = Path(task.source["path"])
    return [str(path)] + ([str(path.parents[1])] if task.benchmark and not task.benchmark.shipped else [])


def program_verdicts(
    task: EvalTask, problems, texts: list[str], timeout_s: float, sandbox: str
) -> list[tuple[Verdict, dict | None]]:
    """Score program-of-thought outputs, as the paper's harness does: the program an output holds is run (in
    ``sandbox``) and what it prints read as "The answer is <stdout>" (a program that fails: no answer); an output
    without a program is read as it is. Per problem: the verdict, and the program's run (None without one)."""
    programs = [extract_program(text) for text in texts]
    found = [p for p in programs if p is not None]
    runs = iter(run_programs(found, timeout_s=timeout_s, sandbox=sandbox, hidden=answer_key(task)))
    outcomes = []
    for problem, text, program in zip(problems, texts, programs):
        if program is None:
            outcomes.append((task.score(text, problem), None))
            continue
        run = next(runs)
        verdict = task.score("The answer is " + run.stdout, problem) if run.ok else task.no_answer()
        outcomes.append((verdict, {"status": run.status, "stdout": run.stdout[:2000], "detail": run.detail}))
    return outcomes


def score_outputs(
    task: EvalTask,
    outputs: dict[int, str],
    report: RunReport,
    program_of_thought: bool = False,
    program_timeout_s: float = PROGRAM_TIMEOUT_S,
    sandbox: str | None = None,
) -> dict[int, Verdict]:
    """Score ``outputs`` (problem id -> generated text) of ``task``'s problems into ``report``, one generation
    record each, as given or, with ``program_of_thought``, by running the program an output holds (in ``sandbox``);
    the task is complete when it returns. Returns the verdicts by problem id."""
    metrics = GenerationMetrics(task.scoring)
    report.start_task(task)
    texts = [outputs[p.id] for p in task.problems]
    if program_of_thought:
        outcomes = program_verdicts(task, task.problems, texts, program_timeout_s, sandbox)
        metrics.programs = ProgramCounts(asked=len(texts), programs=sum(a is not None for _, a in outcomes))
    else:
        outcomes = [(task.score(text, problem), None) for problem, text in zip(task.problems, texts)]
    verdicts = {}
    for problem, text, (verdict, attempt) in zip(task.problems, texts, outcomes):
        if attempt is not None:
            metrics.programs.ran += int(attempt["status"] == "ok")
        if metrics.programs is not None:
            metrics.programs.answered += int(verdict.answered)
        metrics.add(verdict, problem.reference, problem_id=problem.id)
        mode = "as given" if attempt is None else "program-of-thought"
        report.write_generation(generation_record(task, problem, verdict, text, mode=mode, program=attempt))
        verdicts[problem.id] = verdict
    report.set_generation(task.name, metrics)
    report.complete_task(task.name)
    return verdicts
