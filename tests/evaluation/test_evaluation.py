"""del-eval: answer extraction and scoring on real GSM8K answers, metrics against hand-worked values, the
teacher-forced digit metrics on a hand-built model, and the command end to end with a tiny local model."""

from __future__ import annotations

import json
import math
import shutil
from decimal import Decimal
from pathlib import Path

import pytest
import torch

from del_plugin.evaluation import cli
from del_plugin.evaluation.benchmarks.answers import (
    GSM8K_MARKERS,
    extract_answer,
    find_numbers,
    format_decimal,
    is_correct,
)
from del_plugin.evaluation.benchmarks.own_sets import read_eval_set
from del_plugin.evaluation.benchmarks.readers import read_number
from del_plugin.evaluation.errors import OutputError
from del_plugin.evaluation.reports.files import load_report
from del_plugin.evaluation.scoring.metrics import digits_by_place, log_transform, numeric_metrics
from del_plugin.evaluation.scoring.teacher_forced import ENTROPY_EDGES, TeacherForcedStats, teacher_forced_batches

from fake_vocab import TOKEN_ID, VOCAB, V, encode
from gsm8k_rows import gsm8k_rows
from repo import REPO

D = Decimal


# ---------------------------------------------------------------------------------------------- extraction


@pytest.fixture(scope="module")
def gsm8k_test():
    return gsm8k_rows(None, "test")


@pytest.fixture(scope="module")
def gsm8k_train():
    return gsm8k_rows(None, "train")


def test_reference_of_every_gsm8k_answer_is_the_number_after_the_marker(gsm8k_test, gsm8k_train):
    # oracle: plain string handling of the text after '####' (commas removed), independent of the regex
    for row in gsm8k_test + gsm8k_train:
        expected = D(row["answer"].rsplit("####", 1)[1].strip().replace(",", ""))
        found = extract_answer(row["answer"])
        assert found is not None and found.source == "marker"
        assert found.value == expected, row["answer"][-80:]


@pytest.mark.parametrize(
    ("split", "index", "expected"),
    [
        ("test", 2, D("70000")),  # '...=$<<200000-130000=70000>>70,000\n#### 70000': dollars, thousands commas
        ("test", 146, D("2125")),  # '#### 2,125'
        ("test", 489, D("-10")),  # '#### -10'
        ("test", 1113, D("-3")),
        ("train", 5715, D("-7")),
        ("train", 5844, D("-47")),
    ],
)
def test_hand_checked_gsm8k_references(split, index, expected, gsm8k_test, gsm8k_train):
    row = (gsm8k_test if split == "test" else gsm8k_train)[index]
    assert extract_answer(row["answer"]).value == expected


@pytest.mark.parametrize(
    ("split", "index", "expected"),
    [
        # without '####' the last number counts; hand-read from the solutions
        ("test", 0, D("18")),  # '...9 * 2 = $<<9*2=18>>18 every day at the farmer’s market.'
        ("test", 2, D("70000")),  # '...200,000-130,000=$<<200000-130000=70000>>70,000'
        ("test", 489, D("-10")),  # '...is -10 degrees Fahrenheit.'
        ("test", 1113, D("-3")),  # 'It was -3 degrees Celsius in the morning.'
        ("train", 1, D("10")),  # '...0.2 x 50 = $<<0.2*50=10>>10.'
        ("train", 5844, D("-47")),  # 'The largest number is <<-47=-47>>-47.'
    ],
)
def test_last_number_of_gsm8k_solutions_without_marker(split, index, expected, gsm8k_test, gsm8k_train):
    row = (gsm8k_test if split == "test" else gsm8k_train)[index]
    body = row["answer"].rsplit("####", 1)[0]
    found = extract_answer(body)
    assert found.source == "last" and found.value == expected


@pytest.mark.parametrize(
    ("split", "index", "line", "expected"),
    [
        ("train", 1, 0, D("0.2")),  # 'Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.'
        ("train", 26, 0, D("0.4")),  # '... 2 liters * 20% = <<2*20*.01=.4>>.4 liters': a bare '.4'
        ("train", 37, 1, D("4.80")),  # '... $1.20 x 4 = $<<1.20*4=4.80>>4.80.': the sentence's '.' is not a decimal
        ("train", 5715, 0, D("-21")),  # '-14 + (-8) + 1 = <<-14+-8+1=-21>>-21 degrees Fahrenheit'
    ],
)
def test_decimals_and_negatives_in_gsm8k_solution_lines(split, index, line, expected, gsm8k_train):
    text = gsm8k_train[index]["answer"].split("\n")[line]
    assert extract_answer(text).value == expected


def test_numbers_in_a_gsm8k_line_with_fractions_subtraction_and_negatives(gsm8k_train):
    # train 25: 'Out of the first 100 balls, Ralph was able to hit 2/5 of them and not able to hit 3/5 of them,
    # 3/5 x 100 = 60 tennis balls Ralph didn't hit.'
    values = [v for v, _ in find_numbers(gsm8k_train[25]["answer"].split("\n")[0])]
    assert values == [D(100), D("0.4"), D("0.6"), D("0.6"), D(100), D(60)]
    # '16 - 3 - 4' and '16-3' are subtractions, '-14 + (-8)' holds two negatives
    assert [v for v, _ in find_numbers("16 - 3 - 4 = 9 and 16-3=13")] == [16, 3, 4, 9, 16, 3, 13]
    assert [v for v, _ in find_numbers("-14 + (-8) + 1 = -21")] == [-14, -8, 1, -21]


@pytest.mark.parametrize(
    ("text", "expected", "source"),
    [
        ("The answer is $70,000.", D("70000"), "marker"),
        ("So he made a profit of $70,000. The answer is 70000", D("70000"), "marker"),
        ("The answer is 12.5.", D("12.5"), "marker"),
        ("the answer is: -10 degrees", D("-10"), "marker"),
        ("The answer is \u22123", D("-3"), "marker"),  # Unicode minus
        ("The answer is 3/4 of the cake", D("0.75"), "marker"),
        ("The answer is 10 - 3 = 7", D(10), "marker"),  # the first number after the marker, as in the paper
        ("The answer is below. We add 2 and 5 to get 7", D(2), "marker"),
        ("We add 2 and 5 to get 7 apples.", D(7), "last"),
        ("The answer is unknown", None, None),
        ("#### 1,234,567", D(1234567), "marker"),
        ("5% of 80 is 4", D(4), "last"),
        ("The answer is 5. On second thought, the answer is 7 apples", D(7), "marker"),  # the last marker
        ("#### 9\nThe answer is 12", D(12), "marker"),
        ("I counted 3 apples. The answer is unknown", None, None),  # a marker without a number: no answer
    ],
)
def test_extraction_rules(text, expected, source):
    found = extract_answer(text)
    if expected is None:
        assert found is None
    else:
        assert (found.value, found.source) == (expected, source)
    # one way of reading an answer: the --data files read it as the paper's GSM8K reader does
    assert read_number(text, GSM8K_MARKERS) == (None if found is None else found.value)


