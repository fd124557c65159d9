"""``del-eval compare``: reports side by side (:mod:`.comparison`, its tables :mod:`.tables`), and the verdict of a
method against a baseline on paired problems and seeds (:mod:`.verdict`: its inputs checked by
:mod:`.verdict_inputs`, its numbers in :mod:`.paired_verdict`, its text and forest plot in :mod:`.verdict_report`).
It stands on :mod:`~del_plugin.evaluation.reports`. Importing this package imports none of its modules."""
