"""``del-check CONFIG``: check an Axolotl config that uses the DEL plugin without a GPU and without the network.

What it checks, in order, and stops at the first failure of the first two:

1. the config: Axolotl's own validation of the whole config, with the plugin's keys and rules (bounds, a misspelled
   ``del_`` key, criteria beside kernels, a LoRA head beside Liger's fused kernel, a fused kernel under ZeRO-3,
   training modes), for the hardware the config is meant for (``--gpu`` or ``--compute-capability``, ``--gpus``;
   the local GPU when there is one and neither is given; else del-check's default card, with a note of what would
   stop the run on this machine; ``--cpu``: a machine without a GPU), and what that card can train:
   ``bf16`` as Axolotl checks it (its "Training will fail" warning, below compute capability 8.0), ``tf32`` as
   transformers does;
2. the tokenizer's digit layout, read from the tokenizer files (one token per digit, or complete 1-3-digit number
   tokens), and the model type from the model's ``config.json`` (in DEL's architecture table, or measured at the
   first step), from a local folder: ``--local HUB_ID=FOLDER`` stands a folder in for a hub id the config names
   (a model already in the Hugging Face cache is read from there);
3. the kernels the config switches on: Axolotl's own support table for the model type (Cut Cross Entropy, Liger),
   and for a LoRA adapter on ``lm_head`` beside Cut Cross Entropy, whether the installed fork folds it in.

What torch, bitsandbytes, Axolotl and the other host libraries log or warn while it runs is held back (their
deprecations and offline notices are not about the config); ``--verbose`` shows it.

Exit status: 0 everything checked and passed; 1 a check failed (the message names the key and the fix); 2 nothing
failed but something could not be checked here (a hub id with no local folder); 3 nothing was checked: the command
line or the file cannot be used (no such file, a folder, not UTF-8, not YAML, not a config, YAML past the bounds of
:mod:`.config_yaml`), with a one-line error. A ``warning`` line (a key that no schema knows, close to one that does)
and a ``note`` line (what would stop the run on this machine without a GPU) do not change it.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from pathlib import Path

import yaml

from ..inputs import EXIT_CHECK_FAILED as CHECK_FAILED
from ..inputs import EXIT_OK as PASSED
from ..inputs import EXIT_PARTLY_CHECKED as PARTLY_CHECKED
from ..inputs import EXIT_UNUSABLE_INPUT as UNUSABLE_INPUT
from ..inputs import ExitStatusHelpFormatter, UnusableInput, exit_status_help, read_input_bytes, utf8_error_position
from .cards import GPUS, card_refusals, hardware, parse_compute_capability
from .config_yaml import MAX_YAML_BYTES, YamlLimitError, load_yaml
from .host_output import HostOutput

# before anything imports huggingface_hub or transformers: read local files and the cache only
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("AXOLOTL_DO_NOT_TRACK", "1")

SOURCE_KEYS = ("base_model", "base_model_config", "tokenizer_config")
OK, FAILED, SKIPPED = "ok", "FAILED", "not checked"
NOTE, WARNING = "note", "warning"  # said, not checked: neither changes the exit status


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # exit 3, not argparse's 2, which del-check uses for "partly checked"
        self.print_usage(sys.stderr)
        self.exit(UNUSABLE_INPUT, f"{self.prog}: error: {message}\n")


def _parser() -> _Parser:
    parser = _Parser(
        prog="del-check",
        description="Check an Axolotl config that uses the DEL plugin, offline: its keys (Axolotl's validation) for "
        "the card you will train on, the tokenizer's digit layout and the model type (from local folders), and the "
        "loss kernels it switches on.",
        epilog=exit_status_help(program="del-check"),
        formatter_class=ExitStatusHelpFormatter,
    )
    parser.add_argument("config", type=Path, help="the Axolotl YAML you train with")
    parser.add_argument(
        "--local",
        action="append",
        default=[],
        metavar="HUB_ID=FOLDER",
        help="read the model or tokenizer the config names as HUB_ID from FOLDER (config.json, tokenizer files); "
        "repeatable",
    )
    card = parser.add_mutually_exclusive_group()
    card.add_argument(
        "--gpu",
        choices=sorted(GPUS),
        metavar="NAME",
        help=f"the card you will train on, by name: {', '.join(sorted(GPUS))}",
    )
    card.add_argument(
        "--compute-capability",
        metavar="CC",
        help="the card you will train on, by compute capability, in any form nvidia-smi or torch prints: 8.9, 89, "
        "sm_89 or (8, 9). Default (without --gpu, on a machine without a GPU): 8.6, a 24 GB RTX 3090 or A10 as the "
        "QLoRA examples are written for; 8.0 (A100) for an FSDP or DeepSpeed config",
    )
    card.add_argument(
        "--cpu",
        action="store_true",
        help="check for a machine without a GPU: what would stop the run there (Axolotl's auto-enabled LoRA kernels, "
        "bf16, tf32, flash-attention, Liger, Cut Cross Entropy), each key with its fix (docs/cpu.md). Without --gpu, "
        "--compute-capability or --cpu on a machine without a GPU, del-check checks for the default card and adds "
        "a note of what would stop the run on this machine",
    )
    parser.add_argument(
        "--gpus",
        type=int,
        default=None,
        help="how many GPUs the run is for (default: this machine's count; without a GPU, 1, or 8 for an FSDP or "
        "DeepSpeed config)",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="also show what torch, bitsandbytes and Axolotl log while checking"
    )
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """del-check's command line, with the card (``args.card``: None for this machine's GPU or the default) and the
    ``--local`` folders (``args.mapping``: hub id -> folder) read."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.gpus is not None and args.gpus < 1:
        parser.error(f"--gpus {args.gpus}: at least 1")
    args.card = None
    if args.gpu:
        args.card = GPUS[args.gpu]
    elif args.compute_capability is not None:
        try:
            args.card = parse_compute_capability(args.compute_capability)
        except ValueError as err:
            parser.error(str(err))
    args.mapping = {}
    for item in args.local:
        hub_id, sep, folder = item.partition("=")
        if not sep or not hub_id or not folder:
            parser.error(f"--local {item!r}: expected HUB_ID=FOLDER")
        if not Path(folder).is_dir():
            parser.error(f"--local {item!r}: {folder} is not a folder")
        args.mapping[hub_id] = str(Path(folder).resolve())
    return args


