"""bench/gpu_check, the GPU check (``python -m bench.gpu_check``): its refusal without a GPU, its pairs and what it
skips, its bookkeeping with the runs faked (budget, failures, host synchronisations), its number-token tokenizer, and
its two Axolotl processes in CPU smoke mode."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from repo import REPO
from trainer_checks import LOGGED_KEYS

GPU_CHECK = [sys.executable, "-m", "bench.gpu_check"]  # run from the clone's root


def test_gpu_check_refuses_clearly_without_a_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU; the refusal is for machines without one")
    done = subprocess.run(GPU_CHECK, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode != 0
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "CUDA GPU" in lines[0] and "gpu_check" in lines[0]


def test_gpu_check_pairs_and_what_it_skips():
    import importlib.util

    from bench.gpu_check.cli import parse_args
    from bench.gpu_check.pairs import unavailable

    assert parse_args(["--pairs", "cce,plain,cce"]).pairs == ["cce", "plain"]
    with pytest.raises(SystemExit):
        parse_args(["--pairs", "plain,flash"])
    smoke = parse_args(["--cpu-smoke"])
    assert unavailable("plain", smoke) is None
    assert "need a GPU" in unavailable("liger", smoke) and "need a GPU" in unavailable("cce", smoke)
    gpu = parse_args([])
    if importlib.util.find_spec("cut_cross_entropy") is None:  # Axolotl's fork is not on PyPI
        reason = unavailable("cce", gpu)
        assert "fork of cut_cross_entropy" in reason and "ml-cross-entropy.git@v0.1.1" in reason


def _run_result(args, pair: str, variant: str, del_log: dict, wall_s: float = 1.0, **extra) -> dict:
    """What ``launch`` returns for one finished Axolotl run of the GPU check (DEL's logged keys when it is on);
    ``extra`` adds keys or replaces the defaults (``forward``: the model's forward, which the check reads)."""
    return {
        "pair": pair,
        "del": variant == "on",
        "trainer": "DELTrainer" if variant == "on" else "AxolotlTrainer",
        "forward": "transformers.x.forward",
        "attention": "sdpa",
        "steps": args.warmup + args.steps,
        "step_time_s": 0.5,
        "peak_allocated_gib": None,
        "peak_reserved_gib": None,
        "last_log": del_log if variant == "on" else {},
        "wall_s": wall_s,
        **extra,
    }


def test_gpu_check_keeps_to_its_budget_and_reports_failed_runs(monkeypatch, capsys):
    """The parent's bookkeeping with the runs faked: a pair that would end past --budget is skipped, a failed run
    is reported in the table and the exit status, and the other pairs still run."""
    from bench.gpu_check import driver as gpu_check

    log = {k: 1.0 for k in LOGGED_KEYS}
    launched = []

    def fake_launch(args, workdir, pair, variant):
        launched.append((pair, variant))
        if pair == "liger":
            return {"error": "the Liger FLCE, DEL-off run failed (exit 1):\nboom", "wall_s": 1.0}
        return _run_result(args, pair, variant, log, wall_s=60.0 if pair == "plain" else 1.0)

    monkeypatch.setattr(gpu_check, "launch", fake_launch)
    monkeypatch.setattr(gpu_check, "unavailable", lambda pair, args: None)
    monkeypatch.setattr(gpu_check, "build_model_dir", lambda args, out: 0)
    monkeypatch.setattr(gpu_check, "write_arithmetic_rows", lambda path, rows: None)
    assert gpu_check.main(["--cpu-smoke", "--pairs", "liger,plain,cce", "--budget", "100"]) == 1
    out = capsys.readouterr().out
    # liger fails after one run, plain runs (60 s each), then cce's two runs would end past 100 s
    assert launched == [("liger", "off"), ("plain", "off"), ("plain", "on")]
    assert any(line.startswith("Liger FLCE") and "failed" in line for line in out.splitlines())
    assert any(line.startswith("Cut Cross Entropy") and "--budget of 100 s" in line for line in out.splitlines())
    assert [line.split()[2] for line in out.splitlines() if line.startswith("plain CE ")] == ["off", "on", "on/off"]


@pytest.mark.e2e
def test_gpu_check_runs_its_two_axolotl_processes_in_cpu_smoke_mode():
    """The GPU check's own machinery (local model and tokenizer, synthetic data, one Axolotl process per variant,
    result parsing) on the CPU with a tiny model; only the GPU-only features differ from a GPU run. The fused
    kernels' pairs (Liger, Cut Cross Entropy) need a GPU: the smoke run says so. The numbers pair, the same
    machinery on another model folder, is left out here (two more processes); its tokenizer and its order in the
    default run are tested below."""
    done = subprocess.run(
        [*GPU_CHECK, "--cpu-smoke", "--pairs", "plain,liger,cce", "--timeout", "900"],
        capture_output=True,
        text=True,
        timeout=1900,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    rows = [line.split() for line in lines if line.startswith("plain CE ")]
    assert [row[2] for row in rows] == ["off", "on", "on/off"], lines
    for title in ("Liger FLCE", "Cut Cross Entropy"):
        assert any(line.startswith(title) and "skipped" in line and "GPU" in line for line in lines), lines
    (metrics_line,) = [line for line in lines if line.startswith("DEL on, last step (plain): ")]
    metrics = dict(item.split("=") for item in metrics_line.removeprefix("DEL on, last step (plain): ").split(", "))
    assert set(metrics) == set(LOGGED_KEYS)
    assert all(math.isfinite(float(value)) for value in metrics.values())
    assert float(metrics["digit_targets"]) > 0


def test_gpu_check_number_tokens_cut_numbers_as_llama3():
    """--number-tokens: the synthetic tokenizer cuts digit runs into 1-3-digit tokens from the left, and DEL reads
    it through its number tokens (the GPU run then measures that path)."""
    from bench.gpu_check.assets import build_tokenizer
    from bench.gpu_check.cli import parse_args
    from del_plugin.core import DigitVocab

    args = parse_args(["--cpu-smoke", "--number-tokens"])
    tokenizer = build_tokenizer(args.vocab, args.number_tokens)
    assert tokenizer.tokenize("pay 12345678 or 3.14159") == (
        ["p", "a", "y", " ", "123", "456", "78", " ", "o", "r", " ", "3", ".", "141", "59"]
    )
    assert DigitVocab.from_tokenizer(tokenizer).max_digits == 3
    assert build_tokenizer(512).tokenize("12 3") == ["1", "2", " ", "3"]  # the default: single digits
    with pytest.raises(SystemExit):
        parse_args(["--number-tokens", "--vocab", "512"])


def test_gpu_check_runs_the_number_tokens_and_the_loss_step_and_fails_on_host_syncs(monkeypatch, capsys):
    """bench/gpu_check's bookkeeping with its runs faked: by default the plain pair, the number-token pair
    (its own model, with number tokens at Llama-3's vocabulary), the loss step, then the fused kernels' pairs; it
    fails when DEL's calls synchronise, when a DEL run's steps synchronise more often than the run without, or
    when the loss step's term alone waited for the GPU."""
    from bench.gpu_check import driver as gpu_check
    from bench.gpu_check.cli import SMOKE_NUMBERS_VOCAB, parse_args
    from bench.gpu_check.report import DEL_KEYS

    order, built = [], {}
    syncs = {"plain": (2.0, 2.0, 0.0), "numbers": (2.0, 2.0, 0.0), "liger": (2.0, 3.0, 0.0), "cce": (2.0, 2.0, 1.0)}

    def fake_launch(args, workdir, pair, variant):
        order.append((pair, variant))
        off_syncs, on_syncs, del_syncs = syncs[pair]
        return _run_result(
            args,
            pair,
            variant,
            dict.fromkeys(DEL_KEYS, 1.0),
            forward="?.forward",
            syncs_per_step=on_syncs if variant == "on" else off_syncs,
            del_syncs_per_step=del_syncs if variant == "on" else None,
        )

    def fake_loss_step(args, workdir):
        order.append(("loss step", None))
        row = {"shape": "8,192 x 128,256", "tokenizer": "synthetic number tokens", "term_ms": 0.2}
        row.update(term_over_fastest_ce=0.01, term_kernels=12, term_sync_free="called a synchronizing CUDA operation")
        return {"tables": "(tables)", "targets": {"memory_le_1.02_every_case": True}, "summary": [row], "wall_s": 9.0}

    monkeypatch.setattr(gpu_check, "launch", fake_launch)
    monkeypatch.setattr(gpu_check, "run_loss_step", fake_loss_step)
    monkeypatch.setattr(gpu_check, "unavailable", lambda pair, args: None)
    monkeypatch.setattr(gpu_check, "build_model_dir", lambda args, out: built.update({out.name: args}) or 0)
    monkeypatch.setattr(gpu_check, "write_arithmetic_rows", lambda path, rows: None)
    assert gpu_check.main(["--cpu-smoke", "--loss-step"]) == 1
    assert [p for p, _ in order] == [
        "plain",
        "plain",
        "numbers",
        "numbers",
        "loss step",
        "liger",
        "liger",
        "cce",
        "cce",
    ]
    assert not built["model"].number_tokens and built["model-numbers"].number_tokens
    assert built["model-numbers"].vocab == SMOKE_NUMBERS_VOCAB
    assert parse_args([]).numbers_vocab == 128_256 and parse_args([]).loss_step
    captured = capsys.readouterr()
    failures = [line for line in captured.err.splitlines() if "FAILED" in line]
    assert len(failures) == 3, failures
    assert any("Liger FLCE: 3 host synchronisations per step with DEL, 2 without" in f for f in failures)
    assert any("cce, DEL on: DEL's code made the host wait" in f for f in failures)
    assert any("loss step 8,192 x 128,256: DEL's term alone waited" in f for f in failures)
    assert "host synchronisations per step (numbers): training_step 2 (DEL off), 2 (DEL on)" in captured.out
