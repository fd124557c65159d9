"""The prompt format a model was fine-tuned with by ``del-llamafactory train``, read from the config it saves in
``output_dir`` when training ends (:data:`CONFIG_FILE`: LLaMA-Factory itself keeps no config there).

LLaMA-Factory's ``template`` decides: ``alpaca`` -> del-eval's alpaca prompt (LLaMA-Factory's alpaca template is the
same text, system line included, so a model trained with either host is scored on the same prompt); any other
template -> the chat template of the tokenizer saved with the model: LLaMA-Factory writes its own template's there
when the base tokenizer had none (or the template replaces it), and keeps the model's own otherwise, which is then
the one its template follows (``deepseek`` and DeepSeek's own, BOS included).
"""

from __future__ import annotations

import logging
from pathlib import Path

LOG = logging.getLogger(__name__)

__all__ = ["CONFIG_FILE", "llamafactory_config_in", "prompt_format_from_llamafactory"]

CONFIG_FILE = "del_llamafactory.yaml"


def llamafactory_config_in(folder: str | Path) -> tuple[dict, Path] | None:
    """The config ``del-llamafactory train`` saved in ``folder`` (and its path), or None when there is none (or it
    cannot be read: logged)."""
    import yaml

    path = Path(folder) / CONFIG_FILE
    if not path.is_file():
        return None
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        LOG.warning("%s is not valid YAML (%s); ignoring it", path, err)
        return None
    return (config, path) if isinstance(config, dict) else None


def prompt_format_from_llamafactory(config: dict) -> tuple[str | None, str]:
    """``(alpaca | chat | a CustomFormat | None, why)`` from a LLaMA-Factory config (see the module docs)."""
    template = config.get("template")
    if not template:
        return None, "it names no template"
    if template == "alpaca":
        return "alpaca", "template: alpaca"
    return "chat", f"template: {template}, the chat template LLaMA-Factory saved with the tokenizer"
