"""Fuzzing what takes outside input.

* The number-place rules (``number_places``, ``next_token_places``) against the slow per-token oracle
  ``oracle_places`` (tests/helpers/places_oracle.py, written from number_places' docstring), over random batches of
  token streams with every kind of token a vocabulary knows: bare digits, space-marked digits of two families, '.',
  leading-point tokens ('*.'), other tokens, -100, ids outside the vocabulary, and packing boundaries in
  ``position_ids``. The vocabulary itself is random too: its digit, point and other ids are a random permutation.
  Only the public functions are called, so any implementation of them is held to the same rules.
* The digit losses (``digit_entropy_loss`` and every digit criterion of ``digit_criterion_loss``) on float16,
  bfloat16 and float32 logits of +-1e4 (one sign, mixed signs, all equal), on empty and all-masked batches and on
  a 1,000-digit number and a 6,000-decimal one: finite values and finite gradients, exactly 0 where there is no
  digit.
* The commands that read files (``del-eval score`` of predictions and of lm-eval samples, ``del-eval compare`` of
  hand-edited reports and generations, ``del-check``) on random JSON, JSONL and YAML shapes and bytes: only the
  documented exit statuses, never a traceback.
"""

from __future__ import annotations

import json
import random

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from del_plugin.core import (
    DigitVocab,
    PlaceWeighting,
    digit_criterion_loss,
    digit_entropy_loss,
    digit_targets_from_hidden,
    next_token_places,
    number_places,
    shift_to_next_token,
)
from del_plugin.core.criteria import DIGIT_CRITERIA, dist2_place_weights
from del_plugin.core.places import NOT_A_DIGIT, place_weights

from fake_vocab import DIGITS, SPACE_MARKED, VOCAB, V, encode
from places_oracle import oracle_places

FUZZ = settings(max_examples=150, deadline=None)


# ---------------------------------------------------------------------------------------------- places
class RandomVocab:
    """A vocabulary of 64 ids in random order: bare digits, two space-marked families ('▁', 'Ġ'), '.', two
    leading-point tokens, and 19 other tokens. ``ids[ch]`` lists the ids that the oracle reads as ``ch``: a digit
    of ``DIGITS``, a space-marked digit of ``SPACE_MARKED`` (either family), '.', '@' (a leading point) or 'a' (any
    other token); '#' stands for -100 and for ids outside the vocabulary."""

    SIZE = 64

    def __init__(self, seed: int):
        order = list(range(self.SIZE))
        random.Random(seed).shuffle(order)
        take = iter(order)
        families = [tuple(next(take) for _ in range(10)) for _ in range(3)]
        point, leading = next(take), (next(take), next(take))
        others = list(take)
        self.vocab = DigitVocab(
            family_token_ids=tuple(families),
            family_markers=("", "▁", "Ġ"),
            decimal_point_id=point,
            leading_point_ids=tuple(sorted(leading)),
            name=f"random-{seed}",
        )
        self.ids: dict[str, list[int]] = {ch: [families[0][d]] for d, ch in enumerate(DIGITS)}
        for d, ch in enumerate(SPACE_MARKED):
            self.ids[ch] = [families[1][d], families[2][d]]
        self.ids["."] = [point]
        self.ids["@"] = list(leading)
        self.ids["a"] = others
        # -100, other negative ids, and ids past the end of the vocabulary's lookup tables
        self.ids["#"] = [-100, -100, -1, -7, self.SIZE, self.SIZE + 5, 10**7]


# The oracle's alphabet; digits and points are frequent so that long, odd numbers come up.
CHARS = list(DIGITS) * 3 + list(SPACE_MARKED) + [".", ".", ".", "@", "a", "a", "#", "#"]


@st.composite
def token_batches(draw):
    """(vocab, text rows, id rows, position_ids rows or None): a [B, T] batch with its oracle texts."""
    vocab = RandomVocab(draw(st.integers(0, 2**16)))
    batch = draw(st.integers(1, 3))
    length = draw(st.integers(1, 40))
    texts, rows, positions = [], [], []
    packed = draw(st.booleans())
    for _ in range(batch):
        text = draw(st.lists(st.sampled_from(CHARS), min_size=length, max_size=length))
        texts.append(text)
        rows.append([draw(st.sampled_from(vocab.ids[ch])) for ch in text])
        # packed sequences: position ids restart (at 0 or anywhere) at random places; a segment may also start
        # exactly where the previous one would have continued, which by the rule is no boundary
        pos, p = [], draw(st.integers(0, 5))
        for _ in range(length):
            pos.append(p)
            p = draw(st.sampled_from([p + 1] * 4 + [0, draw(st.integers(0, 50))])) if packed else p + 1
        positions.append(pos)
    ids = torch.tensor(rows, dtype=torch.long)
    position_ids = torch.tensor(positions, dtype=torch.long) if packed else None
    return vocab, texts, ids, position_ids


