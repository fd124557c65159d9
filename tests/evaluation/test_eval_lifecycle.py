"""del-eval's run lifecycle: killed with SIGKILL at any point and resumed, every problem is scored once and the
report equals an uninterrupted run's; an earlier report is never replaced without --overwrite nor lost to a failed
run (a full disk included); --out that cannot be written, unreadable inputs, a model that is not on disk and a
modified SimulEq/SAT file each stop at once with one line and their exit status; partial coverage is reported and
compare ranks only what is comparable.

The hard kills run del-eval (``cli.main``, the command's own entry point) in a child forked from this process, so
that the child starts with the libraries already imported: the child kills itself with SIGKILL at a chosen point
(the only thing replaced there is the trigger, a wrapper around the write or rename it stops at) and the test reads
what it left, as a user's next command would."""

from __future__ import annotations

import json
import os
import random
import re
import resource
import signal
from pathlib import Path

import pytest

from del_plugin.evaluation import cli
from del_plugin.evaluation.errors import (
    EXIT_STATUS_HELP,
    EXIT_STATUSES,
    EXIT_UNUSABLE_INPUT,
    EXIT_UNWRITABLE_OUTPUT,
    OutputError,
)
from del_plugin.evaluation.reports.files import STAGING_DIR, load_report

from killed_runs import (
    exit_code,
    forked,
    kill_after_generation,
    kill_at_rename,
    lines_of,
    stopped_progress_monitor,
    whole_records,
)
from repo import REPO

# ---------------------------------------------------------------------------------------------- a child to kill


@pytest.fixture(autouse=True, scope="module")
def no_progress_bar_thread():
    yield from stopped_progress_monitor()


# ---------------------------------------------------------------------------------------------- killed, resumed


def test_del_eval_run_killed_hard_at_random_points_resumes_with_every_problem_scored_once(digit_model, tmp_path):
    argv = ["run", "--model", str(digit_model), "--benchmarks", "gsm8k,aqua,mmlu_math", "--limit", "3"]
    argv += ["--batch-size", "2", "--max-new-tokens", "4", "--name", "tiny"]
    reference, out = tmp_path / "reference", tmp_path / "killed"
    assert exit_code(forked(lambda: cli.main(argv + ["--out", str(reference)]))) == 0

    rng, states = random.Random(37), []
    triggers = [
        ("a random rename", kill_at_rename(number=rng.randint(4, 14))),
        ("after a generation line", kill_after_generation(4)),  # the resumed aqua's 3, then mmlu_math's first
        ("half-way through a generation line", kill_after_generation(2, torn=True)),
        ("at the rename of report.md", kill_at_rename(target="report.md")),
    ]
    for what, trigger in triggers:
        status = forked(lambda trigger=trigger: (trigger(), cli.main(argv + ["--out", str(out)]))[1])
        assert exit_code(status) == f"signal {signal.SIGKILL}", what
        report = load_report(out)  # never half-written: it parses, and says the run did not end
        assert report["status"] == "running", what
        states.append([d["status"] for d in report["datasets"]])
        torn = not (out / "generations.jsonl").read_text().endswith("\n")
        assert torn is ("half-way" in what), what
        records = whole_records(out / "generations.jsonl")
        keys = [(r["dataset"], r["id"]) for r in records]
        assert len(keys) == len(set(keys)), what
        assert not (out / "report.md").exists() or (out / "report.md").read_text().startswith("# del-eval: tiny")
    assert states == [  # where the kills landed: in a set with teacher forcing, in one without, in the last step
        ["complete", "running", "pending"],
        ["complete", "complete", "running"],
        ["complete", "complete", "running"],
        ["complete", "complete", "complete"],
    ]
    assert exit_code(forked(lambda: cli.main(argv + ["--out", str(out)]))) == 0

    done, expected = load_report(out), load_report(reference)
    assert done["status"] == "complete"
    assert done["datasets"] == expected["datasets"] and done["macc"] == expected["macc"]
    assert done["overall"] == expected["overall"]

    def by_problem(folder):
        return {(r["dataset"], r["id"]): r for r in whole_records(folder / "generations.jsonl")}

    records = whole_records(out / "generations.jsonl")
    assert len(records) == 9 and by_problem(out) == by_problem(reference)  # 3 sets x 3 problems, once each
    assert sorted(done["warnings"]) == sorted(expected["warnings"])
    same_lines = sorted((out / "report.md").read_text().splitlines())  # warnings in the order they came
    assert same_lines == sorted((reference / "report.md").read_text().splitlines())
    assert sorted(done["files"]["plots"]) == sorted(expected["files"]["plots"])


