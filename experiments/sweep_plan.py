"""What ``python -m experiments sweep`` runs: its settings and seeds, the spec of each run (what its training and
evaluation depend on) and where each run lives under ``--out``. Nothing here trains or imports torch."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from .runs import Setting, parse_setting, sha256_of

__all__ = ["DEFAULT_SEEDS", "DEFAULT_SETTINGS", "REFERENCE", "Planned", "plan", "run_dir", "run_name", "specs"]

# DEL at six weights, then the two distance-aware baselines at the weights docs/criteria.md gives them: NTL-WAS
# 0.3 (its authors' recommendation, same normalisation as here) and DIST2 1.28 (the weight every digit criterion
# gets in the ablation configs; no DIST2-specific weight is published).
DEFAULT_SETTINGS = ("del:0", "del:0.03", "del:0.1", "del:0.3", "del:1", "del:3", "ntl_was:0.3", "dist2:1.28")
DEFAULT_SEEDS = (42, 43, 44)
REFERENCE = "del:0"

Planned = list[tuple[Setting | None, int | None, dict]]  # (setting, seed, spec); setting None: the base model


def plan(settings: list[Setting], seeds: list[int]) -> list[tuple[Setting, int]]:
    """Seed-major order: every setting on the first seed, then on the next, so that a sweep stopped early already
    has complete paired comparisons."""
    return [(setting, seed) for seed in seeds for setting in settings]


def specs(args, train_file: Path, eval_file: Path) -> tuple[list[Setting], Planned]:
    """The settings (the reference first) and every planned run of the sweep ``args`` asks for, the base model's
    evaluation first unless ``--no-base``."""
    from .training import TrainSettings

    settings = list(
        dict.fromkeys([parse_setting(REFERENCE)] + list(args.settings or map(parse_setting, DEFAULT_SETTINGS)))
    )
    data = {"data_seed": args.data_seed, "train_sha256": sha256_of(train_file), "heldout_sha256": sha256_of(eval_file)}
    evaluation = {
        "eval_size": args.eval_size,
        "max_new_tokens": args.max_new_tokens,
        "eval_batch_size": args.eval_batch_size,
    }

    def spec(criterion: str | None, alpha: float | None, seed: int | None, train: dict | None) -> dict:
        return {
            "model": "SmolLM2-135M-Instruct",
            "criterion": criterion,
            "alpha": alpha,
            "seed": seed,
            "train": train,
            **data,
            **evaluation,
        }

    runs: Planned = [] if args.no_base else [(None, None, spec(None, None, None, None))]
    for setting, seed in plan(settings, args.seeds):
        train = TrainSettings(
            steps=args.steps, micro_batch_size=args.micro_batch_size, learning_rate=args.learning_rate, seed=seed
        )
        runs.append((setting, seed, spec(setting.criterion, setting.alpha, seed, asdict(train))))
    return settings, runs


def run_dir(out: Path, setting: Setting | None, seed: int | None) -> Path:
    return out / "runs" / ("base" if setting is None else f"{setting.folder}/seed{seed}")


def run_name(setting: Setting | None, seed: int | None) -> str:
    return "base model" if setting is None else f"{setting.key} seed {seed}"
