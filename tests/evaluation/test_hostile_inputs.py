"""Hostile outputs against the readers and scorers: every one linear in its input (a 1 MiB output scored in well
under a second of CPU), memory a small multiple of the output (no Decimal per number never used), an answer
length cap, and the rewritten parts held to the old rules (the one-level-per-pass ``\\text{...}`` unwrapping, the
list of every number) as slow oracles on random text."""

from __future__ import annotations

import json
import os
import re
import threading
import time
import tracemalloc
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from del_plugin import inputs
from del_plugin.axolotl import check, config_yaml
from del_plugin.evaluation import cli
from del_plugin.evaluation.benchmarks import answers, latex
from del_plugin.evaluation.benchmarks.answers import (
    GSM8K_MARKERS,
    MAX_ANSWER_CHARS,
    extract_answer,
    find_numbers,
    last_match,
)
from del_plugin.evaluation.benchmarks.latex import same_math_answer
from del_plugin.evaluation.benchmarks.program import run_program
from del_plugin.evaluation.benchmarks.readers import (
    read_choice,
    read_math_answer,
    read_number,
    score_choice,
    score_math,
    score_number,
)
from del_plugin.evaluation.errors import EXIT_OK, EXIT_UNUSABLE_INPUT, EXIT_UNWRITABLE_OUTPUT
from del_plugin.evaluation.output import write_file_atomic

FUZZ = settings(max_examples=300, deadline=None)
MIB = 1 << 20

# the old unwrapping, one level per pass (quadratic in the depth): the oracle of the one-pass stack
_TEXT = re.compile(r"\\text\{([^{}]*)\}")


def unwrapped_by_passes(text: str) -> str:
    previous = None
    while previous != text:
        previous, text = text, _TEXT.sub(r"\1", text)
    return text


@FUZZ
@given(st.lists(st.sampled_from(["\\text{", "{", "}", "a", "B", "1", " "]), max_size=24))
def test_one_pass_unwrapping_is_the_old_rule(tokens):
    text = "".join(tokens)
    assert latex._unwrap_text(text) == unwrapped_by_passes(text), text


def test_deep_text_nesting_unwraps_in_one_pass():
    deep = "\\text{" * 5000 + "(B)" + "}" * 5000
    assert same_math_answer(deep, "(b)")
    assert not same_math_answer("\\text{" * 5000 + "a{b}" + "}" * 5000, "a{b}")  # a brace inside: kept


@FUZZ
@given(st.text(alphabet="1-./a )(B{,x", max_size=60), st.sampled_from(["numbers", "plain", "choices"]))
def test_last_match_from_the_end_is_the_last_of_all_matches(text, kind):
    """Windows of 8 characters (the cap set to 2 here) over short random text: the windowing is exercised at
    every cut; the oracle is the last of ``finditer``."""
    pattern, outside = {
        "numbers": (answers._NUMBER, answers._OUTSIDE_NUMBERS),
        "plain": (re.compile(r"-?\d*\.?\d+"), re.compile(r"[^-\d.]")),
        "choices": (
            re.compile(r"(?<![A-Za-z0-9])(?:([B])|\(([b])\))(?![A-Za-z0-9])"),
            re.compile(r"[^A-Za-z()]"),
        ),
    }[kind]
    saved = answers.MAX_ANSWER_CHARS
    answers.MAX_ANSWER_CHARS = 2
    try:
        found = last_match(pattern, text, outside)
    finally:
        answers.MAX_ANSWER_CHARS = saved
    every = list(pattern.finditer(text))
    expected = every[-1] if every else None
    assert (found and found.span()) == (expected and expected.span()), text


@FUZZ
@given(st.text(alphabet="12-./ x,", max_size=40), st.booleans())
def test_read_number_is_the_first_or_last_of_every_number(text, marked):
    output = ("The answer is " if marked else "") + text
    numbers = find_numbers(text)
    expected = None if not numbers else numbers[0][0] if marked else numbers[-1][0]
    assert read_number(output) == expected


