"""The head-row gradient added outside autograd (del_plugin/core/row_gradient.py): its contract against a dense
autograd oracle, and what it assumes of torch, including the private engine API it calls, which must fail loudly
if torch changes it."""

from __future__ import annotations

import pytest
import torch
from torch.autograd import Variable

from del_plugin.core import row_gradient
from del_plugin.core.row_gradient import ENGINE_API, dense_row_gradient, queue_at_end_of_backward, row_gradient_sink

from capture_checks import AllocationsOfShape

V, H = 40, 6
IDS = torch.tensor([3, 17, 4, 39])


class _Rows(torch.autograd.Function):
    """``weight[ids]``, whose weight gradient goes through the sink as DEL's own functions send it (or through
    :func:`dense_row_gradient` without a sink)."""

    @staticmethod
    def forward(ctx, weight, ids, sink):  # type: ignore[override]
        ctx.sink, ctx.shape, ctx.dtype = sink, weight.shape, weight.dtype
        ctx.save_for_backward(ids)
        return weight.detach().index_select(0, ids)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        (ids,) = ctx.saved_tensors
        if ctx.sink is not None:
            ctx.sink.add(ids, grad)
            return None, None, None
        return dense_row_gradient(ctx.shape, ctx.dtype, ids, grad), None, None


def rows(weight: torch.Tensor, ids: torch.Tensor = IDS) -> torch.Tensor:
    """The sink is taken outside the function's forward, which runs without gradients, as DEL's functions take it."""
    return _Rows.apply(weight, ids, row_gradient_sink(weight))


def _oracle(other_use: torch.Tensor | None, upstream: torch.Tensor) -> torch.Tensor:
    """The gradient autograd gives the same losses through a plain ``index_select``."""
    torch.manual_seed(0)
    weight = torch.randn(V, H, dtype=torch.float64, requires_grad=True)
    loss = (weight.index_select(0, IDS) * upstream).sum()
    if other_use is not None:
        loss = loss + (weight * other_use).sum()
    loss.backward()
    return weight.grad


def _weight() -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(V, H, dtype=torch.float64, requires_grad=True)


def test_rows_join_the_summed_gradient_before_it_is_accumulated():
    upstream, other = torch.randn(len(IDS), H, dtype=torch.float64), torch.randn(V, H, dtype=torch.float64)
    weight = _weight()
    at_accumulation = []
    weight.register_post_accumulate_grad_hook(lambda w: at_accumulation.append(w.grad.clone()))
    with AllocationsOfShape() as alone:
        (weight * other).sum().backward()
    weight.grad = None
    at_accumulation.clear()
    with AllocationsOfShape() as seen:
        ((rows(weight) * upstream).sum() + (weight * other).sum()).backward()
    expected = _oracle(other, upstream)
    torch.testing.assert_close(weight.grad, expected)
    # inside the backward pass, when the gradient is accumulated (where DDP and FSDP reduce it): already there
    torch.testing.assert_close(at_accumulation[0], expected)
    # the rows add no [V, H] tensor to what the other use allocates
    assert seen.shapes.count((V, H)) == alone.shapes.count((V, H))


def test_rows_accumulate_over_backward_passes_as_gradient_accumulation_does():
    upstream, other = torch.randn(len(IDS), H, dtype=torch.float64), torch.randn(V, H, dtype=torch.float64)
    for other_use in (other, None):
        weight = _weight()
        for _ in range(2):
            loss = (rows(weight) * upstream).sum()
            (loss if other_use is None else loss + (weight * other_use).sum()).backward()
        torch.testing.assert_close(weight.grad, 2 * _oracle(other_use, upstream))


def test_rows_alone_reach_grad_when_the_backward_pass_ends():
    upstream = torch.randn(len(IDS), H, dtype=torch.float64)
    weight = _weight()
    (rows(weight) * upstream).sum().backward()
    torch.testing.assert_close(weight.grad, _oracle(None, upstream))


def test_an_expanded_gradient_is_not_written_in_many_places():
    upstream = torch.randn(len(IDS), H, dtype=torch.float64)
    weight = _weight()
    # weight.sum()'s gradient is a ones tensor expanded from one element (stride 0)
    ((rows(weight) * upstream).sum() + weight.sum()).backward()
    torch.testing.assert_close(weight.grad, _oracle(torch.ones(V, H, dtype=torch.float64), upstream))


