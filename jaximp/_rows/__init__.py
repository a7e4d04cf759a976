"""Rows: what users pass in, checked and brought to what kernels read.

Arrays and DataFrames are matched to the model's columns (``inputs``, ``frames``); categorical
columns become CatBoost's hashes and evaluated features (``hashing``, ``featurize``,
``ctr_values``) or the category codes of XGBoost, LightGBM and scikit-learn (``codes``); and
kernels run over rows in fixed-size padded steps, sharded over devices (``batching``), each
step in blocks of rows (``blocks``).
"""
