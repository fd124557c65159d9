"""The demo's processes killed and run again: the paper demo's worker killed while scoring resumes its evaluation,
and ``run_jobs`` (the paper demo's and the sweep's) stops the job it started when it is killed itself. The kills
run as in tests/evaluation/test_eval_lifecycle.py, in a child forked from this process
(tests/helpers/killed_runs.py)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from del_plugin.evaluation.reports.files import load_report

from killed_runs import (
    exit_code,
    forked,
    kill_after_generation,
    note_generations,
    stopped_progress_monitor,
    whole_records,
)


@pytest.fixture(autouse=True, scope="module")
def no_progress_bar_thread():
    yield from stopped_progress_monitor()


def test_the_paper_demo_killed_while_scoring_resumes_its_evaluation(digit_model, tmp_path):
    """The demo's worker (``python -m experiments paper --worker RUN``) scoring the base model: killed after the
    first set, run again, it keeps that set, scores the second once, and marks the run done."""
    from del_plugin.evaluation.run.runner import read_generations
    from experiments.paper_worker import work
    from experiments.runs import read_record, write_record

    out = tmp_path / "paper"
    run_dir = out / "runs" / "base"
    run_dir.mkdir(parents=True)
    (out / "plan.json").write_text("{}")
    eval_spec = {
        "sets": ["gsm8k", "mmlu_math"],
        "benchmark_dir": None,
        "limit": 2,
        "max_new_tokens": 3,
        "batch_size": 2,
        "dtype": "auto",
    }
    spec = {"model": "tiny", "regime": None, "criterion": None, "alpha": None, "seed": None, "train": None}
    write_record(run_dir, {"setting": "base", "spec": spec, "eval_spec": eval_spec, "state": "new"})

    status = forked(lambda: (kill_after_generation(3)(), work(run_dir, "eval", Path(digit_model)))[1])
    assert exit_code(status) == f"signal {signal.SIGKILL}"
    stopped = load_report(run_dir / "eval")
    assert [d["status"] for d in stopped["datasets"]] == ["complete", "running"]
    first_set = [r for r in whole_records(run_dir / "eval" / "generations.jsonl") if r["dataset"] == "gsm8k"]

    generated = tmp_path / "generated"
    assert exit_code(forked(lambda: (note_generations(generated)(), work(run_dir, "eval", Path(digit_model)))[1])) == 0
    assert generated.read_text().split() == ["mmlu_math", "mmlu_math"]  # gsm8k was not generated again
    report = load_report(run_dir / "eval")
    assert report["status"] == "complete" and report["datasets"][0] == stopped["datasets"][0]  # kept, not redone
    records = read_generations(run_dir / "eval")
    assert sorted((r["dataset"], r["id"]) for r in records) == [
        ("gsm8k", 0),
        ("gsm8k", 1),
        ("mmlu_math", 0),
        ("mmlu_math", 1),
    ]
    assert [r for r in records if r["dataset"] == "gsm8k"] == first_set
    assert read_record(run_dir)["state"] == "done"


def test_a_killed_sweep_stops_the_run_it_started(tmp_path):
    """``run_jobs`` (the paper demo's and the sweep's): the parent killed with SIGKILL, the job's process gets SIGTERM
    (and writes its partial report), instead of going on unseen beside the next invocation's."""
    from experiments.jobs import Job, run_jobs

    started, stopped = tmp_path / "started", tmp_path / "stopped"
    script = (
        "import pathlib, signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, lambda *a: (pathlib.Path({str(stopped)!r}).touch(), sys.exit(143)))\n"
        f"pathlib.Path({str(started)!r}).touch()\n"
        "time.sleep(30)\n"
    )
    job = Job(
        name="sleeper", run_dir=tmp_path, argv=[sys.executable, "-S", "-c", script], action="waiting", trains=False
    )
    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            run_jobs([job], dict(os.environ))
        finally:
            os._exit(0)
    deadline = time.monotonic() + 20
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert started.exists()
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    deadline = time.monotonic() + 10
    while not stopped.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stopped.exists()
