"""docs/hosts.md's custom training loop, run as written on the tiny model: it trains, its loss parts are the plain
cross-entropy and DEL's mean over the step's digits, and its gradient does not depend on the micro-batching."""

from __future__ import annotations

import contextlib
import io
import math
import re

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from del_plugin.core import digit_entropy_loss, shift_to_next_token
from del_plugin.hf.collator import TARGET_PLACES_KEY
from tools.assets import tiny_model_dir

from gsm8k_rows import gsm8k_rows
from repo import REPO

DOC = REPO / "docs" / "hosts.md"
MARKER = "<!-- run by tests/hf/test_hosts_doc.py"


def custom_loop_block() -> str:
    text = DOC.read_text(encoding="utf-8")
    assert text.count(MARKER) == 1
    match = re.search(r"```python\n(.*?)```", text[text.index(MARKER) :], re.DOTALL)
    assert match, "no python block after the marker"
    return match.group(1)


def tokenize(tokenizer, row: dict) -> dict:
    prompt = tokenizer(f"Question: {row['question']}\nAnswer:")["input_ids"]
    target = tokenizer(" " + row["answer"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return {"input_ids": prompt + target, "labels": [-100] * len(prompt) + target}


@pytest.fixture(scope="module")
def loop():
    model_dir = str(tiny_model_dir("llama-spm"))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    # four answers with very different numbers of digits, so that per-micro-batch means would differ
    rows = sorted(gsm8k_rows(40), key=lambda r: sum(ch.isdigit() for ch in r["answer"]))
    features = [tokenize(tokenizer, rows[i]) for i in (0, 13, 26, 39)]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    namespace = {"model": model, "tokenizer": tokenizer, "features": features, "micro_batch_size": 2, "grad_accum": 2}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(custom_loop_block(), str(DOC), "exec"), namespace)  # noqa: S102 - the documented code itself
    namespace["before"], namespace["printed"] = before, printed.getvalue()
    return namespace


def test_the_documented_loop_trains(loop):
    model, before = loop["model"], loop["before"]
    changed = [n for n, p in model.named_parameters() if not torch.equal(p, before[n])]
    assert len(changed) == len(before)  # one optimizer step over the four rows moved every weight
    (line,) = loop["printed"].splitlines()
    loss, ce, del_term = map(float, re.fullmatch(r"loss (\S+) = ce (\S+) \+ del (\S+)", line).groups())
    assert ce > 0 and del_term > 0 and loss == pytest.approx(ce + del_term, abs=2e-4)


def gradients(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def test_gradient_and_parts_do_not_depend_on_micro_batching(loop):
    model, collate, backward_step, alpha = loop["model"], loop["collate"], loop["backward_step"], loop["alpha"]
    features = loop["features"]
    model.zero_grad()
    one_by_four = backward_step([collate(features)])
    grads_one_by_four = gradients(model)
    model.zero_grad()
    four_by_one = backward_step([collate([f]) for f in features])
    grads_four_by_one = gradients(model)
    model.zero_grad()
    assert grads_one_by_four.keys() == grads_four_by_one.keys() and len(grads_one_by_four) > 0
    for name in grads_one_by_four:
        torch.testing.assert_close(grads_four_by_one[name], grads_one_by_four[name], rtol=1e-4, atol=1e-6, msg=name)
    assert four_by_one == pytest.approx(one_by_four, rel=1e-5)

    # the parts, recomputed from the full logits: the step's token-mean CE and alpha * DEL's mean over its digits
    batch = collate(features)
    places = batch.pop(TARGET_PLACES_KEY)
    with torch.no_grad():
        outputs = model(**batch)
    targets = shift_to_next_token(batch["labels"], -100)
    del_mean = digit_entropy_loss(outputs.logits, targets, places, loop["vocab"], alpha=alpha)
    assert one_by_four["ce"] == pytest.approx(outputs.loss.item(), rel=1e-5)
    assert one_by_four["del"] == pytest.approx(del_mean.item(), rel=1e-5)
    assert math.isfinite(one_by_four["del"]) and one_by_four["del"] > 0


def pins(lock: str) -> dict[str, str]:
    lines = (REPO / lock).read_text(encoding="utf-8").splitlines()
    return dict(line.split("==") for line in (ln.split("#")[0].strip() for ln in lines) if "==" in line)


def test_the_versions_tested_are_the_lock_files():
    """docs/hosts.md's table of the test lanes names the versions their lock files install."""
    text = DOC.read_text(encoding="utf-8")
    table = text[text.index("<!-- the versions of requirements.lock") :].split("\n\n")[0]
    rows = {
        cells[0]: cells for cells in ([c.strip() for c in ln.strip("|").split("|")] for ln in table.splitlines()[1:])
    }
    header = rows.pop("lane")
    for lane, lock in (
        ("main (`requirements.lock`)", "requirements.lock"),
        ("newest hosts (`requirements-latest.lock`)", "requirements-latest.lock"),
        ("LLaMA-Factory (`requirements-llamafactory.lock`)", "requirements-llamafactory.lock"),
    ):
        pinned = pins(lock)
        row = dict(zip(header, rows[lane]))
        for package, column in (
            ("transformers", "transformers"),
            ("trl", "TRL"),
            ("accelerate", "accelerate"),
            ("peft", "peft"),
            ("axolotl", "Axolotl"),
            ("llamafactory", "LLaMA-Factory"),
        ):
            assert row[column] == pinned.get(package, "none"), (lane, package)
    main = pins("requirements.lock")  # the other lanes install neither: every lane runs these
    assert f"torch {main['torch']} and Liger-Kernel {main['liger_kernel']}" in text
