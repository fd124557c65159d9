"""DEL's training step at GPU speed, checked on the CPU: no host synchronisation in DEL's path (bench/step_ops.py's
census).

A host synchronisation cannot be observed as a wait without a GPU; ``op_census.op_census`` counts the ops that make
one on CUDA (``aten::nonzero``, ``.item()``, ``.tolist()``, tensors made from host data ...), and is itself checked
on known cases in tests/bench/test_bench_smoke.py. DEL's small ops compiled whole are checked in
tests/core/test_compiled_ops.py, the collator's number-token positions in tests/hf/test_number_positions.py.
"""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("tokenizer", ["llama-spm", "llama-bpe"])
def test_dels_path_in_a_training_step_has_no_host_sync(tokenizer):
    """A training step (get_batch_samples, compute_loss, backward) of a tiny Llama with DEL, minus the same step
    without: no op that waits for the device. With number tokens the control drops the collator's positions,
    and the census then sees the step find them itself: with NumPy on these CPU tensors (one read of the targets
    on the host), where a GPU's would take one ``nonzero`` per number group."""
    from bench import step_ops

    case = step_ops.census_case(tokenizer, "trainable", rows=2, seq_len=256)
    assert case["digit_targets"] > 0
    del_part = case["del"]
    assert del_part["sync_ops"] == {} and del_part["host_read_calls"] == {}, del_part
    assert del_part["cpu_only_check_ops"] == {}
    assert 0 < del_part["launches"] < case["step_without_del"]["launches"]
    if tokenizer == "llama-bpe":
        assert case["number_token_digits"] == 3 and all(n > 0 for n in case["targets_by_digits"][1:])
        control = step_ops.census_case(tokenizer, "trainable", rows=2, seq_len=256, number_positions=False)
        assert control["del"]["host_read_calls"] == {"numpy()": 1}
