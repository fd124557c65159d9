"""Notices that host libraries log while they are imported and that say nothing about the user's run, held back by
del-eval and the demo as del-check holds back everything the hosts log (``del_plugin/axolotl/host_output.py``,
``HostOutput``; its ``--verbose`` shows them). Set ``DEL_PLUGIN_HOST_NOTICES=1`` to see them."""

from __future__ import annotations

import logging
import os

# logger -> what it logs on import
IMPORT_NOTICES = {
    "torch.utils._pytree": "torch's deprecation of torchao's enums as pytree constants (<enum 'KernelPreference'> ...)",
    "bitsandbytes.backends.cpu.ops": "bitsandbytes' CPU 4-bit kernel not in the offline cache "
    "(Failed to load CPU gemm_4bit_forward from kernels-community)",
    "kernels.hf_hub": "the kernels hub's trust check skipped offline",
}


def hold_back_import_notices() -> None:
    """Raise the loggers of :data:`IMPORT_NOTICES` to ERROR; call it before the host libraries are imported."""
    if os.environ.get("DEL_PLUGIN_HOST_NOTICES") == "1":
        return
    for name in IMPORT_NOTICES:
        logging.getLogger(name).setLevel(logging.ERROR)