@pytest.mark.parametrize(
    ("prediction", "reference", "correct"),
    [
        (D("18"), D("18"), True),
        (D("17.5"), D("18"), True),  # rounds half away from zero to 18
        (D("17.49"), D("18"), False),
        (D("18.4"), D("18"), True),
        (D("-2.5"), D("-3"), True),  # away from zero: -3
        (D("-2.5"), D("-2"), False),
        (D("70000"), D("70000"), True),
        (D("13.0"), D("12.5"), True),  # |0.5| = 4% of 12.5: inside
        (D("12.0"), D("12.5"), True),
        (D("13.01"), D("12.5"), False),
        (D("0.26"), D("0.25"), True),
        (D("0.2601"), D("0.25"), False),
        (D("-0.25"), D("0.25"), False),
        (None, D("18"), False),
    ],
)
def test_scoring(prediction, reference, correct):
    assert is_correct(prediction, reference) is correct


def test_scoring_accepts_floats_and_ints():
    assert is_correct(17.6, 18) and not is_correct(1.0, 1.5)


# ---------------------------------------------------------------------------------------------- metrics


def test_log_transform():
    assert log_transform(0.0) == 0.0
    assert log_transform(math.e - 1) == pytest.approx(1.0)
    assert log_transform(-(math.e**2 - 1)) == pytest.approx(-2.0)


@pytest.mark.parametrize(
    ("value", "places"),
    [
        (D("1038.5"), {3: 1, 2: 0, 1: 3, 0: 8, -1: 5}),
        (D("12.50"), {1: 1, 0: 2, -1: 5}),  # trailing zero dropped
        (D("0.05"), {0: 0, -1: 0, -2: 5}),
        (D("1E+3"), {3: 1, 2: 0, 1: 0, 0: 0}),
        (D("-7"), {0: 7}),
    ],
)
def test_digits_by_place(value, places):
    assert digits_by_place(value) == places


def test_numeric_metrics_against_hand_worked_values():
    pairs = [
        (D("1038"), D("1038")),  # right
        (D("938"), D("1038")),  # wrong, |error| 100
        (None, D("12.5")),  # no number
        (D("12.9"), D("12.5")),  # right (within 4%), |error| 0.4
    ]
    m = numeric_metrics(pairs)
    assert (m["n"], m["answered"], m["correct"]) == (4, 3, 2)
    assert m["accuracy"] == 0.5 and m["answered_rate"] == 0.75
    assert m["mae"] == pytest.approx((0 + 100 + 0.4) / 3)
    assert m["log_mae"] == pytest.approx((0 + math.log(1039 / 939) + math.log(13.9 / 13.5)) / 3)
    # reference digits: 1038 (x2) and 12.5 (x2); 938 misses 10^3 and 10^2, 12.9 misses 10^-1, None misses all
    expected = {"3": (2, 1), "2": (2, 1), "1": (4, 3), "0": (4, 3), "-1": (2, 0)}
    got = {p: (v["n"], v["correct"]) for p, v in m["place_accuracy"].items()}
    assert got == expected
    assert list(m["place_accuracy"]) == ["3", "2", "1", "0", "-1"]


def test_numeric_metrics_of_nothing_and_of_runaway_numbers():
    empty = numeric_metrics([])
    assert empty["accuracy"] is None and empty["mae"] is None
    runaway = numeric_metrics([(D("9" * 400), D("5"))])
    assert math.isfinite(runaway["mae"]) and runaway["log_mae"] == pytest.approx(
        math.log(1.7976931348623157e308) - math.log(6), rel=1e-6
    )


def test_format_decimal():
    assert format_decimal(D("12.50")) == "12.5"
    assert format_decimal(D("1E+3")) == "1000"
    assert format_decimal(D(2) / D(3)) == "0.666667"
    assert format_decimal(D("-0.0")) == "0"


# ---------------------------------------------------------------------------------------------- teacher forcing


class NextTokenOracle(torch.nn.Module):
    """Reads the next input token and puts logit ln 9 on it (ln 9 on the next digit + 1 after a '.'), 0 elsewhere.

    On a digit target the ten-digit distribution is then 1/2 on one digit and 1/18 on each other one: entropy
    0.5 ln 2 + 0.5 ln 18 = ln 6 exactly."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask=None):
        batch, length = input_ids.shape
        logits = torch.zeros(batch, length, V)
        for b in range(batch):
            for t in range(length - 1):
                target = int(input_ids[b, t + 1])
                if int(input_ids[b, t]) == TOKEN_ID["."] and target in VOCAB.family_token_ids[0]:
                    target = VOCAB.family_token_ids[0][(VOCAB.family_token_ids[0].index(target) + 1) % 10]
                logits[b, t, target] = math.log(9)
        return type("Out", (), {"logits": logits})()


def test_teacher_forced_digit_metrics_on_a_hand_built_model():
    # prompts hold digits that must not count; solutions have 3 + 4 digits; the batch is right-padded
    sequences = [
        (encode("q 7 = answer is 12.5").tolist(), 6),  # targets '12.5' -> 1 (10^1), 2 (10^0), 5 (10^-1)
        (encode("q 88 = 3041").tolist(), 7),  # targets 3 0 4 1 at 10^3 .. 10^0
    ]
    batches = list(teacher_forced_batches(NextTokenOracle(), sequences, VOCAB, batch_size=2, pad_id=TOKEN_ID[" "]))
    assert len(batches) == 1
    indices, per_sequence, stats = batches[0]
    assert indices == [0, 1]
    result = stats.as_dict()
    assert result["digits"] == 7
    assert result["correct"] == 6  # all but the decimal, where the oracle prefers the next digit
    assert result["mean_entropy"] == pytest.approx(math.log(6), abs=1e-5)
    bin_of_ln6 = int(math.log(6) / (math.log(10) / 20))  # 15
    assert result["entropy_histogram"]["counts"] == [7 if k == bin_of_ln6 else 0 for k in range(20)]
    assert result["entropy_histogram"]["edges"] == ENTROPY_EDGES
    by_place = {p: (v["n"], v["correct"]) for p, v in result["places"].items()}
    assert by_place == {"3": (1, 1), "2": (1, 1), "1": (2, 2), "0": (2, 2), "-1": (1, 0)}
    assert [(n, c) for n, c, _ in per_sequence] == [(3, 2), (4, 4)]
    assert per_sequence[0][2] == pytest.approx(3 * math.log(6), abs=1e-5)


class NextChunkOracle(torch.nn.Module):
    """Logit ln 9 on the next input token, 0 elsewhere, over the chunked vocabulary of test_number_capture (digit runs
    cut into tokens of up to three digits)."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.vocab_size = vocab_size
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask=None):
        logits = torch.zeros(*input_ids.shape, self.vocab_size)
        logits[:, :-1].scatter_(-1, input_ids[:, 1:, None], math.log(9))
        return type("Out", (), {"logits": logits})()


