"""Where a fine-tune left the digit logits: their raw level, the digits' share of the full softmax and DEL's own
term, teacher-forced on the held-out reference answers of an efficacy sweep (``python -m experiments sweep``).

DEL's binary cross-entropies read the *raw* digit logits, which the full softmax of cross-entropy does not pin
(adding a constant to the ten digit logits leaves the ten-way distribution unchanged). This reads, at every digit
target of the reference answers:

* ``z_target`` / ``z_other``: the mean raw logit of the target digit / of the nine other digits of its family;
* ``z_max``: the mean largest logit over the whole vocabulary (the level the digits compete with);
* ``digit mass``: the mean full-softmax probability of the ten digits together;
* ``L_num``: the mean of ``mean_k(p_hat_k * BCE_k)`` (DEL's per-digit term without place weights);
* ``TF acc``: the share of targets whose largest digit logit is the target (``del-eval``'s TF digit accuracy).

    python -m experiments.digit_logit_levels runs/efficacy --settings del:0 del:0.1 del:1 --seed 42

Prints a Markdown table; ``--json FILE`` also writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from del_plugin.core import DigitVocab, digit_correct, digit_targets_from_logits
from del_plugin.core.criteria import del_token_losses
from del_plugin.core.places import shift_to_next_token
from experiments.runs import parse_setting

COLUMNS = ("z_target", "z_other", "z_max", "digit_mass", "l_num", "tf_accuracy")
HEADERS = ("z_target", "z_other", "z_max", "digit mass", "L_num", "TF acc")


def level_sums(logits: torch.Tensor, aligned_labels: torch.Tensor, vocab: DigitVocab) -> dict[str, float]:
    """Sums over the digit targets of ``aligned_labels`` (``logits[..., t, :]`` predicts ``aligned_labels[..., t]``)
    of each quantity in :data:`COLUMNS`, and their count under ``"digits"``."""
    logits = logits.float()
    targets = digit_targets_from_logits(logits, aligned_labels, vocab)
    mask = targets.mask
    z = targets.logits[mask]  # [N, 10]
    y = targets.target[mask]
    full = logits[mask]  # [N, V]
    # z holds the target family's ten logits: their share of the full softmax is logsumexp(z) - logsumexp(all)
    log_mass = torch.logsumexp(z, -1) - torch.logsumexp(full, -1)
    z_target = z.gather(-1, y[:, None]).squeeze(-1)
    l_t = del_token_losses(targets, torch.ones_like(targets.mask, dtype=torch.float32))  # DEL's term, u = 1
    return {
        "digits": float(mask.sum()),
        "z_target": float(z_target.sum()),
        "z_other": float(((z.sum(-1) - z_target) / 9).sum()),
        "z_max": float(full.max(-1).values.sum()),
        "digit_mass": float(log_mass.exp().sum()),
        "l_num": float(l_t.sum()),
        "tf_accuracy": float(digit_correct(targets).sum()),
    }


@torch.inference_mode()
def run_levels(adapter: Path, heldout: Path, batch_size: int) -> dict[str, float]:
    from del_plugin.evaluation.benchmarks.own_sets import read_eval_set
    from del_plugin.evaluation.run.generation import PromptFormat, load_model
    from del_plugin.evaluation.scoring.teacher_forced import pad_teacher_forced

    lm = load_model(adapter, dtype="float32", device="cpu")
    vocab = DigitVocab.from_tokenizer(lm.tokenizer)
    prompt_format = PromptFormat(lm.tokenizer)
    pad_id = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else lm.tokenizer.eos_token_id
    examples = read_eval_set(heldout).examples
    sequences = [prompt_format.teacher_forcing_ids(e.question, e.solution) for e in examples]
    totals: dict[str, float] = {}
    for start in range(0, len(sequences), batch_size):
        input_ids, attention, labels = pad_teacher_forced(sequences[start : start + batch_size], pad_id)
        logits = lm.model(input_ids=input_ids, attention_mask=attention).logits
        for key, value in level_sums(logits, shift_to_next_token(labels, -100), vocab).items():
            totals[key] = totals.get(key, 0.0) + value
    return {key: totals[key] / totals["digits"] for key in COLUMNS} | {"digits": totals["digits"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m experiments.digit_logit_levels",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("sweep", type=Path, help="the sweep's working folder (its --out)")
    parser.add_argument("--settings", nargs="+", required=True, help="e.g. del:0 del:0.1 del:1")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)

    heldout = args.sweep / "data" / "heldout.jsonl"
    if not heldout.is_file():
        raise SystemExit(f"error: {heldout} is missing; is {args.sweep} a sweep's --out folder?")
    rows = {}
    for setting in args.settings:
        adapter = args.sweep / "runs" / parse_setting(setting).folder / f"seed{args.seed}" / "adapter"
        if not (adapter / "adapter_config.json").is_file():
            raise SystemExit(f"error: no trained adapter for {setting} seed {args.seed} at {adapter}")
        print(f"{setting} seed {args.seed} ...", file=sys.stderr, flush=True)
        rows[setting] = run_levels(adapter, heldout, args.batch_size)
    print(f"| setting (seed {args.seed}) | " + " | ".join(HEADERS) + " |")
    print("|---" * (len(HEADERS) + 1) + "|")
    for setting, row in rows.items():
        cells = [f"{row[k]:.2f}" for k in COLUMNS[:3]] + [f"{row['digit_mass']:.3f}", f"{row['l_num']:.3f}"]
        print(f"| {setting} | " + " | ".join(cells + [f"{100 * row['tf_accuracy']:.1f}%"]) + " |")
    if args.json:
        args.json.write_text(json.dumps({"seed": args.seed, "rows": rows}, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
