"""Rows that only CatBoost can read: a ``catboost.Pool`` with categorical features keeps the raw
values to itself, so the drop-in rebuilds each row's evaluated features from what CatBoost tells
of it, the outcome of every split of the model:

* an oblivious model's leaves (:func:`evaluated_from_leaves`): bit ``d`` of a row's leaf in a
  tree is the outcome of the tree's split at depth ``d``;
* a non-symmetric model's leaves tell only the splits on each row's path, so CatBoost reads a
  *probe* instead, oblivious trees over the model's distinct splits (:func:`evaluated_from_pool`).

:func:`evaluated_from_catboost` picks one by the model's layout (:data:`_READERS`). Either way
each evaluated feature gets the smallest bin that every split on it agrees with, and every
kernel then sees exactly CatBoost's split outcomes.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import numpy as np

from jaximp._importers.catboost_json import json_of_model
from jaximp._importers.catboost_trees import preorder
from jaximp._models.ensemble import Ensemble
from jaximp._models.oblivious import ObliviousEnsemble
from jaximp._models.trees import TreeEnsemble
from jaximp._rows.frames import EvaluatedRows


def _smallest_bins(outcomes: np.ndarray, features: np.ndarray, thresholds: np.ndarray,
                   n_evaluated: int) -> np.ndarray:
    """``i64[N, E]`` the smallest bin of each evaluated feature that agrees with every split's
    outcome: ``max(threshold + 1)`` over the splits on it that are true (``bin > threshold``),
    0 where none is.

    Args:
        outcomes: ``[N, n_splits]`` 1 where the row's split is true, else 0.
        features: ``[n_splits]`` the evaluated feature each split reads.
        thresholds: ``[n_splits]`` each split's border index.
        n_evaluated: E.
    """
    bins = np.zeros((outcomes.shape[0], n_evaluated), np.int64)
    if len(features):
        order = np.argsort(features, kind="stable")
        starts = np.flatnonzero(np.r_[True, np.diff(features[order]) != 0])
        lower = np.where(outcomes[:, order] == 1, thresholds[order] + 1, 0)
        bins[:, features[order][starts]] = np.maximum.reduceat(lower, starts, axis=1)
    return bins


def evaluated_from_leaves(ens: ObliviousEnsemble, leaves: np.ndarray) -> EvaluatedRows:
    """``[N, E]`` evaluated rows that reach the given leaves ``i[N, T]`` in every tree: bins
    (``ens.featurizer.bin_dtype``) for a categorical model, float values (``f32``) for a numeric
    one.

    For rows that only CatBoost can read, ``model.calc_leaf_indexes(pool)`` gives every split's
    outcome: bit ``d`` of a row's leaf in tree ``t``. Each evaluated feature then gets the
    smallest bin that every split on it agrees with: the bin itself for a categorical model's
    featurized rows, else a value in that bin, its upper border (``+inf`` past the last).
    """
    t, d = np.nonzero(np.asarray(ens.split_mask))
    outcomes = (np.asarray(leaves)[:, t] >> d) & 1  # [N, n_splits]
    bins = _smallest_bins(outcomes, np.asarray(ens.split_features)[t, d], np.asarray(ens.split_bins)[t, d],
                          ens.n_evaluated)
    if ens.n_searched is not None:  # the kernels take the bins themselves
        return bins.astype(ens.featurizer.bin_dtype).view(EvaluatedRows)
    borders = np.concatenate([np.asarray(ens.borders), np.full((ens.n_evaluated, 1), np.inf, np.float32)], 1)
    return borders[np.arange(ens.n_evaluated)[None, :], bins].view(EvaluatedRows)


_PROBE_BITS = 8  # splits per probe tree (256 leaves each)


def evaluated_from_pool(model: Any, ens: TreeEnsemble, pool: Any) -> EvaluatedRows:
    """``[N, E]`` the bins of the evaluated features of a ``catboost.Pool`` with categorical
    features, whose raw values CatBoost keeps to itself, computed by CatBoost.

    The leaf indices of non-symmetric trees only give the outcomes of the splits on each row's own
    path, while SHAP needs every node's. So the model's distinct splits (evaluated feature, border
    index) become the splits of a *probe*: oblivious trees of ``_PROBE_BITS`` splits each, over the
    model's own ``features_info`` and ``ctr_data``, loaded into CatBoost from JSON; bit ``d`` of a
    row's probe leaf is then CatBoost's outcome of split ``d``, and each evaluated feature gets the
    smallest bin that agrees with every outcome, ``max(j + 1)`` over its splits that are true.
    Costs a JSON export of the model, a load of the probe and its ``calc_leaf_indexes``.

    Args:
        model: the fitted CatBoost model ``ens`` was imported from.
        ens: the model as a ``TreeEnsemble`` with categorical features.
        pool: the rows.

    Returns:
        ``EvaluatedRows`` ``[N, E]`` of ``ens.featurizer.bin_dtype``: every node decides as
        CatBoost does.

    Raises:
        ValueError: ``model`` is not the model of ``ens`` (different trees).
    """
    model_json = json_of_model(model)
    probes = _distinct_splits(model_json, ens)
    keys = np.asarray([key for key, _ in probes], np.int64).reshape(-1, 2)  # [n_splits, 2] (feature, j)
    outcomes = _probe_outcomes(model_json, [split for _, split in probes], pool)
    bins = _smallest_bins(outcomes, keys[:, 0], keys[:, 1], ens.n_evaluated)
    return bins.astype(ens.featurizer.bin_dtype).view(EvaluatedRows)


def _distinct_splits(model_json: dict, ens: TreeEnsemble) -> list[tuple[tuple[int, int], dict]]:
    """``[((evaluated feature, border index), JSON split)]``, one per distinct split of the model's
    nodes, matched to ``ens``'s nodes by the importer's traversal (``preorder``)."""
    features, borders = np.asarray(ens.node_features), np.asarray(ens.node_borders)
    if len(model_json.get("trees", [])) != ens.n_trees:
        raise ValueError("the CatBoost model is not the one the ensemble was imported from")
    found: dict[tuple[int, int], dict] = {}
    for t, tree in enumerate(model_json["trees"]):
        splits = [node["split"] for node, _, _, _ in preorder(tree) if "split" in node]
        if len(splits) != int(np.isfinite(borders[t]).sum()):  # padded nodes have border +inf
            raise ValueError("the CatBoost model is not the one the ensemble was imported from")
        for k, split in enumerate(splits):
            found.setdefault((int(features[t, k]), int(borders[t, k])), split)
    return list(found.items())


def _probe_json(model_json: dict, splits: list[dict]) -> dict:
    """A CatBoost JSON model of oblivious trees over ``splits`` (``_PROBE_BITS`` each, leaf values
    0) that reads the features as ``model_json`` does."""
    trees = []
    for start in range(0, len(splits), _PROBE_BITS):
        chunk = splits[start:start + _PROBE_BITS]
        n = 1 << len(chunk)
        trees.append({"splits": chunk, "leaf_values": [0.0] * n, "leaf_weights": [0.0] * n})
    probe = {"features_info": model_json["features_info"], "oblivious_trees": trees,
             "scale_and_bias": [1.0, [0.0]]}
    if "ctr_data" in model_json:
        probe["ctr_data"] = model_json["ctr_data"]
    return probe


def _probe_outcomes(model_json: dict, splits: list[dict], pool: Any) -> np.ndarray:
    """``i64[N, n_splits]`` CatBoost's outcome of each of ``splits`` (JSON splits of the model
    ``model_json``) on each row of ``pool``: bit ``d`` of a row's leaf in probe tree ``p`` is the
    outcome of split ``p * _PROBE_BITS + d``."""
    if not splits:
        return np.zeros((pool.num_row(), 0), np.int64)
    import catboost

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "probe.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(_probe_json(model_json, splits), f)
        probe = catboost.CatBoost()
        probe.load_model(path, format="json")
    leaves = np.asarray(probe.calc_leaf_indexes(pool), np.int64)  # [N, ceil(n_splits / _PROBE_BITS)]
    s = np.arange(len(splits))
    return (leaves[:, s // _PROBE_BITS] >> (s % _PROBE_BITS)) & 1


# layout -> the evaluated rows of a Pool as CatBoost reads them, (model, ens, pool) -> [N, E]
_READERS = {
    "oblivious": lambda model, ens, pool: evaluated_from_leaves(ens, np.asarray(model.calc_leaf_indexes(pool))),
    "trees": evaluated_from_pool,
}


def evaluated_from_catboost(model: Any, ens: Ensemble, pool: Any) -> EvaluatedRows:
    """``[N, E]`` the evaluated rows of ``pool`` (a ``catboost.Pool`` with categorical features)
    as the fitted CatBoost ``model`` that ``ens`` was imported from reads them: an oblivious
    model's from its leaves, a non-symmetric model's from a probe."""
    return _READERS[ens.layout](model, ens, pool)