def test_teacher_forced_digit_metrics_on_number_tokens():
    from chunked_vocab import TOKEN_ID as CHUNK_ID
    from chunked_vocab import VOCAB as CHUNKED
    from chunked_vocab import V as CHUNK_V
    from chunked_vocab import encode as encode_chunked

    # the solution '12.5 or 3041' is '12' '.' '5' ' ' 'o' 'r' ' ' '304' '1': 1 + 1 + 3 + 1 number tokens, 7 digits
    prompt = encode_chunked("q 7 = ").tolist()
    ids = prompt + encode_chunked("12.5 or 3041").tolist()
    ((_, per_sequence, stats),) = teacher_forced_batches(
        NextChunkOracle(CHUNK_V), [(ids, len(prompt))], CHUNKED, batch_size=1, pad_id=CHUNK_ID[" "]
    )
    result = stats.as_dict()
    assert result["digits"] == 7 and result["correct"] == 7

    # a slot of an m-digit target: its digit's marginal sums 10**(m-1) tokens, one of them at 9 (the others 1), so
    # the target digit has mass 9 + 10**(m-1) - 1 and every other digit 10**(m-1)
    def entropy(m: int) -> float:
        masses = [9 + 10 ** (m - 1) - 1] + [10 ** (m - 1)] * 9
        total = sum(masses)
        return -sum(w / total * math.log(w / total) for w in masses)

    expected = [entropy(2)] * 2 + [entropy(1)] + [entropy(3)] * 3 + [entropy(1)]
    assert entropy(1) == pytest.approx(math.log(6))
    assert result["mean_entropy"] == pytest.approx(sum(expected) / 7, abs=1e-5)
    by_place = {p: v["n"] for p, v in result["places"].items()}
    assert by_place == {"3": 1, "2": 1, "1": 2, "0": 2, "-1": 1}
    assert per_sequence[0][0] == 7


def test_teacher_forced_stats_merge_and_empty():
    empty = TeacherForcedStats().as_dict()
    assert empty["digits"] == 0 and empty["mean_entropy"] is None and empty["digit_accuracy"] is None
    a, b = TeacherForcedStats(), TeacherForcedStats()
    a.add_positions(torch.tensor([0.0, 2.3]), torch.tensor([True, False]), torch.tensor([0, 1]))
    b.add_positions(torch.tensor([1.0]), torch.tensor([True]), torch.tensor([0]))
    a.merge(b)
    merged = a.as_dict()
    assert merged["digits"] == 3 and merged["correct"] == 2
    assert merged["mean_entropy"] == pytest.approx(3.3 / 3)
    assert merged["places"]["0"] == {"n": 2, "correct": 2, "accuracy": 1.0, "mean_entropy": 0.5}
    assert merged["entropy_histogram"]["counts"][0] == 1 and merged["entropy_histogram"]["counts"][-1] == 1


# ---------------------------------------------------------------------------------------------- data


def test_bad_lines_are_reported_with_file_and_line(tmp_path, gsm8k_test):
    path = tmp_path / "mixed.jsonl"
    lines = [
        json.dumps(gsm8k_test[0]),
        "{not json",
        "",
        json.dumps({"question": "How many?"}),
        json.dumps({"question": "How many?", "answer": "none at all"}),
        json.dumps({"question": "How many?", "answer": "work\n#### "}),
        json.dumps(["a list"]),
        json.dumps({"question": "What is 2.5 * 2?", "answer": 5.0}),
        json.dumps({"question": "What is 1000 + 234?", "answer": "The answer is 1,234"}),
    ]
    path.write_text("\n".join(lines) + "\n")
    eval_set = read_eval_set(path)
    assert [(e.line, e.reference, e.format) for e in eval_set.examples] == [
        (1, D(18), "gsm8k"),
        (8, D("5.0"), "numeric"),
        (9, D(1234), "numeric"),
    ]
    assert eval_set.examples[1].solution == "5.0"
    reasons = {issue.line: issue.reason for issue in eval_set.issues}
    assert sorted(reasons) == [2, 4, 5, 6, 7]
    assert "not valid JSON" in reasons[2] and "missing key(s) answer" in reasons[4]
    assert "no number in `answer`" in reasons[5] and "no number after '####'" in reasons[6]
    assert str(eval_set.issues[0]) == f"{path}:2: {reasons[2]}"
    assert len(read_eval_set(path, limit=2).examples) == 2


