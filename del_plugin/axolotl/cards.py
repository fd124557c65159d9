"""The card a config is checked for by ``del-check``: a compute capability in any form nvidia-smi or torch prints it,
NVIDIA's cards by name, the capabilities Axolotl's validation reads for it, and what the card cannot train."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass


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


def card_refusals(cfg, capabilities: dict, axolotl_warnings: list[str]) -> list[str]:
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
