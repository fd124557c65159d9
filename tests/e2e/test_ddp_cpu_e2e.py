"""DEL's normalisation across data-parallel ranks, in real two-process Axolotl runs on CPU (gloo DDP).

DELTrainer counts the digit targets of an optimizer step on every rank, all-gathers the count, and multiplies its
term by the world size because DDP averages gradients (del_plugin/axolotl/trainer.py, ``get_batch_samples`` and
``compute_loss``). Here that is measured rather than reasoned: the same four GSM8K rows make one optimizer step
either in one process (micro-batch 2 x accumulation 2) or on two ranks (micro-batch 1 x accumulation 2 each), and
the gradient the optimizer sees and every logged part must agree.

Which row goes where: ``curriculum_sampling`` makes Axolotl keep the dataset order and sample sequentially, and
accelerate's ``BatchSamplerShard`` deals the per-rank batches of size 1 round-robin, so with rows (a, b, c, d)

* world 1: micro-batches [a, b] and [c, d];
* world 2: rank 0 gets [a] then [c], rank 1 gets [b] then [d].

Rows a and c are mostly digits, b and d mostly words, so rank 0 holds about four times the digit targets of
rank 1 (117 against 28): a per-rank digit mean would weight the two ranks' digits very differently. Both ranks
hold the same number of label tokens (207), because Axolotl 0.21 sets ``average_tokens_across_devices=False``
(axolotl/core/builders/base.py): its cross-entropy is the mean over ranks of each rank's token mean, which equals
the world-1 token mean only when the ranks hold equal token counts. With equal counts the *full* gradients can be
compared exactly, not only DEL's part of them. The tests check the assignment from what each rank actually
computed, not from this reasoning.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tools.assets import tiny_model_dir
from tools.cpu import write_alpaca_jsonl

from axolotl_helpers import cpu_config
from ddp_cpu import start
from gsm8k_rows import gsm8k_rows
from paper_sets import write_benchmark_dir
from parallel_checks import (
    ALPHA,
    ATOL,
    DIGITS_PER_ROW,
    LABEL_TOKENS_PER_ROW,
    ROWS,
    RTOL,
    assert_grads_close,
    assert_ranks_log,
    ok,
    step_keys,
    train_log,
)

pytestmark = pytest.mark.e2e


def config(work, model_dir, data, world: int, **overrides) -> dict:
    return cpu_config(work, model_dir, data, **{**step_keys(world), **overrides})


# the evaluation after training: the seven sets (SimulEq and SAT the stand-ins of tests/helpers/paper_sets.py, which
# are not the authors' files, hence del_eval_allow_modified), two problems each, short generations; its run is Axolotl's
# whole train() and ends the process group, so it goes last
EVAL_KEYS = dict(del_eval_benchmarks="all", del_eval_limit=2, del_eval_max_new_tokens=8, del_eval_allow_modified=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddp")
    benchmark_dir = write_benchmark_dir(tmp / "paper-benchmarks")
    rows = gsm8k_rows(max(ROWS) + 1)
    data = write_alpaca_jsonl(tmp / "rows.jsonl", [rows[i] for i in ROWS])
    model_dir = tiny_model_dir("llama-spm")

    def plan(world):
        def run(name, setup=None, **overrides):
            overrides.setdefault("dataset_prepared_path", str(tmp / f"prepared-w{world}"))  # tokenised once
            return {"config": config(tmp / f"w{world}-{name}", model_dir, data, world, **overrides), "setup": setup}

        plan = {
            "del": run("del"),
            "ce": run("ce", del_alpha=0.0),
            "ntl_number": run("ntl_number", del_criterion="ntl_number"),
        }
        if world == 2:
            # control: the same run with each rank dividing by its own digit count
            plan["rank_local"] = run("rank_local", setup="parallel_checks:rank_local_digit_count")
            # last but the evaluation: it may raise (see test_ddp_find_unused_parameters)
            plan["find_unused"] = run("find_unused", ddp_find_unused_parameters=True)
        plan["eval"] = run("eval", **EVAL_KEYS, del_eval_benchmark_dir=str(benchmark_dir)) | {"whole": True}
        return plan

    two = start(plan(2), tmp / "world2", nproc=2)
    one = start(plan(1), tmp / "world1", nproc=1)  # a plain process: no process group, no DDP wrapper
    return one.results(), two.results()


def del_contribution(del_run: dict, ce_run: dict) -> dict:
    """(gradient with del_alpha=ALPHA) - (gradient with del_alpha=0): DEL's part of the gradient alone."""
    return {n: ok(del_run)["grads"][n] - ok(ce_run)["grads"][n] for n in del_run["grads"]}


