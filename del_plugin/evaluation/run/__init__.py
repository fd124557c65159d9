"""A run: ``del-eval run`` loads a model and generates greedily (:mod:`.runner`, :mod:`.generation`; its cost
beforehand: :mod:`.estimate`), in the prompt format of the training config beside the adapter
(:mod:`.axolotl_config`, :mod:`.llamafactory_config`); ``del-eval score`` scores generations made elsewhere
(:mod:`.score`). Both fill a report (:mod:`~del_plugin.evaluation.reports`) with what
:mod:`~del_plugin.evaluation.scoring` judges. Importing this package imports none of its modules (nor a model
library)."""