def test_an_answer_longer_than_the_cap_is_no_answer():
    long_number = "7" * (MAX_ANSWER_CHARS + 1)
    assert read_number(f"The answer is {long_number}") is None and extract_answer(long_number) is None
    assert read_number("The answer is " + "7" * MAX_ANSWER_CHARS) == Decimal("7" * MAX_ANSWER_CHARS)
    assert read_math_answer("The answer is \\boxed{" + "x" * (MAX_ANSWER_CHARS + 1) + "}") is None
    assert read_math_answer("The answer is \\boxed{" + "x" * 10 + "}") == "x" * 10
    assert read_math_answer("The answer is " + "y" * (MAX_ANSWER_CHARS + 1)) is None
    assert score_number("The answer is " + long_number, long_number).prediction is None


def _fill(unit: str, size: int = MIB, tail: str = "") -> str:
    return (unit * (size // len(unit) + 1))[: size - len(tail)] + tail


# 1 MiB outputs that hit each reader where it was (or could be) worse than linear
HOSTILE_OUTPUTS = {
    "149,000 nested \\text": "\\text{" * 149_000 + "5" + "}" * 149_000,
    "149,000 nested \\text after the marker": "The answer is " + "\\text{" * 149_000 + "5" + "}" * 149_000,
    "a box of 100,000 nested \\text": "\\boxed{" + "\\text{" * 100_000 + "5" + "}" * 100_001,
    "half a million numbers": _fill("1 "),
    "half a million numbers after the marker": "The answer is " + _fill("1 "),
    "one number of a million digits": _fill("1"),
    "subtractions": _fill("-1"),
    "boxes that never close": _fill("\\boxed{"),
    "open braces": _fill("{"),
    "\\frac after the marker": "The answer is " + _fill("\\frac"),
    "markers": _fill("The answer is "),
    "equals signs": "The answer is " + _fill("1="),
    "decimal points": _fill("1."),
    "fractions": _fill("1/"),
    "thousands commas": _fill("1,"),
    "option letters": _fill("(B) "),
    "letters before digits": _fill("a1 "),
    "dollars after \\boxed": "\\boxed " + _fill("$"),
    "\\sqrt after the marker": "The answer is " + _fill("\\sqrt "),
    "spaces after the marker": "The answer is " + _fill(" "),
}
SCORERS = {
    "GSM8K": lambda text: score_number(text, "5", GSM8K_MARKERS),
    "MATH": lambda text: score_math(text, "5"),
    "AQuA": lambda text: score_choice(text, "B", "ABCDE"),
    "--data": extract_answer,
}


@pytest.mark.parametrize("name", HOSTILE_OUTPUTS)
def test_each_scorer_reads_a_hostile_1_mib_output_in_well_under_a_second(name):
    """CPU time of this process (not the wall clock of a shared machine), per scorer (one problem): a bound with a
    wide margin (each takes 0.2 s at most on a busy 2-core machine; depth 149,000 took minutes before)."""
    text = HOSTILE_OUTPUTS[name]
    for set_name, scorer in SCORERS.items():
        started = time.process_time()
        scorer(text)
        assert time.process_time() - started < 1.0, (name, set_name)


def test_memory_is_a_small_multiple_of_the_output():
    """Ten million characters of numbers ("1 " five million times): a Decimal per number took 1.67 GB; now a few
    copies of the text at most."""
    text = "1 " * 5_000_000
    for scorer in SCORERS.values():
        tracemalloc.start()
        try:
            scorer(text)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 6 * len(text), peak
    assert read_choice("The answer is " + _fill("(B) "), "ABCDE") == "B"


# ---------------------------------------------------------------------------------------------- hostile files


def del_eval(capsys, *argv) -> tuple[int, str]:
    """``del-eval`` in-process: its exit status and its stderr (never a traceback for an input)."""
    status = cli.main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return status, err


def score(capsys, predictions, out, *more) -> tuple[int, str]:
    return del_eval(capsys, "score", "--benchmark", "gsm8k", "--predictions", predictions, "--out", out, *more)


HOSTILE_LINES = {
    "nested 200,000 deep": ('{"id": 0, "output": "x", "more": ' + "[" * 200_000 + "]" * 200_000 + "}", "too deep"),
    "a 5,000-digit integer": ('{"id": 0, "output": "x", "n": 1' + "0" * 5000 + "}", "Exceeds the limit"),
    "a 5,000-digit id": ('{"id": 1' + "0" * 5000 + ', "output": "x"}', "Exceeds the limit"),
    "a lone surrogate": ('{"id": 0, "output": "print(\\"\\ud800\\")"}', "lone surrogate"),
}


@pytest.mark.parametrize("name", HOSTILE_LINES)
def test_a_hostile_predictions_line_is_refused_with_its_line(name, tmp_path, capsys):
    line, words = HOSTILE_LINES[name]
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text('{"id": 1, "output": "The answer is 3"}\n' + line + "\n", encoding="utf-8")
    status, err = score(capsys, predictions, tmp_path / "out")
    assert status == EXIT_UNUSABLE_INPUT and f"{predictions}:2: " in err and words in err, err
    assert not (tmp_path / "out").exists()


def test_a_program_with_a_lone_surrogate_runs_without_it():
    run = run_program('print("a\ud800b")', sandbox="none")
    assert (run.status, run.stdout) == ("ok", "a?b\n")


def test_names_and_file_names_that_are_not_utf8_show_as_replacement_characters(tmp_path, capsys):
    predictions = Path(os.fsdecode(bytes(tmp_path) + b"/pred\xff.jsonl"))
    predictions.write_text('{"id": 0, "output": "The answer is 18"}\n', encoding="utf-8")
    status, err = score(capsys, predictions, tmp_path / "out")
    assert status == EXIT_OK, err
    assert (tmp_path / "out" / "report.md").read_text(encoding="utf-8").startswith("# del-eval: pred\ufffd\n")
    status, err = score(capsys, predictions, tmp_path / "named", "--name", os.fsdecode(b"model-\xfe"))
    assert status == EXIT_OK, err
    assert (tmp_path / "named" / "report.md").read_text(encoding="utf-8").startswith("# del-eval: model-\ufffd\n")
    assert json.loads((tmp_path / "named" / "report.json").read_text())["status"] == "complete"
    assert not [p for p in (tmp_path / "named").iterdir() if p.name.endswith(".tmp")]


def test_an_atomic_write_stopped_by_any_exception_leaves_no_temporary_file(tmp_path):
    def fails(tmp: Path):
        tmp.write_text("half")
        raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")

    with pytest.raises(UnicodeEncodeError):
        write_file_atomic(tmp_path / "report.md", fails)
    assert list(tmp_path.iterdir()) == []


def test_an_out_folder_that_cannot_be_a_folder_is_refused_naming_it(tmp_path, capsys):
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text('{"id": 0, "output": "The answer is 18"}\n', encoding="utf-8")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere" / "x")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for out, words in (
        (tmp_path / ("x" * 300), "File name too long"),
        (tmp_path / "dangling", "is a symbolic link to"),
        (tmp_path / "loop", "is a symbolic link to"),
    ):
        status, err = score(capsys, predictions, out)
        assert status == EXIT_UNWRITABLE_OUTPUT and words in err and len(err.strip().splitlines()) == 1, err


def test_a_pipe_is_read_and_a_device_or_a_file_past_the_limit_is_refused(tmp_path, capsys, monkeypatch):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_text('{"id": 0, "output": "The answer is 18"}\n'))
    writer.start()
    status, err = score(capsys, fifo, tmp_path / "from-a-pipe")
    writer.join()
    assert status == EXIT_OK, err
    status, err = score(capsys, "/dev/zero", tmp_path / "zero")
    assert status == EXIT_UNUSABLE_INPUT and "/dev/zero is a device" in err, err
    big = tmp_path / "big.jsonl"
    big.write_text('{"id": 0, "output": "The answer is 18"}\n' * 100, encoding="utf-8")
    monkeypatch.setattr(inputs, "MAX_INPUT_BYTES", 1000)
    status, err = score(capsys, big, tmp_path / "big")
    assert status == EXIT_UNUSABLE_INPUT and "larger than" in err, err


