"""``torch_compile: true`` (Axolotl compiles the model with torch.compile, Inductor on this CPU) with DEL: an
in-process tiny run logs the eager run's DEL metrics, step by step, in training and evaluation."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def axolotl_data(tmp_path_factory):
    from tools.assets import tiny_model_dir
    from tools.cpu import write_alpaca_jsonl

    from gsm8k_rows import gsm8k_rows

    return tiny_model_dir("llama-spm"), write_alpaca_jsonl(tmp_path_factory.mktemp("data") / "d.jsonl", gsm8k_rows(16))


def test_torch_compile_logs_the_eager_metrics(tmp_path, axolotl_data):
    import torch

    from axolotl_helpers import run_logged
    from trainer_checks import assert_logs_match

    # two micro-batches a step and four evaluation rows: a third faster here under Inductor than run_logged's default
    same = dict(gradient_accumulation_steps=2, val_set_size=0.25)
    runs = {"plain": run_logged(tmp_path / "eager", axolotl_data, **same)}
    compiled_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    runs["compiled"] = run_logged(tmp_path / "compiled", axolotl_data, torch_compile=True, **same)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > compiled_before  # torch.compile really ran
    assert_logs_match(runs)
    torch._dynamo.reset()