def oracle(text: list[str], positions: list[int] | None) -> list[int]:
    """The per-token oracle on one row, as number_places' output (NOT_A_DIGIT for None)."""
    starts = set()
    if positions is not None:
        starts = {i for i in range(1, len(positions)) if positions[i] != positions[i - 1] + 1}
    return [NOT_A_DIGIT if p is None else p for p in oracle_places(text, starts)]


@FUZZ
@given(token_batches())
def test_number_places_match_the_oracle(case):
    vocab, texts, ids, position_ids = case
    places = number_places(ids, vocab.vocab, position_ids)
    assert places.dtype == torch.int32 and places.shape == ids.shape
    for b, text in enumerate(texts):
        expected = oracle(text, None if position_ids is None else position_ids[b].tolist())
        assert places[b].tolist() == expected, ("".join(text), ids[b].tolist())
        # a single row [T] reads the same as that row of the batch
        one = number_places(ids[b], vocab.vocab, None if position_ids is None else position_ids[b])
        assert one.tolist() == expected


@FUZZ
@given(token_batches(), st.randoms(use_true_random=False))
def test_next_token_places_are_the_oracle_shifted_and_masked(case, rnd):
    vocab, texts, ids, position_ids = case
    # shift_labels as a collator provides them: the shifted labels, with some more targets masked
    shift_labels = shift_to_next_token(ids, -100)
    extra = torch.tensor([[rnd.random() < 0.2 for _ in range(ids.shape[1])] for _ in range(ids.shape[0])])
    shift_labels = torch.where(extra, -100, shift_labels)
    for given_shift in (None, shift_labels):
        aligned = next_token_places(ids, vocab.vocab, position_ids, shift_labels=given_shift)
        assert aligned.dtype == torch.int32 and aligned.shape == ids.shape
        for b, text in enumerate(texts):
            expected = oracle(text, None if position_ids is None else position_ids[b].tolist())[1:] + [NOT_A_DIGIT]
            if given_shift is not None:
                expected = [NOT_A_DIGIT if m == -100 else e for e, m in zip(expected, given_shift[b].tolist())]
            assert aligned[b].tolist() == expected, ("".join(text), ids[b].tolist())


@pytest.mark.parametrize("shape", [(0,), (0, 5), (3, 0), (0, 0)])
def test_number_places_on_empty_labels(shape):
    labels = torch.zeros(shape, dtype=torch.long)
    positions = torch.zeros(shape, dtype=torch.long)
    for pos in (None, positions):
        places = number_places(labels, VOCAB, pos)
        assert places.shape == labels.shape and places.dtype == torch.int32
        assert next_token_places(labels, VOCAB, pos).shape == labels.shape


# ---------------------------------------------------------------------------------------------- losses
# One loss function per digit criterion: DEL through its logits entry point, and every criterion through
# digit_criterion_loss on digit logits read from hidden states (``path="hidden"``: the logits themselves as the
# hidden states of an identity head, so that the training path sees exactly these values).
LOSSES = [("digit_entropy_loss", None)] + [("digit_criterion_loss", c) for c in DIGIT_CRITERIA]
LOSS_IDS = ["digit_entropy_loss"] + [f"criterion={c}" for c in DIGIT_CRITERIA]
DTYPES = [torch.float16, torch.bfloat16, torch.float32]
PATHS = ("logits", "hidden")


def loss_of(which, logits, labels, places, reduction="mean", path="logits", **kwargs):
    name, criterion = which
    if name == "digit_entropy_loss":
        kwargs.pop("dist2_tau", None)
        return digit_entropy_loss(logits, labels, places, VOCAB, reduction=reduction, **kwargs)
    if criterion != "dist2":
        kwargs.pop("dist2_tau", None)
    if path == "hidden":
        identity = torch.eye(logits.shape[-1], dtype=logits.dtype)
        digits = digit_targets_from_hidden(logits, identity, labels, VOCAB)
    else:
        from del_plugin.core import digit_targets_from_logits

        digits = digit_targets_from_logits(logits, labels, VOCAB)
    return digit_criterion_loss(criterion, digits, places, reduction=reduction, **kwargs)