def _is_sweep(raw: dict) -> bool:
    """An Axolotl sweep file (``axolotl train CONFIG --sweep FILE``): values to vary, each a list, ``_`` the paired
    ones; no ``base_model``."""
    return "base_model" not in raw and all(isinstance(value, list) for value in raw.values())


def read_config(path: Path) -> dict:
    """The YAML mapping at ``path``, or :class:`UnusableInput` saying why not and what to do."""
    if path.is_dir():
        found = sorted(p.name for p in path.iterdir() if p.suffix in (".yml", ".yaml"))
        inside = f" (in it: {', '.join(found[:4])}{', ...' if len(found) > 4 else ''})" if found else ""
        raise UnusableInput(f"{path} is a folder; pass the Axolotl YAML file itself{inside}")
    data = read_input_bytes(
        path,
        "file",
        limit=MAX_YAML_BYTES,
        fix="pass the path of the Axolotl YAML you train with",
        past_limit="far more than an Axolotl config holds: pass the config itself",
    )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line, _ = utf8_error_position(data, err)
        raise UnusableInput(
            f"{path} is not UTF-8 text (byte 0x{data[err.start]:02x} on line {line}); save it as UTF-8"
        ) from None
    try:
        raw = load_yaml(text)
    except YamlLimitError as err:
        raise UnusableInput(f"{path}: {err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UnusableInput(f"{path} is not valid YAML{where}: {problem}; fix that line") from None
    if raw is None:
        raise UnusableInput(f"{path} is empty; pass the Axolotl YAML you train with")
    if not isinstance(raw, dict):
        raise UnusableInput(
            f"{path} holds a YAML {type(raw).__name__}, not an Axolotl config (a mapping: base_model: ..., "
            "plugins: ...)"
        )
    if _is_sweep(raw):
        raise UnusableInput(
            f"{path} is an Axolotl sweep file (values to vary), not a config: use it as `axolotl train CONFIG "
            f"--sweep {path}` and check the config it varies, `del-check CONFIG`"
        )
    return raw


def reasons(err: Exception) -> str:
    """A validation error's messages, without pydantic's echo of the whole input."""
    from pydantic import ValidationError

    messages = [_with_key(e) for e in err.errors()] if isinstance(err, ValidationError) else [str(err)]
    return "\n".join("  " + line for message in messages for line in message.splitlines())


def _with_key(error: dict) -> str:
    """A pydantic error's message, led by the key and value it is about when the message does not name the key
    (``learning_rate: fast``: could not convert string to float: 'fast')."""
    message = error["msg"].removeprefix("Value error, ")
    key = error["loc"][0] if error["loc"] and isinstance(error["loc"][0], str) else None
    if key is None or key in message:
        return message
    value = error.get("input")
    shown = f"`{key}: {value}`" if isinstance(value, (str, int, float, bool)) else f"`{key}`"
    return f"{shown}: {message}"


def unknown_keys(raw: dict, known: set[str]) -> list[str]:
    """A warning for each top-level key that no schema knows (Axolotl's, the plugins') and that is close to one
    that is: Axolotl drops unknown keys, so a typo (``lora_dropuot``) would otherwise train with the default. The
    ``del_`` keys are the plugin's own rule (refused when misspelled)."""
    found = []
    for key in raw:
        if not isinstance(key, str) or key in known or key.startswith("del_"):
            continue
        close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.8)
        if close:
            found.append(f"`{key}` is no key of Axolotl's or a plugin's, so it is not used: did you mean `{close[0]}`?")
    return found