def test_a_zero3_weight_reached_by_the_rows_alone_is_refused():
    weight = _weight()
    weight.ds_id = 7  # what DeepSpeed ZeRO-3 gives its parameters
    with pytest.raises(RuntimeError, match="ZeRO-3 reduces the weight's gradient when it is accumulated"):
        rows(weight).sum().backward()


def test_a_weight_that_is_not_a_parameter_taking_a_gradient_now_has_no_sink():
    leaf, frozen = _weight(), torch.randn(V, H)
    assert row_gradient_sink(leaf * 1.0) is None and row_gradient_sink(frozen) is None
    with torch.no_grad():
        assert row_gradient_sink(leaf) is None
    # a computed weight: the dense gradient through autograd, the rows summed where ids repeat
    upstream = torch.randn(len(IDS) + 1, H, dtype=torch.float64)
    ids = torch.cat([IDS, IDS[:1]])
    (rows(leaf * 1.0, ids) * upstream).sum().backward()
    expected = torch.zeros(V, H, dtype=torch.float64)
    for row, grad in zip(ids.tolist(), upstream):
        expected[row] += grad
    torch.testing.assert_close(leaf.grad, expected)


# ---------------------------------------------------------------------------------------- what it assumes of torch
def test_the_private_engine_api_still_runs_a_callback_once_the_backward_pass_has_ended():
    engine = getattr(Variable, "_execution_engine", None)
    assert callable(getattr(engine, "queue_callback", None)), (
        f"{ENGINE_API} is gone in torch {torch.__version__}: del_plugin/core/row_gradient.py relies on it"
    )
    leaf = torch.randn(3, requires_grad=True)
    seen = []

    class Queues(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):  # type: ignore[override]
            return x.clone()

        @staticmethod
        def backward(ctx, grad):  # type: ignore[override]
            try:
                engine.queue_callback(lambda: seen.append(None if leaf.grad is None else leaf.grad.clone()))
            except TypeError as error:
                pytest.fail(f"{ENGINE_API}(callback) has another signature in torch {torch.__version__}: {error}")
            return grad

    (Queues.apply(leaf) * 2).sum().backward()
    assert len(seen) == 1, f"{ENGINE_API}: the queued callback ran {len(seen)} times in one backward pass, not once"
    assert seen[0] is not None and torch.equal(seen[0], torch.full((3,), 2.0)), (
        f"{ENGINE_API}: the callback ran before the leaf's gradient was accumulated, not at the end of the backward"
    )


class _EngineWith:
    """Autograd's engine (which runs every backward pass) with ``queue_callback`` replaced, or removed when None."""

    def __init__(self, engine, queue_callback):
        self._engine, self._queue_callback = engine, queue_callback

    def __getattr__(self, name):
        if name == "queue_callback" and self._queue_callback is None:
            raise AttributeError(name)
        return self._queue_callback if name == "queue_callback" else getattr(self._engine, name)


def test_a_missing_engine_api_is_named_in_the_error(monkeypatch):
    monkeypatch.setattr(Variable, "_execution_engine", _EngineWith(Variable._execution_engine, None))
    with pytest.raises(RuntimeError, match="Variable._execution_engine.queue_callback is missing"):
        queue_at_end_of_backward(lambda: None)
    with pytest.raises(RuntimeError, match="queue_callback is missing"):
        rows(_weight()).sum().backward()


def test_another_signature_of_the_engine_api_is_named_in_the_error(monkeypatch):
    def two_arguments(callback, when):
        raise AssertionError("not reached")

    monkeypatch.setattr(Variable, "_execution_engine", _EngineWith(Variable._execution_engine, two_arguments))
    with pytest.raises(RuntimeError, match=r"queue_callback\(callback\) failed .* signature has changed"):
        queue_at_end_of_backward(lambda: None)


def test_the_engine_api_is_called_in_one_place():
    import inspect
    from pathlib import Path

    core = Path(row_gradient.__file__).parent
    callers = [p.name for p in core.rglob("*.py") if "_execution_engine" in p.read_text()]
    assert callers == ["row_gradient.py"], callers
    assert "_execution_engine" in inspect.getsource(queue_at_end_of_backward)
