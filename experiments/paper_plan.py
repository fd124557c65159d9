"""What ``python -m experiments paper`` runs: its two regimes, its profiles and the time estimate of a profile.

Nothing here imports torch or Axolotl: the plan and its arithmetic are tested on their own.

**The paper's regime** (arXiv 2605.20369, PolyU-VCLab/DEL ``train_*.sh``): every weight trained, lr 5e-6, cosine
schedule with 3 % warm-up, weight decay 0, 2 epochs, float32 weights under bf16 autocast, loss on the answer only,
alpaca prompt. Their DEL weight, in our normalisation (docs/examples.md, "The DEL weight and how it was converted"),
is 0.01 x G x W for their Qwen2.5 / DeepSeek-Math scripts: we take **1.28** = 0.01 x 32 x 4, their published
``train_qwen.sh`` (Qwen2.5-1.5B on 4 GPUs): the smallest model they trained, nearest to SmolLM2-135M, and the one
Qwen run whose GPU count is published (their 7B runs give 2.56).

**The regime our users train in**: (Q)LoRA r 32 / alpha 16 on every linear layer at lr 2e-4, cosine with 3 %
warm-up, 2 epochs, as the QLoRA examples (``examples/*/qlora-24gb.yml``) set it; 4-bit NF4 base weights on a GPU,
LoRA on float32 weights (under bf16 autocast) on a CPU, which has no 4-bit kernels.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

__all__ = [
    "ALL_PAPER_SETTINGS",
    "GPU_RATES",
    "PAPER_DEL_WEIGHT",
    "PROFILES",
    "REGIMES",
    "SMOLLM2_TOKENS_PER_ROW",
    "Profile",
    "Rates",
    "Regime",
    "estimate",
    "planned_runs",
    "smoke_profile",
]

# 0.01 x 32 accumulation steps x 4 GPUs: the authors' train_qwen.sh, converted (docs/examples.md)
PAPER_DEL_WEIGHT = 1.28
REFERENCE = "del:0"  # cross-entropy alone: MLE


@dataclass(frozen=True)
class Regime:
    name: str
    title: str
    adapter: str | None  # None: full fine-tune; "lora" (CPU) / "qlora" (GPU)
    learning_rate: float
    lora_r: int = 32
    lora_alpha: int = 16

    def on(self, device: str) -> Regime:
        """The regime as run on ``device``: QLoRA needs CUDA (bitsandbytes' 4-bit kernels), LoRA stands in on a
        CPU."""
        if self.adapter == "qlora" and device != "cuda":
            return replace(self, adapter="lora")
        return self


REGIMES: dict[str, Regime] = {
    "paper": Regime("paper", "The paper's regime: full fine-tune, lr 5e-6", None, 5e-6),
    "users": Regime("users", "Our users' regime: (Q)LoRA r 32, lr 2e-4", "qlora", 2e-4),
}


@dataclass(frozen=True)
class Profile:
    """One size of the experiment. ``settings`` holds, per regime, the ``criterion:alpha`` settings in priority
    order (the reference, cross-entropy alone, first); every setting runs with every seed."""

    name: str
    description: str
    device: str  # "cpu" or "cuda": the training keys are written for it
    train_rows: int | None  # GSM8K training problems (None: all 7,473)
    settings: dict[str, tuple[str, ...]]
    seeds: tuple[int, ...]
    eval_limit: int | None  # problems per evaluation set (None: all)
    max_new_tokens: int
    eval_batch_size: int
    epochs: int = 2
    sequence_len: int = 512
    micro_batch_size: int = 4
    gradient_accumulation_steps: int = 1
    max_row_tokens: int | None = None  # draw only problems whose prompt + answer is at most this many tokens
    eval_dtype: str = "auto"
    budget_s: float | None = None  # the wall time the profile is sized for
    regime_seeds: dict[str, tuple[int, ...]] = field(default_factory=dict)  # a regime's own seeds, if not ``seeds``

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def rows_per_step(self) -> int:
        return self.micro_batch_size * self.gradient_accumulation_steps


_PAIR = (REFERENCE, f"del:{PAPER_DEL_WEIGHT:g}")  # MLE and the paper's DEL: what every profile runs first
# every setting of the experiment in the paper's regime (``--all-settings``): MLE, the paper's DEL, our default,
# del_centered at its best weight (docs/efficacy.md, set-up 1), NTL-WAS at its authors' weight, DIST2 at the
# ablation configs' weight
ALL_PAPER_SETTINGS = (*_PAIR, "del:0.03", "del_centered:0.1", "ntl_was:0.3", "dist2:1.28")
_USERS_SETTINGS = (REFERENCE, "del_centered:0.1")  # the advice's shift-invariant form (docs/choosing-del-alpha.md)

PROFILES: dict[str, Profile] = {
    "cpu": Profile(
        name="cpu",
        description=(
            "about two hours of a 2-core CPU: 64 problems of at most 192 tokens, 2 epochs, MLE against the paper's "
            "DEL and against the README's DEL, 3 seeds each"
        ),
        device="cpu",
        train_rows=64,
        max_row_tokens=192,
        settings={"paper": _PAIR, "users": _USERS_SETTINGS},
        seeds=(42, 43, 44),
        eval_limit=10,
        max_new_tokens=128,
        eval_batch_size=10,
        budget_s=2 * 3600,
    ),
    "gpu": Profile(
        name="gpu",
        description=(
            "one H200 in 8 minutes (estimated): 1,000 problems, 2 epochs, MLE against the paper's DEL on 3 seeds, "
            "MLE against the README's DEL (QLoRA) on 2"
        ),
        device="cuda",
        train_rows=1000,
        micro_batch_size=16,
        settings={"paper": _PAIR, "users": _USERS_SETTINGS},
        seeds=(42, 43, 44),
        regime_seeds={"users": (42, 43)},
        eval_limit=25,
        max_new_tokens=160,
        eval_batch_size=32,
        eval_dtype="bfloat16",
        budget_s=8 * 60,
    ),
}


def smoke_profile(profile: Profile) -> Profile:
    """``profile`` shrunk to a test of its path (``--smoke``): its first two settings per regime, one seed, 8
    problems, one epoch, 2 problems per set; on a CPU when the profile is for a GPU (QLoRA then runs as LoRA)."""
    return replace(
        profile,
        name=f"{profile.name}-smoke",
        description=f"the path of the {profile.name} profile, shrunk to a test: 8 problems, 1 epoch, 2 per set",
        device="cpu",
        train_rows=8,
        epochs=1,
        sequence_len=256,
        max_row_tokens=256,
        micro_batch_size=4,
        gradient_accumulation_steps=1,
        settings={regime: settings[:2] for regime, settings in profile.settings.items()},
        seeds=profile.seeds[:1],
        regime_seeds={regime: seeds[:1] for regime, seeds in profile.regime_seeds.items()},
        eval_limit=2,
        max_new_tokens=16,
        eval_batch_size=4,
        eval_dtype="auto",
        budget_s=None,
    )


def planned_runs(profile: Profile) -> list[tuple[str, str, int]]:
    """``(regime, setting, seed)`` in the order they run: the paper's regime first, and within a regime every
    setting on one seed before the next seed, so that a run stopped early already holds paired comparisons."""
    return [
        (regime, setting, seed)
        for regime, settings in profile.settings.items()
        for seed in profile.regime_seeds.get(regime, profile.seeds)
        for setting in settings
    ]


@dataclass(frozen=True)
class Rates:
    """What a machine does per second, for :func:`estimate`. ``source`` says where each number comes from."""

    full_tokens_per_s: float  # training tokens (prompt + answer, unpadded) per second, full fine-tune
    adapter_tokens_per_s: float  # the same for the users' regime's adapter
    decode_step_s: float  # one greedy decoding step of a batch (launch-bound for a small model: batch-independent)
    teacher_forced_problems_per_s: float
    process_start_s: float  # a run's child process: imports, model load, tokenising the training rows
    source: dict = field(default_factory=dict)


# One H200, SmolLM2-135M. This command has not yet run on a GPU: stated assumptions, each with its reasoning.
GPU_RATES = Rates(
    full_tokens_per_s=35_000,
    adapter_tokens_per_s=25_000,
    decode_step_s=0.015,
    teacher_forced_problems_per_s=400,
    process_start_s=15,
    source={
        "full_tokens_per_s": (
            'measured on one H200 (docs/benchmarks.md, "DEL at GPU speed"; torch 2.11, bf16, sdpa): an Axolotl '
            "QLoRA step of a 443M Llama, "
            "8,192 tokens in 0.791 s = 10,400 tokens/s; SmolLM2-135M has 3.3x fewer weights and no 4-bit "
            "dequantisation, so 3.3 x 10,400 = 34,000, rounded to 35,000"
        ),
        "adapter_tokens_per_s": "QLoRA adds the 4-bit dequantisation of every weight to each step: about 0.7x",
        "decode_step_s": (
            "30 decoder layers x ~15 kernels at ~30 us each (eager, launch-bound at batch <= 128): 15 ms a step"
        ),
        "teacher_forced_problems_per_s": "one forward of a batch of 128 problems of ~250 tokens, ~0.3 s",
        "process_start_s": (
            "importing torch, transformers and Axolotl takes 16 s of CPU time here (`/usr/bin/time python -c "
            "'import torch, transformers, axolotl.train'`, 2-core Xeon); about 10 s on the H200 machine's faster "
            "cores, + the model load and tokenising 1,000 rows"
        ),
    },
)

# This project's 2-core Xeon, shared with other work, SmolLM2-135M: the medians of the cpu profile's 12 runs
# (docs/efficacy/paper-cpu/runs.csv), for the estimate of a profile that runs on a CPU (cpu, --smoke).
CPU_RATES = Rates(
    full_tokens_per_s=63,
    adapter_tokens_per_s=88,
    decode_step_s=0.25,
    teacher_forced_problems_per_s=2,
    process_start_s=20,
    source={
        "full_tokens_per_s": "median tokens_per_s of the paper regime's 6 runs (32.5-113.9): 62.7",
        "adapter_tokens_per_s": "median tokens_per_s of the users regime's 6 runs: 87.7",
        "decode_step_s": (
            "median eval_s of the 12 runs, 238 s, for 7 sets x 1 batch x 128 steps = 896 steps and 70 problems "
            "teacher-forced: 0.25 s a step and 2 problems/s give 224 + 35 = 259 s, within the runs' 186-315 s"
        ),
        "teacher_forced_problems_per_s": "see decode_step_s",
        "process_start_s": "importing torch, transformers and Axolotl: 16 s of CPU time here, + the model load",
    },
)
# tokens per training row of those runs: 19,060 tokens / (64 rows x 2 epochs)
CPU_TOKENS_PER_ROW = 148.9

# Mean tokens of one GSM8K training row as the paper command writes it (alpaca prompt, question, MathInstruct-form
# answer, EOS), over all 7,473 rows, by SmolLM2's tokenizer (tests/experiments/test_paper.py recounts it); the CPU runs
# record
# the count of the rows they trained on in run.json ("training": "tokens_per_row")
SMOLLM2_TOKENS_PER_ROW = 186.3

# The seven sets' sizes (the authors' test files; docs/evaluation.md)
SET_SIZES = {"gsm8k": 1319, "math": 5000, "svamp": 1000, "simuleq": 514, "aqua": 254, "sat": 220, "mmlu_math": 974}


def estimate(profile: Profile, rates: Rates, tokens_per_row: float, sets: dict[str, int] | None = None) -> dict:
    """Seconds that ``profile`` takes at ``rates``, worked out in steps (``lines``) that the docs print.

    ``tokens_per_row``: mean unpadded tokens of one training row (alpaca prompt + question + answer), as the CPU runs
    measured. A run trains ``rows x epochs x tokens_per_row`` tokens; its evaluation decodes, per set, ``ceil(limit /
    batch)`` batches of ``max_new_tokens`` steps and teacher-forces ``limit`` problems; every run and the base model's
    evaluation start one process."""
    sets = SET_SIZES if sets is None else sets
    rows = profile.train_rows or 7473
    tokens = rows * profile.epochs * tokens_per_row
    runs = planned_runs(profile)
    n_full = sum(1 for regime, _, _ in runs if REGIMES[regime].adapter is None)
    n_adapter = len(runs) - n_full
    train_full = tokens / rates.full_tokens_per_s
    train_adapter = tokens / rates.adapter_tokens_per_s
    problems = {name: min(size, profile.eval_limit or size) for name, size in sets.items()}
    batches = sum(math.ceil(n / profile.eval_batch_size) for n in problems.values())
    decode = batches * profile.max_new_tokens * rates.decode_step_s
    forced = sum(problems.values()) / rates.teacher_forced_problems_per_s
    evaluation = decode + forced
    evaluations = len(runs) + 1  # and the base model
    starts = (len(runs) + 1) * rates.process_start_s
    total = n_full * train_full + n_adapter * train_adapter + evaluations * evaluation + starts
    lines = [
        f"training tokens per run: {rows} rows x {profile.epochs} epochs x {tokens_per_row:.1f} tokens = {tokens:,.0f}",
        f"full fine-tune: {tokens:,.0f} / {rates.full_tokens_per_s:,.0f} tokens/s = {train_full:.1f} s, "
        f"x {n_full} runs = {n_full * train_full:.0f} s",
        f"adapter: {tokens:,.0f} / {rates.adapter_tokens_per_s:,.0f} tokens/s = {train_adapter:.1f} s, "
        f"x {n_adapter} runs = {n_adapter * train_adapter:.0f} s",
        f"evaluation: {sum(problems.values())} problems in {batches} batches of <= {profile.eval_batch_size}: "
        f"{batches} x {profile.max_new_tokens} steps x {rates.decode_step_s * 1000:.0f} ms = {decode:.1f} s decoding "
        f"+ {forced:.1f} s teacher-forced = {evaluation:.1f} s, x {evaluations} (runs and the base model) = "
        f"{evaluations * evaluation:.0f} s",
        f"process starts: {len(runs) + 1} x {rates.process_start_s:.0f} s = {starts:.0f} s",
        f"total: {total:.0f} s = {total / 60:.1f} min"
        + (f" (budget {profile.budget_s / 60:.0f} min)" if profile.budget_s else ""),
    ]
    return {
        "runs": len(runs),
        "tokens_per_run": tokens,
        "train_full_s": train_full,
        "train_adapter_s": train_adapter,
        "evaluation_s": evaluation,
        "total_s": total,
        "lines": lines,
    }
