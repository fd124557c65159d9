"""``python -m experiments``: the README's main-job command (see ``experiments/pipeline.py``);
``python -m experiments sweep``: the efficacy sweep over ``del_alpha`` and seeds (``experiments/sweep.py``);
``python -m experiments paper``: the paper's regime and the LoRA one, on GSM8K (``experiments/paper.py``)."""

import os
import sys

# Before torch is imported. PASSIVE: OpenMP threads sleep instead of spinning at barriers; on a CPU shared with
# other work, spinning threads make each training step several times slower.
for _key, _value in {
    "AXOLOTL_DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "OMP_WAIT_POLICY": "PASSIVE",
}.items():
    os.environ.setdefault(_key, _value)

if __name__ == "__main__":
    from del_plugin.host_notices import hold_back_import_notices

    hold_back_import_notices()
    if sys.argv[1:2] == ["sweep"]:  # python -m experiments sweep ...: the efficacy sweep (demo/sweep.py)
        from .sweep import main

        sys.exit(main(sys.argv[2:]))
    if sys.argv[1:2] == ["paper"]:  # python -m experiments paper ...: the paper's regime (demo/paper.py)
        from .paper import main

        sys.exit(main(sys.argv[2:]))
    from .pipeline import main

    sys.exit(main())