def test_the_runs_are_one_process_and_two_gloo_ranks_with_uneven_digits(runs):
    one, two = runs
    for result in one["del"]:
        assert ok(result)["world_size"] == 1 and result["backend"] is None
    micro = one["del"][0]["micro_batches"]
    assert [mb["rows"] for mb in micro] == [2, 2]
    d = DIGITS_PER_ROW
    assert [mb["digits"] for mb in micro] == [d[0] + d[1], d[2] + d[3]]
    for rank, result in enumerate(two["del"]):
        assert ok(result)["world_size"] == 2 and result["backend"] == "gloo"
        assert result["distributed_type"] == "DistributedType.MULTI_CPU"
        micro = result["micro_batches"]
        assert [mb["rows"] for mb in micro] == [1, 1]
        assert [mb["digits"] for mb in micro] == [DIGITS_PER_ROW[rank], DIGITS_PER_ROW[rank + 2]]
        assert [mb["label_tokens"] for mb in micro] == [LABEL_TOKENS_PER_ROW[rank], LABEL_TOKENS_PER_ROW[rank + 2]]
    digits = [DIGITS_PER_ROW[r] + DIGITS_PER_ROW[r + 2] for r in (0, 1)]
    tokens = [LABEL_TOKENS_PER_ROW[r] + LABEL_TOKENS_PER_ROW[r + 2] for r in (0, 1)]
    assert digits[0] > 4 * digits[1] and tokens[0] == tokens[1]
    # both ranks step with the same, all-reduced gradient
    for name, grad in two["del"][0]["grads"].items():
        assert torch.equal(grad, two["del"][1]["grads"][name]), name


def test_gradient_at_world_size_two_equals_world_size_one(runs):
    one, two = runs
    for rank in (0, 1):
        assert_grads_close(two["del"][rank]["grads"], one["del"][0]["grads"], f"full gradient, rank {rank}")
        assert_grads_close(two["ce"][rank]["grads"], one["ce"][0]["grads"], f"CE-only gradient, rank {rank}")
        assert_grads_close(
            del_contribution(two["del"][rank], two["ce"][rank]),
            del_contribution(one["del"][0], one["ce"][0]),
            f"DEL's contribution, rank {rank}",
        )
    contribution = del_contribution(one["del"][0], one["ce"][0])
    assert max(g.abs().max().item() for g in contribution.values()) > 1e-4  # DEL does move the gradient


def test_logged_parts_at_world_size_two_equal_world_size_one(runs):
    one, two = runs
    for name in ("del", "ce"):
        expected = train_log(one[name][0])
        assert expected["digit_targets"] == sum(DIGITS_PER_ROW)
        assert_ranks_log(expected, two[name], name)


def test_number_level_criterion_at_world_size_two_equals_world_size_one(runs):
    """``ntl_number`` is averaged over the numbers of the whole step, counted over both ranks."""
    one, two = runs
    for rank in (0, 1):
        assert_grads_close(two["ntl_number"][rank]["grads"], one["ntl_number"][0]["grads"], f"rank {rank}")
    contribution = del_contribution(one["ntl_number"][0], one["ce"][0])
    assert max(g.abs().max().item() for g in contribution.values()) > 1e-4
    expected = train_log(one["ntl_number"][0])
    assert expected["digit_targets"] == sum(DIGITS_PER_ROW) and 0 < expected["del_l_num"] <= 1
    assert_ranks_log(expected, two["ntl_number"], "ntl_number")


