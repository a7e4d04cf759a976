"""Rows that only CatBoost can read, for the drop-in: a ``catboost.Pool`` with categorical features
keeps its raw values to itself, so its rows are read once, through a probe model built from the
ensemble alone (:func:`jaximp._rows.pools.pool_rows`), and passed on as evaluated rows, so that
every result the drop-in computes from them reads the Pool once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jaximp._models.ensemble import Ensemble
from jaximp._rows.frames import EvaluatedRows, is_pool
from jaximp._rows.pools import pool_rows


def evaluated_rows(ens: Ensemble, data: Any, fn_name: str, arg: str = "data") -> Any:
    """``data`` as evaluated rows ``[N, E]`` when it is a ``catboost.Pool`` with categorical
    features and ``ens`` a model with categorical features; anything else as it is."""
    if isinstance(data, EvaluatedRows) or getattr(ens, "featurizer", None) is None or not is_pool(data):
        return data
    return pool_rows(data, ens, fn_name, arg)


# layout -> i64[T] the leaves of each tree of the ensemble (padding left out)
_LEAF_COUNTS = {
    "oblivious": lambda ens: 1 << np.asarray(ens.split_mask).sum(axis=1),
    "trees": lambda ens: np.isfinite(np.asarray(ens.node_borders)).sum(axis=1) + 1,
}


def evaluated_from_pool(model: Any, ens: Ensemble, pool: Any) -> EvaluatedRows:
    """``[N, E]`` the evaluated rows of ``pool`` for ``ens``, after checking that ``model`` (a
    fitted CatBoost model) is the one ``ens`` was imported from; the rows themselves need only
    ``ens`` (:func:`jaximp._rows.pools.pool_rows`).

    Raises:
        ValueError: ``model`` has other trees than ``ens``.
    """
    counts = np.asarray(model.get_tree_leaf_counts(), np.int64)
    if len(counts) != ens.n_trees or not np.array_equal(counts, _LEAF_COUNTS[ens.layout](ens)):
        raise ValueError("the CatBoost model is not the one the ensemble was imported from")
    return pool_rows(pool, ens, "evaluated_from_pool", "pool")
