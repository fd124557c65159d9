"""The prompt format a model was fine-tuned with, read from the Axolotl config saved beside it.

Axolotl 0.21 keeps no config file in ``output_dir``: it writes the config into the model card, ``README.md``, as
a YAML block after ``<summary>See axolotl config</summary>`` (``axolotl/train.py``: ``setup_model_card``; the
card is written when training ends, for a LoRA adapter and for a full fine-tune alike). Axolotl appends that
block to a process-wide text, so a card written by the second run of one process holds two blocks: the one
whose ``output_dir`` is the folder read wins, else the last.

``datasets[].type`` decides: ``alpaca`` for every dataset -> the alpaca prompt; ``chat_template`` for every
dataset -> the tokenizer's chat template (Axolotl saves the tokenizer, its template included, in the same
folder); the same user-defined format for every dataset (``type:`` a mapping with ``format``,
``no_input_format``, ``system_prompt``, ... as the Llama-3.1 and DeepSeek-Math examples write theirs) -> that
prompt (:class:`~.generation.CustomFormat`). Anything else (mixed types, other prompt strategies, no datasets)
decides nothing: ``auto`` falls back to the tokenizer, chat when it has a template, and says so in a warning and
in the report.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from .generation import CustomFormat, PromptFormat
from .llamafactory_config import llamafactory_config_in, prompt_format_from_llamafactory

LOG = logging.getLogger(__name__)

__all__ = ["axolotl_config_in", "prompt_format_from_config", "resolve_prompt_format"]

_CONFIG_BLOCK = re.compile(r"<summary>See axolotl config</summary>.*?```yaml\n(.*?)```", re.DOTALL)
_TYPE_TO_FORMAT = {"alpaca": "alpaca", "chat_template": "chat"}


def axolotl_config_in(folder: str | Path) -> tuple[dict, Path] | None:
    """The Axolotl config saved in ``folder``'s model card (and the card's path), or None when there is none (or
    it cannot be read: logged)."""
    import yaml

    card = Path(folder) / "README.md"
    if not card.is_file():
        return None
    blocks = _CONFIG_BLOCK.findall(card.read_text(encoding="utf-8", errors="replace"))
    configs = []
    for block in blocks:
        try:
            config = yaml.safe_load(block)
        except yaml.YAMLError as err:
            LOG.warning("%s: the Axolotl config block is not valid YAML (%s); ignoring it", card, err)
            continue
        if isinstance(config, dict):
            configs.append(config)
    if not configs:
        return None
    here = Path(folder).resolve()
    for config in reversed(configs):
        if config.get("output_dir") and Path(str(config["output_dir"])).resolve() == here:
            return config, card
    return configs[-1], card


def prompt_format_from_config(config: dict) -> tuple[str | CustomFormat | None, str]:
    """``(alpaca | chat | a CustomFormat | None, why)`` from an Axolotl config (see the module docs)."""
    datasets = config.get("datasets")
    if not isinstance(datasets, list) or not datasets:
        return None, "it lists no datasets"
    types = [d.get("type") if isinstance(d, dict) else None for d in datasets]
    if all(isinstance(t, dict) for t in types):
        formats = {CustomFormat.from_type(t) for t in types}
        if len(formats) == 1:
            custom = formats.pop()
            return custom, f"datasets[].type: a format of its own, no_input_format {custom.no_input_format!r}"
        return None, "datasets[].type: formats of their own that differ between datasets"
    formats = {_TYPE_TO_FORMAT.get(t) if isinstance(t, str) else None for t in types}
    shown = ", ".join(sorted({str(t) if not isinstance(t, dict) else "a format of its own" for t in types}))
    if len(formats) == 1 and None not in formats:
        return formats.pop(), f"datasets[].type: {shown}"
    return None, (
        f"datasets[].type {shown} is not one of alpaca, chat_template or a format of its own (the same for every "
        "dataset)"
    )


def _saved_config_format(folder) -> tuple[str | CustomFormat | None, str, str] | None:
    """(the prompt format, why, where) from the training config saved in ``folder``: Axolotl's (its model card) or
    the one ``del-llamafactory train`` saves; None when there is neither."""
    found = axolotl_config_in(folder)
    if found is not None:
        config, card = found
        return (*prompt_format_from_config(config), f"the Axolotl config in {card}")
    found = llamafactory_config_in(folder)
    if found is not None:
        config, path = found
        return (*prompt_format_from_llamafactory(config), f"the LLaMA-Factory config {path}")
    return None


def resolve_prompt_format(requested: str, tokenizer, folders) -> tuple[PromptFormat, str]:
    """The prompt format and where it came from. ``requested`` other than ``auto`` wins; with ``auto``, the Axolotl
    (or LLaMA-Factory: :mod:`.llamafactory_config`) config in the first of ``folders`` (the adapter folder, then the
    model folder) that holds one; else chat when the tokenizer has a chat template, alpaca when it has none, with a
    warning when a config was found but decided nothing."""
    if requested != "auto":
        return PromptFormat(tokenizer, requested), f"--prompt-format {requested}"
    notes = []
    for folder in folders:
        if folder is None:
            continue
        found = _saved_config_format(folder)
        if found is None:
            continue
        kind, why, where = found
        if isinstance(kind, CustomFormat):
            return PromptFormat(tokenizer, "custom", kind), f"{where} ({why})"
        if kind is not None:
            return PromptFormat(tokenizer, kind), f"{where} ({why})"
        notes.append(f"{where} decides nothing: {why}")
    has_template = bool(getattr(tokenizer, "chat_template", None))
    fallback = "chat" if has_template else "alpaca"
    reason = "the tokenizer has a chat template" if has_template else "the tokenizer has no chat template"
    source = "; ".join(notes + [f"auto: {reason}"])
    if notes:
        LOG.warning("prompt format %s, which may not be the one the model was trained with: %s", fallback, source)
    return PromptFormat(tokenizer, fallback), source