class Report:
    def __init__(self):
        self.lines: list[tuple[str, str, str]] = []

    def add(self, status: str, what: str, detail: str) -> None:
        self.lines.append((status, what, detail))
        print(f"{status:<12} {what}: {detail}", flush=True)

    def status(self) -> int:
        statuses = {status for status, _, _ in self.lines}
        return CHECK_FAILED if FAILED in statuses else PARTLY_CHECKED if SKIPPED in statuses else PASSED


def check(args: argparse.Namespace, host: HostOutput) -> Report:
    """The checks of the module docstring, in order: the config (stops at a refusal), the tokenizer and the model
    type, the loss kernels."""
    report = Report()
    raw = read_config(args.config)
    hub_ids = _stand_in_folders(raw, args.mapping)
    if not _lists_the_plugin(report, raw, args.config):
        return report
    validated = _validate(report, args, host, raw)
    if validated is None:
        return report
    cfg, written = validated
    if args.card is None and not args.cpu:
        _note_this_cpu(report, written, cfg)
    model_type = _check_sources(report, cfg, hub_ids)
    check_kernels(report, cfg, model_type)
    return report


def _stand_in_folders(raw: dict, mapping: dict[str, str]) -> dict[str, str]:
    """Replaces each hub id of ``raw``'s source keys that ``--local`` maps with its folder; returns the folder ->
    the hub id, to name it in the report."""
    hub_ids = {}
    for key in SOURCE_KEYS:
        if isinstance(raw.get(key), str) and raw[key] in mapping:
            hub_ids[mapping[raw[key]]] = raw[key]
            raw[key] = mapping[raw[key]]
    return hub_ids


def _lists_the_plugin(report: Report, raw: dict, path: Path) -> bool:
    """Whether the config is one of DEL's (lists the plugin, or sets ``del_`` keys whose refusal says to list it)."""
    from .config_rules import PLUGIN_NAME, plugin_enabled

    if not isinstance(raw.get("plugins") or [], list):
        report.add(FAILED, "plugins", f"`plugins` is not a list; write it as\nplugins:\n  - {PLUGIN_NAME}")
        return False
    if not plugin_enabled(raw) and not any(str(k).startswith("del_") for k in raw):
        report.add(FAILED, "plugin", f"{path} does not list {PLUGIN_NAME} in `plugins`; DEL would not run")
        return False
    return True


def _validate(report: Report, args: argparse.Namespace, host: HostOutput, raw: dict):
    """1. the keys, by Axolotl's own validation (the plugin's validators run inside it), and what the card can
    train: (the validated config, the config as written), or None after a refusal."""
    from axolotl.integrations.base import PluginManager
    from axolotl.utils.config import prepare_plugins, validate_config
    from axolotl.utils.dict import DictDefault

    from .config_rules import PLUGIN_NAME
    from .cpu import cpu_refusals

    capabilities, env, described = hardware(args, raw)
    written = dict(raw)
    cfg = DictDefault(raw)
    try:
        # as Axolotl 0.21 does for an installed plugin (entry point), so that del_ keys without the plugin line are
        # refused here too
        PluginManager.get_instance().register(PLUGIN_NAME)
        prepare_plugins(cfg)
        _warn_unknown_keys(report, raw)
        host.axolotl_warnings.clear()
        cfg = validate_config(cfg, capabilities=capabilities, env_capabilities=env)
    except Exception as err:  # noqa: BLE001 - pydantic's ValidationError, ValueError, ImportError: all a refusal
        report.add(FAILED, "validation", f"Axolotl's validation for {described} refused the config:\n{reasons(err)}")
        return None
    if args.cpu:
        refusals = cpu_refusals(written, cfg)
    else:
        refusals = card_refusals(cfg, capabilities, host.axolotl_warnings)
    if refusals:
        lines = "\n".join("  " + line for line in refusals)
        report.add(FAILED, "validation", f"Axolotl's validation for {described}: training would fail there:\n{lines}")
        return None
    from ..hf.settings import DELSettings

    settings = DELSettings.from_config(cfg)
    report.add(
        OK,
        "validation",
        f"Axolotl's validation for {described} passed; DEL: criterion {settings.criterion}, del_alpha "
        f"{settings.alpha}{settings.described_keys()}",
    )
    return cfg, written