# ---------------------------------------------------------------------------------------------- earlier reports


def _score(argv: list[str]) -> int:
    return cli.main(["score", *argv])


def _predictions(path: Path, outputs: dict[int, str]) -> Path:
    path.write_text("".join(json.dumps({"id": i, "output": o}) + "\n" for i, o in outputs.items()))
    return path


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture
def sat_dir(tmp_path):
    """A --benchmark-dir whose SAT is not the authors' file (test_benchmarks' two problems)."""
    from paper_sets import SAT

    (tmp_path / "bench" / "sat").mkdir(parents=True)
    (tmp_path / "bench" / "sat" / "sat.json").write_text(json.dumps(SAT))
    return tmp_path / "bench"


def test_score_keeps_an_earlier_report_unless_overwrite_and_leaves_no_stale_plot(tmp_path, sat_dir, capsys):
    out = tmp_path / "out"
    gsm8k = _predictions(tmp_path / "g.jsonl", {0: "The answer is 18", 1: "The answer is 3", 2: "The answer is 7"})
    assert _score(["--benchmark", "gsm8k", "--predictions", str(gsm8k), "--out", str(out)]) == 0
    assert _score(["--benchmark", "gsm8k", "--predictions", str(gsm8k), "--out", str(out)]) == 0  # the same: kept
    assert len(lines_of(out / "generations.jsonl")) == 3
    earlier = _files(out)
    assert "place_accuracy.png" in earlier
    capsys.readouterr()

    sat = _predictions(tmp_path / "s.jsonl", {0: "The answer is C", 1: "The answer is B"})
    command = ["--benchmark", "sat", "--predictions", str(sat), "--benchmark-dir", str(sat_dir), "--out", str(out)]
    assert _score(command + ["--allow-modified"]) == EXIT_UNWRITABLE_OUTPUT
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{out} holds the report of another run" in err and "--overwrite" in err
    assert _files(out) == earlier

    assert _score(command + ["--allow-modified", "--overwrite"]) == 0
    report = load_report(out)
    assert [d["name"] for d in report["datasets"]] == ["sat"] and report["files"]["plots"] == []
    assert not (out / "place_accuracy.png").exists()  # no empty plot for an option set, and not the old one
    assert not (out / STAGING_DIR).exists()
    assert [json.loads(line)["dataset"] for line in lines_of(out / "generations.jsonl")] == ["sat", "sat"]


def _fill_the_disk_at(limit: int, argv: list[str]):
    """del-eval with a file size limit (``ulimit -f``): a write past it fails as on a full disk."""

    def action() -> int:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        return cli.main(argv)

    return action


def test_a_full_disk_half_way_keeps_the_earlier_report_and_never_cuts_a_line(tmp_path):
    long_outputs = {i: f"{'We add the numbers. ' * 60}The answer is {i}" for i in range(40)}
    predictions = _predictions(tmp_path / "p.jsonl", long_outputs)  # ~1.3 kB a generation line
    argv = ["score", "--benchmark", "gsm8k", "--predictions", str(predictions)]

    fresh = tmp_path / "fresh"
    status = forked(_fill_the_disk_at(30_000, argv + ["--out", str(fresh)]), stderr=tmp_path / "err1")
    assert exit_code(status) == EXIT_UNWRITABLE_OUTPUT
    err = (tmp_path / "err1").read_text()
    assert f"{fresh / 'generations.jsonl'}: cannot be written (File too large); free some disk space" in err
    assert "Traceback" not in err
    assert (fresh / "generations.jsonl").read_text().endswith("\n")  # the cut line was taken back
    assert 10 < len(whole_records(fresh / "generations.jsonl")) < 40
    assert load_report(fresh)["status"] == "partial"

    out = tmp_path / "out"
    few = _predictions(tmp_path / "few.jsonl", {0: "The answer is 18"})
    assert cli.main(["score", "--benchmark", "gsm8k", "--predictions", str(few), "--out", str(out)]) == 0
    earlier = _files(out)
    command = argv + ["--out", str(out), "--overwrite"]
    assert exit_code(forked(_fill_the_disk_at(30_000, command), stderr=tmp_path / "err2")) == EXIT_UNWRITABLE_OUTPUT
    assert _files(out) == earlier  # the earlier report, whole
    staged = out / STAGING_DIR
    assert load_report(staged)["status"] == "partial"
    assert (staged / "generations.jsonl").read_text().endswith("\n")
    # the same command, with room, resumes the replacement and then moves it into place
    assert cli.main(command) == 0
    assert len(whole_records(out / "generations.jsonl")) == 40 and not staged.exists()


