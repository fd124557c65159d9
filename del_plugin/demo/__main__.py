"""``python -m del_plugin.demo``: the README's main-job command (see ``del_plugin/demo/pipeline.py``)."""

import os
import sys

# Before torch is imported. PASSIVE: OpenMP threads sleep instead of spinning at barriers; on a CPU shared with
# other work, spinning threads make each training step several times slower.
for _key, _value in {"AXOLOTL_DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                     "OMP_WAIT_POLICY": "PASSIVE"}.items():
    os.environ.setdefault(_key, _value)

if __name__ == "__main__":
    from .pipeline import main

    sys.exit(main())