def test_missing_file_is_an_error_before_any_model_is_loaded(tmp_path, capsys):
    code = cli.main(
        [
            "run",
            "--model",
            str(tmp_path / "no-model"),
            "--data",
            str(tmp_path / "nope.jsonl"),
            "--out",
            str(tmp_path / "out"),
        ]
    )
    assert code == 3  # unusable input
    assert "nope.jsonl" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "lines, first_bad",
    [
        (
            [{"input": "What is 2+3?", "output": "5"}, {"question": "What is 2+3?"}],
            ":1: missing key(s) question, answer",
        ),
        ([{"messages": [{"role": "user", "content": "What is 2+3?"}]}], ":1: `messages` has no assistant turn"),
        ([], None),  # an empty file
    ],
)
def test_a_data_file_without_a_usable_line_is_refused_before_the_model_loads(
    lines, first_bad, tmp_path, capsys, monkeypatch
):
    from del_plugin.evaluation.run import generation

    def no_model(*_args, **_kwargs):
        raise AssertionError("the model was looked for before the data file was checked")

    for looks_for_the_model in ("check_model_source", "load_model"):
        monkeypatch.setattr(generation, looks_for_the_model, no_model)
    path = tmp_path / "unusable.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    command = ["run", "--model", "any", "--data", str(path), "--out", str(tmp_path / "out")]
    assert cli.main(command) == 3
    error = capsys.readouterr().err
    assert error.startswith(f"del-eval: error: {path}: ")
    assert "`question` and `answer`" in error and "chat `messages`" in error  # the keys expected
    if first_bad:
        assert f"the first bad one, {path}{first_bad}" in error
    else:
        assert "the file is empty" in error
    assert not (tmp_path / "out").exists()


def test_chat_lines_are_read_the_last_assistant_turn_as_the_answer(tmp_path):
    path = tmp_path / "chat.jsonl"
    rows = [
        {
            "messages": [
                {"role": "system", "content": "You are a careful tutor."},
                {"role": "user", "content": "A pen costs $2."},
                {"role": "assistant", "content": "Noted."},
                {"role": "user", "content": [{"type": "text", "text": "How much are 3 pens?"}]},
                {"role": "assistant", "content": "3 * 2 = 6\n#### 6"},
            ]
        },
        {"messages": [{"role": "user", "content": "Half of 5?"}, {"role": "assistant", "content": "2.5"}]},
        {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]},
        {"messages": "What is 1+1?"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    eval_set = read_eval_set(path)
    first, second = eval_set.examples
    # the user turns before the last assistant turn, the system turn left out
    assert first.question == "A pen costs $2.\n\nHow much are 3 pens?"
    assert (first.solution, first.reference, first.format) == ("3 * 2 = 6\n#### 6", D(6), "chat")
    assert (second.question, second.reference) == ("Half of 5?", D("2.5"))
    reasons = [(i.line, i.reason) for i in eval_set.issues]
    assert reasons == [
        (3, "no number in `answer` ('Hello!')"),
        (4, '`messages` must be a list of {"role", "content"} turns'),
    ]


def test_load_report_refuses_other_json(tmp_path):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "something else"}))
    with pytest.raises(ValueError, match="not a del-eval report"):
        load_report(other)


# ---------------------------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def eval_file(tmp_path_factory, gsm8k_test):
    path = tmp_path_factory.mktemp("data") / "gsm8k_few.jsonl"
    rows = [json.dumps(r) for r in gsm8k_test[:4]]
    rows.insert(2, '{"question": "broken"')  # line 3
    rows.append(json.dumps({"question": "What is 12.5 + 10?", "answer": "The answer is 22.5"}))
    path.write_text("\n".join(rows) + "\n")
    return path


def _saved_generations(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]


