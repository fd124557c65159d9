"""A run's report: :class:`~.run_report.RunReport` fills it as a run goes (resuming one that stopped:
:mod:`.resume`); its folder's files are written by :mod:`.store`, read back by :mod:`.files`; the summary numbers
(:mod:`.summary`), the markdown tables (:mod:`.tables`) and the plots (:mod:`.plots`) are made from it. It stands on
:mod:`~del_plugin.evaluation.scoring`; the comparison of reports (:mod:`~del_plugin.evaluation.compare`) stands on
it. Importing this package imports none of its modules."""