# ---------------------------------------------------------------------------------------------- lm-eval samples

DATE = "2026-01-01T00-00-00.000000"


def write_samples(folder: Path, task: str = "del_gsm8k", rows=None, results="default", date: str = DATE) -> Path:
    """lm-eval's files of one run as ``--log_samples`` writes them (``rows``: the samples lines, as JSON values or
    raw text; ``results``: the results file's object or text, None for none)."""
    from del_plugin.evaluation.benchmarks.sets import load_benchmark

    folder.mkdir(parents=True, exist_ok=True)
    if rows is None:
        problems = load_benchmark(task.removeprefix("del_")).problems[:2]
        rows = [
            {
                "doc": {"id": p.id, "question": p.question, "reference": p.reference},
                "arguments": {"gen_args_0": {"arg_0": p.question, "arg_1": {}}},
                "resps": [[f"The answer is {p.reference}"]],
            }
            for p in problems
        ]
    lines = [row if isinstance(row, (str, bytes)) else json.dumps(row) for row in rows]
    data = b"\n".join(line if isinstance(line, bytes) else line.encode() for line in lines) + b"\n"
    (folder / f"samples_{task}_{date}.jsonl").write_bytes(data)
    if results == "default":
        results = {"config": {"model": "hf", "model_args": "pretrained=/models/a"}, "configs": {task: {}}}
    if results is not None:
        text = results if isinstance(results, str) else json.dumps(results)
        (folder / f"results_{date}.json").write_text(text, encoding="utf-8")
    return folder


