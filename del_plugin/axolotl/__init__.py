"""The Axolotl host: the plugin's hooks (:class:`~del_plugin.axolotl.plugin.DELPlugin`, registered with Axolotl by
the package's ``axolotl.plugins`` entry point), its config keys (:mod:`~del_plugin.axolotl.args`) and the rules they
are validated by (:mod:`~del_plugin.axolotl.config_rules`, :mod:`~del_plugin.axolotl.eval_rules`),
the trainer Axolotl is handed (:mod:`~del_plugin.axolotl.trainer`), the early checks of the model and tokenizer a
config names (:mod:`~del_plugin.axolotl.source_checks`), the logger Axolotl's console shows
(:mod:`~del_plugin.axolotl.logs`) and ``del-check`` (:mod:`~del_plugin.axolotl.check`).

Axolotl is imported where it is used: on import by :mod:`~del_plugin.axolotl.logs` (Axolotl's logger, and so by
the modules that log through it), :mod:`~del_plugin.axolotl.plugin` and :mod:`~del_plugin.axolotl.trainer`; inside
the functions that need it by ``check``, ``cards``, ``kernel_check`` and ``sweep``; the rest (the keys, their rules,
the evaluation after training) import none of it themselves. Nothing in ``del_plugin.core`` or ``del_plugin.hf``
imports this package."""
