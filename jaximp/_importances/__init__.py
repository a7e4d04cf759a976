"""Importances: from the model alone (PredictionValuesChange, Interaction, split statistics) and
from data (permutation importance, LossFunctionChange, PredictionDiff), with the metrics and
scores they compute as pure JAX functions.

One module per capability (``pvc``, ``interaction``, ``splits``, ``permutation``,
``loss_change``, ``prediction_diff``); each checks its arguments once and picks the kernel of the
model's layout once, from a table keyed by ``ens.layout``; the general-tree and oblivious kernels
that need a module of their own sit beside it (``interaction_trees``, ``permutation_oblivious``,
``permutation_trees``).
"""