def score_samples(capsys, folder: Path, out: Path) -> tuple[int, str]:
    return del_eval(capsys, "score", "--lm-eval-samples", folder, "--out", out)


def test_well_formed_samples_are_scored_and_old_style_arguments_read(tmp_path, capsys):
    folder = write_samples(tmp_path / "run")
    assert score_samples(capsys, folder, tmp_path / "out")[0] == EXIT_OK
    rows = [json.loads(line) for line in next(folder.glob("samples_*")).read_text().splitlines()]
    for row in rows:  # lm-eval before 0.4 logged [[prompt, settings]]
        row["arguments"] = [[row["arguments"]["gen_args_0"]["arg_0"], {"until": []}]]
    old = write_samples(tmp_path / "old", rows=rows)
    status, err = score_samples(capsys, old, tmp_path / "old-out")
    assert status == EXIT_OK, err
    report = json.loads((tmp_path / "old-out" / "report.json").read_text())
    assert report["datasets"][0]["generation"]["correct"] == 2


def _gsm8k_row(**changes) -> dict:
    from del_plugin.evaluation.benchmarks.sets import load_benchmark

    p = load_benchmark("gsm8k").problems[0]
    row = {"doc": {"id": 0, "question": p.question, "reference": p.reference}, "resps": [["The answer is 18"]]}
    row.update(changes)
    return row


HOSTILE_SAMPLES = {
    "a results file that is not JSON": ({"results": "{not json"}, "results_", "not valid JSON"),
    "a results file that is a list": ({"results": "[]"}, "results_", "a JSON list, not an object"),
    "config a string": ({"results": {"config": "x"}}, "results_", "`config` is str"),
    "model_args a list": ({"results": {"config": {"model_args": ["a"]}}}, "results_", "model_args` is list"),
    "metadata a list": ({"results": {"configs": {"del_gsm8k": {"metadata": []}}}}, "results_", "metadata"),
    "a latin-1 byte": ({"rows": [b'{"doc": {"question": "caf\xe9"}}']}, "samples_", "not UTF-8"),
    "a doc nested 100,000 deep": ({"rows": ['{"doc": ' + "[" * 100_000 + "]" * 100_000 + "}"]}, ":1: ", "too deep"),
    "resps a string": ({"rows": [_gsm8k_row(resps="The answer is 18")]}, ":1: ", '`resps` is "The answer'),
    "a doc id true": ({"rows": [_gsm8k_row(doc={"id": True})]}, ":1: ", "doc id True is not a problem index"),
}


@pytest.mark.parametrize("name", HOSTILE_SAMPLES)
def test_hostile_lm_eval_samples_are_refused_naming_the_file(name, tmp_path, capsys):
    files, where, words = HOSTILE_SAMPLES[name]
    folder = write_samples(tmp_path / "run", **files)
    status, err = score_samples(capsys, folder, tmp_path / "out")
    assert status == EXIT_UNUSABLE_INPUT and where in err and words in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_a_second_model_without_its_results_file_is_not_merged_into_the_first(tmp_path, capsys):
    write_samples(tmp_path / "runs" / "model-a")
    write_samples(tmp_path / "runs" / "model-b", task="del_svamp", results=None)
    status, err = score_samples(capsys, tmp_path / "runs", tmp_path / "out")
    assert status == EXIT_UNUSABLE_INPUT and "cannot be told to be one model's" in err, err


