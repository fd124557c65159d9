"""The pairs of runs (DEL off, DEL on): one per cross-entropy kernel and one with number tokens, the model each
trains, and why one cannot run on this machine."""

from __future__ import annotations

import argparse
import importlib.util

# cross-entropy kernel -> what it adds to the Axolotl config (besides DEL's own keys)
PAIRS = {
    "plain": {"plugins": [], "cfg": {}},
    "numbers": {"plugins": [], "cfg": {}},  # the plain CE, on a model with number tokens (NUMBERS_MODEL)
    "liger": {"plugins": ["axolotl.integrations.liger.LigerPlugin"], "cfg": {"liger_fused_linear_cross_entropy": True}},
    "cce": {
        "plugins": ["axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"],
        "cfg": {"cut_cross_entropy": True},
    },
}
PAIR_TITLES = {"plain": "plain CE", "numbers": "number tokens", "liger": "Liger FLCE", "cce": "Cut Cross Entropy"}
MODEL, NUMBERS_MODEL = "model", "model-numbers"  # folders in the work directory
# a word in the module of the causal LM's forward that each kernel's plugin installs
FORWARD_MARKS = {"liger": "liger", "cce": "cut_cross_entropy"}
CCE_INSTALL = (
    'pip install "cut-cross-entropy[transformers] @ '
    'git+https://github.com/axolotl-ai-cloud/ml-cross-entropy.git@v0.1.1"'
)


def pair_model(args: argparse.Namespace, pair: str) -> tuple[str, argparse.Namespace]:
    """(the folder of the pair's model in the work directory, the arguments its model and tokenizer are built
    with): the numbers pair's own model with number tokens, every other pair the shared one."""
    if pair != "numbers" or args.number_tokens:
        return MODEL, args
    return NUMBERS_MODEL, argparse.Namespace(**{**vars(args), "number_tokens": True, "vocab": args.numbers_vocab})


def unavailable(pair: str, args: argparse.Namespace) -> str | None:
    """Why a pair cannot run here (None if it can)."""
    if pair == "plain":
        return None
    if pair == "numbers":
        return "--number-tokens: every pair reads number tokens already" if args.number_tokens else None
    if args.cpu_smoke:
        return "its fused kernels are Triton kernels and need a GPU (--cpu-smoke runs the plain pair only)"
    if pair == "liger" and importlib.util.find_spec("liger_kernel") is None:
        return "liger-kernel is not installed (pip install liger-kernel)"
    if pair == "cce":
        return cce_unavailable()
    return None


def cce_unavailable() -> str | None:
    """Why Axolotl's Cut Cross Entropy cannot run here: its CutCrossEntropyPlugin raises ImportError in
    pre_model_load without Axolotl's fork of cut_cross_entropy, so that is checked first."""
    try:
        found = importlib.util.find_spec("cut_cross_entropy.transformers") is not None
    except ModuleNotFoundError:
        found = False
    if not found:
        return f"Axolotl's fork of cut_cross_entropy is not installed (not on PyPI): {CCE_INSTALL}"
    try:
        from cut_cross_entropy.transformers.patch import AXOLOTL_CCE_FORK
    except ImportError as error:
        return f"cut_cross_entropy.transformers.patch does not import ({error}); {CCE_INSTALL}"
    if not AXOLOTL_CCE_FORK:
        return f"the installed cut_cross_entropy is not Axolotl's fork; {CCE_INSTALL}"
    return None
