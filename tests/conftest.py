import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

CCE = "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"


@pytest.fixture(autouse=True)
def forget_cut_cross_entropy():
    """Axolotl's plugin manager is process-wide: once a config listing Cut Cross Entropy was validated, its plugin
    would stay registered and run (and fail: its fork is not installed here) for every later config."""
    yield
    if "axolotl.integrations.base" in sys.modules:
        from axolotl.integrations.base import PluginManager

        PluginManager.get_instance().plugins.pop(CCE, None)
