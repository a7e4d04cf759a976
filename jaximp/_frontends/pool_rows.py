"""Rows that only CatBoost can read, for the drop-in: a ``catboost.Pool`` with categorical features
keeps its raw values to itself, so its rows are read once, through a probe model built from the
ensemble alone (:func:`jaximp._rows.pools.pool_rows`), and passed on as evaluated rows, so that
every result the drop-in computes from them reads the Pool once.
"""

from __future__ import annotations

from typing import Any

from jaximp._models.ensemble import Ensemble
from jaximp._rows.frames import EvaluatedRows, is_pool
from jaximp._rows.pools import pool_rows


def evaluated_rows(ens: Ensemble, data: Any, fn_name: str, arg: str = "data") -> Any:
    """``data`` as evaluated rows ``[N, E]`` when it is a ``catboost.Pool`` with categorical
    features and ``ens`` a model with categorical features; anything else as it is."""
    if isinstance(data, EvaluatedRows) or getattr(ens, "featurizer", None) is None or not is_pool(data):
        return data
    return pool_rows(data, ens, fn_name, arg)

