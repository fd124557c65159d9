"""del-eval reports of GSM8K problems right exactly where a test says, scored by the real ``del-eval score`` path
(tests/evaluation/test_compare_verdict.py, tests/experiments/test_efficacy.py)."""

from __future__ import annotations

from pathlib import Path

from del_plugin.evaluation import load_benchmark, score_predictions


def gsm8k_reference_answers() -> list[str]:
    """GSM8K's reference answers, in the shipped set's order."""
    return [p.reference for p in load_benchmark("gsm8k").problems]


def scored_report(tmp_path: Path, references: list[str], name: str, right: set[int], n: int) -> Path:
    """A del-eval score report of GSM8K's first ``n`` problems, right exactly on ``right``; its folder."""
    outputs = [
        {"id": i, "output": f"The answer is {references[i] if i in right else references[i] + '1'}"} for i in range(n)
    ]
    out = tmp_path / name
    report = score_predictions("gsm8k", outputs, out, name=name)
    assert report["datasets"][0]["generation"]["correct"] == len(right)
    return out


def seed_reports(tmp_path: Path, references: list[str], name: str, rights: list[set[int]], n: int) -> list[Path]:
    """One report a seed (``{name}-s{k}``), the k-th right on ``rights[k]``."""
    return [scored_report(tmp_path, references, f"{name}-s{k}", right, n) for k, right in enumerate(rights)]