def test_del_eval_end_to_end_report_is_consistent_with_its_generations(digit_model, eval_file, tmp_path):
    out = tmp_path / "report"
    code = cli.main(
        [
            "run",
            "--model",
            str(digit_model),
            "--data",
            str(eval_file),
            "--out",
            str(out),
            "--max-new-tokens",
            "6",
            "--batch-size",
            "2",
            "--name",
            "tiny",
        ]
    )
    assert code == 0
    report = load_report(out)
    assert report["schema"] == "del-eval/2" and report["status"] == "complete" and report["error"] is None
    assert report["model"]["prompt_format"] == "alpaca"  # the tiny model's tokenizer has no chat template
    assert report["model"]["dtype"] == "float32" and report["model"]["device"] == "cpu"
    assert set(report["files"]["plots"]) == {"entropy_histogram.png", "place_accuracy.png"}
    for name in report["files"]["plots"] + ["report.md"]:
        assert (out / name).stat().st_size > 0
    assert (out / "entropy_histogram.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (entry,) = report["datasets"]
    assert (entry["lines_read"], entry["evaluated"], entry["skipped"]) == (6, 5, 1)
    assert entry["issues"] == [{"file": str(eval_file), "line": 3, "reason": entry["issues"][0]["reason"]}]
    assert entry["formats"] == ["gsm8k", "numeric"]

    saved = _saved_generations(out)
    assert sorted(r["line"] for r in saved) == [1, 2, 4, 5, 6]
    for r in saved:
        assert set(r["generation"]) <= set("12 ")  # the rewired model writes digits only
        found = extract_answer(r["generation"])
        assert r["prediction"] == (None if found is None else format_decimal(found.value))
        assert r["correct"] == is_correct(found.value if found else None, D(r["reference"]))
        assert 1 <= r["new_tokens"] <= 6
    # the numbers of the report, recomputed from the saved generations
    recomputed = numeric_metrics(
        (None if r["prediction"] is None else D(r["prediction"]), D(r["reference"])) for r in saved
    )
    generation = entry["generation"]
    assert generation["answered"] == recomputed["answered"] >= 1
    for key in ("n", "correct", "accuracy", "place_accuracy"):
        assert generation[key] == recomputed[key], key
    assert generation["mae"] == pytest.approx(recomputed["mae"])
    assert generation["log_mae"] == pytest.approx(recomputed["log_mae"])
    assert report["overall"]["generation"]["accuracy"] == generation["accuracy"]
    tf = entry["teacher_forced"]
    assert tf["digits"] == sum(r["tf_digits"] for r in saved) > 0
    assert tf["correct"] == sum(r["tf_digits_correct"] for r in saved)
    assert tf["mean_entropy"] == pytest.approx(sum(r["tf_entropy_sum"] for r in saved) / tf["digits"])
    assert sum(tf["entropy_histogram"]["counts"]) == tf["digits"]
    assert sum(p["n"] for p in tf["places"].values()) == tf["digits"]
    assert 0.0 <= tf["mean_entropy"] <= math.log(10) + 1e-6

    # two reports side by side (the twin without its generations: compare refuses to pair a run with its copy)
    twin = tmp_path / "twin"
    shutil.copytree(out, twin)
    (twin / "generations.jsonl").unlink()
    table = tmp_path / "side-by-side"
    assert (
        cli.main(["compare", str(out), str(twin / "report.json"), "--out", str(table), "--labels", "first", "second"])
        == 0
    )
    markdown = (table / "comparison.md").read_text()
    assert "| first |" in markdown and "| second |" in markdown
    assert (table / "place_accuracy.png").exists() and (table / "entropy_histogram.png").exists()
    assert json.loads((table / "comparison.json").read_text())["models"][1]["label"] == "second"


@pytest.mark.parametrize("stop", ["error", "sigterm"])
def test_a_run_stopped_half_way_keeps_its_results(stop, digit_model, eval_file, tmp_path, monkeypatch):
    import os
    import signal

    from del_plugin.evaluation.cli import stop_cleanly_on_sigterm
    from del_plugin.evaluation.run import generation as generation_module
    from del_plugin.evaluation.run.runner import EvalSettings, evaluate

    real = generation_module.generate_greedy
    out = tmp_path / "partial"
    on_disk_after_first_batch = []

    def first_batch_then_stop(*args, **kwargs):
        batches = real(*args, **kwargs)
        yield next(batches)
        # what a hard kill (SIGKILL, no clean-up at all) would leave at this point
        on_disk = json.loads((out / "report.json").read_text())
        on_disk_after_first_batch.append((on_disk["status"], on_disk["datasets"][0]["generation"]["n"]))
        if stop == "error":
            raise RuntimeError("simulated out-of-memory")
        os.kill(os.getpid(), signal.SIGTERM)  # as `kill` or a job scheduler would
        yield next(batches)

    monkeypatch.setattr(generation_module, "generate_greedy", first_batch_then_stop)
    previous = stop_cleanly_on_sigterm() if stop == "sigterm" else None
    try:
        with pytest.raises(RuntimeError if stop == "error" else SystemExit):
            evaluate(digit_model, [eval_file], out, settings=EvalSettings(batch_size=2, max_new_tokens=3))
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    assert on_disk_after_first_batch == [("running", 2)]
    report = load_report(out)
    assert report["status"] == "partial"
    assert report["error"] == ("RuntimeError: simulated out-of-memory" if stop == "error" else "SystemExit: 143")
    saved = _saved_generations(out)
    assert len(saved) == 2
    assert report["datasets"][0]["generation"]["n"] == 2
    assert report["datasets"][0]["teacher_forced"]["digits"] > 0  # the phase before the stop is kept whole
    assert "Status: partial" in (out / "report.md").read_text()


# ---------------------------------------------------------------------------------------------- the paper's benchmarks


@pytest.fixture(scope="module")
def benchmark_dir(tmp_path_factory):
    """SimulEq and SAT as a --benchmark-dir, with the small sets of test_benchmarks (not the authors' files)."""
    from paper_sets import SAT, SIMULEQ

    root = tmp_path_factory.mktemp("paper-benchmarks")
    for folder, rows in (("simuleq", SIMULEQ), ("sat", SAT)):
        (root / folder).mkdir()
        (root / folder / f"{folder}.json").write_text(json.dumps(rows))
    return root


@pytest.fixture(scope="module")
def benchmark_run(digit_model, benchmark_dir, tmp_path_factory):
    from del_plugin.evaluation.run.runner import EvalSettings, evaluate

    out = tmp_path_factory.mktemp("benchmarks") / "all"
    settings = EvalSettings(limit=2, max_new_tokens=4, batch_size=4)
    report = evaluate(  # SimulEq and SAT are not the authors' files: allowed, and marked (checked below)
        digit_model, out_dir=out, benchmarks="all", benchmark_dir=benchmark_dir, settings=settings, allow_modified=True
    )
    return out, report


def test_all_seven_benchmarks_end_to_end(benchmark_run):
    from del_plugin.evaluation.benchmarks import BENCHMARK_NAMES, BENCHMARKS

    out, report = benchmark_run
    assert report["status"] == "complete" and report["schema"] == "del-eval/2"
    assert [d["benchmark"] for d in report["datasets"]] == list(BENCHMARK_NAMES)
    assert report["model"]["prompt_format"] == "alpaca"
    assert report["model"]["prompt_format_source"] == "auto: the tokenizer has no chat template"
    records = _saved_generations(out)
    assert len({(r["dataset"], r["id"]) for r in records}) == len(records) == 14  # 2 problems x 7 sets
    accuracies = {}
    for entry in report["datasets"]:
        name = entry["benchmark"]
        rows = [r for r in records if r["dataset"] == name]
        assert entry["status"] == "complete" and [r["id"] for r in sorted(rows, key=lambda r: r["id"])] == [0, 1]
        for r in rows:  # every saved verdict, recomputed from the saved generation
            verdict = BENCHMARKS[name].score(r["generation"], r["reference"])
            assert (verdict.prediction, verdict.correct, verdict.defaulted) == (
                r["prediction"],
                r["correct"],
                r["defaulted"],
            )
        generation = entry["generation"]
        accuracies[name] = sum(r["correct"] for r in rows) / 2
        assert generation["accuracy"] == accuracies[name]
        assert generation["no_answer"] == sum(r["prediction"] is None for r in rows)
        assert ("mae" in generation) is (BENCHMARKS[name].scoring == "numeric")
        assert ("accuracy_without_default" in generation) is (BENCHMARKS[name].scoring == "choice")
        # teacher forcing where the set has reference solutions (GSM8K answers, MATH solutions, AQuA rationales)
        assert (entry["teacher_forced"] is not None) is (name in ("gsm8k", "math", "aqua")), name
        assert entry["source"]["verified"] is (name not in ("simuleq", "sat"))
    for name in ("simuleq", "sat"):
        assert any(w.startswith(f"{name}: ") and "is not the authors' file" in w for w in report["warnings"])
    assert report["macc"]["value"] == pytest.approx(sum(accuracies.values()) / 7)
    # --limit 2: every set but the 2-problem SAT fixture is scored in part
    assert (report["macc"]["label"], report["macc"]["complete"]) == ("mACC (partial coverage)", False)
    assert report["macc"]["partial"] == [n for n in BENCHMARK_NAMES if n != "sat"]
    markdown = (out / "report.md").read_text()
    assert "| **mACC (partial coverage)** |" in markdown and "| SimulEq† |" in markdown
    assert "The first 2 problems of each set." in markdown and "| GSM8K | 2 of 1,319 |" in markdown
    assert (out / "benchmark_accuracy.png").read_bytes()[:4] == b"\x89PNG"


def test_benchmark_reports_side_by_side(benchmark_run, tmp_path):
    out, report = benchmark_run
    table = tmp_path / "compare"
    twin = shutil.copytree(out, tmp_path / "twin")  # without its generations: a run is never paired with itself
    (twin / "generations.jsonl").unlink()
    assert cli.main(["compare", str(out), str(twin), "--labels", "MLE", "DEL", "--out", str(table)]) == 0
    markdown = (table / "comparison.md").read_text()
    header = "| model | GSM8K | MATH | SVAMP | SimulEq | AQuA | SAT | MMLU-math | mACC (partial coverage) |"
    assert header in markdown
    assert f"{100 * report['macc']['value']:.1f}% |" in markdown
    assert json.loads((table / "comparison.json").read_text())["models"][0]["macc"] == report["macc"]
    assert (table / "benchmark_accuracy.png").exists()


def test_a_stopped_benchmark_run_resumes_from_the_sets_already_scored(digit_model, tmp_path, monkeypatch):
    from del_plugin.evaluation.run import generation as generation_module
    from del_plugin.evaluation.run import runner
    from del_plugin.evaluation.run.runner import EvalSettings, evaluate

    out = tmp_path / "resumed"
    settings = EvalSettings(limit=2, max_new_tokens=3, batch_size=2, teacher_forced=False)
    real_task, real_generate = runner._run_task, generation_module.generate_greedy

    def stop_before_aqua(task, *args):
        if task.name == "aqua":
            raise RuntimeError("simulated crash")
        return real_task(task, *args)

    monkeypatch.setattr(runner, "_run_task", stop_before_aqua)
    with pytest.raises(RuntimeError, match="simulated crash"):
        evaluate(digit_model, out_dir=out, benchmarks="gsm8k,aqua,mmlu_math", settings=settings)
    first = load_report(out)
    assert first["status"] == "partial"
    assert [d["status"] for d in first["datasets"]] == ["complete", "pending", "pending"]
    assert "mACC (1 of 7 sets, partial coverage)" in (out / "report.md").read_text()

    generated = []

    def counting(lm, prompts, **kwargs):
        generated.append(len(prompts))
        yield from real_generate(lm, prompts, **kwargs)

    monkeypatch.setattr(runner, "_run_task", real_task)
    monkeypatch.setattr(generation_module, "generate_greedy", counting)
    report = evaluate(digit_model, out_dir=out, benchmarks="gsm8k,aqua,mmlu_math", settings=settings)
    assert generated == [2, 2]  # aqua and mmlu_math only: gsm8k was kept
    assert report["status"] == "complete" and report["datasets"][0] == first["datasets"][0]
    records = _saved_generations(out)
    assert sorted((r["dataset"], r["id"]) for r in records) == [
        (name, i) for name in ("aqua", "gsm8k", "mmlu_math") for i in (0, 1)
    ]
    assert report["macc"]["sets"] == ["gsm8k", "aqua", "mmlu_math"]
    assert any(w.startswith("gsm8k: 2 of 2 generations hit") for w in report["warnings"])  # kept with its set

    other = EvalSettings(limit=2, max_new_tokens=5, batch_size=2, teacher_forced=False)
    with pytest.raises(OutputError, match=r"holds the report of another run \(max_new_tokens: 3 there, 5 now\)"):
        evaluate(digit_model, out_dir=out, benchmarks="gsm8k", settings=other)
    generated.clear()
    again = evaluate(digit_model, out_dir=out, benchmarks="gsm8k", settings=other, overwrite=True)
    assert generated == [2] and [d["name"] for d in again["datasets"]] == ["gsm8k"]
    assert len(_saved_generations(out)) == 2


def test_program_of_thought_runs_the_programs_and_falls_back_to_chain_of_thought(digit_model, tmp_path, monkeypatch):
    """The generations are canned (generate_greedy replaced: the digit model writes no programs); the rest is real:
    prompts, the sandbox, scoring, the fallback and the report."""
    from del_plugin.evaluation.benchmarks.program import SandboxUnavailableError, program_sandbox
    from del_plugin.evaluation.run import generation as generation_module
    from del_plugin.evaluation.run.runner import EvalSettings, evaluate

    try:
        sandbox = program_sandbox()
    except SandboxUnavailableError as err:  # a kernel that refuses user namespaces (tests/evaluation/test_sandbox.py)
        pytest.skip(str(err))

    def canned(lm, prompts, **kwargs):
        texts = []
        for ids in prompts:
            prompt = lm.tokenizer.decode(ids, skip_special_tokens=True)
            if "Let's write a program." not in prompt:
                texts.append("The answer is 3")  # chain-of-thought
            elif "Janet" in prompt:  # GSM8K 0 (18): a program that prints the answer
                texts.append("eggs = 16 - 3 - 4\nprint(eggs * 2)")
            elif "robe" in prompt:  # GSM8K 1 (3): a program that fails -> asked again as chain-of-thought
                texts.append("print(1 / 0)")
            else:  # GSM8K 2 (70000): no program, a plain answer, read as it is
                texts.append("The answer is 70000")
        yield list(range(len(prompts))), texts, [5] * len(prompts), [True] * len(prompts)

    monkeypatch.setattr(generation_module, "generate_greedy", canned)
    out = tmp_path / "pot"
    settings = EvalSettings(limit=3, teacher_forced=False, program_of_thought=True)
    report = evaluate(digit_model, out_dir=out, benchmarks="gsm8k,aqua", settings=settings)
    records = {(r["dataset"], r["id"]): r for r in _saved_generations(out)}
    janet, robe, house = records["gsm8k", 0], records["gsm8k", 1], records["gsm8k", 2]
    assert (janet["mode"], janet["prediction"], janet["correct"]) == ("program-of-thought", "18", True)
    assert janet["program"] == {"status": "ok", "stdout": "18\n", "detail": ""}
    assert (robe["mode"], robe["prediction"], robe["correct"]) == ("chain-of-thought", "3", True)
    assert robe["program"]["status"] == "error" and "ZeroDivisionError" in robe["program"]["detail"]
    assert robe["program"]["output"] == "print(1 / 0)"
    assert (house["mode"], house["program"], house["correct"]) == ("program-of-thought", None, True)
    gsm8k, aqua = report["datasets"]
    assert gsm8k["generation"]["program_of_thought"] == {
        "asked": 3,
        "programs": 2,
        "ran": 1,
        "answered": 2,
        "cot_fallback": 1,
    }
    assert gsm8k["generation"]["accuracy"] == 1.0
    # AQuA is not a program-of-thought set in the paper: chain-of-thought only
    assert aqua["generation"]["program_of_thought"] is None
    assert {records["aqua", i]["mode"] for i in range(3)} == {"chain-of-thought"}
    assert "program-of-thought, chain-of-thought fallback" in (out / "report.md").read_text()
    assert report["settings"]["program_sandbox"] == sandbox


def test_stop_strings_end_a_generation(digit_model):
    from del_plugin.evaluation.run.generation import PromptFormat, generate_greedy, load_model

    lm = load_model(digit_model)
    prompts = [PromptFormat(lm.tokenizer, "alpaca").prompt_ids("What is 1 + 1?")]
    ((_, (free,), _, (free_done,)),) = generate_greedy(lm, prompts, batch_size=1, max_new_tokens=8, stop_strings=())
    assert not free_done and len(free.replace(" ", "")) >= 4  # the digit model never stops on its own
    stop = free.replace(" ", "")[1:3]  # two digits it writes: a stop string it will meet
    ((_, (cut,), _, (done,)),) = generate_greedy(lm, prompts, batch_size=1, max_new_tokens=8, stop_strings=(stop,))
    assert done and stop not in cut and free.startswith(cut)


# ---------------------------------------------------------------------------------------------- first hour


def test_without_the_eval_extra_del_eval_stops_before_any_work(digit_model, tmp_path, monkeypatch, capsys):
    import sys

    from del_plugin.evaluation.run.runner import evaluate

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if matplotlib were not installed
    out = tmp_path / "out"
    code = cli.main(["run", "--model", str(digit_model), "--benchmarks", "gsm8k", "--out", str(out)])
    assert code == 3
    err = capsys.readouterr().err
    assert "matplotlib" in err and "pip install 'del-plugin[eval]'" in err
    assert not out.exists()
    with pytest.raises(ImportError, match=r"del-plugin\[eval\]"):
        evaluate(digit_model, out_dir=out, benchmarks="gsm8k")
    assert not out.exists()


def test_a_failing_plot_never_leaves_a_running_report(digit_model, eval_file, tmp_path, monkeypatch):
    from del_plugin.evaluation.reports import plots
    from del_plugin.evaluation.run.runner import EvalSettings, evaluate

    def broken(*args, **kwargs):
        raise RuntimeError("no usable backend")

    monkeypatch.setattr(plots, "plot_place_accuracy", broken)
    out = tmp_path / "out"
    report = evaluate(digit_model, [eval_file], out, settings=EvalSettings(max_new_tokens=2, limit=2))
    on_disk = load_report(out)
    assert report["status"] == on_disk["status"] == "complete"
    assert "plots skipped: RuntimeError: no usable backend" in on_disk["warnings"]
    assert "no usable backend" in (out / "report.md").read_text()


def test_benchmark_reports_show_the_teacher_forced_digit_metrics(digit_model, tmp_path):
    from del_plugin.evaluation.compare.comparison import compare_reports
    from del_plugin.evaluation.run.runner import EvalSettings, evaluate

    settings = EvalSettings(max_new_tokens=2, limit=2)
    report = evaluate(digit_model, out_dir=tmp_path / "run", benchmarks="gsm8k,svamp", settings=settings)
    gsm8k, svamp = report["datasets"]
    assert gsm8k["teacher_forced"]["digits"] > 0 and svamp["teacher_forced"] is None  # SVAMP has no solutions
    tf = gsm8k["teacher_forced"]
    row = f"| GSM8K | {tf['digits']} | {100 * tf['digit_accuracy']:.1f}% | {tf['mean_entropy']:.3f} |"
    markdown = (tmp_path / "run" / "report.md").read_text()
    assert "### Teacher-forced digit metrics" in markdown and row in markdown
    assert "SVAMP: no solutions to score" in markdown and "| SVAMP |" not in markdown.split("### Teacher-forced")[1]
    assert "Per-place teacher-forced digit accuracy" in markdown
    # a second model's report, its GSM8K numbers written by hand: 6 of 8 digits right, mean entropy 0.25 nats
    other = json.loads(json.dumps(report)) | {"name": "other"}
    places = {"1": {"n": 4, "correct": 2, "accuracy": 0.5}, "0": {"n": 4, "correct": 4, "accuracy": 1.0}}
    other["datasets"][0]["teacher_forced"] = tf | {
        "digits": 8,
        "correct": 6,
        "digit_accuracy": 0.75,
        "mean_entropy": 0.25,
        "places": places,
    }
    written = compare_reports([report, other], tmp_path / "compare", ["base", "other"])
    comparison = written["markdown"].read_text().split("## The paper's benchmarks: teacher-forced digit metrics")[1]
    assert row.replace("| GSM8K |", "| base |") in comparison and "| other | 8 | 75.0% | 0.250 |" in comparison
    assert "| other | 50.0% | 100.0% |" in comparison  # per place: tens, units


AXOLOTL_CARD = """---
library_name: peft
---

[<img src="https://raw.githubusercontent.com/axolotl-ai-cloud/axolotl/main/image/axolotl-badge-web.png" />](x)
<details><summary>See axolotl config</summary>

axolotl version: `0.21.0`
```yaml
{first}
```

</details><br>
<details><summary>See axolotl config</summary>

axolotl version: `0.21.0`
```yaml
{second}
```

</details><br>

# out
"""


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        # a card written by the second training of one process holds both configs: the one for this folder wins
        ("output_dir: /elsewhere\ndatasets:\n- path: a.jsonl\n  type: chat_template", "{this}", "alpaca"),
        ("{this}", "output_dir: /elsewhere\ndatasets:\n- path: a.jsonl\n  type: chat_template", "alpaca"),
        ("datasets: []", "datasets:\n- path: a.jsonl\n  type: chat_template\nchat_template: chatml", "chat"),
    ],
)
def test_prompt_format_from_an_axolotl_model_card(first, second, expected, tmp_path):
    """Cards written as Axolotl 0.21 writes them (axolotl/train.py setup_model_card; the real thing is in
    test_prompt_format_from_a_real_axolotl_output_dir)."""
    from del_plugin.evaluation.run.axolotl_config import resolve_prompt_format

    this = f"output_dir: {tmp_path}\ndatasets:\n- path: train.jsonl\n  type: alpaca"
    (tmp_path / "README.md").write_text(
        AXOLOTL_CARD.format(first=first.replace("{this}", this), second=second.replace("{this}", this))
    )
    with_template = type("Tokenizer", (), {"chat_template": "{{ messages }}"})()
    prompt_format, source = resolve_prompt_format("auto", with_template, [tmp_path])
    assert prompt_format.kind == expected and f"{tmp_path}/README.md" in source
    prompt_format, source = resolve_prompt_format("chat", with_template, [tmp_path])
    assert (prompt_format.kind, source) == ("chat", "--prompt-format chat")


