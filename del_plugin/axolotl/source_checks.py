"""Early checks at config validation, before any model is loaded: the run's tokenizer gives DEL a ten-way
distribution for every digit (one token per digit, or complete number tokens of 1-3 digits read slot by slot), and
the model's config sets no post-head logit transform that DEL does not apply, nor a loss kernel its architecture
refuses."""

from __future__ import annotations

import functools

from ..core import DigitVocab
from ..core.capture import DigitCaptureError, check_architecture
from ..core.vocab import DigitVocabError
from .config_rules import PLUGIN_NAME
from .logs import LOG


def _load_or_postpone(loader, source: str, what: str, trust_remote_code: bool, revision: str | None, **kwargs):
    """``loader.from_pretrained(source)``, or None with a warning when it cannot be loaded here (no network, a gated
    repository): the check is then made again on what the trainer loads."""
    kwargs["trust_remote_code"] = trust_remote_code
    if revision:
        kwargs["revision"] = revision
    try:
        return loader.from_pretrained(source, **kwargs)
    except Exception as err:  # noqa: BLE001 - any load failure only postpones the check
        LOG.warning(
            "del_plugin: could not load the %s of %s to check it now (%s); it is checked again when the "
            "trainer is built",
            what,
            source,
            err,
        )
        return None


@functools.lru_cache(maxsize=16)
def check_tokenizer_source(
    source: str, *, use_fast: bool | None, trust_remote_code: bool, revision: str | None
) -> DigitVocab | None:
    """Load the tokenizer at ``source`` and read its digits; raise ``ValueError`` if DEL cannot use it. None when
    the tokenizer cannot be loaded here (see :func:`_load_or_postpone`)."""
    from transformers import AutoTokenizer

    extra = {} if use_fast is None else {"use_fast": use_fast}
    tokenizer = _load_or_postpone(AutoTokenizer, source, "tokenizer", trust_remote_code, revision, **extra)
    if tokenizer is None:
        return None
    try:
        vocab = DigitVocab.from_tokenizer(tokenizer, name=source)
    except DigitVocabError as err:
        raise ValueError(f"{PLUGIN_NAME}: {err}") from err
    LOG.info(
        "DEL: tokenizer %s: %s%s",
        source,
        vocab.describe(),
        "" if vocab.decimal_point_id is not None else "; no '.' token, so no decimal places",
    )
    return vocab


@functools.lru_cache(maxsize=16)
def check_model_source(
    source: str, *, trust_remote_code: bool, revision: str | None, kernels: tuple[str, ...] = ()
) -> str | None:
    """Load the model config at ``source`` and refuse one whose logits DEL cannot read exactly, or whose
    architecture a loss kernel of ``kernels`` (config keys) would train on other logits than the model's; returns
    the model type, or None when the config cannot be loaded here (see :func:`_load_or_postpone`)."""
    from transformers import AutoConfig

    config = _load_or_postpone(AutoConfig, source, "model config", trust_remote_code, revision)
    if config is None:
        return None
    try:
        architecture = check_architecture(config)
    except DigitCaptureError as err:
        raise ValueError(f"{PLUGIN_NAME}: {source}: {err}") from err
    for key, reason in architecture.kernel_refusals if architecture is not None else ():
        if key in kernels:
            raise ValueError(f"{PLUGIN_NAME}: {source}: `{key}: true` with model_type {config.model_type!r}: {reason}")
    if architecture is None:
        LOG.warning(
            "del_plugin: model_type %r of %s has no entry in DEL's architecture table; DEL measures its digit logits "
            "against the model's own logits at the first step and stops there if they differ (docs/architectures.md)",
            config.model_type,
            source,
        )
    return config.model_type