# ---------------------------------------------------------------------------------------------- del-check YAML


def _alias_bomb(levels: int = 9) -> str:
    lines = ["a0: &a0 [" + ", ".join(["x"] * 10) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


HOSTILE_YAML = {
    "an alias bomb of nine levels of ten": (_alias_bomb(), "at line 5 ", "expands to more than"),
    "a 5,000-digit integer": ("base_model: x\nseed: " + "9" * 5000 + "\n", "line 2", "more than 4000 digits"),
    "a list nested 20,000 deep": ("base_model: x\nz: " + "[" * 20_000 + "]" * 20_000 + "\n", "", "too deep"),
    "an anchor holding itself": ("base_model: x\nz: &a [*a]\n", "line 2", "holds itself"),
    # PyYAML's constructor raises IndexError / ValueError on a tag that does not fit its value (found by the fuzz)
    "an empty value tagged !!int": ("base_model: x\nseed: !!int ''\n", "", "explicit tag"),
    "a timestamp that is no date": ("base_model: x\nwhen: !!timestamp 2020-13-45\n", "", "explicit tag"),
}


@pytest.mark.parametrize("name", HOSTILE_YAML)
def test_del_check_refuses_hostile_yaml_at_once(name, tmp_path, capsys):
    text, where, words = HOSTILE_YAML[name]
    config = tmp_path / "config.yml"
    config.write_text(text, encoding="utf-8")
    started = time.process_time()
    status = check.main([str(config)])
    err = capsys.readouterr().err
    assert status == check.UNUSABLE_INPUT and where in err and words in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert time.process_time() - started < 5  # the bomb ran 115 s into a MemoryError


def test_the_yaml_bounds_leave_ordinary_aliases_and_big_configs_alone():
    text = (
        "base: &base {lr: 0.1, steps: [1, 2, 3]}\nrun: {<<: *base, seed: 42}\nlist: [" + ", ".join(["1"] * 5000) + "]\n"
    )
    loaded = config_yaml.load_yaml(text)
    assert loaded["run"] == {"lr": 0.1, "steps": [1, 2, 3], "seed": 42} and len(loaded["list"]) == 5000
    assert config_yaml.load_yaml(_alias_bomb(3))["a3"][0][0][0] == ["x"] * 10  # 11,111 values: within the bound


DEEP = "[" * 100_000 + "]" * 100_000


def test_other_json_inputs_nested_too_deep_are_refused_naming_the_file(tmp_path, capsys):
    """A report given to compare, a --benchmark-dir set and a --data line: the same JSON reader, one line each."""
    report = tmp_path / "deep" / "report.json"
    report.parent.mkdir()
    report.write_text(DEEP, encoding="utf-8")
    status, err = del_eval(capsys, "compare", report, report, "--out", tmp_path / "compare")
    assert status == EXIT_UNUSABLE_INPUT and f"{report}: JSON nested too deep" in err, err

    sets = tmp_path / "sets" / "simuleq"
    sets.mkdir(parents=True)
    (sets / "simuleq.json").write_text('{"id": 1' + "0" * 5000 + "}", encoding="utf-8")
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text('{"id": 0, "output": "The answer is 1"}\n', encoding="utf-8")
    argv = ["score", "--benchmark", "simuleq", "--benchmark-dir", tmp_path / "sets", "--predictions", predictions]
    status, err = del_eval(capsys, *argv, "--out", tmp_path / "out")
    assert status == EXIT_UNUSABLE_INPUT and "simuleq.json: not usable JSON (Exceeds the limit" in err, err

    from del_plugin.evaluation.benchmarks.own_sets import read_eval_set

    data = tmp_path / "data.jsonl"
    data.write_text('{"question": "q", "answer": "#### 1"}\n' + DEEP + "\n", encoding="utf-8")
    read = read_eval_set(data)
    assert len(read.examples) == 1 and [(i.line, "too deep" in i.reason) for i in read.issues] == [(2, True)]
