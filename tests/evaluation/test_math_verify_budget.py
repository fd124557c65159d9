"""math-verify's per-problem budget (CPU time and memory, parse and verify together), enforced by the kernel in the
worker's forked process, and the static guard in front of it (del_plugin/evaluation/scoring/math_verify_guard.py; its
own cases in test_math_verify_guard.py): hostile GSM8K-style outputs (power towers, huge powers of polynomials,
factorial chains, deep nests; tests/helpers/hostile_math.py) are each "not verified" with a reason, the guard's or the
budget's; with the guard off (``guard=None``) the budget alone stops the runaways, the worker kept; plain outputs keep
their verdicts. No wall-clock assertion: each checks the mechanism (the guard's reason, the signal that stopped the
problem, the CPU time and memory the kernel counted for its process)."""

from __future__ import annotations

import json

import pytest

from del_plugin.evaluation import cli
from del_plugin.evaluation.scoring.math_verify_guard import too_costly
from del_plugin.evaluation.scoring.math_verify_scoring import CPU_BUDGET_S, MEMORY_BUDGET_MB, MathVerifyScorer

from hostile_math import HOSTILE_OUTPUTS, PLAIN_OUTPUTS, REFERENCE, RUNAWAY

pytest.importorskip("math_verify")

# the kernel counts CPU time in ticks (up to 10 ms) and delivers ITIMER_PROF's signal at the next one
TICK_SLACK_S = 0.1
# worked out by hand: which plain outputs (tests/helpers/hostile_math.py) say 18, as math-verify reads them
PLAIN_VERDICTS = [True, True, True, False, True, True, True, True, True, False]
PLAIN_VERDICTS += [True, False, True, False, True, False, False, True, True, True]


BUDGET_REASONS = (f"CPU time: over {CPU_BUDGET_S:g} s (ITIMER_PROF)", f"memory: over {MEMORY_BUDGET_MB} MiB")


@pytest.fixture(scope="module")
def scorer():
    """The budget alone: the guard off, so that every output reaches math-verify."""
    scorer = MathVerifyScorer(guard=None)
    yield scorer
    scorer.close()


@pytest.fixture(scope="module")
def plain_rss_mb(scorer) -> float:
    """What a problem's process holds on a plain output (the worker's pages it shares, and little more)."""
    return scorer.check(REFERENCE, PLAIN_OUTPUTS[0]).max_rss_mb


def test_plain_outputs_keep_their_verdicts_within_the_budget(scorer):
    results = [scorer.check(REFERENCE, output) for output in PLAIN_OUTPUTS]
    assert [r.correct for r in results] == PLAIN_VERDICTS
    assert all(r.over_budget is None and r.cpu_s < CPU_BUDGET_S for r in results), results


def test_the_guard_and_the_budget_catch_every_hostile_output_each_with_its_reason():
    """The scorer as runs use it: the guard's reason for what it recognises (no process spent: no CPU counted),
    the budget's for the rest; plain outputs pass the guard."""
    scorer = MathVerifyScorer()
    try:
        for name, output in HOSTILE_OUTPUTS.items():
            result, reason = scorer.check(REFERENCE, output), too_costly(output)
            assert result.correct is False, name
            if reason is not None:
                assert reason.startswith("too large to evaluate: ")
                assert (result.over_budget, result.cpu_s, result.max_rss_mb) == (reason, 0.0, None), name
            else:
                assert result.over_budget in BUDGET_REASONS, (name, result)
        assert scorer.over_budget == len(HOSTILE_OUTPUTS) and scorer.timeouts == 0
        assert [scorer.correct(REFERENCE, output) for output in PLAIN_OUTPUTS] == PLAIN_VERDICTS
    finally:
        scorer.close()


