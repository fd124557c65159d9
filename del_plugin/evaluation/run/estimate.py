"""``del-eval run ... --estimate``: how long that run would take on this machine, before spending the time, from a timed
probe of the model as loaded (nothing is written).

The probe generates a batch of the first set's longest prompts, every row forced to ``1 + PROBE_TOKENS`` tokens
(``min_new_tokens``), after one untimed warm-up, and notes when each token is done: the median time between two tokens
is the cost of a generated token at the run's batch size (the median: a moment of other work on the machine does not
move it), the time to the first token less one token the cost of the batch's prompt pass. A token costs more as the
context grows, so the tokens are timed again after each prompt grown by ``max_new_tokens`` tokens, and the mean of the
two is the cost of a token. One teacher-forced batch is timed too. The expected time is then arithmetic
(:func:`expected_seconds`): per set, its batches, each with its prompt pass and ``max_new_tokens`` tokens (the most: a
batch whose every row ends sooner stops sooner), twice for a program-of-thought set (the programs, then the
chain-of-thought fallback at most for every problem). The probe measures the machine as it is loaded at that moment; a
machine busier later runs slower. Measured on SmolLM2-135M-Instruct, 20 GSM8K problems, 200 new tokens, on a 2-core
machine shared with other work: 9.0 min expected, 8.0 min taken (docs/cpu.md).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

__all__ = ["PROBE_TOKENS", "Probe", "estimate_run", "expected_seconds", "format_estimate"]

PROBE_TOKENS = 16  # the generated tokens the probe times, after the first


@dataclass(frozen=True)
class Probe:
    """What a probe measured: seconds to load the model, one batch's prompt pass, one generated token of a batch,
    one teacher-forced batch (0 when not asked), at ``batch_size`` on ``device``."""

    load_s: float
    prompt_s: float
    token_s: float
    teacher_forced_s: float
    batch_size: int
    device: str


def expected_seconds(problems: Sequence[int], passes: Sequence[int], probe: Probe, max_new_tokens: int) -> float:
    """The expected seconds of a run whose sets hold ``problems`` problems, each generated ``passes`` times (2 for
    program-of-thought, 0 when generation is off), at the probe's rates: load, then per set and pass ``ceil(n /
    batch)`` batches of a prompt pass and ``max_new_tokens`` tokens, and ``ceil(n / batch)`` teacher-forced
    batches."""
    total = probe.load_s
    for n, k in zip(problems, passes, strict=True):
        batches = math.ceil(n / probe.batch_size)
        total += batches * (k * (probe.prompt_s + max_new_tokens * probe.token_s) + probe.teacher_forced_s)
    return total


class _StepClock:
    """A stopping criterion that stops nothing and notes when each generated token is done."""

    def __init__(self):
        self.times: list[float] = []

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        self.times.append(time.perf_counter())
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def _timed_generation(lm, prompts: list[list[int]], new_tokens: int) -> tuple[float, float]:
    """``(seconds to the first generated token, median seconds of each later one)`` of one greedy generation of
    ``prompts`` as a batch, every row forced to ``new_tokens`` tokens."""
    from statistics import median

    from transformers import GenerationConfig, StoppingCriteriaList

    from .generation import _left_padded

    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else lm.tokenizer.eos_token_id
    input_ids, attention, _ = _left_padded(prompts, pad)
    config = GenerationConfig(
        max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, num_beams=1, pad_token_id=pad
    )
    device = next(lm.model.parameters()).device
    clock = _StepClock()
    started = time.perf_counter()
    with torch.inference_mode():
        lm.model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention.to(device),
            generation_config=config,
            stopping_criteria=StoppingCriteriaList([clock]),
        )
    steps = [b - a for a, b in zip(clock.times, clock.times[1:])]
    return clock.times[0] - started, median(steps) if steps else 0.0


def _timed_teacher_forced(lm, sequences: list[tuple[list[int], int]], batch_size: int) -> float:
    from ...core import DigitVocab
    from ...core.vocab import DigitVocabError
    from ..scoring.teacher_forced import teacher_forced_batches

    try:
        vocab = DigitVocab.from_tokenizer(lm.tokenizer)
    except DigitVocabError:
        return 0.0  # the run skips these metrics too
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else lm.tokenizer.eos_token_id
    started = time.perf_counter()
    for _ in teacher_forced_batches(lm.model, sequences[:batch_size], vocab, batch_size=batch_size, pad_id=pad):
        pass
    return time.perf_counter() - started


def probe_model(lm, prompt_format, task, settings, load_s: float) -> Probe:
    """Time ``lm`` on ``task``'s longest prompts at ``settings.batch_size``: the prompt pass, and
    :data:`PROBE_TOKENS` generated tokens at the start and at the end of a generation's context."""
    prompts = sorted((prompt_format.prompt_ids(p.question, task.response_prefix) for p in task.problems), key=len)
    batch = prompts[::-1][: settings.batch_size]
    _timed_generation(lm, batch, 2)  # warm-up: first-call costs the run pays once
    first_s, early_token_s = _timed_generation(lm, batch, 1 + PROBE_TOKENS)
    # a token costs more as the context grows: time the steps again at the context a batch reaches at the limit
    # (each prompt followed by max_new_tokens of its own tokens), and take the mean of the two
    grown = [
        (ids * (1 + settings.max_new_tokens // len(ids) + 1))[: len(ids) + settings.max_new_tokens] for ids in batch
    ]
    _, late_token_s = _timed_generation(lm, grown, 1 + PROBE_TOKENS)
    token_s = (early_token_s + late_token_s) / 2
    teacher_forced_s = 0.0
    solved = [p for p in task.problems if p.solution]
    if settings.teacher_forced and solved:
        sequences = [prompt_format.teacher_forcing_ids(p.question, p.solution, task.response_prefix) for p in solved]
        teacher_forced_s = _timed_teacher_forced(lm, sequences, settings.batch_size)
    return Probe(load_s, max(first_s - token_s, 0.0), token_s, teacher_forced_s, settings.batch_size, lm.device)


def estimate_run(model, data=(), *, benchmarks=(), benchmark_dir=None, adapter=None, settings, allow_modified=False):
    """Plan the run as :func:`~.runner.evaluate` would, load the model, probe it; ``(tasks, probe, expected s)``."""
    from ..scoring.tasks import plan_tasks
    from .runner import for_device, load_for_run

    tasks = plan_tasks(data, benchmarks, benchmark_dir, settings.limit, allow_modified=allow_modified)
    started = time.perf_counter()
    lm, prompt_format, _ = load_for_run(model, adapter, settings)
    load_s = time.perf_counter() - started
    settings = for_device(settings, lm.device)
    probe = probe_model(lm, prompt_format, tasks[0], settings, load_s)
    pot = settings.program_of_thought
    passes = [int(settings.generate) * (2 if pot and t.runs_program_of_thought else 1) for t in tasks]
    if not settings.teacher_forced:
        probe = Probe(probe.load_s, probe.prompt_s, probe.token_s, 0.0, probe.batch_size, probe.device)
    counts = [len(t.problems) for t in tasks]
    return tasks, probe, expected_seconds(counts, passes, probe, settings.max_new_tokens)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def format_estimate(tasks, probe: Probe, seconds: float, max_new_tokens: int) -> str:
    """The lines ``--estimate`` prints."""
    sets = ", ".join(f"{t.name} {len(t.problems)}" for t in tasks)
    return (
        f"estimate: about {_duration(seconds)} on this machine as loaded now (problems: {sets}; each generation "
        f"run to {max_new_tokens} new tokens)\n"
        f"  probe: load {probe.load_s:.1f} s; a batch of {probe.batch_size} on {probe.device}: prompt pass "
        f"{probe.prompt_s:.3f} s, {probe.token_s:.4f} s a generated token, teacher-forced {probe.teacher_forced_s:.3f} "
        "s\n  generations that end before the token limit take less, a busier machine more; nothing was written"
    )
