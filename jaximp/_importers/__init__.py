"""Importers: a trained model (an object or a file of its library) in, an ensemble out.

CatBoost (``.cbm`` / JSON: oblivious trees, or general trees for Depthwise and Lossguide),
XGBoost (JSON / UBJSON), LightGBM (text) and scikit-learn (fitted estimators). Each parses its
library's trees into :class:`~jaximp._importers.padded.ParsedTree` and its model-level fields
into :class:`~jaximp._importers.padded.ModelFields`; :func:`~jaximp._importers.padded.pad_trees`
lays general trees out as one padded ``TreeEnsemble`` (CatBoost's oblivious trees take their own
layout, with the same model-level fields). The importers import :mod:`jaximp._models` only.
"""