def test_an_axolotl_config_that_decides_nothing_falls_back_to_the_tokenizer_and_says_so(tmp_path, caplog):
    from del_plugin.evaluation.run.axolotl_config import resolve_prompt_format

    mixed = f"output_dir: {tmp_path}\ndatasets:\n- path: a\n  type: alpaca\n- path: b\n  type: chat_template"
    (tmp_path / "README.md").write_text(AXOLOTL_CARD.format(first=mixed, second=mixed))
    with_template = type("Tokenizer", (), {"chat_template": "{{ messages }}"})()
    with caplog.at_level("WARNING", logger="del_plugin.evaluation.run.axolotl_config"):
        prompt_format, source = resolve_prompt_format("auto", with_template, [tmp_path, None])
    assert prompt_format.kind == "chat"
    assert source == (
        f"the Axolotl config in {tmp_path}/README.md decides nothing: datasets[].type alpaca, chat_template is not "
        "one of alpaca, chat_template or a format of its own (the same for every dataset); auto: the tokenizer has "
        "a chat template"
    )
    assert [r.getMessage() for r in caplog.records] == [
        f"prompt format chat, which may not be the one the model was trained with: {source}"
    ]
    caplog.clear()
    prompt_format, source = resolve_prompt_format("auto", object(), [tmp_path / "none"])
    assert (prompt_format.kind, source) == ("alpaca", "auto: the tokenizer has no chat template")
    assert caplog.records == []  # no config: nothing was overruled


