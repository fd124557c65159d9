"""One evaluation: read the sets, load the model, teacher-forced digit metrics, greedy generation, report files.

Results are saved as they come: every generation is appended to ``generations.jsonl`` at once, and the report is
written even when the run stops half-way (an error, Ctrl-C), with ``"status": "partial"`` and the numbers of the
finished problems.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from tqdm.auto import tqdm

from .. import __version__
from ..core import DigitVocab
from ..core.vocab import DigitVocabError
from .answers import extract_answer, format_decimal, to_float
from .data import EvalSet, check_files_exist, read_eval_set
from .metrics import NumericMetrics
from .report import SCHEMA, write_json_atomic, write_report_files
from .teacher_forced import TeacherForcedStats, teacher_forced_batches

LOG = logging.getLogger(__name__)

__all__ = ["EvalSettings", "evaluate", "GENERATIONS_FILE"]

GENERATIONS_FILE = "generations.jsonl"


@dataclass(frozen=True)
class EvalSettings:
    batch_size: int = 16
    max_new_tokens: int = 256
    prompt_format: str = "auto"
    limit: int | None = None
    generate: bool = True
    teacher_forced: bool = True
    dtype: str = "auto"
    device: str = "auto"

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1, got {self.limit}")
        if not (self.generate or self.teacher_forced):
            raise ValueError("nothing to do: both generation and the teacher-forced metrics are off")


def _dataset_entry(eval_set: EvalSet) -> dict:
    return {
        "name": eval_set.name,
        "path": eval_set.path,
        "lines_read": eval_set.lines_read,
        "evaluated": len(eval_set.examples),
        "skipped": len(eval_set.issues),
        "issues": [issue.as_dict() for issue in eval_set.issues],
        "formats": sorted({e.format for e in eval_set.examples}),
        "generation": None,
        "teacher_forced": None,
    }


def _unique_names(paths: Sequence[str | Path]) -> list[str]:
    names = [Path(p).stem for p in paths]
    if len(set(names)) == len(names):
        return names
    return [f"{Path(p).parent.name}/{Path(p).stem}" if names.count(n) > 1 else n for p, n in zip(paths, names)]


def evaluate(
    model: str | Path,
    data: Sequence[str | Path],
    out_dir: str | Path,
    *,
    adapter: str | Path | None = None,
    name: str | None = None,
    settings: EvalSettings = EvalSettings(),
) -> dict:
    """Evaluate ``model`` (+ ``adapter``) on the JSONL ``data`` sets; write ``out_dir``/report.json, report.md,
    generations.jsonl and plots; return the report."""
    started = time.perf_counter()
    check_files_exist(list(data))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sets = [read_eval_set(p, settings.limit, n) for p, n in zip(data, _unique_names(data))]
    for eval_set in sets:
        for issue in eval_set.issues:
            LOG.warning("skipped %s", issue)
        LOG.info("%s: %d problems (%d lines skipped)", eval_set.path, len(eval_set.examples), len(eval_set.issues))
    name = name or (Path(adapter).name if adapter else Path(model).name)
    report = {
        "schema": SCHEMA,
        "name": name,
        "status": "running",
        "error": None,
        "warnings": [],
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "del_plugin_version": __version__,
        "model": {
            "path": str(model),
            "base": None,
            "adapter": None,
            "prompt_format": settings.prompt_format,
            "dtype": settings.dtype,
            "device": settings.device,
        },
        "settings": asdict(settings),
        "files": {"generations": GENERATIONS_FILE if settings.generate else None, "markdown": None, "plots": []},
        "datasets": [_dataset_entry(s) for s in sets],
        "overall": {"generation": None, "teacher_forced": None},
        "timing": {},
    }
    numeric = {s.name: NumericMetrics() for s in sets}
    overall_numeric = NumericMetrics()
    teacher = {s.name: TeacherForcedStats() for s in sets}
    per_example_tf: dict[tuple[str, int], tuple[int, int, float]] = {}
    lengths: list[int] = []
    unfinished = 0
    phase_done = {"teacher_forced": False}

    def fill_metrics() -> None:
        for entry in report["datasets"]:
            if settings.generate and numeric[entry["name"]].n:
                entry["generation"] = numeric[entry["name"]].as_dict()
            if settings.teacher_forced and (phase_done["teacher_forced"] or teacher[entry["name"]].digits):
                entry["teacher_forced"] = teacher[entry["name"]].as_dict()
        if settings.generate and overall_numeric.n:
            report["overall"]["generation"] = overall_numeric.as_dict() | {
                "mean_new_tokens": sum(lengths) / len(lengths),
                "cut_at_max_new_tokens": unfinished,
            }
        if any(e["teacher_forced"] for e in report["datasets"]):
            merged = TeacherForcedStats()
            for stats in teacher.values():
                merged.merge(stats)
            report["overall"]["teacher_forced"] = merged.as_dict()

    def save_progress() -> None:
        # report.json after every batch: even a hard kill (the OOM killer's SIGKILL) leaves the numbers so far,
        # with "status": "running"; markdown and plots are written once, at the end
        fill_metrics()
        report["timing"]["total_s"] = round(time.perf_counter() - started, 2)
        write_json_atomic(out_dir / "report.json", report)

    generations_path = out_dir / GENERATIONS_FILE
    try:
        if not any(s.examples for s in sets):
            raise ValueError("no usable problem in " + ", ".join(s.path for s in sets) + " (see the skipped lines)")
        from .generation import PromptFormat, load_model

        load_start = time.perf_counter()
        lm = load_model(model, adapter, dtype=settings.dtype, device=settings.device)
        prompt_format = PromptFormat(lm.tokenizer, settings.prompt_format)
        report["model"].update(
            base=lm.base, adapter=lm.adapter, prompt_format=prompt_format.kind, dtype=lm.dtype, device=lm.device
        )
        report["timing"]["load_s"] = round(time.perf_counter() - load_start, 2)
        pad_id = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else lm.tokenizer.eos_token_id

        if settings.teacher_forced:
            tf_start = time.perf_counter()
            try:
                vocab = DigitVocab.from_tokenizer(lm.tokenizer)
            except DigitVocabError as err:
                vocab = None
                message = f"teacher-forced digit metrics skipped: {err}"
                LOG.warning(message)
                report["warnings"].append(message)
            if vocab is not None:
                for eval_set in sets:
                    sequences = [prompt_format.teacher_forcing_ids(e.question, e.solution) for e in eval_set.examples]
                    with tqdm(total=len(sequences), desc=f"teacher-forced {eval_set.name}", unit="problem") as bar:
                        for indices, per_sequence, stats in teacher_forced_batches(
                            lm.model, sequences, vocab, batch_size=settings.batch_size, pad_id=pad_id, progress=bar
                        ):
                            teacher[eval_set.name].merge(stats)
                            for i, values in zip(indices, per_sequence):
                                per_example_tf[(eval_set.name, eval_set.examples[i].line)] = values
                            save_progress()
                phase_done["teacher_forced"] = True
            report["timing"]["teacher_forced_s"] = round(time.perf_counter() - tf_start, 2)

        if settings.generate:
            from .generation import generate_greedy

            gen_start = time.perf_counter()
            with open(generations_path, "w", encoding="utf-8") as out:
                for eval_set in sets:
                    prompts = [prompt_format.prompt_ids(e.question) for e in eval_set.examples]
                    with tqdm(total=len(prompts), desc=f"generating {eval_set.name}", unit="problem") as bar:
                        for indices, texts, new_tokens, finished in generate_greedy(
                            lm,
                            prompts,
                            batch_size=settings.batch_size,
                            max_new_tokens=settings.max_new_tokens,
                            progress=bar,
                        ):
                            for i, text, n_tokens, done in zip(indices, texts, new_tokens, finished):
                                example = eval_set.examples[i]
                                found = extract_answer(text)
                                prediction = found.value if found else None
                                correct = numeric[eval_set.name].add(prediction, example.reference)
                                overall_numeric.add(prediction, example.reference)
                                lengths.append(n_tokens)
                                unfinished += int(not done)
                                tf = per_example_tf.get((eval_set.name, example.line))
                                record = {
                                    "dataset": eval_set.name,
                                    "line": example.line,
                                    "question": example.question,
                                    "reference": format_decimal(example.reference),
                                    "generation": text,
                                    "prediction": None if found is None else format_decimal(found.value),
                                    "prediction_source": None if found is None else found.source,
                                    "correct": correct,
                                    "abs_error": None
                                    if found is None
                                    else to_float(abs(found.value - example.reference)),
                                    "new_tokens": n_tokens,
                                    "ended_with_eos": done,
                                    "tf_digits": None if tf is None else tf[0],
                                    "tf_digits_correct": None if tf is None else tf[1],
                                    "tf_entropy_sum": None if tf is None else tf[2],
                                }
                                out.write(json.dumps(record) + "\n")
                            out.flush()
                            save_progress()
            report["timing"]["generation_s"] = round(time.perf_counter() - gen_start, 2)
            if unfinished:
                message = (
                    f"{unfinished} of {len(lengths)} generations hit --max-new-tokens "
                    f"{settings.max_new_tokens} before EOS; their answers may be cut off"
                )
                LOG.warning(message)
                report["warnings"].append(message)
        report["status"] = "complete"
    except BaseException as err:  # noqa: BLE001 - also Ctrl-C: save what is done, then stop as asked
        report["status"] = "partial"
        report["error"] = f"{type(err).__name__}: {err}"
        LOG.error("evaluation stopped (%s); writing the partial report", report["error"])
        raise
    finally:
        fill_metrics()
        report["timing"]["total_s"] = round(time.perf_counter() - started, 2)
        write_report_files(report, out_dir)
        LOG.info("report: %s", out_dir / "report.json")
    return report
