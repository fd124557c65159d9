"""The README's claim: the core and collator work with a plain transformers.Trainer (no Axolotl involved)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path


def load_example():
    path = Path(__file__).resolve().parents[1] / "examples" / "plain_hf_trainer.py"
    spec = importlib.util.spec_from_file_location("plain_hf_trainer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_plain_trainer_runs_and_adds_del(tmp_path):
    example = load_example()
    first_loss = {}
    for alpha in (0.0, 5.0):
        trainer = example.main(["--output-dir", str(tmp_path / str(alpha)), "--max-steps", "2", "--alpha", str(alpha)])
        assert "del_target_places" not in trainer.model.forward.__code__.co_varnames
        losses = [log["loss"] for log in trainer.state.log_history if "loss" in log]
        assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
        first_loss[alpha] = losses[0]
    # same seed, same first batch and weights: the DEL run's first loss is CE plus a clearly positive digit term
    assert first_loss[5.0] > first_loss[0.0] + 0.1