@pytest.mark.axolotl
@pytest.mark.parametrize(
    "example, tokenizer_name",
    [("llama-3.1-8b/qlora-24gb.yml", "llama-bpe"), ("deepseek-math-7b-instruct/qlora-24gb.yml", "deepseek-llm")],
)
def test_auto_reads_an_axolotl_format_of_its_own_and_prompts_as_axolotl_trained(tmp_path, example, tokenizer_name):
    """The examples that write their own `type:` (Llama-3.1's and DeepSeek-Math's chat formats): the prompt del-eval
    sends is, token for token, the prompt part of the row Axolotl's own user-defined strategy tokenizes."""
    import yaml
    from axolotl.prompt_strategies import load as load_strategy
    from axolotl.utils.dict import DictDefault

    from del_plugin.evaluation.run.axolotl_config import resolve_prompt_format
    from tools.assets import load_tokenizer

    shipped = yaml.safe_load((REPO / "examples" / example).read_text(encoding="utf-8"))
    saved = yaml.safe_dump({**shipped, "output_dir": str(tmp_path)}, sort_keys=False)
    (tmp_path / "README.md").write_text(AXOLOTL_CARD.format(first="datasets: []", second=saved))
    tokenizer = load_tokenizer(tokenizer_name)
    custom = shipped["datasets"][0]["type"]

    prompt_format, source = resolve_prompt_format("auto", tokenizer, [tmp_path])
    assert prompt_format.kind == "custom"
    assert source == (
        f"the Axolotl config in {tmp_path}/README.md (datasets[].type: a format of its own, no_input_format "
        f"{custom['no_input_format']!r})"
    )
    cfg = DictDefault({"train_on_inputs": False, "sequence_len": shipped["sequence_len"]})
    strategy = load_strategy("user_defined", tokenizer, cfg, custom)
    for row in gsm8k_rows(3):
        tokenized = strategy.tokenize_prompt({"instruction": row["question"], "output": row["answer"]})
        n_prompt = sum(label == -100 for label in tokenized["labels"])
        assert prompt_format.prompt_ids(row["question"]) == tokenized["input_ids"][:n_prompt]