def _check_sources(report: Report, cfg, hub_ids: dict[str, str]) -> str | None:
    """2. the tokenizer and the model type, from what validation loaded (cached), or why not; returns the model
    type (None: not read here)."""
    from ..core.architectures import ARCHITECTURES
    from ..core.compatibility import fused_cross_entropy
    from .source_checks import check_model_source, check_tokenizer_source

    trust, revision = bool(cfg.trust_remote_code), cfg.revision_of_model
    tokenizer_source = str(cfg.tokenizer_config or cfg.base_model)
    vocab = check_tokenizer_source(
        tokenizer_source, use_fast=cfg.tokenizer_use_fast, trust_remote_code=trust, revision=revision
    )
    if vocab is None:
        report.add(SKIPPED, "tokenizer", _not_loaded(tokenizer_source, hub_ids, TOKENIZER_FILES, "the tokenizer"))
    else:
        point = "" if vocab.decimal_point_id is not None else "; no '.' token, so no decimal places"
        report.add(OK, "tokenizer", f"{tokenizer_source}: {vocab.describe()}{point}")
    kernels = tuple(fused_cross_entropy(cfg))
    model_source = str(cfg.base_model_config or cfg.base_model)
    model_type = check_model_source(model_source, trust_remote_code=trust, revision=revision, kernels=kernels)
    if model_type is None:
        report.add(SKIPPED, "model type", _not_loaded(model_source, hub_ids, ("config.json",), "the model type"))
        return None
    known = (
        "in DEL's architecture table (its digit logits are read exactly)"
        if model_type in ARCHITECTURES
        else "outside DEL's architecture table: its digit logits are measured against the model's own at the "
        "first step, and the run stops there if they differ (docs/architectures.md)"
    )
    report.add(OK, "model type", f"{model_type!r}, {known}")
    return model_type


def _warn_unknown_keys(report: Report, raw: dict) -> None:
    from axolotl.integrations.config import merge_input_args

    schema, _ = merge_input_args()
    known = {name for name, field in schema.model_fields.items() for name in (name, field.alias) if name}
    for warning in unknown_keys(raw, known):
        report.add(WARNING, "keys", warning)


def _note_this_cpu(report: Report, written: dict, cfg) -> None:
    """Checked for the default card on a machine without a GPU: what would stop the run on this machine."""
    import torch

    from .cpu import cpu_refusals

    if torch.cuda.is_available():
        return
    refusals = cpu_refusals(written, cfg)
    if refusals:
        lines = "\n".join("  " + line for line in refusals)
        report.add(NOTE, "this machine", f"it has no GPU; to train this config on it (`del-check --cpu`):\n{lines}")
    else:
        report.add(NOTE, "this machine", "it has no GPU, and nothing in this config needs one (`del-check --cpu`)")


# any one of them makes a folder a tokenizer's (SentencePiece, byte-level BPE, WordPiece, tiktoken)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json", "tekken.json")


def _not_loaded(source: str, hub_ids: dict[str, str], files: tuple[str, ...], what: str) -> str:
    """Why ``source`` could not be read, and what to pass: a folder lacking the file ``what`` is read from, or a hub
    id neither in a folder nor in the cache."""
    folder = Path(source)
    if folder.is_dir():
        named = f" (for {hub_ids[source]})" if source in hub_ids else ""
        if not any((folder / name).is_file() for name in files):
            return (
                f"{source}{named}: no {' or '.join(files)} in this folder, from which {what} is read; copy the "
                "model's file there"
            )
        return f"{source}{named}: {what} could not be read from this folder (--verbose shows why)"
    return f"{source}: not in the Hugging Face cache; pass --local {source}=FOLDER (a folder holding its files)"


def check_kernels(report: Report, cfg, model_type: str | None) -> None:
    """3. the loss kernels (:func:`~.kernel_check.kernel_verdict`)."""
    from .kernel_check import kernel_verdict

    passed, detail = kernel_verdict(cfg, model_type)
    report.add({True: OK, False: FAILED, None: SKIPPED}[passed], "kernels", detail)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        with HostOutput(args.verbose) as host:
            report = check(args, host)
    except UnusableInput as err:
        print(f"del-check: {err}", file=sys.stderr, flush=True)
        return UNUSABLE_INPUT
    if host.held:
        print(
            f"del-check: {len(host.held)} message(s) of the host libraries held back; --verbose shows them",
            file=sys.stderr,
            flush=True,
        )
    status = report.status()
    verdict = {PASSED: "passed", CHECK_FAILED: "failed", PARTLY_CHECKED: "passed what could be checked here"}[status]
    print(f"del-check {args.config}: {verdict}", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
