"""Shared by the tests of every host (Axolotl, Trainer, TRL): the checks of a DEL run's logs, the gradients of a
first optimizer step, and an example script as a module."""

from __future__ import annotations

import importlib.util
import math
import os

import pytest
from transformers import TrainerCallback

from repo import REPO

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # TRL's telemetry honours it

PARTS = ("ce_loss", "del_loss", "del_l_num", "digit_entropy", "digit_accuracy")
# every value DEL adds to a training or evaluation log
LOGGED_KEYS = PARTS + ("digit_targets",)


def load_example(name: str):
    path = REPO / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_parts_logged(log: dict, prefix: str = "") -> None:
    for key in PARTS:
        assert math.isfinite(log[prefix + key]), (key, log)
    assert log[prefix + "digit_targets"] > 0, log
    assert 0 <= log[prefix + "digit_accuracy"] <= 1
    assert 0 < log[prefix + "digit_entropy"] <= math.log(10) + 1e-6
    # the logged parts add up to the loss the trainer optimises
    assert log[prefix + "ce_loss"] + log[prefix + "del_loss"] == pytest.approx(log[prefix + "loss"], rel=1e-5)


def train_logs(trainer) -> list[dict]:
    return [log for log in trainer.state.log_history if "loss" in log]


def eval_logs(trainer) -> list[dict]:
    return [log for log in trainer.state.log_history if "eval_loss" in log]


def check_run(trainer, steps: int, evaluations: int) -> None:
    """``steps`` training logs and ``evaluations`` evaluation logs, each with every DEL part, adding up."""
    logs, evals = train_logs(trainer), eval_logs(trainer)
    assert len(logs) == steps and len(evals) == evaluations, trainer.state.log_history
    for log in logs:
        assert_parts_logged(log)
        assert log["del_loss"] > 0
    for log in evals:
        assert_parts_logged(log, "eval_")


class GradientCapture(TrainerCallback):
    """The gradients of the first optimizer step, as the optimizer will see them."""

    def __init__(self):
        self.grads = None

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if self.grads is None:
            self.grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_logs_match(runs: dict, reference: str = "plain"):
    ref_train, ref_eval = runs[reference]
    for name, (train, evals) in runs.items():
        assert len(train) == len(ref_train) == 2 and len(evals) == len(ref_eval) >= 1, name
        for prefix, got, want in [("", train[0], ref_train[0]), ("eval_", evals[-1], ref_eval[-1])]:
            for key in ("loss",) + LOGGED_KEYS:
                assert got[prefix + key] == pytest.approx(want[prefix + key], rel=1e-4, abs=1e-6), (name, key)
            assert got[prefix + "ce_loss"] + got[prefix + "del_loss"] == pytest.approx(got[prefix + "loss"], rel=1e-5)
            assert got[prefix + "digit_targets"] > 0 and got[prefix + "del_loss"] > 0
