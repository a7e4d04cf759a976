"""Importers: a trained model (an object or a file of its library) in, an ensemble out.

CatBoost (``.cbm`` / JSON: oblivious trees, or general trees for Depthwise and Lossguide),
XGBoost (JSON / UBJSON), LightGBM (text) and scikit-learn (fitted estimators). Each parses its
library's format into per-tree node lists and leaves the padding to one shared builder; they
import :mod:`jaximp._models` only.
"""
