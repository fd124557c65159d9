"""``python -m experiments``: the README's main-job command (see ``experiments/pipeline.py``);
``python -m experiments sweep``: the efficacy sweep over ``del_alpha`` and seeds (``experiments/sweep.py``);
``python -m experiments paper``: the paper's regime and the LoRA one, on GSM8K (``experiments/paper.py``)."""

import os
import sys

COMMAND_ENV = {
    "AXOLOTL_DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    # PASSIVE: OpenMP threads sleep instead of spinning at barriers; on a CPU shared with other work, spinning
    # threads make each training step several times slower
    "OMP_WAIT_POLICY": "PASSIVE",
}


def main(argv: list[str]) -> int:
    """Runs the command ``argv`` names (the demo when it names none); the environment is set before torch is
    imported, where the user has not set it."""
    for key, value in COMMAND_ENV.items():
        os.environ.setdefault(key, value)
    from del_plugin.host_notices import hold_back_import_notices

    hold_back_import_notices()
    if argv[:1] == ["sweep"]:  # python -m experiments sweep ...: the efficacy sweep
        from .sweep import main as sweep

        return sweep(argv[1:])
    if argv[:1] == ["paper"]:  # python -m experiments paper ...: the paper's regime
        from .paper import main as paper

        return paper(argv[1:])
    from .pipeline import main as demo

    return demo(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
