"""Trained models of every library and kind, and the rows they explain, made once per session.

Everything here is deterministic (fixed seeds, one thread) and cached per arguments, so that the
test modules share each model: CatBoost's oblivious models (``train``, ``summed``), its
non-symmetric ones (``catboost_trees``, ``depthwise_multiclass``), its categorical models of both
layouts (``catboost_categorical``, ``catboost_categorical_trees``, ``catboost_combinations``),
XGBoost (``xgboost_model``), LightGBM (``lightgbm_model``, ``lightgbm_deep``), scikit-learn
(``sklearn_model``), the categorical models of XGBoost, LightGBM and scikit-learn
(``library_categorical``), tiny models for brute force (``xgboost_tiny``, ``sklearn_tiny``, small
arguments of the others) and hand-made oblivious ensembles (``random_ensemble``). A model is a
:class:`Fitted` (the library's model, jaximp's ensemble, the training rows) or, for
``train``/``summed``, a tuple. Models are small enough that the whole set trains in seconds on
2 cores.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import json
import os
import re
import shutil
import tempfile
from typing import Any

import catboost
import jax.numpy as jnp
import numpy as np
import pandas as pd

import jaximp

KINDS = ("regression", "binary", "multiclass", "multiregression")
LOSS = {"regression": "RMSE", "binary": "Logloss", "multiclass": "MultiClass", "multiregression": "MultiRMSE"}


@dataclasses.dataclass(frozen=True, eq=False)
class Fitted:
    """A trained model with jaximp's ensemble of it and its training data."""

    model: Any  # the reference: the library's model (CatBoost's non-symmetric ones: reloaded from their JSON export)
    ens: Any  # jaximp.ObliviousEnsemble or jaximp.TreeEnsemble
    X: Any  # the training rows: an array or a DataFrame
    y: Any = None
    trained: Any = None  # CatBoost: the model object as trained, before the JSON round trip
    json: dict | None = None  # CatBoost: the JSON export that ``ens`` was read from
    path: str | None = None  # CatBoost: the JSON file that ``ens`` was read from


# Data ---------------------------------------------------------------------------------------


