"""Scoring answers: what a set's problems are and how a generation is judged (:mod:`.tasks`), the numeric and
teacher-forced digit metrics (:mod:`.metrics`, :mod:`.teacher_forced`), their statistics (:mod:`.stats`), and the
optional math-verify check, run in a process of its own under a budget (``math_verify_*``). It stands on
:mod:`~del_plugin.evaluation.benchmarks` and writes no file: the reports (:mod:`~del_plugin.evaluation.reports`)
stand on it. Importing this package imports none of its modules."""
