"""The paper's benchmarks scored at the end of ``axolotl train`` (``del_eval_benchmarks``), and the DEL section of the
model card Axolotl writes in ``output_dir``.

**When and where.** Axolotl 0.21's ``train`` (axolotl/train.py) calls the plugins' ``post_train`` twice: right
after ``trainer.train()``, before the final save, and as its last step, after the final save, the tokenizer, the
model card (pushed with ``hub_model_id``) and ``cleanup_distributed``, which destroys the process group. The
evaluation runs at the second call, on rank 0 alone, on the saved model: ``del-eval run --model output_dir`` with
the same settings (the prompt format read from the Axolotl config in the card, bf16 on a GPU, float32 on a CPU),
so the numbers are the ones that command gives. With the process group gone there is nothing to wait in: the
other ranks return, and their launcher (torchrun, accelerate launch) waits for rank 0; no collective can time out
during a long evaluation, and none can deadlock under DDP or FSDP2.

**What it writes.** ``output_dir/del_eval/`` (report.json, report.md, generations.jsonl, plots); through the
trainer's ``log`` (so the console, W&B, TensorBoard and the trainer state), ``del_eval/<set>_accuracy`` per set and
``del_eval/macc``, their mean; the scores and their command in the model card's DEL section, which is uploaded
again when the run pushes to the hub.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from ..version import __version__
from .logs import LOG

__all__ = [
    "CARD_BEGIN",
    "CARD_END",
    "EVAL_FOLDER",
    "card_section",
    "eval_command",
    "eval_logs",
    "evaluate_after_training",
    "write_card_section",
]

EVAL_FOLDER = "del_eval"
CARD_BEGIN = "<!-- del-plugin: begin -->"
CARD_END = "<!-- del-plugin: end -->"
_SECTION = re.compile(re.escape(CARD_BEGIN) + r".*?" + re.escape(CARD_END) + r"\n?", re.DOTALL)


def eval_command(
    output_dir: str, names: Sequence[str], settings, benchmark_dir: str | None, allow_modified: bool = False
) -> str:
    """The ``del-eval run`` command that gives the same report as the post-training evaluation."""
    from ..evaluation.benchmarks.names import BENCHMARK_NAMES

    sets = "all" if list(names) == list(BENCHMARK_NAMES) else ",".join(names)
    parts = ["del-eval run", f"--model {shlex.quote(str(output_dir))}", f"--benchmarks {sets}"]
    if benchmark_dir:
        parts.append(f"--benchmark-dir {shlex.quote(str(benchmark_dir))}")
    if allow_modified:
        parts.append("--allow-modified")
    if settings.limit is not None:
        parts.append(f"--limit {settings.limit}")
    out = shlex.quote(str(Path(output_dir) / EVAL_FOLDER))
    parts += [f"--max-new-tokens {settings.max_new_tokens}", f"--out {out}"]
    return " ".join(parts)


def eval_logs(report: dict) -> dict[str, float]:
    """``{"del_eval/<set>_accuracy": ..., "del_eval/macc": ...}`` from a report: each complete set's accuracy,
    and the mean of them (mACC when all seven are there; report.json's ``macc.label`` says over how many)."""
    logs = {}
    for entry in report["datasets"]:
        accuracy = (entry.get("generation") or {}).get("accuracy")
        if entry.get("benchmark") and entry.get("status") == "complete" and accuracy is not None:
            logs[f"del_eval/{entry['benchmark']}_accuracy"] = accuracy
    if report.get("macc"):
        logs["del_eval/macc"] = report["macc"]["value"]
    return logs


def card_section(
    settings, vocab_description: str | None, report: dict | None = None, command: str | None = None
) -> str:
    """The DEL section of a model card: criterion, weight and tokenizer layout; with ``report``, its scores and
    the command that reproduces them."""
    from ..evaluation.reports.summary import macc as _macc
    from ..evaluation.reports.tables import benchmark_title, fmt

    weighting = settings.weighting
    places = (
        f"place weights u = {weighting.integer_slope:g}(i+1) for integer places, {weighting.decimal_base:g}^(i-1) "
        "for decimal places"
        if weighting.enabled
        else "every digit weighted 1"
    )
    lines = [
        CARD_BEGIN,
        "## Digit Entropy Loss (DEL)",
        "",
        f"Fine-tuned with del-plugin {__version__} (`plugins: [del_plugin.DELPlugin]`): criterion "
        f"`del_criterion: {settings.criterion}`, weight `del_alpha: {settings.alpha:g}`, {places}.",
    ]
    if vocab_description:
        lines.append(f"Tokenizer digits: {vocab_description}.")
    if report is not None:
        rows = [
            e
            for e in report["datasets"]
            if e.get("benchmark") and e.get("status") == "complete" and e.get("generation")
        ]
        lines += ["", "### Evaluation (del-eval)", "", "| set | problems | accuracy |", "|---|---|---|"]
        for entry in rows:
            total = entry.get("lines_read")
            problems = f"{entry['evaluated']:,}" + (f" of {total:,}" if total and total != entry["evaluated"] else "")
            lines.append(f"| {benchmark_title(entry)} | {problems} | {fmt(entry['generation']['accuracy'], 'pct')} |")
        summary = _macc(report["datasets"])
        if summary:
            lines.append(f"| **{summary['label']}** | | **{fmt(summary['value'], 'pct')}** |")
        model = report.get("model") or {}
        lines += [
            "",
            f"Greedy, zero-shot, prompt format {model.get('prompt_format')}, {model.get('dtype')}; report in "
            f"`{EVAL_FOLDER}/report.json`. Reproduce with:",
            "",
            f"`{command}`",
        ]
    lines.append(CARD_END)
    return "\n".join(lines) + "\n"


def write_card_section(output_dir: str | Path, section: str) -> Path | None:
    """Put ``section`` into ``output_dir``/README.md, replacing an earlier DEL section; None when there is no
    card (Axolotl writes it at the end of training)."""
    card = Path(output_dir) / "README.md"
    if not card.is_file():
        return None
    text = card.read_text(encoding="utf-8")
    if _SECTION.search(text):
        text = _SECTION.sub(lambda _: section, text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    from ..evaluation.output import write_text_atomic

    write_text_atomic(card, text)  # the card Axolotl wrote is replaced whole or not at all
    return card


def _push_card(trainer, card: Path) -> None:
    """Upload the card again when the run pushes to the hub (its first push came before the evaluation)."""
    if not (trainer.args.push_to_hub and getattr(trainer, "hub_model_id", None)):
        return
    try:
        from huggingface_hub import upload_file

        upload_file(
            path_or_fileobj=str(card),
            path_in_repo="README.md",
            repo_id=trainer.hub_model_id,
            token=trainer.args.hub_token,
            revision=trainer.args.hub_revision,
            commit_message="del-eval scores in the model card",
        )
    except Exception as err:  # noqa: BLE001 - the scores are saved locally; the upload can be redone by hand
        LOG.warning(
            "del_eval: the model card with the scores could not be uploaded to %s (%s); upload %s by hand",
            trainer.hub_model_id,
            err,
            card,
        )


def evaluate_after_training(cfg, trainer) -> dict:
    """Score ``cfg.output_dir`` (the saved model) on ``cfg.del_eval_benchmarks``; write the report, log the
    accuracies through ``trainer``, put them into the model card; return the report. Call on rank 0 only."""
    from ..evaluation.benchmarks.names import resolve_benchmark_names
    from ..evaluation.run.runner import EvalSettings, evaluate

    names = resolve_benchmark_names(cfg.del_eval_benchmarks)
    settings = EvalSettings(
        limit=cfg.del_eval_limit,
        max_new_tokens=cfg.del_eval_max_new_tokens or EvalSettings.max_new_tokens,
    )
    output_dir = str(cfg.output_dir)
    allow_modified = bool(cfg.del_eval_allow_modified)
    command = eval_command(output_dir, names, settings, cfg.del_eval_benchmark_dir, allow_modified)
    LOG.info("del_eval: scoring the saved model on %s (as `%s`)", ", ".join(names), command)
    try:
        # overwrite: a report of an earlier training into the same output_dir is of another model
        report = evaluate(
            output_dir,
            out_dir=Path(output_dir) / EVAL_FOLDER,
            benchmarks=names,
            benchmark_dir=cfg.del_eval_benchmark_dir,
            settings=settings,
            overwrite=True,
            allow_modified=allow_modified,
        )
    except Exception as err:
        raise RuntimeError(
            f"del_eval: the evaluation after training failed ({type(err).__name__}: {err}); the trained model is "
            f"saved in {output_dir}: score it with `{command}`"
        ) from err
    logs = eval_logs(report)
    for key, value in logs.items():
        LOG.info("%s: %.4f", key, value)
    trainer.log(dict(logs))
    del_settings, vocab = getattr(trainer, "del_settings", None), getattr(trainer, "del_vocab", None)
    if del_settings is not None:
        section = card_section(del_settings, vocab.describe() if vocab is not None else None, report, command)
        card = write_card_section(output_dir, section)
        if card is not None:
            _push_card(trainer, card)
    return report
