"""Shared fixtures: small CatBoost models of every output kind, trained once per session.

Models are trained on synthetic data made here (deterministic seeds), small enough that the
whole grid trains in seconds on 2 cores.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile

# Two host devices, so that sharding over devices is tested on a CPU-only machine. Set before
# JAX initialises its backends; the default device (and so every default computation) is cpu:0.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

import catboost
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaximp
from jaximp._models.oblivious import ObliviousEnsemble

KINDS = ("regression", "binary", "multiclass", "multiregression")


def json_reloaded(model, json_hook=None):
    """``(json dict, CatBoost model reloaded from that JSON export)``; ``json_hook`` may edit the
    dict first. The reloaded model is the reference for non-symmetric trees (catboost issue 2136)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.json")
        model.save_model(path, format="json")
        with open(path) as f:
            model_json = json.load(f)
        if json_hook is not None:
            json_hook(model_json)
            with open(path, "w") as f:
                json.dump(model_json, f)
        reloaded = catboost.CatBoost()
        reloaded.load_model(path, format="json")
    return model_json, reloaded


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


_LOSS = {"regression": "RMSE", "binary": "Logloss", "multiclass": "MultiClass", "multiregression": "MultiRMSE"}


@functools.cache
def train(kind: str = "regression", depth: int = 4, iterations: int = 20, nan_mode: str = "Min",
          nan_fraction: float = 0.0, border_count: int = 32, weighted: bool = False, seed: int = 0,
          n: int = 400, n_features: int = 6):
    """A fitted CatBoost model and its training data ``(model, X, y, w)``, cached per arguments."""
    X, y = make_data(kind, n=n, n_features=n_features, seed=seed, nan_fraction=nan_fraction)
    w = np.random.default_rng(seed + 1).uniform(0.2, 3.0, size=len(X)) if weighted else None
    model = catboost.CatBoost(dict(
        loss_function=_LOSS[kind], depth=depth, iterations=iterations, learning_rate=0.3,
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


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop every compiled program after each test module. A session compiles thousands of XLA
    programs, each holding its own memory mappings; kept alive to the end, they exceed Linux's
    default limit of 65,530 mappings per process and XLA crashes in its next compilation."""
    yield
    from jaximp._rows import batching as _batching

    _batching._compiled.cache_clear()
    jax.clear_caches()


@pytest.fixture(scope="session")
def regression_model():
    """A small fitted regression model with its ensemble: ``(model, ens, X, y)``."""
    model, X, y, _ = train("regression")
    return model, jaximp.from_catboost(model), X, y


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
    return ObliviousEnsemble(
        split_features=jnp.asarray(features), split_borders=jnp.asarray(borders),
        split_bins=jnp.asarray(bins), split_mask=jnp.asarray(mask), borders=jnp.asarray(table),
        leaf_values=jnp.asarray(values), leaf_weights=jnp.asarray(weights),
        scale=jnp.asarray(scale, jnp.float32), bias=jnp.asarray(rng.normal(size=n_outputs), jnp.float32),
        n_features=n_features, feature_names=tuple(str(i) for i in range(n_features)),
        nan_modes=("Min",) * n_features,
    )
