"""Importances: from the model alone (PredictionValuesChange, Interaction, split statistics) and
from data (permutation importance, LossFunctionChange, PredictionDiff), with the metrics they
score as pure JAX functions.
"""
