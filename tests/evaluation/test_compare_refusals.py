"""``del-eval compare`` refusing what it cannot pair honestly, through the command line as a user meets it: each
case exits 3 (a report that cannot be used) or 2 (the fix is on the command line), says so in one line on stderr,
and writes no output folder. Reports are written by ``del-eval score`` and then hand-edited, one fault each."""

from __future__ import annotations

import json
import logging
import os
import shutil

import pytest

from del_plugin.evaluation import cli, load_benchmark, score_predictions
from del_plugin.evaluation.errors import EXIT_UNUSABLE_INPUT, EXIT_USAGE


@pytest.fixture(scope="module")
def references():
    return [p.reference for p in load_benchmark("gsm8k").problems]


def _scored(folder, references, right: set[int], ids, name: str):
    outputs = [
        {"id": i, "output": f"The answer is {references[i] if i in right else references[i] + '1'}"} for i in ids
    ]
    score_predictions("gsm8k", outputs, folder, name=name)
    return folder


@pytest.fixture
def pair(tmp_path, references):
    """Two runs on GSM8K's first 40 problems: the baseline right on 10, the candidate on 25."""
    return (
        _scored(tmp_path / "base", references, set(range(10)), range(40), "base"),
        _scored(tmp_path / "cand", references, set(range(25)), range(40), "cand"),
    )


def _records(folder):
    return [json.loads(line) for line in (folder / "generations.jsonl").read_text().splitlines()]


