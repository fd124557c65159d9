"""The Axolotl host: the plugin's hooks (:class:`~del_plugin.axolotl.plugin.DELPlugin`), its config keys and
validators (:mod:`~del_plugin.axolotl.args`), the trainer Axolotl is handed (:mod:`~del_plugin.axolotl.trainer`) and
the early checks of the model and tokenizer a config names (:mod:`~del_plugin.axolotl.source_checks`).

Everything here imports Axolotl; nothing in ``del_plugin.core`` or ``del_plugin.hf`` imports this package."""
