"""del-eval sized for the machine: the batch size chosen for the device, a progress bar that moves with every
generated token, `run --estimate` (a timed probe, then arithmetic; nothing written), and a wrong `--benchmarks`
answered as a wrong command line."""

from __future__ import annotations

import math

import pytest

from del_plugin.evaluation import cli
from del_plugin.evaluation.run.estimate import PROBE_TOKENS, Probe, estimate_run, expected_seconds, format_estimate
from del_plugin.evaluation.run.generation import DEVICE_BATCH_SIZES, device_batch_size, generate_greedy, load_model
from del_plugin.evaluation.run.runner import EvalSettings, for_device


class Bar:
    """Records what a tqdm bar is given."""

    def __init__(self):
        self.updates: list[float] = []

    def update(self, n: float) -> None:
        self.updates.append(n)


def test_the_batch_size_is_chosen_for_the_device_unless_given():
    assert DEVICE_BATCH_SIZES == {"cuda": 16, "cpu": 4}
    assert device_batch_size("cpu") == 4 and device_batch_size("cuda:1") == 16 and device_batch_size("meta") == 4
    assert for_device(EvalSettings(), "cpu").batch_size == 4
    assert for_device(EvalSettings(), "cuda:0").batch_size == 16
    assert for_device(EvalSettings(batch_size=3), "cuda:0").batch_size == 3
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        EvalSettings(batch_size=0)


def test_the_progress_bar_moves_with_every_generated_token(digit_model):
    """The digit model writes digits to the token limit, so each batch of `rows` takes `max_new_tokens` steps; the
    bar gets rows / max_new_tokens a step, and the batch's rest when it ends: in all, one per problem."""
    lm = load_model(digit_model)
    prompts = [lm.tokenizer("Question: 12 + 3?")["input_ids"]] * 5
    bar = Bar()
    batches = list(generate_greedy(lm, prompts, batch_size=2, max_new_tokens=6, progress=bar))
    assert [len(indices) for indices, *_ in batches] == [2, 2, 1]
    assert all(n == 6 for _, _, lengths, _ in batches for n in lengths)  # every row ran to the limit
    total = 0.0
    for update in bar.updates:  # summed in order, as the bar adds them: exactly the count, never past the total
        total += update
    assert total == 5.0
    steps = [u for u in bar.updates if math.isclose(u, 2 / 6, rel_tol=1e-5) or math.isclose(u, 1 / 6, rel_tol=1e-5)]
    assert len(steps) >= 3 * 4  # several moves within each batch, not one per batch
    assert len(bar.updates) > 3 * 5


def test_expected_seconds_is_the_probes_arithmetic():
    """Worked by hand: load 10 s; 9 problems at batch 4 are 3 batches, each 2 s of prompt + 100 tokens x 0.5 s
    = 52 s, and a teacher-forced batch of 3 s: 3 x 55 = 165 s; a second set of 1 problem generated twice
    (program-of-thought): 1 batch x (2 x 52 + 3) = 107 s; a set with generation off: 2 batches x 3 s."""
    probe = Probe(load_s=10.0, prompt_s=2.0, token_s=0.5, teacher_forced_s=3.0, batch_size=4, device="cpu")
    assert expected_seconds([9], [1], probe, 100) == 10 + 165
    assert expected_seconds([9, 1], [1, 2], probe, 100) == 10 + 165 + 107
    assert expected_seconds([5], [0], probe, 100) == 10 + 6
    assert expected_seconds([], [], probe, 100) == 10


def test_the_estimate_line_says_what_it_assumed():
    probe = Probe(load_s=10.0, prompt_s=2.0, token_s=0.5, teacher_forced_s=3.0, batch_size=4, device="cpu")

    class Task:
        name, problems = "gsm8k", [object()] * 9

    text = format_estimate([Task], probe, 175.0, 100)
    assert text.startswith(
        "estimate: about 2.9 min on this machine as loaded now (problems: gsm8k 9; each generation run to 100 new"
    )
    assert "a batch of 4 on cpu: prompt pass 2.000 s, 0.5000 s a generated token, teacher-forced 3.000 s" in text


def test_estimate_probes_the_model_and_adds_up(digit_model):
    settings = EvalSettings(limit=6, max_new_tokens=40, batch_size=4)
    tasks, probe, seconds = estimate_run(str(digit_model), benchmarks="gsm8k", settings=settings)
    assert [(t.name, len(t.problems)) for t in tasks] == [("gsm8k", 6)]
    assert probe.batch_size == 4 and probe.device == "cpu" and PROBE_TOKENS >= 8
    assert probe.token_s > 0 and probe.prompt_s >= 0 and probe.teacher_forced_s > 0 and probe.load_s > 0
    assert seconds == expected_seconds([6], [1], probe, 40)
    _, probe, seconds = estimate_run(
        str(digit_model), benchmarks="gsm8k", settings=EvalSettings(limit=6, generate=False, batch_size=4)
    )
    assert seconds == probe.load_s + 2 * probe.teacher_forced_s


def test_run_estimate_prints_the_estimate_and_writes_nothing(digit_model, tmp_path, capsys):
    out = tmp_path / "eval"
    argv = ["run", "--model", str(digit_model), "--benchmarks", "gsm8k", "--limit", "3", "--max-new-tokens", "20"]
    assert cli.main([*argv, "--out", str(out), "--estimate", "--no-teacher-forced"]) == 0
    printed = capsys.readouterr().out
    assert (
        printed.startswith("estimate: about ")
        and "(problems: gsm8k 3; each generation run to 20 new tokens)" in printed
    )
    assert "a batch of 4 on cpu" in printed and "nothing was written" in printed
    assert not out.exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--model", "m", "--benchmarks", "gsm8k,svmap", "--out", "o"],
        ["lm-eval-tasks", "--out", "o", "--benchmarks", "gsm8k,svmap"],
    ],
    ids=["run", "lm-eval-tasks"],
)
def test_an_unknown_benchmark_is_a_wrong_command_line(argv, capsys):
    """Exit status 2, as --help reserves for a wrong command line, with the closest name; before anything loads
    (the model "m" does not exist)."""
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    assert stop.value.code == 2
    assert "unknown benchmark 'svmap' (did you mean 'svamp'?)" in capsys.readouterr().err