def extreme_logits(pattern: str, labels: torch.Tensor, dtype, seed: int = 0) -> torch.Tensor:
    """[*labels.shape, V] logits of +-1e4 laid out by ``pattern``."""
    shape = (*labels.shape, V)
    big = 1e4
    if pattern == "all +1e4":
        z = torch.full(shape, big)
    elif pattern == "all -1e4":
        z = torch.full(shape, -big)
    elif pattern == "all equal":
        z = torch.full(shape, 3.0)
    elif pattern == "random signs":
        g = torch.Generator().manual_seed(seed)
        z = torch.where(torch.rand(shape, generator=g) < 0.5, -big, big)
    elif pattern in ("target +1e4, rest -1e4", "target -1e4, rest +1e4"):
        sign = 1.0 if pattern.startswith("target +") else -1.0
        z = torch.full(shape, -sign * big)
        safe = labels.clamp(0, V - 1).unsqueeze(-1)
        z.scatter_(-1, safe, sign * big)
    elif pattern == "wrong digit +1e4":
        # the most confident wrong answer: the digit after the target gets +1e4, everything else -1e4
        z = torch.full(shape, -big)
        digit, family = VOCAB.classify(labels)
        fam = VOCAB.family_ids(labels.device)[family.clamp(min=0)]
        wrong = fam.gather(-1, ((digit.clamp(min=0) + 1) % 10).unsqueeze(-1))
        z.scatter_(-1, wrong, big)
    else:
        raise ValueError(pattern)
    return z.to(dtype)


PATTERNS = [
    "all +1e4",
    "all -1e4",
    "all equal",
    "random signs",
    "target +1e4, rest -1e4",
    "target -1e4, rest +1e4",
    "wrong digit +1e4",
]


def value_and_grad(which, logits, labels, places, reduction, path, **kwargs):
    leaf = logits.detach().clone().requires_grad_()
    loss = loss_of(which, leaf, labels, places, reduction=reduction, path=path, **kwargs)
    loss.sum().backward()
    assert leaf.grad is not None
    return loss.detach(), leaf.grad


def check_finite(which, logits, labels, places, expect_zero=False, **kwargs):
    """Finite values and gradients for the "mean", "sum" and "none" reductions, from logits and hidden states; 0
    everywhere if ``expect_zero``.

    The "mean" gradient must be finite in every dtype. A "sum" gradient can exceed float16's range (65504) in
    principle (a 1,000-digit number's leading digit weighs 2000, and BCE on a logit of 1e4 is 1e4): there it
    must be the float32 gradient rounded to float16 (inf exactly where that overflows), and finite in float32
    and bfloat16.
    """
    per_position = loss_of(which, logits, labels, places, reduction="none", **kwargs)
    assert per_position.dtype == torch.float32 and per_position.shape == labels.shape
    assert torch.isfinite(per_position).all() and (per_position >= -1e-4).all()  # non-negative terms
    assert not per_position[places == NOT_A_DIGIT].any()  # exactly 0 off the digits
    if expect_zero:
        assert not per_position.any()
    for path in PATHS if which[0] == "digit_criterion_loss" else ("logits",):
        for reduction in ("mean", "sum"):
            loss, grad = value_and_grad(which, logits, labels, places, reduction, path, **kwargs)
            assert loss.dtype == torch.float32 and torch.isfinite(loss), (reduction, loss)
            assert grad.dtype == logits.dtype and grad.shape == logits.shape
            if expect_zero:
                assert loss.item() == 0.0 and not grad.any()
            if reduction == "mean" or logits.dtype != torch.float16:
                assert torch.isfinite(grad).all(), (reduction, path, grad.float().abs().max())
                continue
            _, ref = value_and_grad(which, logits.float(), labels, places, reduction, path, **kwargs)
            assert torch.isfinite(ref).all()
            assert torch.equal(grad, ref.to(torch.float16)), (path, (grad.float() - ref).abs().max())


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("which", LOSSES, ids=LOSS_IDS)
def test_extreme_logits_give_finite_losses_and_gradients(which, dtype, pattern):
    labels = torch.stack([encode("x 99999.99999 + ⁴2 = 7"), encode("12@5 and 3.1.4 ⁰0 a.b.")])
    places = number_places(labels, VOCAB)
    logits = extreme_logits(pattern, labels, dtype, seed=len(pattern))
    check_finite(which, logits, labels, places)
    if which[1] == "dist2":
        check_finite(which, logits, labels, places, dist2_tau=0.01)  # a sharp target: -(y-k)^2 / tau = -8100


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sampled_from([-1e4, -30.0, -1.0, 0.0, 0.5, 1.0, 30.0, 1e4]), min_size=10, max_size=10),
    st.sampled_from(DTYPES),
    st.sampled_from(LOSSES),
    st.sampled_from(list("0123456789⁰⁵⁹")),
)
def test_any_mix_of_extreme_digit_logits_is_finite(digit_logits, dtype, which, target):
    # "7<target>" so that the target has a place weight of 2 (units) after a tens digit
    labels = encode("7" + target)
    places = number_places(labels, VOCAB)
    logits = torch.zeros(*labels.shape, V)
    family = 1 if target in SPACE_MARKED else 0
    logits[0, list(VOCAB.family_token_ids[family])] = torch.tensor(digit_logits)
    logits[1, list(VOCAB.family_token_ids[family])] = torch.tensor(digit_logits[::-1])
    check_finite(which, logits.to(dtype), labels, places)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("which", LOSSES, ids=LOSS_IDS)
