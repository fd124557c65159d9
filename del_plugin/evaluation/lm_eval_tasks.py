"""Where lm-eval task folders written before del-eval was laid out in parts import their helpers from: their
``del_paper_tasks.py`` reads ``from del_plugin.evaluation.lm_eval_tasks import docs_processor, results_processor``.
The two names live in :mod:`.lm_eval.tasks`; nothing in del-plugin imports this module. ``del-eval lm-eval-tasks
--overwrite`` writes a folder that imports from the new home."""

from .lm_eval.tasks import docs_processor, results_processor

__all__ = ["docs_processor", "results_processor"]
