"""lm-evaluation-harness: ``del-eval lm-eval-tasks`` writes the paper's sets as its tasks (:mod:`.tasks`), scored as
del-eval scores them, and ``del-eval score --lm-eval-samples`` reads its samples back into a del-eval report
(:mod:`.samples`). It stands on :mod:`~del_plugin.evaluation.run`. Importing this package imports none of its
modules."""
