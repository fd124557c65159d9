"""The README's standalone example, run as written on a bf16 model whose logits it casts to float: both ways of
reading the digits give the same loss and the same gradients."""

from __future__ import annotations

import re

import pytest
import torch

from repo import REPO

README = REPO / "README.md"


def standalone_example() -> str:
    text = README.read_text(encoding="utf-8")
    marker = text.index("<!-- standalone-example:")
    match = re.compile(r"```python\n(.*?)```", re.S).search(text, marker)
    assert match, "the README's standalone example is missing"
    return match.group(1)


def gsm8k_features(tokenizer, rows: int = 2) -> list[dict]:
    """GSM8K problems as features: the question (masked in the labels), then the solution."""
    from gsm8k_rows import gsm8k_rows

    features = []
    for row in gsm8k_rows(rows):
        prompt = tokenizer(row["question"] + "\n")["input_ids"]
        answer = tokenizer(row["answer"], add_special_tokens=False)["input_ids"]
        features.append({"input_ids": prompt + answer, "labels": [-100] * len(prompt) + answer})
    return features


def run_standalone_example(tokenizer, model, features) -> dict:
    """The README's block run as written, with the names it expects; its variables afterwards."""
    from transformers import DataCollatorForSeq2Seq

    scope = {
        "tokenizer": tokenizer,
        "model": model,
        "features": features,
        "DataCollatorForSeq2Seq": DataCollatorForSeq2Seq,
    }
    exec(compile(standalone_example(), "README.md", "exec"), scope)
    return scope


def test_readme_standalone_example_runs_on_a_bf16_model():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tools.assets import tiny_model_dir

    model_dir = tiny_model_dir("llama-spm")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    features = gsm8k_features(tokenizer)
    scope = run_standalone_example(tokenizer, model, features)

    assert scope["outputs"].logits.dtype == torch.bfloat16
    loss, logits_loss = scope["loss"], scope["logits_loss"]
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    # the two digit terms: from float32 products of bf16 h and W, and from the bf16 logits cast to float
    assert logits_loss.item() == pytest.approx(loss.item(), rel=1e-2)
    digit_term = loss - scope["outputs"].loss
    assert digit_term.item() > 0
    grads = []  # of the digit terms alone, so that the cross-entropy cannot hide a difference
    for total in (loss, logits_loss):
        model.zero_grad(set_to_none=True)
        (total - scope["outputs"].loss).backward(retain_graph=True)
        grads.append({n: p.grad.float().clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for name in grads[0]:
        scale = grads[1][name].abs().max().clamp(min=1e-12)
        assert (grads[0][name] - grads[1][name]).abs().max() <= 0.05 * scale, name  # bf16 rounding of the logits
    assert any(g.abs().max() > 0 for g in grads[0].values())


def test_readme_standalone_example_gives_the_definitions_value_on_llama3():
    """The same block, unchanged, on Llama-3's tokenizer (numbers cut into 1-3-digit tokens): its digit term is
    the definition's, computed slot by slot by the oracle of tests/helpers/number_token_oracle.py (explicit
    logsumexps over the number tokens' strings, places read per character)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from del_plugin.core.places import PlaceWeighting
    from tools.assets import tiny_model_dir

    from number_token_oracle import oracle_terms

    model_dir = tiny_model_dir("llama-bpe")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    features = gsm8k_features(tokenizer)
    answers = [tokenizer.convert_ids_to_tokens([i for i in f["labels"] if i >= 0]) for f in features]
    assert any(len(t) >= 2 and t.isdigit() for tokens in answers for t in tokens)  # merged digits among the targets
    scope = run_standalone_example(tokenizer, model, features)

    labels = scope["batch"]["labels"]
    strings = tokenizer.convert_ids_to_tokens(list(range(model.config.vocab_size)))
    terms = oracle_terms("del", scope["outputs"].logits.detach().double(), labels, PlaceWeighting(), strings)
    assert len(terms) == int((scope["places"] != -(2**31)).sum()) > 50
    definition = 0.03 * sum(terms.values()) / len(terms)
    # the block's own digit term, from the same capture and targets (a forward is read once, then reused)
    term = scope["digit_criterion_loss"](
        "del", scope["capture"].digit_targets(scope["targets"]), scope["places"], alpha=0.03
    )
    assert term.item() == pytest.approx(definition.item(), rel=1e-6)
    ce = scope["outputs"].loss.item()
    for total in (scope["loss"], scope["logits_loss"]):
        # the term is read back from a float32 sum with the cross-entropy: exact to a few steps of float32 at the CE
        assert (total - scope["outputs"].loss).item() == pytest.approx(definition.item(), abs=4 * 2**-23 * ce)