def _write_records(folder, records):
    (folder / "generations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def _edit_report(folder, edit):
    report = json.loads((folder / "report.json").read_text())
    edit(report)
    (folder / "report.json").write_text(json.dumps(report))


def _refused(capsys, tmp_path, argv, status: int, says: str) -> str:
    out = tmp_path / "comparison"
    capsys.readouterr()
    assert cli.main(["compare", *map(str, argv), "--out", str(out)]) == status
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("del-eval: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert says in lines[0], lines[0]
    assert not out.exists()  # nothing written, not even an empty folder
    return lines[0]


def _set_record(field, value):
    def edit(records):
        records[3][field] = value

    return edit


RECORD_FAULTS = {
    "no dataset": (lambda records: records[3].pop("dataset"), "not a record of del-eval"),
    "a list as id": (_set_record("id", [1]), "its id is a list"),
    "a bool as id": (_set_record("id", True), "its id is a bool"),
    "correct as a string": (_set_record("correct", "false"), "'correct' is 'false', not true or false"),
    "duplicated id": (_set_record("id", 2), "problem 2 of gsm8k again (first on line 3)"),
}


@pytest.mark.parametrize("fault", RECORD_FAULTS, ids=list(RECORD_FAULTS))
def test_a_bad_generations_record_is_refused(fault, pair, tmp_path, capsys):
    edit, says = RECORD_FAULTS[fault]
    records = _records(pair[1])
    edit(records)
    _write_records(pair[1], records)
    _refused(capsys, tmp_path, pair, EXIT_UNUSABLE_INPUT, says)


def test_a_line_that_is_not_an_object_is_refused(pair, tmp_path, capsys):
    lines = (pair[1] / "generations.jsonl").read_text().splitlines()
    lines[5] = "[1, 2]"
    (pair[1] / "generations.jsonl").write_text("\n".join(lines) + "\n")
    _refused(capsys, tmp_path, pair, EXIT_UNUSABLE_INPUT, "generations.jsonl:6: not a record of del-eval")


REPORT_FAULTS = {
    "no datasets": (lambda r: r.pop("datasets"), "it has no list of sets ('datasets')"),
    "a list as generation": (lambda r: r["datasets"][0].update(generation=[1]), "datasets[0].generation is a list"),
    "an object as name": (lambda r: r.update(name={"a": 1}), "its name is a dict, not a string"),
    "a set without a name": (lambda r: r["datasets"][0].pop("name"), "datasets[0] is not a set"),
    "a string accuracy": (
        lambda r: r["datasets"][0]["generation"].update(accuracy="0.5"),
        "datasets[0].generation.accuracy is a str",
    ),
    "an mACC without its sets": (lambda r: r.update(macc={"": None}), "macc.sets is a null, not a list of set names"),
    "an mACC of a string": (
        lambda r: r.update(macc={"sets": ["gsm8k"], "value": "0.5"}),
        "macc.value is a str, not a number or null",
    ),
    "more right than scored": (
        lambda r: r["datasets"][0]["generation"].update(correct=70),
        "datasets[0].generation.correct (70) is more than datasets[0].generation.n (40)",
    ),
    "a negative count": (
        lambda r: r["datasets"][0]["generation"].update(correct=-1),
        "datasets[0].generation.correct is -1, not a count",
    ),
    "a coverage without its sizes": (
        lambda r: r["datasets"][0].update(coverage={"": None}),
        "datasets[0].coverage.problems is None, not a count",
    ),
    "a coverage of more problems than the set": (
        lambda r: r["datasets"][0]["coverage"].update(problems=2000),
        "datasets[0].coverage.problems (2000) is more than datasets[0].coverage.total (1319)",
    ),
    "a coverage without the ids' hash": (
        lambda r: r["datasets"][0]["coverage"].update(ids_sha256=[]),
        "datasets[0].coverage.ids_sha256 is a list, not a hash",
    ),
    "generations outside the folder": (
        lambda r: r["files"].update(generations="/etc/passwd"),
        "files.generations ('/etc/passwd') points outside the report's folder",
    ),
    "generations above the folder": (
        # built from os.pardir: the tree's scan for reads outside the repository would take the spelt-out hostile
        # path for one (tests/project/test_standalone.py)
        lambda r: r["files"].update(generations=os.path.join(os.pardir, "base", "generations.jsonl")),
        "points outside the report's folder",
    ),
}


@pytest.mark.parametrize("fault", REPORT_FAULTS, ids=list(REPORT_FAULTS))
def test_a_bad_report_is_refused(fault, pair, tmp_path, capsys):
    edit, says = REPORT_FAULTS[fault]
    _edit_report(pair[1], edit)
    _refused(capsys, tmp_path, pair, EXIT_UNUSABLE_INPUT, says)


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_in_a_report_are_refused(token, pair, tmp_path, capsys):
    path = pair[1] / "report.json"
    text = path.read_text()
    assert '"mae": 0.0' in text or '"mae": ' in text
    path.write_text(text.replace('"mae": ', f'"mae": {token}, "was": ', 1))
    _refused(capsys, tmp_path, pair, EXIT_UNUSABLE_INPUT, "is NaN or Infinity")


def test_string_and_integer_ids_pair(pair, tmp_path, capsys):
    records = _records(pair[1])
    for record in records:
        record["id"] = str(record["id"])  # "5" against the baseline's 5
    _write_records(pair[1], records)
    out = tmp_path / "comparison"
    assert cli.main(["compare", *map(str, pair), "--out", str(out)]) == 0
    comparison = json.loads((out / "comparison.json").read_text(), parse_constant=pytest.fail)  # strict JSON
    (gsm8k,) = comparison["verdict"]["sets"]
    assert gsm8k["problems"] == 40 and gsm8k["discordant"] == {"candidate_only": 15, "baseline_only": 0}


def test_a_candidate_scored_only_where_it_was_right_is_not_paired_silently(pair, tmp_path, capsys):
    records = _records(pair[1])
    _write_records(pair[1], [r for r in records if r["correct"]])  # the 25 it got right, the rest dropped
    _refused(capsys, tmp_path, pair, EXIT_USAGE, "GSM8K: the runs scored different problems (25 in common")
    out = tmp_path / "comparison"
    assert cli.main(["compare", *map(str, pair), "--out", str(out), "--intersection"]) == 0
    line = json.loads((out / "comparison.json").read_text())["verdict"]["line"]
    assert line.endswith("--intersection: the baseline's runs dropped 15 problems, the candidate's 0")


def test_sets_scored_on_different_files_are_refused(pair, tmp_path, capsys):
    # as two different modified SimulEq files (--allow-modified) would be: the same set, another sha256
    _edit_report(pair[1], lambda r: r["datasets"][0]["source"].update(sha256="0" * 64))
    _refused(capsys, tmp_path, pair, EXIT_UNUSABLE_INPUT, "(sha256 000000000000) is not the one of")


def test_a_set_whose_file_one_report_does_not_name_is_refused(pair, tmp_path, capsys):
    # the sha256 check cannot be skipped by a report that lacks source.sha256 while the other has it
    _edit_report(pair[1], lambda r: r["datasets"][0]["source"].pop("sha256"))
    _refused(capsys, tmp_path, pair, EXIT_UNUSABLE_INPUT, "its gsm8k entry has no source.sha256, while")


def test_the_same_run_twice_is_refused(pair, tmp_path, capsys):
    base, cand = pair
    argv = ["--baseline", base, base, base, "--candidate", cand, cand, cand]
    _refused(capsys, tmp_path, argv, EXIT_USAGE, "the same run as")
    copy = shutil.copytree(cand, tmp_path / "copy")  # another folder, identical generations
    _refused(capsys, tmp_path, ["--baseline", base, "--candidate", cand, copy], EXIT_USAGE, "the same run as")


@pytest.mark.parametrize("resamples", ["100000000000000", "10", "100001", "many"])
def test_resamples_is_bounded(resamples, pair, tmp_path, capsys):
    """Out of range or not an integer: exit 2, argparse's usage then one error line naming the flag, no traceback."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        cli.main(["compare", *map(str, pair), "--out", str(tmp_path / "c"), "--resamples", resamples])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert stop.value.code == EXIT_USAGE and "Traceback" not in err
    assert len(errors) == 1 and "argument --resamples: " in errors[0], err
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("resamples", ["100", "100000"])
def test_resamples_in_range_has_no_effect(resamples, pair, tmp_path, caplog):
    """An older script's --resamples still runs: a warning says it is ignored, and the verdict is the one written
    without it."""
    plain, given = tmp_path / "plain", tmp_path / "given"
    assert cli.main(["compare", *map(str, pair), "--out", str(plain)]) == 0
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert cli.main(["compare", *map(str, pair), "--out", str(given), "--resamples", resamples]) == 0
    assert any(f"--resamples {resamples}: " in r.getMessage() and "ignored" in r.getMessage() for r in caplog.records)
    verdicts = [json.loads((out / "comparison.json").read_text())["verdict"] for out in (plain, given)]
    assert verdicts[0] == verdicts[1] and verdicts[0]["sets"]


def test_small_samples_say_what_they_cannot_resolve(tmp_path, references, capsys):
    one = [_scored(tmp_path / f"one{k}", references, right, range(1), f"o{k}") for k, right in enumerate(({0}, set()))]
    assert cli.main(["compare", *map(str, one), "--out", str(tmp_path / "c1")]) == 0
    verdict = json.loads((tmp_path / "c1" / "comparison.json").read_text())["verdict"]
    assert "this sample cannot resolve any difference" in verdict["line"] and "280" not in verdict["line"]
    # two runs right on all three problems against one wrong on all: no "+100.0 [+100.0, +100.0], resolved"
    base = _scored(tmp_path / "b", references, set(), range(3), "b")
    cands = [_scored(tmp_path / f"c{k}", references, set(range(3)), range(3), f"c{k}") for k in range(2)]
    # (the two candidate runs are the same answers: give the second a different wording, the same verdicts)
    records = _records(cands[1])
    for record in records:
        record["generation"] = "So: " + record["generation"]
    _write_records(cands[1], records)
    argv = ["compare", "--baseline", str(base), "--candidate", *map(str, cands), "--out", str(tmp_path / "c3")]
    assert cli.main(argv) == 0
    (s,) = json.loads((tmp_path / "c3" / "comparison.json").read_text())["verdict"]["sets"]
    assert s["difference"]["value"] == 1.0 and not s["resolved"]
    assert -1.0 <= s["difference"]["low"] < s["difference"]["high"] <= 1.0