# ---------------------------------------------------------------------------------------------- clear errors


def test_an_out_that_is_a_file_or_under_one_is_one_line_with_exit_4(digit_model, tmp_path, capsys):
    file = tmp_path / "taken"
    file.write_text("not a folder\n")
    predictions = _predictions(tmp_path / "p.jsonl", {0: "The answer is 18"})
    assert _score(["--benchmark", "gsm8k", "--predictions", str(predictions), "--out", str(tmp_path / "report")]) == 0
    commands = {
        "score": ["score", "--benchmark", "gsm8k", "--predictions", str(predictions)],
        "run": ["run", "--model", str(digit_model), "--benchmarks", "gsm8k", "--limit", "1"],
        "compare": ["compare", str(tmp_path / "report")],
    }
    capsys.readouterr()
    for name, command in commands.items():
        for out, words in ((file, "is a file, not a folder"), (file / "sub", f"{file} is a file")):
            assert cli.main(command + ["--out", str(out)]) == EXIT_UNWRITABLE_OUTPUT, (name, out)
            err = capsys.readouterr().err.strip()
            assert err.startswith(f"del-eval: error: --out {out}") and words in err and "\n" not in err, err
    assert file.read_text() == "not a folder\n"


def test_an_out_folder_that_cannot_be_written_is_one_line_with_exit_4(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    predictions = _predictions(tmp_path / "p.jsonl", {0: "The answer is 18"})
    argv = ["score", "--benchmark", "gsm8k", "--predictions", str(predictions), "--out", str(locked / "out")]
    locked.chmod(0o555)

    def unprivileged() -> None:
        if os.geteuid() == 0:  # root writes anywhere: in a user namespace of its own it is an ordinary user
            os.unshare(os.CLONE_NEWUSER)

    try:
        status = forked(lambda: cli.main(argv), stderr=tmp_path / "err", first=unprivileged)
    finally:
        locked.chmod(0o755)
    err = (tmp_path / "err").read_text()
    if os.geteuid() == 0 and "Operation not permitted" in err and "unshare" in err:
        pytest.skip("this kernel refuses user namespaces, and root can write to any folder")
    assert exit_code(status) == EXIT_UNWRITABLE_OUTPUT
    assert err.strip() == (
        f"del-eval: error: --out {locked / 'out'}: cannot write in this folder (Permission denied); give a folder "
        "you can write to"
    )


def test_a_predictions_file_that_is_not_utf8_names_the_file_and_line(tmp_path, capsys):
    bad = tmp_path / "latin1.jsonl"
    bad.write_bytes(b'{"id": 0, "output": "The answer is 18"}\n{"id": 1, "output": "caf\xe9 3"}\n')
    out = tmp_path / "out"
    assert _score(["--benchmark", "gsm8k", "--predictions", str(bad), "--out", str(out)]) == EXIT_UNUSABLE_INPUT
    err = capsys.readouterr().err
    assert f"{bad}:2: not UTF-8 (byte 0xe9 at column 25); save the file as UTF-8" in err
    assert not out.exists()


def test_a_model_that_is_not_on_disk_stops_before_any_report(digit_model, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["run", "--benchmarks", "gsm8k", "--limit", "1", "--max-new-tokens", "2", "--out", str(out)]
    assert cli.main(argv + ["--model", str(tmp_path / "nonexistent")]) == EXIT_UNUSABLE_INPUT
    assert f"--model {tmp_path / 'nonexistent'}: no such folder" in capsys.readouterr().err
    assert not out.exists()
    hub_id = "del-plugin-tests/not-downloaded"
    assert cli.main(argv + ["--model", hub_id]) == EXIT_UNUSABLE_INPUT
    err = capsys.readouterr().err
    assert f"--model {hub_id}: no such folder, and not in the Hugging Face cache" in err
    assert "HF_HUB_OFFLINE" in err and f"hf download {hub_id}" in err and "pass the folder" in err
    assert not out.exists()

    # a start that fails once the report is open (weights that cannot be read) leaves nothing that blocks
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text((Path(digit_model) / "config.json").read_text())
    assert cli.main(argv + ["--model", str(broken)]) == EXIT_UNUSABLE_INPUT
    assert load_report(out)["status"] == "partial"
    capsys.readouterr()
    assert cli.main(argv + ["--model", str(digit_model)]) == 0  # the corrected command, no --overwrite
    assert load_report(out)["status"] == "complete"


def test_a_modified_benchmark_file_fails_unless_allowed(tmp_path, sat_dir, capsys):
    predictions = _predictions(tmp_path / "p.jsonl", {0: "The answer is C"})
    command = ["--benchmark", "sat", "--predictions", str(predictions), "--benchmark-dir", str(sat_dir)]
    assert _score(command + ["--out", str(tmp_path / "a")]) == EXIT_UNUSABLE_INPUT
    err = capsys.readouterr().err
    assert f"sat: {sat_dir / 'sat' / 'sat.json'} is not the authors' file" in err and "--allow-modified" in err
    assert not (tmp_path / "a").exists()
    assert _score(command + ["--out", str(tmp_path / "b"), "--allow-modified"]) == 0
    report = load_report(tmp_path / "b")
    assert report["datasets"][0]["source"]["verified"] is False
    assert any("is not the authors' file" in w for w in report["warnings"])


def test_a_folder_is_written_by_one_run_at_a_time(tmp_path):
    from del_plugin.evaluation.output import lock_folder, unlock_folder

    held = lock_folder(tmp_path)
    try:
        with pytest.raises(OutputError, match="another del-eval process is writing there"):
            lock_folder(tmp_path, wait_s=0.2)
    finally:
        unlock_folder(held)
    unlock_folder(lock_folder(tmp_path, wait_s=0))


def test_exit_statuses_are_listed_in_help_and_docs(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert EXIT_STATUS_HELP in capsys.readouterr().out
    docs = (REPO / "docs" / "evaluation.md").read_text()
    rows = dict(re.findall(r"\n\| (\d+) \| (.*) \|", docs))
    for status, meaning in EXIT_STATUSES:  # the same words (the docs set options in code type)
        assert rows[str(status)].replace("`", "") == meaning, status


@pytest.mark.parametrize("command", ["lm-eval-tasks", "compare"])
def test_commands_without_a_model_list_only_their_own_exit_statuses(command, capsys):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    epilog = capsys.readouterr().out.split("exit status:")[1]
    assert [int(line.split()[0]) for line in epilog.splitlines() if line[:6].strip().isdigit()] == [
        0,
        1,
        2,
        3,
        4,
        130,
        143,
    ]
    # nothing of run's: no partial report to resume, no sandbox, no --overwrite
    for word in ("resume", "sandbox", "program", "--overwrite", "partial"):
        assert word not in epilog, word
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    assert "the same command resumes it" in capsys.readouterr().out.split("exit status:")[1]


def test_compare_with_labels_not_one_per_report_is_a_usage_error(tmp_path, capsys):
    assert cli.main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--labels", "A", "--out", str(tmp_path)]) == 2
    assert "--labels: 1 given for 2 reports; give one label per report" in capsys.readouterr().err


def test_settings_that_ask_for_nothing_are_usage_and_a_librarys_error_is_a_failed_run(
    digit_model,
    tmp_path,
    capsys,
    monkeypatch,
):
    run = ["run", "--model", str(digit_model), "--benchmarks", "gsm8k"]
    for extra in (["--limit", "0"], ["--batch-size", "0"], ["--no-generate", "--no-teacher-forced"]):
        assert cli.main([*run, *extra, "--out", str(tmp_path / "x")]) == 2, extra
        assert capsys.readouterr().err.startswith("del-eval: error: "), extra
    assert not (tmp_path / "x").exists()
    predictions = tmp_path / "p.jsonl"
    predictions.write_text(json.dumps({"id": 0, "output": "print(1)"}) + "\n")
    score = ["score", "--benchmark", "aqua", "--predictions", str(predictions), "--out", str(tmp_path / "y")]
    assert cli.main([*score, "--program-of-thought"]) == 2
    assert "aqua is asked as chain-of-thought" in capsys.readouterr().err
    # a ValueError from inside a library during the run (here a stand-in for transformers' generate) is not "an
    # input that cannot be used": it ends the run with its traceback (exit 1), the partial report saved
    from del_plugin.evaluation.run import runner

    def library_failure(*args, **kwargs):
        raise ValueError("something inside the library")

    monkeypatch.setattr(runner, "evaluate", library_failure)
    with pytest.raises(ValueError, match="something inside the library"):
        cli.main([*run, "--out", str(tmp_path / "z")])


def test_a_resume_that_scores_nothing_keeps_the_runs_warnings_about_its_sets(tmp_path):
    """A run killed after its last set was scored resumes without loading the model, so it cannot say again that
    the teacher-forced metrics were skipped (a tokenizer without digit tokens): the finished report still says
    so, as an uninterrupted run's does."""
    from del_plugin.evaluation.reports.run_report import RunReport
    from del_plugin.evaluation.run.score import score_outputs
    from del_plugin.evaluation.scoring.tasks import benchmark_task

    skipped = "teacher-forced digit metrics skipped: no digit tokens"

    def run(stop_before_the_end: bool) -> dict:
        task = benchmark_task("svamp", None, 2)
        report = RunReport.open(
            tmp_path / "out",
            command="run",
            name="m",
            model={"path": "m"},
            settings={"limit": 2},
            resume_key={"model": "m"},
            tasks=[task],
        )
        if not report.is_complete(task.name):  # what the runner does: a scored set loads no model
            report.warn(skipped)
            score_outputs(task, {p.id: "The answer is 1" for p in task.problems}, report)
        if stop_before_the_end:
            report.mark_stopped(KeyboardInterrupt())
        else:
            report.mark_complete()
        return report.finish()

    assert skipped in run(stop_before_the_end=True)["warnings"]
    resumed = run(stop_before_the_end=False)
    assert resumed["status"] == "complete" and resumed["warnings"].count(skipped) == 1


# ---------------------------------------------------------------------------------------------- coverage, compare


def test_three_of_gsm8ks_problems_are_reported_as_partial_coverage(tmp_path, capsys, caplog):
    predictions = _predictions(
        tmp_path / "p.jsonl", {0: "The answer is 18", 1: "The answer is 3", 2: "The answer is 70000"}
    )
    assert _score(["--benchmark", "gsm8k", "--predictions", str(predictions), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr()
    report = load_report(tmp_path / "out")
    (entry,) = report["datasets"]
    assert (entry["coverage"]["problems"], entry["coverage"]["total"]) == (3, 1319)
    assert report["macc"]["label"] == "mACC (1 of 7 sets, partial coverage)" and report["macc"]["partial"] == ["gsm8k"]
    warning = "partial coverage: gsm8k 3 of 1,319 problems scored"
    assert any(w.startswith(warning) for w in report["warnings"])
    assert "| GSM8K | 3 of 1,319 | 100.0% |" in printed.out and f"- {warning}" in printed.out
    assert any(r.getMessage().startswith(warning) for r in caplog.records)  # logged (on stderr) as it starts


def test_compare_ranks_only_what_the_reports_scored_alike(tmp_path, capsys, caplog):
    def scored(name: str, outputs: dict[int, str], benchmark: str = "gsm8k", out: Path | None = None) -> Path:
        out = out or tmp_path / name
        path = _predictions(tmp_path / f"{name}-{benchmark}.jsonl", outputs)
        argv = ["--benchmark", benchmark, "--predictions", str(path), "--out", str(out), "--name", name]
        assert _score(argv) == 0
        return out

    right, wrong = "The answer is 18", "The answer is 17"
    a = scored("A", {0: right, 1: "The answer is 3"})
    b = scored("B", {0: wrong, 1: "The answer is 3"})
    c = scored("C", {0: right})  # GSM8K on other problems
    svamp = scored("D", {0: "The answer is 51"}, "svamp")
    capsys.readouterr()

    assert cli.main(["compare", str(a), str(b), "--out", str(tmp_path / "ab")]) == 0
    markdown = (tmp_path / "ab" / "comparison.md").read_text()
    # the same two problems: comparable, but one problem apart decides nothing, so nothing is bold
    assert "| A | 100.0% | 100.0% |" in markdown and "| B | 50.0% | 50.0% |" in markdown
    assert "B - A: -50.0 GSM8K points [" in markdown and ", not resolved: " in markdown
    assert "partial coverage: GSM8K 2 of 1,319 problems" in markdown

    assert cli.main(["compare", str(a), str(c), str(svamp), "--out", str(tmp_path / "acd")]) == 0
    markdown = (tmp_path / "acd" / "comparison.md").read_text()
    table = markdown.split("## The paper's benchmarks: accuracy")[1].split("\n\n")[1]
    assert "**" not in table  # GSM8K on different problems, mACC over different sets: nothing ranked
    warnings = json.loads((tmp_path / "acd" / "comparison.json").read_text())["warnings"]
    assert warnings[0].startswith("GSM8K is not ranked: the reports scored different problems (A: 2 of 1,319; C: 1")
    assert warnings[-1] == "mACC is not ranked: the reports average different sets (A: gsm8k; C: gsm8k; D: svamp)"
    logged, printed = [r.getMessage() for r in caplog.records], capsys.readouterr().out
    assert all(w in logged and f"**{w}**" in markdown and f"**{w}**" in printed for w in warnings)


def test_a_run_with_fewer_sets_keeps_the_report_and_one_with_more_resumes_it(digit_model, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["run", "--model", str(digit_model), "--limit", "1", "--max-new-tokens", "2", "--out", str(out)]
    assert cli.main(argv + ["--benchmarks", "gsm8k,aqua"]) == 0
    first = lines_of(out / "generations.jsonl")
    assert cli.main(argv + ["--benchmarks", "gsm8k"]) == EXIT_UNWRITABLE_OUTPUT  # would drop aqua's results
    assert "(its sets aqua are not in this run)" in capsys.readouterr().err
    assert lines_of(out / "generations.jsonl") == first
    assert cli.main(argv + ["--benchmarks", "gsm8k,aqua,mmlu_math"]) == 0  # more sets: resumed
    assert lines_of(out / "generations.jsonl")[:2] == first and len(lines_of(out / "generations.jsonl")) == 3


def test_a_model_trained_again_into_the_same_folder_is_scored_again(digit_model, tmp_path, capsys):
    """Axolotl's output_dir holds a new model after every training: the same command on it is another run (not one
    to resume, whose complete sets would be the earlier model's), refused without --overwrite and scored anew."""
    import shutil

    from safetensors.torch import load_file, save_file

    model, out = tmp_path / "output_dir", tmp_path / "out"
    shutil.copytree(digit_model, model)
    argv = ["run", "--model", str(model), "--benchmarks", "gsm8k", "--limit", "2", "--max-new-tokens", "3"]
    argv += ["--no-teacher-forced", "--out", str(out)]
    assert cli.main(argv) == 0
    first = [r["generation"] for r in whole_records(out / "generations.jsonl")]
    assert cli.main(argv) == 0  # the same weights: the complete report is kept as it is
    assert [r["generation"] for r in whole_records(out / "generations.jsonl")] == first

    weights = model / "model.safetensors"
    state = load_file(weights)
    state["lm_head.weight"] = -state["lm_head.weight"]  # "trained again": it now writes 2 where it wrote 1
    save_file(state, weights, metadata={"format": "pt"})
    capsys.readouterr()
    assert cli.main(argv) == EXIT_UNWRITABLE_OUTPUT
    assert "another run" in capsys.readouterr().err
    assert cli.main(argv + ["--overwrite"]) == 0
    again = [r["generation"] for r in whole_records(out / "generations.jsonl")]
    assert again == [text.translate(str.maketrans("12", "21")) for text in first] and again != first
