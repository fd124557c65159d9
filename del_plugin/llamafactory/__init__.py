"""The LLaMA-Factory host: ``del-llamafactory train my.yaml`` (:mod:`~del_plugin.llamafactory.cli`) reads a
LLaMA-Factory YAML with DEL's keys, validates them (:mod:`~del_plugin.llamafactory.config`: the rules of
:mod:`del_plugin.hf.config_keys` and :mod:`del_plugin.core.compatibility`, as Axolotl's validator applies them)
before any model loads, then runs LLaMA-Factory's own ``run_exp`` with its SFT trainer made DEL's
(:mod:`~del_plugin.llamafactory.trainer`: :class:`~del_plugin.hf.trainer.DELTrainerMixin` on
``CustomSeq2SeqTrainer``). When training ends it saves the run's config in ``output_dir``, where ``del-eval``
reads the prompt format (:mod:`del_plugin.evaluation.run.llamafactory_config`).

Only :mod:`~del_plugin.llamafactory.trainer` and :mod:`~del_plugin.llamafactory.cli`'s run import LLaMA-Factory;
nothing here imports Axolotl, and nothing below this floor imports this package."""
