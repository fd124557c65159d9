"""The plugin's logger on Axolotl's console.

Axolotl's console handlers pass records below WARNING only from loggers named ``axolotl*``
(``axolotl.logging_config.AxolotlOrWarnErrorFilter``); its own integrations log as ``axolotl.integrations.<name>``.
The plugin does the same, so that its INFO lines (the criterion and weight, the tokenizer's digit layout, the
start-up check of the digit logits) show where a user looks, once each: the ``axolotl`` logger does not propagate.
"""

from __future__ import annotations

from axolotl.utils.logging import get_logger

LOGGER_NAME = "axolotl.integrations.del_plugin"

LOG = get_logger(LOGGER_NAME)
