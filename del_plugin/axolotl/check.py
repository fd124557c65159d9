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
import contextlib
import difflib
import logging
import os
import re
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..inputs import EXIT_CHECK_FAILED as CHECK_FAILED
from ..inputs import EXIT_OK as PASSED
from ..inputs import EXIT_PARTLY_CHECKED as PARTLY_CHECKED
from ..inputs import EXIT_UNUSABLE_INPUT as UNUSABLE_INPUT
from ..inputs import ExitStatusHelpFormatter, UnusableInput, exit_status_help, read_input_bytes, utf8_error_position
from .config_yaml import MAX_YAML_BYTES, YamlLimitError, load_yaml

# before anything imports huggingface_hub or transformers: read local files and the cache only
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("AXOLOTL_DO_NOT_TRACK", "1")

SOURCE_KEYS = ("base_model", "base_model_config", "tokenizer_config")
OK, FAILED, SKIPPED = "ok", "FAILED", "not checked"
NOTE, WARNING = "note", "warning"  # said, not checked: neither changes the exit status


@dataclass(frozen=True)
class Gpu:
    """A training card: its compute capability (major, minor) and what it is called."""

    major: int
    minor: int
    label: str | None = None

    @property
    def sm(self) -> str:
        return f"sm_{self.major}{self.minor}"

    def capabilities(self, n_gpu: int) -> dict:
        """Axolotl's ``capabilities`` for ``n_gpu`` of this card, by the rules its ``gpu_capabilities`` reads from a
        real one: bf16 and tf32 from compute capability 8.0 (torch's ``is_bf16_supported``, transformers'
        ``is_torch_tf32_available``), fp8 from 9.0 (Axolotl's ``compute_supports_fp8``)."""
        return {
            "bf16": self.major >= 8,
            "fp8": (self.major, self.minor) >= (9, 0),
            "tf32": self.major >= 8,
            "n_gpu": n_gpu,
            "compute_capability": self.sm,
        }


# ``--gpu`` names: NVIDIA's published compute capabilities
GPUS = {
    "v100": Gpu(7, 0, "V100"),
    "t4": Gpu(7, 5, "T4"),
    "rtx2080ti": Gpu(7, 5, "RTX 2080 Ti"),
    "titan-rtx": Gpu(7, 5, "TITAN RTX"),
    "a100": Gpu(8, 0, "A100"),
    "a30": Gpu(8, 0, "A30"),
    "rtx3090": Gpu(8, 6, "RTX 3090"),
    "a10": Gpu(8, 6, "A10 / A10G"),
    "a40": Gpu(8, 6, "A40"),
    "a6000": Gpu(8, 6, "RTX A6000"),
    "rtx4090": Gpu(8, 9, "RTX 4090"),
    "l4": Gpu(8, 9, "L4"),
    "l40s": Gpu(8, 9, "L40S"),
    "rtx6000-ada": Gpu(8, 9, "RTX 6000 Ada"),
    "h100": Gpu(9, 0, "H100"),
    "h200": Gpu(9, 0, "H200"),
    "gh200": Gpu(9, 0, "GH200"),
    "b200": Gpu(10, 0, "B200"),
    "rtx5090": Gpu(12, 0, "RTX 5090"),
}
# the examples' cards when neither --gpu nor --compute-capability is given: the QLoRA examples are written for one
# 24 GB card (RTX 3090 / 4090, A10, L4: compute capability 8.6 or 8.9), the FSDP2 reproductions for 8 A100s
DEFAULT_SINGLE = Gpu(8, 6, "RTX 3090 / A10 (24 GB)")
DEFAULT_SHARDED = Gpu(8, 0, "A100")

_CAPABILITY = re.compile(r"(?:sm_?|compute_)?(\d{1,3})(?:[.,] ?(\d))?[af]?")