def test_control_rank_local_digit_mean_changes_the_gradient(runs):
    # the comparison has teeth: normalising by each rank's own digits gives another DEL gradient on these rows
    one, two = runs
    expected = del_contribution(one["del"][0], one["ce"][0])
    local = del_contribution(two["rank_local"][0], two["ce"][0])
    far = [n for n in expected if not torch.allclose(local[n], expected[n], rtol=10 * RTOL, atol=10 * ATOL)]
    assert far, "rank-local normalisation gave the same gradient: the rows do not test the all-gather"


def test_ddp_find_unused_parameters(runs):
    # DDP then returns the outputs through _DDPSink (a clone of the logits); DEL reads the hidden states inside
    # the forward, so it is unaffected
    one, two = runs
    for rank in (0, 1):
        assert_grads_close(ok(two["find_unused"][rank])["grads"], one["del"][0]["grads"], f"rank {rank}")


# ------------------------------------------------------------------------------------ evaluation after training
def eval_log(result: dict) -> dict:
    """The entry ``del_eval_benchmarks`` logged through the trainer, or {} (none)."""
    logged = [h for h in ok(result)["logs"] if any(k.startswith("del_eval/") for k in h)]
    assert len(logged) <= 1, logged
    return {k: v for k, v in logged[0].items() if k.startswith("del_eval/")} if logged else {}


def assert_report_logged(report: dict, logged: dict) -> None:
    """The report covers the seven sets, two problems each, and the trainer logged exactly its numbers."""
    from del_plugin.evaluation import BENCHMARK_NAMES

    assert report["status"] == "complete" and report["macc"]["label"] == "mACC (partial coverage)"
    assert [d["benchmark"] for d in report["datasets"]] == list(BENCHMARK_NAMES)
    assert all(d["evaluated"] == 2 and d["status"] == "complete" for d in report["datasets"])
    expected = {f"del_eval/{d['benchmark']}_accuracy": d["generation"]["accuracy"] for d in report["datasets"]}
    assert logged == expected | {"del_eval/macc": pytest.approx(sum(expected.values()) / 7)}


def test_evaluation_after_training_reports_logs_and_fills_the_model_card(runs, tmp_path):
    from del_plugin.evaluation import cli, load_report, read_generations

    one, _ = runs
    (result,) = one["eval"]
    out = Path(ok(result)["output_dir"])
    report = load_report(out / "del_eval")
    assert_report_logged(report, eval_log(result))
    assert report["model"]["adapter"] == str(out)  # the saved adapter, read as del-eval run reads output_dir
    card = (out / "README.md").read_text()
    assert "<summary>See axolotl config</summary>" in card  # Axolotl's card, with the DEL section added
    section = card[card.index("## Digit Entropy Loss (DEL)") :]
    assert f"`del_alpha: {ALPHA:g}`" in section and "one token per digit" in section
    assert "| GSM8K | 2 of 1,319 |" in section and "| **mACC (partial coverage)** |" in section
    # the command the card gives reproduces the report, problem by problem
    command = section.split("Reproduce with:")[1].split("`")[1].split()
    assert command[:2] == ["del-eval", "run"]
    command = command[1 : command.index("--out")] + ["--out", str(tmp_path / "again")]
    assert cli.main(command) == 0
    again = {(g["dataset"], g["id"]): (g["generation"], g["correct"]) for g in read_generations(tmp_path / "again")}
    ours = {(g["dataset"], g["id"]): (g["generation"], g["correct"]) for g in read_generations(out / "del_eval")}
    assert again == ours and len(ours) == 14


def test_evaluation_after_training_under_two_ranks_runs_once_on_rank_zero(runs):
    from del_plugin.evaluation import load_report, read_generations

    _, two = runs
    rank0, rank1 = (ok(r) for r in two["eval"])  # the launch returned: no rank waited forever
    assert rank0["world_size"] == rank1["world_size"] == 2
    assert not rank0["process_group"] and not rank1["process_group"]
    assert eval_log(rank1) == {}
    out = Path(rank0["output_dir"])
    assert rank1["output_dir"] == str(out) and [p.name for p in out.glob("del_eval*")] == ["del_eval"]
    report = load_report(out / "del_eval")
    assert_report_logged(report, eval_log(rank0))
    assert len(read_generations(out / "del_eval")) == 14  # one rank wrote them, once