@pytest.mark.parametrize("name", list(HOSTILE_OUTPUTS))
def test_a_hostile_output_is_not_verified_within_the_budget(name, scorer, plain_rss_mb):
    worker = scorer._process.pid if scorer._process else None
    result = scorer.check(REFERENCE, HOSTILE_OUTPUTS[name])
    assert result.correct is False
    assert result.cpu_s <= CPU_BUDGET_S + TICK_SLACK_S, result  # the kernel's count of the problem's process
    # its memory: within its address-space limit, which is the budget above the worker's (and its plain problems')
    assert plain_rss_mb < result.memory_limit_mb - MEMORY_BUDGET_MB and result.max_rss_mb <= result.memory_limit_mb
    if name in RUNAWAY:  # unbounded, math-verify takes seconds to minutes (or gigabytes) on these
        assert result.over_budget in BUDGET_REASONS
    else:
        assert result.over_budget is None, result
    assert scorer.timeouts == 0 and worker in (None, scorer._process.pid)  # the same worker goes on


def test_the_memory_budget_fires_and_caps_the_problem():
    """(x+1)^1000000 grows past 2 GiB unbounded (2,100 MB of RSS when measured with a 2 GiB budget): with a 64 MiB
    budget and a CPU budget it cannot reach first, the memory limit stops it within its address-space limit."""
    scorer = MathVerifyScorer(cpu_s=60, memory_mb=64, guard=None)
    try:
        plain = scorer.check(REFERENCE, PLAIN_OUTPUTS[0])
        result = scorer.check(REFERENCE, HOSTILE_OUTPUTS["(x+1)^1000000"])
        assert (result.correct, result.over_budget) == (False, "memory: over 64 MiB"), result
        assert result.memory_limit_mb - 64 > plain.max_rss_mb  # the limit: 64 MiB above the worker's address space
        assert plain.max_rss_mb + 32 < result.max_rss_mb <= result.memory_limit_mb  # it grew, and stopped there
        assert scorer.check(REFERENCE, PLAIN_OUTPUTS[0]).correct  # the worker goes on
    finally:
        scorer.close()


def test_a_worker_that_gives_no_answer_is_replaced_and_the_problem_not_verified():
    """The parent's backstop (a worker stuck past ``timeout_s`` of wall time): here with a CPU budget far above it,
    so that the worker is still working when it fires."""
    scorer = MathVerifyScorer(timeout_s=1, cpu_s=60, guard=None)
    try:
        assert scorer.correct(REFERENCE, PLAIN_OUTPUTS[0])  # started, and warm
        first = scorer._process.pid
        result = scorer.check(REFERENCE, HOSTILE_OUTPUTS["power tower 10^10^10"])
        assert (result.correct, result.over_budget) == (False, "wall time: no answer within 1 s (worker replaced)")
        assert scorer.timeouts == 1 and scorer._process is None
        assert scorer.correct(REFERENCE, PLAIN_OUTPUTS[0]) and scorer._process.pid != first
    finally:
        scorer.close()


def test_del_eval_score_records_the_budgets_reason_and_counts_it(tmp_path, capsys):
    """The real path: ``del-eval score`` on the hostile set as GSM8K predictions (none of them is an answer):
    every record not verified, each with its reason (the guard's where it recognises the output, else the
    budget's), the set's count of problems over the budget (the guard's among them)."""
    names = list(HOSTILE_OUTPUTS)
    predictions = tmp_path / "predictions.jsonl"
    rows = [{"id": i, "output": HOSTILE_OUTPUTS[name]} for i, name in enumerate(names)]
    predictions.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "out"
    assert cli.main(["score", "--benchmark", "gsm8k", "--predictions", str(predictions), "--out", str(out)]) == 0
    capsys.readouterr()
    records = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    notes = {names[r["id"]]: r["math_verify_note"] for r in records}
    assert all(r["math_verify_correct"] is False for r in records)
    for name, note in notes.items():
        assert note == too_costly(HOSTILE_OUTPUTS[name]) or (
            too_costly(HOSTILE_OUTPUTS[name]) is None and note in BUDGET_REASONS
        ), (name, note)
    assert sum(too_costly(output) is not None for output in HOSTILE_OUTPUTS.values()) >= 18  # the guard's share
    entry = json.loads((out / "report.json").read_text())["datasets"][0]
    assert entry["math_verify"]["over_budget"] == len(HOSTILE_OUTPUTS) and entry["math_verify"]["correct"] == 0