def make_data(kind: str, n: int = 400, n_features: int = 6, seed: int = 0, nan_fraction: float = 0.0):
    """``(X f32[n, F], y)`` for an output kind; NaN injected at ``nan_fraction`` of cells."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, n_features)).astype(np.float32)
    signal = X[:, 0] * 2 + np.sin(3 * X[:, 1]) + X[:, 2] * X[:, 3]
    if kind == "regression":
        y = signal + 0.1 * rng.normal(size=n)
    elif kind == "binary":
        y = (signal + 0.5 * rng.normal(size=n) > 0).astype(int)
    elif kind == "multiclass":
        y = np.digitize(signal + 0.5 * rng.normal(size=n), [-1.0, 1.0])
    elif kind == "multiregression":
        y = np.stack([signal, X[:, 4] - X[:, 0]], axis=1)
    else:
        raise ValueError(kind)
    if nan_fraction:
        X[rng.random(X.shape) < nan_fraction] = np.nan
    return X, y


def explained_rows(X, n: int = 60, seed: int = 3):
    """Rows to explain: the first training rows, then fresh ones (10% NaN where X has NaN)."""
    rng = np.random.default_rng(seed)
    fresh = rng.normal(size=(n // 2, X.shape[1])).astype(np.float32)
    if np.isnan(X).any():
        fresh[rng.random(fresh.shape) < 0.1] = np.nan
    return np.concatenate([X[: n - n // 2], fresh])


def wide_rows(kind: str, n_features: int = 6):
    """80 rows to explain: 60 like the training data, and 20 wide ones that reach leaves no
    training row reached."""
    X, _ = make_data(kind, n=60, seed=42, n_features=n_features)
    wide = np.random.default_rng(3).normal(scale=3.0, size=(20, n_features)).astype(np.float32)
    return np.concatenate([X, wide])


def sample_weights(n: int, seed: int = 1):
    """Row weights in [0.2, 3)."""
    return np.random.default_rng(seed).uniform(0.2, 3.0, size=n)


# CatBoost: oblivious trees --------------------------------------------------------------------


@functools.cache
def train(kind: str = "regression", depth: int = 4, iterations: int = 20, nan_mode: str = "Min",
          nan_fraction: float = 0.0, border_count: int = 32, weighted: bool = False, seed: int = 0,
          n: int = 400, n_features: int = 6):
    """A fitted CatBoost model and its training data ``(model, X, y, w)``, cached per arguments."""
    X, y = make_data(kind, n=n, n_features=n_features, seed=seed, nan_fraction=nan_fraction)
    w = np.random.default_rng(seed + 1).uniform(0.2, 3.0, size=len(X)) if weighted else None
    model = catboost.CatBoost(dict(
        loss_function=LOSS[kind], depth=depth, iterations=iterations, learning_rate=0.3,
        nan_mode=nan_mode, border_count=border_count, random_seed=seed, verbose=0,
        thread_count=1, allow_writing_files=False,
    ))
    model.fit(X, y, sample_weight=w)
    return model, X, y, w


@functools.cache
def summed(kind: str = "regression", depths: tuple = (2, 5, 3)):
    """``catboost.sum_models`` of models of different depths: ``(model, X, y)``."""
    parts = [train(kind, depth=d, iterations=5, seed=i)[0] for i, d in enumerate(depths)]
    model = catboost.sum_models(parts, weights=[1.0, 0.5, 0.25][: len(parts)])
    _, X, y, _ = train(kind, depth=depths[0], iterations=5, seed=0)
    return model, X, y


def random_ensemble(seed, depths, n_features=4, n_outputs=1, scale=1.0):
    """An ObliviousEnsemble with features repeated within trees and zero-weight leaves (some with
    non-zero values), trees of the given depths padded to the deepest."""
    rng = np.random.default_rng(seed)
    depth, n_trees = max(depths), len(depths)
    grid = np.round(np.linspace(-1.5, 1.5, 7), 2).astype(np.float32)
    features = np.zeros((n_trees, depth), np.int32)
    borders = np.full((n_trees, depth), np.inf, np.float32)
    mask = np.zeros((n_trees, depth), bool)
    values = np.zeros((n_trees, 1 << depth, n_outputs), np.float32)
    weights = np.zeros((n_trees, 1 << depth), np.float32)
    for t, d in enumerate(depths):
        features[t, :d] = rng.integers(0, n_features, d)  # repeats are likely
        borders[t, :d] = rng.choice(grid, d)
        mask[t, :d] = True
        values[t, : 1 << d] = rng.normal(size=((1 << d), n_outputs))
        w = rng.integers(1, 20, 1 << d).astype(np.float32)
        w[rng.random(1 << d) < 0.3] = 0.0
        if d >= 2 and t % 2 == 0:
            w[: 1 << (d - 1)] = 0.0  # a whole zero-weight subtree under the root
        weights[t, : 1 << d] = w
    table = np.full((n_features, grid.size), np.inf, np.float32)
    table[:, :] = grid
    bins = np.where(mask, np.searchsorted(grid, borders), grid.size).astype(np.int32)
    return jaximp.ObliviousEnsemble(
        split_features=jnp.asarray(features), split_borders=jnp.asarray(borders),
        split_bins=jnp.asarray(bins), split_mask=jnp.asarray(mask), borders=jnp.asarray(table),
        leaf_values=jnp.asarray(values), leaf_weights=jnp.asarray(weights),
        scale=jnp.asarray(scale, jnp.float32), bias=jnp.asarray(rng.normal(size=n_outputs), jnp.float32),
        n_features=n_features, feature_names=tuple(str(i) for i in range(n_features)),
        nan_modes=("Min",) * n_features,
    )


# CatBoost: non-symmetric trees (Depthwise, Lossguide) -------------------------------------------


_FILES = tempfile.mkdtemp(prefix="jaximp-tests-")  # model files of the session, removed at its end
atexit.register(shutil.rmtree, _FILES, ignore_errors=True)


def write_json(model_json: dict) -> str:
    """The path of a new file holding ``model_json`` (kept for the session)."""
    path = os.path.join(tempfile.mkdtemp(dir=_FILES), "model.json")
    with open(path, "w") as f:
        json.dump(model_json, f)
    return path


def json_reloaded(model, json_hook=None):
    """``(json dict, CatBoost model reloaded from that JSON export, the file's path)``;
    ``json_hook`` may edit the dict first. The reloaded model is CatBoost's reference for
    non-symmetric trees: a freshly trained model's leaf numbering and SHAP differ from the same
    model's after the round trip (catboost issue 2136)."""
    path = os.path.join(tempfile.mkdtemp(dir=_FILES), "model.json")
    model.save_model(path, format="json")
    with open(path) as f:
        model_json = json.load(f)
    if json_hook is not None:
        json_hook(model_json)
        with open(path, "w") as f:
            json.dump(model_json, f)
    reloaded = catboost.CatBoost()
    reloaded.load_model(path, format="json")
    return model_json, reloaded, path


def _strip_weights(model_json):
    """Delete every leaf's ``"weight"``: a model file that carries no leaf weights."""
    def strip(node):
        node.pop("weight", None)
        if "split" in node:
            strip(node["left"])
            strip(node["right"])

    for tree in model_json["trees"]:
        strip(tree)


CATBOOST_TREES = [  # (kind, grow_policy, depth, max_leaves, nan_mode): catboost_trees' grid on 600 rows
    ("regression", "Depthwise", 6, None, "Min"),
    ("regression", "Lossguide", 10, 64, "Max"),
    ("binary", "Depthwise", 4, None, "Max"),
    ("binary", "Lossguide", 8, 20, "Min"),
    ("multiclass", "Depthwise", 5, None, "Min"),
    ("multiclass", "Lossguide", 6, 16, "Max"),
]


IMPORTANCE_TREES = [  # (kind, grow_policy, depth, max_leaves, nan_mode): the grid of the importances, on 500 rows
    ("regression", "Depthwise", 6, None, "Min"),
    ("regression", "Lossguide", 10, 64, "Max"),
    ("binary", "Lossguide", 8, 20, "Min"),
    ("multiclass", "Depthwise", 5, None, "Max"),
]


@functools.cache
def catboost_trees(kind, grow_policy, depth, max_leaves=None, nan_mode="Min", *, iterations=12, n=600,
                   n_features=6, learning_rate=0.3, thread_count=1, strip_weights=False):
    """A non-symmetric CatBoost model trained on X with 5% NaN, its JSON export (leaf weights
    deleted with ``strip_weights``) and ``ens`` read from that file by ``jaximp.from_catboost``.
    ``max_leaves``, ``nan_mode``, ``learning_rate``, ``thread_count``: None leaves CatBoost's default."""
    X, y = make_data(kind, n=n, n_features=n_features, nan_fraction=0.05)
    params = dict(loss_function=LOSS[kind], depth=depth, iterations=iterations, grow_policy=grow_policy,
                  random_seed=0, verbose=0, allow_writing_files=False)
    optional = dict(max_leaves=max_leaves, nan_mode=nan_mode, learning_rate=learning_rate, thread_count=thread_count)
    params.update({name: value for name, value in optional.items() if value is not None})
    model = catboost.CatBoost(params).fit(X, y)
    model_json, reloaded, path = json_reloaded(model, _strip_weights if strip_weights else None)
    return Fitted(model=reloaded, ens=jaximp.from_catboost(path), X=X, y=y, trained=model, json=model_json, path=path)


def depthwise_multiclass() -> Fitted:
    """A Depthwise MultiClass model (8 trees of depth 4 over 5 features, 500 rows with 5% NaN):
    the non-symmetric layout of the tests of scale and files."""
    return catboost_trees("multiclass", "Depthwise", 4, None, None, iterations=8, n=500, n_features=5)


def from_json(model_json: dict):
    """``jaximp.from_catboost`` of a JSON model given as a dict (through a file, as a user has it)."""
    return jaximp.from_catboost(write_json(model_json))


# CatBoost: categorical features ----------------------------------------------------------------


CAT = ["c0", "c1", "c2", "c3"]
LONG = ["v" * k + str(k) for k in range(5, 150, 12)]  # strings of every CityHash length class


def make_frame(n: int, seed: int, unseen: bool = False) -> pd.DataFrame:
    """Rows with 2 float columns (one with NaN) and 4 categorical ones (strings, ints, long
    strings), interleaved; ``unseen`` replaces some categories by ones no model has seen."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({
        "f0": rng.normal(size=n).astype(np.float32),
        "c0": rng.choice(list("abcd"), n),
        "c1": rng.choice([f"k{i}" for i in range(40)], n),
        "f1": np.where(rng.random(n) < 0.1, np.nan, rng.normal(size=n)).astype(np.float32),
        "c2": rng.integers(0, 7, n),
        "c3": rng.choice(LONG, n),
    })
    if unseen:
        frame.loc[frame.index[::3], "c1"] = "never-seen"
        frame.loc[frame.index[1::4], "c0"] = "zz"
    return frame


def make_target(frame: pd.DataFrame, kind: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    signal = (frame.f0 + (frame.c0 == "a") + pd.to_numeric(frame.c1.str[1:], errors="coerce").fillna(0) / 20
              + frame.c2 / 3
              + frame.c3.str.len() % 3 + 0.3 * rng.normal(size=len(frame))).to_numpy()
    pair = pd.to_numeric(frame.c1.str[1:], errors="coerce").fillna(0) % 3 == 0
    signal = signal + 2.0 * (pair ^ (frame.c3.str.len() % 2 == 0)).to_numpy()  # c1 x c3
    if kind == "regression":
        return signal
    if kind == "binary":
        return (signal > np.median(signal)).astype(int)
    if kind == "multiclass":
        return np.digitize(signal, np.quantile(signal, [0.33, 0.66]))
    return np.stack([signal, frame.f0.to_numpy() - signal], axis=1)


def pool(frame, y=None):
    """A catboost.Pool of raw categorical rows."""
    return catboost.Pool(frame, label=y, cat_features=CAT)


def explained(kind: str):
    """Rows from the training distribution and rows with unseen categories, with targets."""
    frame = pd.concat([make_frame(40, seed=5), make_frame(40, seed=6, unseen=True)], ignore_index=True)
    return frame, make_target(frame, kind, seed=1)


# name: (kind, CatBoost options) of the oblivious categorical models
CATEGORICAL = {
    "one_hot": ("regression", dict(one_hot_max_size=255)),
    "ctr": ("binary", dict(one_hot_max_size=1)),
    "ctr_types": ("binary", dict(one_hot_max_size=4, simple_ctr=["Borders", "Buckets", "Counter",
                                                                  "BinarizedTargetMeanValue"])),
    "combinations_2": ("binary", dict(one_hot_max_size=4, max_ctr_complexity=2)),
    "combinations_4": ("regression", dict(one_hot_max_size=2, max_ctr_complexity=4, depth=5)),
    "categorical_pairs": ("binary", dict(one_hot_max_size=1, max_ctr_complexity=3)),
    "multiclass": ("multiclass", dict(one_hot_max_size=4, max_ctr_complexity=2)),
    "multiregression": ("multiregression", dict(one_hot_max_size=255)),
}


@functools.cache
def catboost_categorical(name: str) -> Fitted:
    """An oblivious model of CATEGORICAL on 500 raw rows (``X`` a DataFrame)."""
    kind, options = CATEGORICAL[name]
    frame = make_frame(500, seed=0)
    y = make_target(frame, kind)
    params = dict(loss_function=LOSS[kind], iterations=12, depth=4, learning_rate=0.3, random_seed=0,
                  verbose=0, thread_count=1, allow_writing_files=False, cat_features=CAT)
    params.update(options)
    model = catboost.CatBoost(params).fit(frame, y)
    return Fitted(model=model, ens=jaximp.from_catboost(model), X=frame, y=y)


# name: (kind, grow_policy, CatBoost options) of the non-symmetric categorical models
CATEGORICAL_TREES = {
    "depthwise_one_hot": ("regression", "Depthwise", dict(one_hot_max_size=255)),
    "depthwise_ctr": ("binary", "Depthwise", dict(one_hot_max_size=1, simple_ctr=["Borders", "Counter"])),
    "lossguide_mixed": ("multiclass", "Lossguide", dict(one_hot_max_size=4, max_leaves=12, nan_mode="Max")),
    "lossguide_ctr_complexity": ("regression", "Lossguide", dict(one_hot_max_size=2, max_leaves=10,
                                                                 max_ctr_complexity=3)),
}


@functools.cache
def catboost_categorical_trees(name: str) -> Fitted:
    """A non-symmetric model of CATEGORICAL_TREES on 400 raw rows: ``trained`` the fresh model,
    ``model`` its JSON round trip, ``ens`` imported from the fresh model."""
    kind, grow_policy, options = CATEGORICAL_TREES[name]
    frame = make_frame(400, seed=0)
    y = make_target(frame, kind)
    params = dict(loss_function=LOSS[kind], iterations=8, depth=4, learning_rate=0.3, random_seed=0,
                  verbose=0, thread_count=1, allow_writing_files=False, cat_features=CAT,
                  grow_policy=grow_policy)
    params.update(options)
    model = catboost.CatBoost(params).fit(frame, y)
    model_json, reloaded, path = json_reloaded(model)
    return Fitted(model=reloaded, ens=jaximp.from_catboost(model), X=frame, y=y, trained=model, json=model_json,
                  path=path)


def unrolled(tree: dict, n_outputs: int) -> dict:
    """An oblivious JSON tree as the binary tree it unrolls to, in the non-symmetric JSON layout:
    the root splits on the last split (the leaf index's highest bit), left is the bit's 0."""
    splits, values, weights = tree["splits"], tree["leaf_values"], tree["leaf_weights"]

    def node(level, leaf):
        if level < 0:
            value = values[leaf * n_outputs:(leaf + 1) * n_outputs]
            return {"value": value[0] if n_outputs == 1 else value, "weight": weights[leaf]}
        return {"split": splits[level], "left": node(level - 1, leaf), "right": node(level - 1, leaf | 1 << level)}

    return node(len(splits) - 1, 0)


@functools.cache
def catboost_combinations(name: str) -> Fitted:
    """A binary oblivious CATEGORICAL model with CTRs over combinations (``trained``), its trees
    written as non-symmetric ones and reloaded by CatBoost (``model``), and their ``ens``:
    Depthwise and Lossguide models build no such CTRs."""
    model = catboost_categorical(name).model

    def hook(model_json):
        model_json["trees"] = [unrolled(tree, 1) for tree in model_json.pop("oblivious_trees")]

    model_json, reloaded, path = json_reloaded(model, hook)
    frame = catboost_categorical(name).X
    return Fitted(model=reloaded, ens=jaximp.from_catboost(path), X=frame, trained=model, json=model_json, path=path)


# XGBoost ------------------------------------------------------------------------------------------


XGBOOST = {  # name: (kind of data, XGBoost parameters)
    "squarederror": ("regression", dict(objective="reg:squarederror", max_depth=6)),
    "logistic": ("binary", dict(objective="binary:logistic", max_depth=4, min_child_weight=0.5)),
    "softprob": ("multiclass", dict(objective="multi:softprob", num_class=3, max_depth=5)),
    "poisson": ("count", dict(objective="count:poisson", max_depth=3)),
    "reg-logistic-lossguide": ("probability", dict(objective="reg:logistic", grow_policy="lossguide",
                                                   max_depth=0, max_leaves=24)),
    "quantiles": ("regression", dict(objective="reg:quantileerror", quantile_alpha=[0.2, 0.8], max_depth=4)),
    "dart": ("regression", dict(booster="dart", rate_drop=0.3, skip_drop=0.0, max_depth=4)),
    "forest-softprob": ("multiclass", dict(objective="multi:softprob", num_class=3, num_parallel_tree=2,
                                           subsample=0.7, colsample_bynode=0.7, max_depth=4)),
}


def xgboost_data(kind, n=400, n_features=6, seed=0):
    """``(X f32[n, F] with 5% NaN, y)`` for a kind of target (``count``, ``probability`` too)."""
    base = {"count": "regression", "probability": "regression"}.get(kind, kind)
    X, y = make_data(base, n=n, n_features=n_features, seed=seed, nan_fraction=0.05)
    if kind == "count":
        y = np.random.default_rng(seed).poisson(np.exp(np.clip(y, -3, 3) / 2))
    elif kind == "probability":
        y = 1.0 / (1.0 + np.exp(-y))
    return X, y


@functools.cache
def xgboost_model(name, rounds=8) -> Fitted:
    """A Booster of XGBOOST trained on 400 rows."""
    import xgboost as xgb

    kind, params = XGBOOST[name]
    X, y = xgboost_data(kind)
    booster = xgb.train(dict(params, eta=0.3, nthread=1, seed=0), xgb.DMatrix(X, y), num_boost_round=rounds)
    return Fitted(model=booster, ens=jaximp.from_xgboost(booster), X=X, y=y)


@functools.cache
def xgboost_tiny(kind) -> Fitted:
    """2 rounds of depth 3 over 4 features (regression or 3 classes): small enough for brute force."""
    import xgboost as xgb

    X, y = xgboost_data(kind, n=300, n_features=4)
    params = dict(max_depth=3, eta=0.5, nthread=1, seed=0)
    if kind == "multiclass":
        params.update(objective="multi:softprob", num_class=3)
    booster = xgb.train(params, xgb.DMatrix(X, y), num_boost_round=2)
    return Fitted(model=booster, ens=jaximp.from_xgboost(booster), X=X, y=y)


# LightGBM -----------------------------------------------------------------------------------------


LIGHTGBM = {  # name: (kind, extra parameters)
    "regression": ("regression", {}),  # NaN in the training rows: missing type NaN
    "regression-none": ("regression", dict(use_missing=False)),  # missing type None: NaN reads 0
    "binary": ("binary", dict(bagging_freq=1, bagging_fraction=0.8)),
    "multiclass": ("multiclass", dict(num_class=3)),
    "rf": ("regression", dict(boosting="rf", bagging_freq=1, bagging_fraction=0.7, feature_fraction=0.8)),
}


def lightgbm_params(objective, **extra):
    return {**dict(objective=objective, learning_rate=0.3, num_threads=1, verbose=-1, seed=0,
                   deterministic=True), **extra}


@functools.cache
def lightgbm_model(name, n_features=6, rounds=12, num_leaves=15) -> Fitted:
    """A Booster of LIGHTGBM trained on 500 rows with 5% NaN."""
    import lightgbm as lgb

    kind, extra = LIGHTGBM[name]
    X, y = make_data(kind, n=500, n_features=n_features, nan_fraction=0.05)
    booster = lgb.train(lightgbm_params(kind, num_leaves=num_leaves, **extra), lgb.Dataset(X, y),
                        num_boost_round=rounds)
    return Fitted(model=booster, ens=jaximp.from_lightgbm(booster), X=X, y=y)


@functools.cache
def lightgbm_deep() -> Fitted:
    """255 leaves, no depth limit: trees deeper than 20, whose paths read up to 13 of 20 features
    (more players than the path-dependent tables take)."""
    import lightgbm as lgb

    rng = np.random.default_rng(2)
    X = rng.normal(size=(600, 20)).astype(np.float32)
    y = np.exp(2 * X[:, 0]) + np.sin(4 * X[:, 1]) + X[:, 2] * X[:, 3] + np.sum(np.sin(3 * X[:, 4:]), axis=1)
    X[rng.random(X.shape) < 0.03] = np.nan
    booster = lgb.train(lightgbm_params("regression", num_leaves=255, max_depth=-1, min_data_in_leaf=1,
                                        min_sum_hessian_in_leaf=0.0), lgb.Dataset(X, y), num_boost_round=3)
    return Fitted(model=booster, ens=jaximp.from_lightgbm(booster), X=X, y=y)


def lightgbm_rows(booster, X, n=120, seed=3, edges=True):
    """Rows to explain: training rows, fresh rows with NaN and zeros, and (``edges``) rows at the
    float32 values around some thresholds (the last float32 at or below, the next one above)."""
    rng = np.random.default_rng(seed)
    fresh = rng.normal(size=(n // 3, X.shape[1])).astype(np.float32)
    fresh[rng.random(fresh.shape) < 0.1] = np.nan
    fresh[rng.random(fresh.shape) < 0.05] = 0.0
    at_thresholds = []
    for tree in booster.dump_model()["tree_info"][:4 if edges else 0]:
        node = tree["tree_structure"]
        while "split_index" in node:
            t = np.float64(node["threshold"])
            below = np.float32(t) if np.float32(t) <= t else np.nextafter(np.float32(t), np.float32(-np.inf))
            for value in (below, np.nextafter(below, np.float32(np.inf))):
                row = X[len(at_thresholds)].copy()
                row[node["split_feature"]] = value
                at_thresholds.append(row)
            node = node["left_child"]
    return np.concatenate([X[: n - n // 3], fresh, np.asarray(at_thresholds, np.float32).reshape(-1, X.shape[1])])


# scikit-learn -------------------------------------------------------------------------------------


def _sklearn_models():
    from sklearn import ensemble, tree

    return {  # name: (estimator, data kind, NaN in X)
        "dt_reg": (lambda: tree.DecisionTreeRegressor(max_depth=6, random_state=0), "regression", True),
        "dt_clf": (lambda: tree.DecisionTreeClassifier(max_depth=5, random_state=0), "multiclass", True),
        "rf_reg": (lambda: ensemble.RandomForestRegressor(8, max_depth=6, random_state=0), "regression", True),
        "rf_clf": (lambda: ensemble.RandomForestClassifier(8, max_depth=6, random_state=0), "binary", True),
        "et_reg2": (lambda: ensemble.ExtraTreesRegressor(6, max_depth=5, random_state=0), "multiregression", True),
        "et_clf": (lambda: ensemble.ExtraTreesClassifier(8, max_depth=6, random_state=0), "multiclass", True),
        "gb_reg": (lambda: ensemble.GradientBoostingRegressor(n_estimators=15, max_depth=3, random_state=0),
                   "regression", False),
        "gb_bin": (lambda: ensemble.GradientBoostingClassifier(n_estimators=10, max_depth=3, random_state=0),
                   "binary", False),
        "gb_multi": (lambda: ensemble.GradientBoostingClassifier(n_estimators=8, max_depth=3, subsample=0.7,
                                                                 random_state=0), "multiclass", False),
        "hgb_reg": (lambda: ensemble.HistGradientBoostingRegressor(max_iter=15, max_leaf_nodes=15, random_state=0),
                    "regression", True),
        "hgb_bin": (lambda: ensemble.HistGradientBoostingClassifier(max_iter=10, random_state=0), "binary", True),
        "hgb_multi": (lambda: ensemble.HistGradientBoostingClassifier(max_iter=6, max_leaf_nodes=8, random_state=0),
                      "multiclass", True),
    }


SKLEARN = tuple(_sklearn_models())


@functools.cache
def sklearn_model(name, n=300, n_features=6) -> Fitted:
    """A scikit-learn model of SKLEARN fitted on rows with 5% NaN where it takes missing values."""
    make, kind, nan = _sklearn_models()[name]
    X, y = make_data(kind, n=n, n_features=n_features, nan_fraction=0.05 if nan else 0.0)
    model = make().fit(X, y)
    return Fitted(model=model, ens=jaximp.from_sklearn(model), X=X, y=y)


@functools.cache
def sklearn_tiny(name) -> Fitted:
    """Multiclass boosting over 4 features small enough for brute force: ``hgb`` (3 iterations of
    5 leaves, 5% NaN) or ``gb`` (3 stages of depth 2)."""
    from sklearn import ensemble

    X, y = make_data("multiclass", n=300, n_features=4, nan_fraction=0.0)
    if name == "hgb":
        X[np.random.default_rng(1).random(X.shape) < 0.05] = np.nan
        model = ensemble.HistGradientBoostingClassifier(max_iter=3, max_leaf_nodes=5, random_state=0)
    else:
        model = ensemble.GradientBoostingClassifier(n_estimators=3, max_depth=2, random_state=0)
    model.fit(X, y)
    return Fitted(model=model, ens=jaximp.from_sklearn(model), X=X, y=y)


# Categorical splits of XGBoost, LightGBM and scikit-learn ---------------------------------------------


STRINGS = [f"s{i}" for i in (3, 0, 7, 1, 9, 4, 2, 8, 6, 5)]  # category order != sorted order
EVENS = list(range(0, 32, 2))
COLUMNS = ["a", "b", "c", "d"]
LIBRARY_CATEGORICAL = ("xgboost-reg", "xgboost-multi", "lightgbm-reg", "sklearn-reg", "sklearn-multi")


def library_frame(n, seed, library, unseen=False):
    """``(DataFrame, y, labels)`` of four columns: ``a``, ``b`` numbers, ``c`` a pandas
    ``category`` of strings (listed out of alphabetical order) and ``d`` integer categories
    (XGBoost: a ``category`` of the even numbers 0..30, so that codes differ from values;
    LightGBM and scikit-learn: plain numbers declared categorical), both with missing values;
    ``unseen``: categories and values never seen in training too."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=(2, n)).astype(np.float32)
    strings = STRINGS + (["new"] if unseen else [])
    c = pd.Categorical(rng.choice(strings, n), categories=strings)
    d = rng.integers(0, 16, n)
    y = a + 2.0 * np.isin(c, ["s3", "s7", "s9", "s2"]) + np.sin(d) + 0.5 * b * (d % 3 == 0)
    y = y + 0.1 * rng.normal(size=n)
    c[rng.random(n) < 0.08] = np.nan
    if library == "xgboost":
        values = pd.Categorical(np.asarray(EVENS)[d], categories=EVENS[::-1])
        values[rng.random(n) < 0.08] = np.nan
    else:
        values = d.astype(np.float32)
        if unseen:  # codes past training, negative, fractional, huge
            values = np.where(rng.random(n) < 0.3, rng.choice([16, 40, -1, -0.5, 2.5, 1e10], n), values)
        values[rng.random(n) < 0.08] = np.nan
    labels = np.digitize(y, np.quantile(y, [1 / 3, 2 / 3]))
    return pd.DataFrame({"a": a, "b": b, "c": c, "d": values}), y, labels


@functools.cache
def library_categorical(case) -> Fitted:
    """A model of LIBRARY_CATEGORICAL (``library-kind``) with categorical splits, about 20 trees.
    XGBoost's regressor splits categories by partitions, its multiclass model ``c`` by one-hot
    splits (``max_cat_to_onehot``)."""
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

    library, kind = case.split("-")
    df, y, labels = library_frame(300, 0, library)
    target = labels if kind == "multi" else y
    if library == "xgboost":
        import xgboost as xgb

        params = dict(max_depth=4, eta=0.3, nthread=1, seed=0, max_cat_to_onehot=1)
        if kind == "multi":
            params.update(objective="multi:softprob", num_class=3, max_depth=3, max_cat_to_onehot=12)  # c one-hot
        model = xgb.train(params, xgb.DMatrix(df, target, enable_categorical=True),
                          num_boost_round=7 if kind == "multi" else 20)
        ens = jaximp.from_xgboost(model)
    elif library == "lightgbm":
        import lightgbm as lgb

        params = dict(objective="regression", num_leaves=8, min_data_in_leaf=5, min_data_per_group=5,
                      cat_smooth=1.0, max_cat_to_onehot=2, num_threads=1, verbose=-1, seed=0)
        model = lgb.train(params, lgb.Dataset(df, target, categorical_feature=["c", "d"]), num_boost_round=20)
        ens = jaximp.from_lightgbm(model)
    else:
        estimator = HistGradientBoostingClassifier if kind == "multi" else HistGradientBoostingRegressor
        model = estimator(max_iter=7 if kind == "multi" else 20, max_leaf_nodes=8, categorical_features=["c", "d"],
                          random_state=0).fit(df, target)
        ens = jaximp.from_sklearn(model)
    return Fitted(model=model, ens=ens, X=df, y=target)


def library_categorical_rows(case):
    """Rows to explain: training rows, then fresh ones (unseen values where the library takes them)."""
    df = library_categorical(case).X
    library = case.split("-")[0]
    fresh, _, _ = library_frame(60, 5, library, unseen=library != "xgboost")  # XGBoost refuses unseen categories
    rows = pd.concat([df.iloc[:40], fresh], ignore_index=True)
    return rows.assign(c=pd.Categorical(rows["c"], categories=fresh["c"].cat.categories))


# CatBoost as a new user trains it: trees without splits, multi-target CTRs, model files -------------------------


CATBOOST_NEW_USER = ("regression", "binary", "multiclass", "multiregression")


def catboost_new_user_frame(n: int = 100, seed: int = 3):
    """``(frame, signal, rng)``: one categorical column of 5 values, the data of a first model."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"c": rng.choice(list("abcde"), n)})
    return frame, (frame.c == "a").to_numpy() + rng.normal(size=n), rng


@functools.cache
def catboost_null_splits(kind: str) -> Fitted:
    """A model of one categorical column, CatBoost's defaults but 40 iterations of depth 4, whose
    export has trees without splits (``"splits": null``: CatBoost found no split for them, each
    adds its one leaf value), ``json`` its JSON export and ``path`` its ``.cbm`` file; ``ens`` is
    read from the model object. For ``multiregression`` the CTRs are per target."""
    frame, signal, rng = catboost_new_user_frame()
    y = {"regression": signal, "binary": (signal > signal.mean()).astype(int),
         "multiclass": np.digitize(signal, np.quantile(signal, [0.33, 0.66])),
         "multiregression": np.stack([signal, rng.normal(size=len(signal)) - signal], axis=1)}[kind]
    model = catboost.CatBoost(dict(loss_function=LOSS[kind], iterations=40, depth=4, random_seed=0, verbose=0,
                                   thread_count=1, allow_writing_files=False, cat_features=["c"])).fit(frame, y)
    directory = tempfile.mkdtemp(dir=_FILES)
    model.save_model(os.path.join(directory, "model.cbm"))
    model.save_model(os.path.join(directory, "model.json"), format="json")
    with open(os.path.join(directory, "model.json")) as f:
        model_json = json.load(f)
    return Fitted(model=model, ens=jaximp.from_catboost(model), X=frame, y=y, json=model_json,
                  path=os.path.join(directory, "model.cbm"))


# name: (loss, CatBoost options) of the multi-target models with CTRs (one CTR table per target)
CATBOOST_MULTI_TARGET = {
    "multi_rmse": ("MultiRMSE", dict(one_hot_max_size=1)),
    "multi_rmse_combinations": ("MultiRMSE", dict(one_hot_max_size=2, max_ctr_complexity=2, depth=5)),
    "multi_logloss": ("MultiLogloss", dict(one_hot_max_size=1)),
}


# XGBoost: missing values, vector leaves, and the models hostile files are made from ---------------


XGBOOST_MISSING = -999.0  # the value that marks missing entries in xgboost_missing_model's rows


@functools.cache
def xgboost_missing_model() -> Fitted:
    """An ``XGBRegressor(missing=-999)`` trained on rows where -999 marks 15% of the cells (its
    ``predict`` reads them as missing, so its ensemble must too); ``X`` holds -999 and no NaN."""
    import xgboost as xgb

    X, y = make_data("regression", n=400, seed=0)
    X[np.random.default_rng(1).random(X.shape) < 0.15] = XGBOOST_MISSING
    model = xgb.XGBRegressor(n_estimators=8, max_depth=4, learning_rate=0.3, missing=XGBOOST_MISSING, nthread=1,
                             random_state=0).fit(X, y)
    return Fitted(model=model, ens=jaximp.from_xgboost(model), X=X, y=y)


def xgboost_missing_rows() -> np.ndarray:
    """Rows for xgboost_missing_model: training rows (with -999), then fresh ones with -999 and
    NaN (both missing to XGBoost)."""
    X = xgboost_missing_model().X
    rng = np.random.default_rng(7)
    fresh = rng.normal(size=(40, X.shape[1])).astype(np.float32)
    fresh[rng.random(fresh.shape) < 0.15] = XGBOOST_MISSING
    fresh[rng.random(fresh.shape) < 0.1] = np.nan
    return np.concatenate([X[:40], fresh])


XGBOOST_VECTOR = {  # name: (kind of data, XGBoost parameters): trees with vector leaves
    "multiregression": ("multiregression", dict(max_depth=3)),
    "multiclass-forest": ("multiclass", dict(objective="multi:softprob", num_class=3, num_parallel_tree=2,
                                             subsample=0.8, max_depth=3)),
}


@functools.cache
def catboost_multi_target(name: str) -> Fitted:
    """A multi-target model of CATBOOST_MULTI_TARGET with CTR features on 400 raw rows, whose JSON
    export loses its per-target CTR tables; ``path`` its ``.cbm`` file."""
    loss, options = CATBOOST_MULTI_TARGET[name]
    frame = make_frame(400, seed=0)
    y = make_target(frame, "multiregression")
    if loss == "MultiLogloss":
        y = (y > np.median(y, axis=0)).astype(int)
    params = dict(loss_function=loss, iterations=10, depth=4, learning_rate=0.3, random_seed=0, verbose=0,
                  thread_count=1, allow_writing_files=False, cat_features=CAT)
    params.update(options)
    model = catboost.CatBoost(params).fit(frame, y)
    path = os.path.join(tempfile.mkdtemp(dir=_FILES), "model.cbm")
    model.save_model(path)
    return Fitted(model=model, ens=jaximp.from_catboost(path), X=frame, y=y, path=path)


@functools.cache
def catboost_mean_ctr() -> Fitted:
    """A regression model with BinarizedTargetMeanValue CTRs over 4 target borders, whose tables hold
    fractional sums (CatBoost's JSON reader rounds them: the reloaded export predicts differently)
    and Counter CTRs; ``path`` its ``.cbm`` file."""
    frame = make_frame(400, seed=0)
    y = make_target(frame, "regression")
    model = catboost.CatBoost(dict(loss_function="RMSE", iterations=12, depth=4, learning_rate=0.3, random_seed=0,
                                   verbose=0, thread_count=1, allow_writing_files=False, cat_features=CAT,
                                   one_hot_max_size=1, max_ctr_complexity=2,
                                   simple_ctr=["BinarizedTargetMeanValue:TargetBorderCount=4", "Counter"]))
    model.fit(frame, y)
    path = os.path.join(tempfile.mkdtemp(dir=_FILES), "model.cbm")
    model.save_model(path)
    return Fitted(model=model, ens=jaximp.from_catboost(path), X=frame, y=y, path=path)


@functools.cache
def xgboost_vector_model(name, rounds=4) -> Fitted:
    """A Booster of XGBOOST_VECTOR with vector leaves (``multi_strategy="multi_output_tree"``):
    every leaf holds K values, K = 2 targets or 3 classes; 5% NaN in X."""
    import xgboost as xgb

    kind, params = XGBOOST_VECTOR[name]
    X, y = xgboost_data(kind)
    if kind == "multiregression":
        y = np.nan_to_num(y)  # XGBoost refuses NaN labels
    params = dict(params, tree_method="hist", multi_strategy="multi_output_tree", eta=0.3, nthread=1, seed=0)
    booster = xgb.train(params, xgb.DMatrix(X, y), num_boost_round=rounds)
    return Fitted(model=booster, ens=jaximp.from_xgboost(booster), X=X, y=y)


XGBOOST_SMALL = ("numeric", "categorical", "vector")


@functools.cache
def xgboost_small(name) -> Fitted:
    """A small XGBoost Booster whose files the hostile-input tests damage: 3 rounds of depth 3
    over numbers with NaN (``numeric``), with a categorical feature of codes 0..5 split by
    partitions (``categorical``; ``X`` holds the codes as numbers), or 2 rounds of vector leaves
    of 2 targets (``vector``). ``X``: 30 rows to predict."""
    import xgboost as xgb

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 4)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    y = np.nan_to_num(X[:, 0]) * 2 + np.sin(np.nan_to_num(X[:, 1]))
    params = dict(max_depth=3, eta=0.5, nthread=1, seed=0)
    if name == "categorical":
        X = np.column_stack([X[:, :2], rng.integers(0, 6, len(X)).astype(np.float32)])
        y = y + 2 * np.isin(X[:, 2], [1, 4])
        data = xgb.DMatrix(X, y, feature_types=["q", "q", "c"], enable_categorical=True)
        booster = xgb.train(dict(params, max_cat_to_onehot=1), data, num_boost_round=3)
    elif name == "vector":
        data = xgb.DMatrix(X, np.stack([y, np.nan_to_num(X[:, 2])], axis=1))
        booster = xgb.train(dict(params, max_depth=2, tree_method="hist", multi_strategy="multi_output_tree"),
                            data, num_boost_round=2)
    else:
        booster = xgb.train(params, xgb.DMatrix(X, y), num_boost_round=3)
    return Fitted(model=booster, ens=jaximp.from_xgboost(booster), X=X[:30], y=y)


def with_tree_sizes(text: str) -> str:
    """``text`` with its header's ``tree_sizes`` written as LightGBM writes them for its trees."""
    starts = [m.start() for m in re.finditer(r"^Tree=", text, re.M)]
    end = text.find("end of trees")
    if not starts or end < 0:
        return text
    sizes = " ".join(str(b - a) for a, b in zip(starts, [*starts[1:], end]))
    return re.sub(r"(?m)^tree_sizes=.*$", lambda _: f"tree_sizes={sizes}", text, count=1)


# LightGBM: zeros as missing, float64 thresholds --------------------------------------------------------


@functools.cache
def lightgbm_zero_model(kind="regression") -> Fitted:
    """``zero_as_missing=True`` (LightGBM's missing type Zero) on 400 rows with 20% zeros and 5%
    NaN: splits whose zeros (and NaN) go against the values next to zero."""
    import lightgbm as lgb

    X, y = make_data(kind, n=400, n_features=4)
    rng = np.random.default_rng(1)
    X[rng.random(X.shape) < 0.2] = 0.0
    X[rng.random(X.shape) < 0.05] = np.nan
    booster = lgb.train(lightgbm_params(kind, num_leaves=8, zero_as_missing=True), lgb.Dataset(X, y),
                        num_boost_round=8)
    return Fitted(model=booster, ens=jaximp.from_lightgbm(booster), X=X, y=y)


@functools.cache
def lightgbm_float64_model() -> Fitted:
    """Trained on float64 rows: ``x0`` ordinary, ``x1`` timestamps in seconds (float32 resolution
    128 s), ``x2`` a precise measurement ``1000 + 0.001 z`` whose thresholds are closer than float32
    resolution (held in bins), ``x3`` with zeros and NaN."""
    import lightgbm as lgb

    rng = np.random.default_rng(4)
    n = 1500
    X = np.column_stack([rng.normal(size=n), 1.7e9 + rng.uniform(0, 86400, n), 1000 + 1e-3 * rng.normal(size=n),
                         rng.normal(size=n)])
    X[rng.random(n) < 0.1, 3] = 0.0
    X[rng.random(n) < 0.05, 3] = np.nan
    y = X[:, 0] + np.sin(X[:, 1] / 5000) + 1000 * (X[:, 2] - 1000) + np.nan_to_num(X[:, 3]) + 0.1 * rng.normal(size=n)
    booster = lgb.train(lightgbm_params("regression", num_leaves=16), lgb.Dataset(X, y), num_boost_round=12)
    return Fitted(model=booster, ens=jaximp.from_lightgbm(booster), X=X, y=y)


# Hostile rows: models trained on named columns, and models whose borders sit at 0 ---------------------------------

ROWS_NAMES = ("income", "age", "rooms", "floor", "year", "area")
ROWS_LIBRARIES = ("catboost", "catboost-depthwise", "xgboost", "lightgbm")


@functools.cache
def rows_named(library: str) -> Fitted:
    """A model of ROWS_LIBRARIES trained on a DataFrame with the columns ROWS_NAMES (5% NaN):
    CatBoost multiclass (oblivious), CatBoost Depthwise regression (``model``: its JSON round
    trip, the reference), XGBoost multiclass (``multi:softprob``), LightGBM regression."""
    kind = "multiclass" if library in ("catboost", "xgboost") else "regression"
    X, y = make_data(kind, n=300, nan_fraction=0.05)
    frame = pd.DataFrame(X, columns=list(ROWS_NAMES))
    if library == "catboost":
        model = catboost.CatBoost(dict(loss_function="MultiClass", depth=4, iterations=8, learning_rate=0.3,
                                       random_seed=0, verbose=0, thread_count=1, allow_writing_files=False))
        model.fit(frame, y)
        return Fitted(model=model, ens=jaximp.from_catboost(model), X=frame, y=y)
    if library == "catboost-depthwise":
        trained = catboost.CatBoost(dict(loss_function="RMSE", depth=4, iterations=6, learning_rate=0.3,
                                         grow_policy="Depthwise", random_seed=0, verbose=0, thread_count=1,
                                         allow_writing_files=False)).fit(frame, y)
        model_json, reloaded, path = json_reloaded(trained)
        return Fitted(model=reloaded, ens=jaximp.from_catboost(path), X=frame, y=y, trained=trained, json=model_json,
                      path=path)
    if library == "xgboost":
        import xgboost as xgb

        booster = xgb.train(dict(objective="multi:softprob", num_class=3, max_depth=3, eta=0.3, nthread=1, seed=0),
                            xgb.DMatrix(frame, y), num_boost_round=5)
        return Fitted(model=booster, ens=jaximp.from_xgboost(booster), X=frame, y=y)
    if library == "lightgbm":
        import lightgbm as lgb

        booster = lgb.train(lightgbm_params("regression", num_leaves=8), lgb.Dataset(frame, y), num_boost_round=8)
        return Fitted(model=booster, ens=jaximp.from_lightgbm(booster), X=frame, y=y)
    raise ValueError(library)


@functools.cache
def rows_zero_borders(library: str) -> Fitted:
    """A model whose splits sit at 0 (columns of -2..2 in steps of 1, so that 0 is a value and a
    border): CatBoost (``x > 0``) or XGBoost (``x < 0``, ``split_condition`` 0)."""
    rng = np.random.default_rng(0)
    X = rng.choice(np.arange(-2.0, 3.0) if library == "xgboost" else np.array([-1.0, 1.0]),
                   size=(400, 2)).astype(np.float32)
    y = 3.0 * (X[:, 0] > 0) - 2.0 * (X[:, 0] < 0) + 0.1 * X[:, 1]
    if library == "xgboost":
        import xgboost as xgb

        booster = xgb.train(dict(max_depth=2, eta=1.0, nthread=1, seed=0), xgb.DMatrix(X, y), num_boost_round=2)
        return Fitted(model=booster, ens=jaximp.from_xgboost(booster), X=X, y=y)
    model = catboost.CatBoost(dict(loss_function="RMSE", depth=2, iterations=3, random_seed=0, verbose=0,
                                   thread_count=1, allow_writing_files=False)).fit(X, y)
    return Fitted(model=model, ens=jaximp.from_catboost(model), X=X, y=y)


# Models for the command line: named columns, saved as their libraries' files -----------------------


CLI_NAMES = ["income", "age", "rooms", "floor", "year_built"]
CLI_CLASSES = np.array(["low", "mid", "high"])  # class names in an order that is not sorted


def cli_frame(kind: str, n: int = 300, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """``(X, y)``: X float32 with the columns ``CLI_NAMES``; y numbers (regression), 0/1
    (binary) or the names of ``CLI_CLASSES`` (multiclass)."""
    X, y = make_data(kind, n=n, n_features=len(CLI_NAMES), seed=seed)
    frame = pd.DataFrame(X, columns=CLI_NAMES)
    return frame, (CLI_CLASSES[y] if kind == "multiclass" else y)


@functools.cache
def cli_xgboost(kind: str) -> Fitted:
    """An XGBoost Booster of 6 rounds of depth 3 on ``cli_frame(kind)`` (multiclass: class codes)."""
    import xgboost as xgb

    X, y = cli_frame(kind)
    params = {"regression": dict(objective="reg:squarederror"), "binary": dict(objective="binary:logistic"),
              "multiclass": dict(objective="multi:softprob", num_class=3)}[kind]
    codes = np.searchsorted(np.sort(CLI_CLASSES), y) if kind == "multiclass" else y
    booster = xgb.train(dict(params, max_depth=3, eta=0.3, nthread=1, seed=0), xgb.DMatrix(X, codes),
                        num_boost_round=6)
    return Fitted(model=booster, ens=jaximp.from_xgboost(booster), X=X, y=codes)


@functools.cache
def cli_lightgbm(kind: str) -> Fitted:
    """A LightGBM Booster of 6 rounds of 7 leaves on ``cli_frame(kind)`` (multiclass: class codes)."""
    import lightgbm as lgb

    X, y = cli_frame(kind)
    extra = dict(num_class=3) if kind == "multiclass" else {}
    codes = np.searchsorted(np.sort(CLI_CLASSES), y) if kind == "multiclass" else y
    booster = lgb.train(lightgbm_params(kind, num_leaves=7, **extra), lgb.Dataset(X, codes), num_boost_round=6)
    return Fitted(model=booster, ens=jaximp.from_lightgbm(booster), X=X, y=codes)


@functools.cache
def cli_sklearn(kind: str) -> Fitted:
    """A random forest of 5 trees of depth 4 on ``cli_frame(kind)``: a regressor, or a classifier
    of the class names ``CLI_CLASSES`` (multiclass)."""
    from sklearn import ensemble

    X, y = cli_frame(kind)
    make = ensemble.RandomForestRegressor if kind == "regression" else ensemble.RandomForestClassifier
    model = make(n_estimators=5, max_depth=4, random_state=0).fit(X, y)
    return Fitted(model=model, ens=jaximp.from_sklearn(model), X=X, y=y)