@pytest.mark.e2e
@pytest.mark.axolotl
def test_prompt_format_from_a_real_axolotl_output_dir(tmp_path):
    """A real Axolotl LoRA run (tiny model, 2 steps, type: alpaca); its tokenizer then gets a chat template, so that
    only the saved config can make auto pick alpaca."""
    from del_plugin.evaluation.run.runner import EvalSettings, evaluate
    from tools.assets import tiny_model_dir
    from tools.cpu import alpaca_lora_config, write_alpaca_jsonl

    from axolotl_helpers import run_axolotl  # sets AXOLOTL_DO_NOT_TRACK and the offline switches
    from gsm8k_rows import gsm8k_rows

    data = write_alpaca_jsonl(tmp_path / "train.jsonl", gsm8k_rows(8))
    config = alpaca_lora_config(
        tiny_model_dir("llama-spm"),
        data,
        tmp_path,
        sequence_len=256,
        micro_batch_size=2,
        max_steps=2,
        learning_rate=1e-3,
    )
    run_axolotl(config)
    out = tmp_path / "out"
    assert "See axolotl config" in (out / "README.md").read_text()
    tokenizer_config = json.loads((out / "tokenizer_config.json").read_text())
    tokenizer_config["chat_template"] = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))

    eval_file = tmp_path / "eval.jsonl"
    eval_file.write_text(json.dumps({"question": "What is 2 + 3?", "answer": "The answer is 5"}) + "\n")
    report = evaluate(out, [eval_file], tmp_path / "eval", settings=EvalSettings(max_new_tokens=2))
    assert report["model"]["adapter"] == str(out)
    assert report["model"]["prompt_format"] == "alpaca"
    assert report["model"]["prompt_format_source"] == (
        f"the Axolotl config in {out}/README.md (datasets[].type: alpaca)"
    )