def parse_compute_capability(text: str) -> Gpu:
    """A compute capability as nvidia-smi (``8.9``), torch (``(8, 9)``, ``sm_89``) or by hand (``89``) writes it;
    ``ValueError`` naming the forms otherwise. Majors 3 to 15 and minors 0 to 9 are CUDA's (3.0 Kepler to 12.x
    Blackwell, with room for the next); a lone digit (``9``, ``sm_9``) is ambiguous and refused."""
    value = text.strip().lower().removeprefix("(").removesuffix(")").strip()
    match = _CAPABILITY.fullmatch(value)
    if match and match.group(2) is None:
        digits = match.group(1)
        major, minor = (int(digits[:-1]), int(digits[-1])) if len(digits) >= 2 else (None, None)
    elif match:
        major, minor = int(match.group(1)), int(match.group(2))
    else:
        major = minor = None
    if major is None or not 3 <= major <= 15:
        raise ValueError(
            f"--compute-capability {text!r}: not a CUDA compute capability; write it as nvidia-smi "
            "(`nvidia-smi --query-gpu=compute_cap --format=csv`) or torch prints it: 8.9, 89, sm_89 or (8, 9)"
        )
    return Gpu(major, minor)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # exit 3, not argparse's 2, which del-check uses for "partly checked"
        self.print_usage(sys.stderr)
        self.exit(UNUSABLE_INPUT, f"{self.prog}: error: {message}\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
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


def _sharded(cfg: dict) -> bool:
    return bool(cfg.get("fsdp_config") or cfg.get("fsdp") or cfg.get("deepspeed"))


def hardware(args: argparse.Namespace, cfg: dict) -> tuple[dict, dict, str]:
    """Axolotl's (capabilities, env_capabilities) and a sentence saying what they describe: the card named by
    ``--gpu`` / ``--compute-capability``, else this machine's GPU, else the examples' card."""
    import torch

    env = {"torch_version": torch.__version__.split("+")[0]}
    if args.cpu:  # what Axolotl's gpu_capabilities() reads on a machine without a GPU
        capabilities = {"bf16": False, "fp8": False, "tf32": False, "n_gpu": 1, "compute_capability": None}
        return capabilities, env, "a machine without a GPU (--cpu)"
    if args.card is None and torch.cuda.is_available():
        from axolotl.cli.config import gpu_capabilities

        capabilities, env = gpu_capabilities()
        # Axolotl reads n_gpu from WORLD_SIZE, which is 1 outside a launcher: the run is for this machine's GPUs
        capabilities["n_gpu"] = args.gpus or torch.cuda.device_count()
        gpu = capabilities["compute_capability"]
        return capabilities, env, f"this machine's GPU ({gpu}), {capabilities['n_gpu']} GPU(s)"
    gpus = args.gpus or (8 if _sharded(cfg) else 1)
    card = args.card or (DEFAULT_SHARDED if _sharded(cfg) else DEFAULT_SINGLE)
    cc = f"compute capability {card.major}.{card.minor}"
    described = f"{gpus} x {card.label}, {cc}" if card.label else f"{gpus} GPU(s) of {cc}"
    if args.card is None:
        described += (
            ", del-check's default card, as no card was given (set yours with --gpu or --compute-capability and "
            "--gpus, or --cpu)"
        )
    return card.capabilities(gpus), env, described


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


def _card_refusals(cfg, capabilities: dict, axolotl_warnings: list[str]) -> list[str]:
    """What the card cannot train: ``bf16`` by Axolotl's own check (a warning that training will fail, which
    validation does not raise), ``tf32: true`` by transformers' (``TrainingArguments`` raises below compute
    capability 8.0)."""
    fix = "train on a card of compute capability 8.0 or higher (--gpu, --compute-capability)"
    refusals = [
        f"Axolotl warns: {message} For this card set `bf16: false` and `fp16: true`, or {fix}"
        for message in axolotl_warnings
        if message.startswith("bf16 requested")
    ]
    if cfg.tf32 is True and not capabilities.get("tf32"):
        refusals.append(
            '`tf32: true` needs compute capability 8.0 or higher (transformers stops with "--tf32 requires Ampere '
            f'or a newer GPU arch"). For this card set `tf32: false`, or {fix}'
        )
    return refusals


class HostOutput(contextlib.AbstractContextManager):
    """Holds back what the host libraries log and warn (torch's deprecations, bitsandbytes' offline kernel notice,
    Axolotl's validation notes) while del-check runs, unless ``verbose``; keeps the plugin's own warnings, and
    records Axolotl's validation warnings for the card checks either way. The plugin's "checked again when the
    trainer is built" is shown with ``verbose`` only: the report says what was not checked. Every handler's
    ``handle`` decides through :meth:`keep`, so handlers that a library adds while the check runs are held too."""

    def __init__(self, verbose: bool):
        from .logs import LOGGER_NAME

        self.verbose, self.ours = verbose, LOGGER_NAME
        self.held: list[str] = []
        self.axolotl_warnings: list[str] = []

    def keep(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "_del_check_seen", False):  # once per record, whichever handlers it reaches
            record._del_check_seen = True
            message = record.getMessage()
            if record.name.startswith("axolotl.") and record.levelno >= logging.WARNING:
                self.axolotl_warnings.append(message)
            if not record.name.startswith(self.ours) and not self.verbose:
                self.held.append(f"{record.name}: {message}")
        if record.name.startswith(self.ours):
            if "it is checked again when the trainer is built" in record.getMessage():
                return self.verbose  # why a source could not be read; the report says what was not checked
            return record.levelno >= logging.WARNING or self.verbose
        return self.verbose

    def __enter__(self):
        import torch  # noqa: F401 - torch's own log handler exists from here on

        host, self._handle = self, logging.Handler.handle

        def handle(handler: logging.Handler, record: logging.LogRecord):
            return host._handle(handler, record) if host.keep(record) else False

        logging.Handler.handle = handle
        self._warnings = warnings.catch_warnings(record=not self.verbose)
        self._warned = self._warnings.__enter__()
        return self

    def __exit__(self, *exc):
        logging.Handler.handle = self._handle
        self._warnings.__exit__(*exc)
        self.held += [f"{w.category.__name__}: {w.message}" for w in self._warned or []]
        return False


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
    from .args import PLUGIN_NAME, cce_folds_lora_head, fused_cross_entropy, lora_targets_head, plugin_enabled

    report = Report()
    raw = read_config(args.config)
    hub_ids = {}  # the folder standing in for a hub id -> the hub id, to name it in the report
    for key in SOURCE_KEYS:
        if isinstance(raw.get(key), str) and raw[key] in args.mapping:
            hub_ids[args.mapping[raw[key]]] = raw[key]
            raw[key] = args.mapping[raw[key]]
    if not isinstance(raw.get("plugins") or [], list):
        report.add(FAILED, "plugins", f"`plugins` is not a list; write it as\nplugins:\n  - {PLUGIN_NAME}")
        return report
    if not plugin_enabled(raw) and not any(str(k).startswith("del_") for k in raw):
        report.add(FAILED, "plugin", f"{args.config} does not list {PLUGIN_NAME} in `plugins`; DEL would not run")
        return report

    # 1. the keys, by Axolotl's own validation (the plugin's validators run inside it), and what the card can train
    from axolotl.utils.config import prepare_plugins, validate_config
    from axolotl.utils.dict import DictDefault

    capabilities, env, described = hardware(args, raw)
    written = dict(raw)
    cfg = DictDefault(raw)
    try:
        # as Axolotl 0.21 does for an installed plugin (entry point), so that del_ keys without the plugin line are
        # refused here too
        from axolotl.integrations.base import PluginManager

        PluginManager.get_instance().register(PLUGIN_NAME)
        prepare_plugins(cfg)
        _warn_unknown_keys(report, raw)
        host.axolotl_warnings.clear()
        cfg = validate_config(cfg, capabilities=capabilities, env_capabilities=env)
    except Exception as err:  # noqa: BLE001 - pydantic's ValidationError, ValueError, ImportError: all a refusal
        report.add(FAILED, "validation", f"Axolotl's validation for {described} refused the config:\n{reasons(err)}")
        return report
    from .cpu import cpu_refusals

    if args.cpu:
        refusals = cpu_refusals(written, cfg)
    else:
        refusals = _card_refusals(cfg, capabilities, host.axolotl_warnings)
    if refusals:
        lines = "\n".join("  " + line for line in refusals)
        report.add(FAILED, "validation", f"Axolotl's validation for {described}: training would fail there:\n{lines}")
        return report
    from ..hf.settings import DELSettings

    settings = DELSettings.from_config(cfg)
    report.add(
        OK,
        "validation",
        f"Axolotl's validation for {described} passed; DEL: criterion {settings.criterion}, del_alpha "
        f"{settings.alpha}, place weighting {'on' if settings.weighting.enabled else 'off'}",
    )

    # 2. the tokenizer and the model type, from what validation loaded (cached), or why not
    if args.card is None and not args.cpu:
        _note_this_cpu(report, written, cfg)

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
    else:
        from ..core.architectures import ARCHITECTURES

        known = (
            "in DEL's architecture table (its digit logits are read exactly)"
            if model_type in ARCHITECTURES
            else "outside DEL's architecture table: its digit logits are measured against the model's own at the "
            "first step, and the run stops there if they differ (docs/architectures.md)"
        )
        report.add(OK, "model type", f"{model_type!r}, {known}")

    # 3. the loss kernels
    check_kernels(report, cfg, model_type, cce_folds_lora_head, lora_targets_head)
    return report


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


def check_kernels(report: Report, cfg, model_type, cce_folds_lora_head, lora_targets_head) -> None:
    from axolotl.integrations.liger.plugin import LIGER_FLAGS
    from axolotl.model_support import check_capability, get_model_support

    cce = any("cut_cross_entropy" in str(p) for p in cfg.plugins or []) and cfg.cut_cross_entropy is not False
    liger = [flag for flag in LIGER_FLAGS if cfg.get(flag)]
    used = (["cut_cross_entropy"] if cce else []) + liger
    if not used:
        report.add(OK, "kernels", "plain cross-entropy (no Cut Cross Entropy, no Liger)")
        return
    if model_type is not None:
        support = get_model_support(model_type)
        try:
            if cce:
                check_capability(support, "cut_cross_entropy", model_type)
            if liger:
                check_capability(support, "liger", model_type, feature="Liger")
        except ValueError as err:
            report.add(FAILED, "kernels", f"{', '.join(used)}: {err}")
            return
    head_lora = cfg.adapter in ("lora", "qlora") and lora_targets_head(cfg.lora_target_modules)
    detail = f"{', '.join(used)}" + (f" with model_type {model_type!r}" if model_type else "")
    if cce and head_lora:
        folds = cce_folds_lora_head()
        if folds is None:
            report.add(
                SKIPPED,
                "kernels",
                f"{detail}; a LoRA adapter on lm_head needs Axolotl's Cut Cross Entropy fork with "
                "apply_lce_lm_head, which is not installed here (the training machine needs it; docs/examples.md)",
            )
            return
        if folds is False:
            report.add(FAILED, "kernels", f"{detail}; the installed fork drops a LoRA adapter on lm_head")
            return
    report.add(OK, "kernels", detail)


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