@pytest.mark.parametrize("shape", [(0,), (4, 0), (0, 6)], ids=["[0, V]", "[B, 0, V]", "[0, T, V]"])
def test_empty_batches_give_zero(which, dtype, shape):
    labels = torch.zeros(shape, dtype=torch.long)
    places = number_places(labels, VOCAB)
    logits = torch.zeros(*shape, V, dtype=dtype)
    check_finite(which, logits, labels, places, expect_zero=True)


@pytest.mark.parametrize("pattern", ["all +1e4", "random signs"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("which", LOSSES, ids=LOSS_IDS)
def test_all_masked_batches_give_zero(which, dtype, pattern):
    labels = torch.full((3, 7), -100)
    places = number_places(labels, VOCAB)
    assert (places == NOT_A_DIGIT).all()
    check_finite(which, extreme_logits(pattern, labels, dtype), labels, places, expect_zero=True)
    # masked labels that would be digits: places given by the caller for them are ignored too
    digits = encode("1234567")[None].expand(3, 7)
    masked_places = number_places(digits, VOCAB)
    check_finite(which, extreme_logits(pattern, labels, dtype), labels, masked_places, expect_zero=True)


LONG_INTEGER = "1" * 1000 + ".5"  # places 999 .. 0, then -1
LONG_DECIMAL = "0." + "1" * 6000  # places 0, then -1 .. -6000


def test_place_weights_of_very_long_numbers_stay_finite_and_non_negative():
    places = number_places(encode(LONG_INTEGER), VOCAB)
    assert places[0].item() == 999 and places[-1].item() == -1
    weights = place_weights(places)
    assert weights[0].item() == 2000.0  # integer_slope * (999 + 1)
    assert weights[-1].item() == pytest.approx(1.02**-2, rel=1e-6)
    assert torch.isfinite(weights).all() and (weights >= 0).all()

    places = number_places(encode(LONG_DECIMAL), VOCAB)
    assert places[-1].item() == -6000
    weights = place_weights(places)
    decimals = weights[2:]
    assert torch.isfinite(weights).all() and (weights >= 0).all()
    # 1.02 ** (i - 1) falls towards 0 and underflows float32 (1.02 ** -6001 ~ 3e-52) without turning negative or NaN
    assert (decimals[1:] <= decimals[:-1]).all()
    assert decimals[-1].item() == 0.0 and decimals[0].item() == pytest.approx(1.02**-2, rel=1e-6)
    # DIST2 reads the 6,000 decimals as an integer of their own: weights 6000 .. 1
    dist2 = dist2_place_weights(places)
    assert dist2[2].item() == 6000 and dist2[-1].item() == 1 and torch.isfinite(dist2).all()
    # the steepest decimal base allowed underflows sooner; still 0, not NaN
    steep = place_weights(places, PlaceWeighting(decimal_base=10.0))
    assert torch.isfinite(steep).all() and (steep >= 0).all()


@pytest.mark.parametrize("text", [LONG_INTEGER, LONG_DECIMAL], ids=["1000-digit integer", "6000 decimals"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("which", LOSSES, ids=LOSS_IDS)
def test_very_long_numbers_give_finite_losses_and_gradients(which, dtype, text):
    labels = encode(text)
    places = number_places(labels, VOCAB)
    # the worst case for the integer: every digit confidently wrong at +1e4, with weights up to 2000
    for pattern in ("random signs", "wrong digit +1e4") if text == LONG_INTEGER else ("random signs",):
        check_finite(which, extreme_logits(pattern, labels, dtype), labels, places)


# ---------------------------------------------------------------------------------------------- input files
# Random JSON, JSONL and YAML shapes fed to the commands that read files (in-process, as the console scripts call
# them): only the documented exit statuses, never an exception (a traceback) for an input.

SHAPES = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
    | st.sampled_from(["The answer is 18", "print(6 * 7)", "\\boxed{5}", "\ud800", "", "0"])
)
JSON_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _object(keys: list[str]):
    """Objects with some of ``keys`` (random values, or well-formed ones) and random others."""
    return st.fixed_dictionaries({}, optional={key: JSON_VALUES for key in keys}) | st.dictionaries(
        st.sampled_from(keys) | st.text(max_size=6), JSON_VALUES, max_size=5
    )


def _line(value) -> bytes:
    try:
        return json.dumps(value).encode()
    except ValueError:  # a float NaN is JSON's NaN; nothing else fails, but keep the line raw then
        return repr(value).encode("utf-8", "replace")


RAW_LINES = st.binary(max_size=40) | st.sampled_from([b"", b"{", b"[1,", b'{"id": 1e999}', b"\xff\xfe", b"null"])


def _main(module, argv: list[str], capsys) -> int:
    status = module.main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return status


@SHAPES
@given(st.lists(_object(["id", "output"]).map(_line) | RAW_LINES, min_size=1, max_size=6))
def test_score_reads_random_predictions_with_a_documented_status(tmp_path_factory, capsys, lines):
    from del_plugin.evaluation import cli
    from del_plugin.evaluation.errors import EXIT_OK, EXIT_UNUSABLE_INPUT

    folder = tmp_path_factory.mktemp("score")
    (folder / "predictions.jsonl").write_bytes(b"\n".join(lines))
    argv = ["score", "--benchmark", "gsm8k", "--predictions", folder / "predictions.jsonl", "--out", folder / "out"]
    assert _main(cli, argv, capsys) in (EXIT_OK, EXIT_UNUSABLE_INPUT)


_DOC = st.fixed_dictionaries({"id": st.integers(-1, 3) | JSON_VALUES, "question": JSON_VALUES}) | JSON_VALUES
_SAMPLE = st.fixed_dictionaries(
    {},
    optional={
        "doc": _DOC,
        "resps": st.just([["The answer is 18"]]) | JSON_VALUES,
        "arguments": JSON_VALUES,
        "acc": JSON_VALUES,
    },
)
_RESULTS = (
    st.none()
    | JSON_VALUES
    | st.fixed_dictionaries(
        {},
        optional={
            "config": _object(["model", "model_args"]),
            "configs": st.dictionaries(st.just("del_gsm8k"), _object(["metadata"])),
        },
    )
)


@SHAPES
@given(st.lists(_SAMPLE.map(_line) | RAW_LINES, max_size=4), _RESULTS)
def test_score_reads_random_lm_eval_samples_with_a_documented_status(tmp_path_factory, capsys, lines, results):
    from del_plugin.evaluation import cli
    from del_plugin.evaluation.errors import EXIT_OK, EXIT_UNUSABLE_INPUT

    folder = tmp_path_factory.mktemp("samples")
    run = folder / "run" / "model"
    run.mkdir(parents=True)
    date = "2026-01-01T00-00-00.000000"
    (run / f"samples_del_gsm8k_{date}.jsonl").write_bytes(b"\n".join(lines))
    if results is not None:
        (run / f"results_{date}.json").write_bytes(_line(results))
    argv = ["score", "--lm-eval-samples", folder / "run", "--out", folder / "out"]
    assert _main(cli, argv, capsys) in (EXIT_OK, EXIT_UNUSABLE_INPUT)


_YAML_TOKENS = st.sampled_from(
    [
        "base_model: ",
        "plugins:",
        "\n  - ",
        "seed: ",
        "&a ",
        "*a",
        "[",
        "]",
        "{",
        "}",
        ": ",
        ", ",
        "\n",
        "- ",
        "0.1",
        "x",
        "'",
        '"',
        "!!int ",
        "!!python/object ",
        "<<: ",
        "?",
        "|",
        "\t",
        "%YAML 1.1\n",
        "---\n",
        "9" * 40,
    ]
)
# no del_ key and no plugins line naming DEL: del-check then stops before Axolotl's validation (seconds a config),
# which catches whatever it raises; what is fuzzed is the reading up to it
_CONFIGS = _object(["base_model", "tokenizer_config", "plugins", "datasets", "adapter", "fsdp", "deepspeed"]).filter(
    lambda config: not any(str(key).startswith("del_") for key in config)
)


@SHAPES
@given(
    _CONFIGS.map(lambda c: yaml.safe_dump(c, allow_unicode=True).encode("utf-8", "replace"))
    | st.lists(_YAML_TOKENS, max_size=20).map(lambda t: "".join(t).encode())
    | st.binary(max_size=30)
)
def test_del_check_reads_random_yaml_with_a_documented_status(tmp_path_factory, capsys, text):
    from del_plugin.axolotl import check

    config = tmp_path_factory.mktemp("check") / "config.yml"
    config.write_bytes(text)
    assert _main(check, [config], capsys) in (
        check.PASSED,
        check.CHECK_FAILED,
        check.PARTLY_CHECKED,
        check.UNUSABLE_INPUT,
    )


# del-eval compare: two runs del-eval score wrote (GSM8K's first 4 problems), then their generations.jsonl replaced
# by random records and their report.json hand-edited at a random key; compare answers with 0 (it could pair
# them), 2 or 3 (one line, nothing written), never a traceback
_RECORD = st.fixed_dictionaries(
    {"dataset": st.just("gsm8k") | JSON_VALUES, "id": st.integers(0, 3) | st.sampled_from(["1", " 2 "]) | JSON_VALUES},
    optional={
        "correct": st.booleans() | JSON_VALUES,
        "math_verify_correct": st.booleans() | st.none() | JSON_VALUES,
        "abs_error": st.floats(0, 1e6) | JSON_VALUES,
        "prediction": st.sampled_from(["18", "-3.5"]) | JSON_VALUES,
        "reference": st.sampled_from(["18", "4"]) | JSON_VALUES,
    },
)
_REPORT_KEYS = [
    ("name",),
    ("datasets",),
    ("datasets", 0),
    ("datasets", 0, "name"),
    ("datasets", 0, "benchmark"),
    ("datasets", 0, "generation"),
    ("datasets", 0, "generation", "accuracy"),
    ("datasets", 0, "generation", "mae"),
    ("datasets", 0, "coverage"),
    ("datasets", 0, "source"),
    ("datasets", 0, "source", "sha256"),
    ("files",),
    ("files", "generations"),
    ("overall",),
    ("overall", "generation"),
    ("macc",),
    ("schema",),
]


def _edited(report: dict, key: tuple, value) -> dict:
    target = report
    for part in key[:-1]:
        if not isinstance(target, (dict, list)) or (isinstance(target, list) and len(target) <= part):
            return report
        target = target[part]
    if isinstance(target, dict) or (isinstance(target, list) and len(target) > key[-1]):
        target[key[-1]] = value
    return report


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(_RECORD.map(_line) | RAW_LINES, max_size=5),
    st.sampled_from(_REPORT_KEYS),
    JSON_VALUES,
    st.sampled_from(["paper", "math-verify"]),
)
def test_compare_reads_random_reports_with_a_documented_status(tmp_path_factory, capsys, lines, key, value, scorer):
    from del_plugin.evaluation import cli, score_predictions
    from del_plugin.evaluation.errors import EXIT_OK, EXIT_UNUSABLE_INPUT, EXIT_USAGE

    folder = tmp_path_factory.mktemp("compare")
    for name, answer in (("base", "18"), ("cand", "4")):
        outputs = [{"id": i, "output": f"The answer is {answer}"} for i in range(4)]
        score_predictions("gsm8k", outputs, folder / name, name=name)
    (folder / "cand" / "generations.jsonl").write_bytes(b"\n".join(lines))
    report = json.loads((folder / "cand" / "report.json").read_text())
    text = json.dumps(_edited(report, key, value))  # NaN and Infinity go in as JSON's extensions
    (folder / "cand" / "report.json").write_text(text)
    out = folder / "out"
    argv = ["compare", folder / "base", folder / "cand", "--out", out, "--scorer", scorer]
    status = _main(cli, argv, capsys)
    assert status in (EXIT_OK, EXIT_USAGE, EXIT_UNUSABLE_INPUT)
    if status != EXIT_OK:
        assert not out.exists()
    else:  # strict JSON: no NaN or Infinity token in what compare wrote
        json.loads((out / "comparison.json").read_text(), parse_constant=pytest.fail)
