"""Split outcomes, leaf indices and predictions against each library, for every layout and library.

Oracles: CatBoost's ``calc_leaf_indexes`` and ``predict(prediction_type="RawFormulaVal")`` (for
non-symmetric trees on the model reloaded from its JSON export, CatBoost's reference), XGBoost's
``predict(output_margin=True)`` and ``pred_leaf=True``, LightGBM's ``predict(raw_score=True)`` and
``pred_leaf=True`` (also on hand-edited model texts for its decision rules around zero),
scikit-learn's raw output (``decision_function`` of boosted classifiers, ``predict_proba``,
``predict``) and ``apply``; ``np.searchsorted`` for the quantizers; closed forms for the
gradient of predict.

Tolerances: leaf indices exactly. CatBoost's oblivious models: jaximp sums T float32 leaf
values where CatBoost sums in float64, so ``atol = 1e-6 * T * max |leaf value sum|``
(``rtol=1e-6``); the others ``rtol=1e-5, atol=1e-5 * max(1, magnitude)``.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import logging
import re

import catboost
import jax
import jax.numpy as jnp
import lightgbm as lgb
import models
import numpy as np
import pytest
import xgboost as xgb
from oracles import LIGHTGBM_ZERO, assert_close, lightgbm_mean_scale, raw_output

import jaximp
from jaximp._leaves import heap, masks, trees
from jaximp._leaves.heap import heap_of
from jaximp._leaves.masks import masks_of
from jaximp._leaves.oblivious import quantize, raw_prediction
from jaximp._rows.inputs import as_features
from jaximp._rows.tuning import tuning_for

slow = pytest.mark.slow

TUNING = tuning_for(jax.devices()[0])  # the kernels' tuning on the default device


# CatBoost's oblivious models ---------------------------------------------------------------------------------


def assert_predict_matches(model, ens, X):
    """predict equals RawFormulaVal within float32 rounding; leaf indices equal exactly.

    jaximp sums T float32 leaf values where CatBoost sums in float64: the error is bounded by
    about T * eps32 * max|partial sum|, so atol is 1e-6 * T * max|leaf value sum| (eps32 = 6e-8).
    """
    expected = raw_output(model, X)
    got = ens.predict(X)
    assert got.shape == expected.shape and got.dtype == np.float32
    scale = float(np.abs(np.asarray(ens.leaf_values)).max(axis=1).sum(axis=0).max()) + float(np.abs(ens.bias).max())
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6 * ens.n_trees * scale)
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, X), model.calc_leaf_indexes(X))


@pytest.mark.parametrize("kind", models.KINDS)
@pytest.mark.parametrize("depth", [d if d in (1, 2, 5, 8) else pytest.param(d, marks=slow) for d in range(1, 9)])
def test_oblivious_models_against_catboost(kind, depth):
    model, X, _, _ = models.train(kind, depth=depth, iterations=12)
    ens = jaximp.from_catboost(model)
    assert (ens.n_trees, ens.depth, ens.n_features) == (model.tree_count_, depth, X.shape[1])
    assert ens.n_outputs == (1 if kind in ("regression", "binary") else 3 if kind == "multiclass" else 2)
    X_new, _ = models.make_data(kind, n=300, seed=99)
    assert_predict_matches(model, ens, X_new)


@pytest.mark.parametrize("nan_mode", ["Min", "Max"])
@pytest.mark.parametrize("kind", ["regression", "multiclass"])
def test_nan_modes(kind, nan_mode):
    model, X, _, _ = models.train(kind, depth=5, nan_mode=nan_mode, nan_fraction=0.15)
    ens = jaximp.from_catboost(model)
    assert set(ens.nan_modes) == {nan_mode}
    X_new, _ = models.make_data(kind, n=300, seed=7, nan_fraction=0.3)
    assert_predict_matches(model, ens, X_new)


def test_nan_in_rows_of_a_model_trained_without_nan():
    # nan_mode="Forbidden" writes "AsIs": CatBoost then evaluates every split on NaN as false.
    model, X, _, _ = models.train("regression", depth=4, nan_mode="Forbidden")
    ens = jaximp.from_catboost(model)
    assert set(ens.nan_modes) == {"AsIs"}
    X_new, _ = models.make_data("regression", n=200, seed=3, nan_fraction=0.3)
    assert_predict_matches(model, ens, X_new)


@pytest.mark.parametrize("border_count", [1, 254, 1024])
def test_border_counts(border_count):
    # More than 254 borders switches the bins from uint8 to int32.
    model, X, _, _ = models.train("regression", depth=6, border_count=border_count, n=3000, iterations=10)
    ens = jaximp.from_catboost(model)
    assert ens.borders.shape[1] <= border_count + 1
    X_new, _ = models.make_data("regression", n=2000, seed=5)
    assert_predict_matches(model, ens, np.concatenate([X, X_new]))


@pytest.mark.parametrize("border_count", [1, 20, 254, 1024])
def test_both_quantizers_count_the_borders_below(border_count):
    # The fence search (many blocks) and the search loop (one block) are both #{borders < x},
    # on random values, NaN, +-inf and every border itself.
    model, _, _, _ = models.train("regression", depth=6, border_count=border_count, n=3000, iterations=10,
                           nan_mode="Max", nan_fraction=0.05)
    ens = jaximp.from_catboost(model)
    borders = np.asarray(ens.borders)
    X, _ = models.make_data("regression", n=500, seed=3, nan_fraction=0.05)
    finite = borders[np.isfinite(borders)]
    on_borders = np.resize(finite, (len(finite) // 6 + 1) * 6).reshape(-1, 6)
    X = np.concatenate([X, on_borders, np.full((2, 6), np.inf), np.full((2, 6), -np.inf)]).astype(np.float32)
    filled = np.where(np.isnan(X), [np.inf if m == "Max" else -np.inf for m in ens.nan_modes], X)
    expected = np.stack([np.searchsorted(borders[f], filled[:, f], side="left") for f in range(6)])
    for fused in (False, True):
        np.testing.assert_array_equal(np.asarray(quantize(ens, jnp.asarray(X), fused=fused, tuning=TUNING)), expected)


@pytest.mark.parametrize("kind", models.KINDS)
def test_sample_weights(kind):
    model, X, _, w = models.train(kind, depth=4, weighted=True)
    ens = jaximp.from_catboost(model)
    assert_predict_matches(model, ens, X)
    # The leaf weights are the training weights reaching each leaf (zero on padded leaves).
    np.testing.assert_allclose(np.asarray(ens.leaf_weights).sum(axis=1), w.sum(), rtol=1e-4)


@pytest.mark.parametrize("kind", models.KINDS)
def test_summed_models_of_mixed_depth(kind):
    model, X, _ = models.summed(kind, depths=(2, 5, 3))
    ens = jaximp.from_catboost(model)
    assert ens.depth == 5
    mask = np.asarray(ens.split_mask)
    assert sorted(set(mask.sum(axis=1))) == [2, 3, 5]
    assert_predict_matches(model, ens, X)


def test_scale_and_bias():
    model, X, _, _ = models.train("regression", depth=3)
    model = catboost.sum_models([model], weights=[1.0])
    model.set_scale_and_bias(2.5, 0.75)
    ens = jaximp.from_catboost(model)
    assert float(ens.scale) == 2.5 and np.allclose(ens.bias, 0.75)
    assert_predict_matches(model, ens, X)


def test_float64_rows_are_compared_like_catboost():
    # CatBoost compares float32 features with float32 borders: float64 rows that are not
    # float32 numbers, and rows equal to a border, must land in CatBoost's leaves.
    model, X, _, _ = models.train("regression", depth=6)
    ens = jaximp.from_catboost(model)
    rng = np.random.default_rng(11)
    rows = rng.normal(size=(500, X.shape[1]))
    borders = np.asarray(ens.split_borders)[:, 0]
    rows[:50, np.asarray(ens.split_features)[:50, 0]] = borders[:50]
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, rows), model.calc_leaf_indexes(rows))


@pytest.mark.parametrize("library", ["catboost", "xgboost"])
def test_leaf_indices_in_steps_on_host_and_device(library):
    """Leaf indices in several steps (the last one partly padding) equal the library's, for rows
    in host memory (int32, tree-major memory: Fortran order), given as a ``jax.Array`` (left on
    the device) and traced under ``jax.jit``; a 1-D row gives that row's leaves."""
    X, y = models.make_data("regression", n=2500, n_features=6, seed=4, nan_fraction=0.05)
    if library == "catboost":
        model = catboost.CatBoostRegressor(iterations=30, depth=6, verbose=0, allow_writing_files=False).fit(X, y)
        ens, expected = jaximp.from_catboost(model), model.calc_leaf_indexes(X)
    else:
        model = xgb.XGBRegressor(n_estimators=30, max_depth=5).fit(X, y)
        ens, expected = jaximp.from_xgboost(model), model.get_booster().predict(xgb.DMatrix(X), pred_leaf=True)
    leaves = jaximp.leaf_indices(ens, X, batch_size=1024, progress=False)
    assert leaves.dtype == np.int32 and leaves.flags["F_CONTIGUOUS"]
    np.testing.assert_array_equal(leaves, expected)
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, X), expected)  # one default step
    on_device = jaximp.leaf_indices(ens, jnp.asarray(X, jnp.float32), batch_size=1024)
    assert isinstance(on_device, jax.Array) and on_device.shape == expected.shape
    np.testing.assert_array_equal(np.asarray(on_device), expected)
    traced = jax.jit(lambda e, x: jaximp.leaf_indices(e, x))(ens, jnp.asarray(X[:700], jnp.float32))
    np.testing.assert_array_equal(np.asarray(traced), expected[:700])
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, X[3]), expected[3])


def test_leaf_indices_in_a_narrower_or_wider_dtype():
    """``dtype``: any integer type that holds the model's leaf numbers gives the library's leaves
    (CatBoost's depth-6 leaves in ``u8`` and ``i8``, its own ``u32``, XGBoost's node numbers,
    scikit-learn's node ids past 255 in ``u16``); a type too narrow is refused naming one that
    fits, as is a narrow type for a traced model whose numbers cannot be read, and a type that is
    not an integer; rows on the device keep the type."""
    from sklearn.tree import DecisionTreeRegressor

    X, y = models.make_data("regression", n=2000, n_features=6, seed=5, nan_fraction=0.0)
    cat = catboost.CatBoostRegressor(iterations=20, depth=6, verbose=0, allow_writing_files=False).fit(X, y)
    booster = xgb.XGBRegressor(n_estimators=10, max_depth=5).fit(X, y)
    tree = DecisionTreeRegressor(max_leaf_nodes=300, random_state=0).fit(X, y)
    cases = [(jaximp.from_catboost(cat), cat.calc_leaf_indexes(X), (np.uint8, np.int8, np.uint32, np.int64)),
             (jaximp.from_xgboost(booster), booster.get_booster().predict(xgb.DMatrix(X), pred_leaf=True),
              (np.uint8, np.int16)),
             (jaximp.from_sklearn(tree), tree.apply(X)[:, None], (np.uint16, np.int64))]
    assert tree.apply(X).max() > 255
    for ens, expected, dtypes in cases:
        for dtype in dtypes:
            leaves = jaximp.leaf_indices(ens, X, dtype=dtype, batch_size=1024, progress=False)
            assert leaves.dtype == dtype
            np.testing.assert_array_equal(leaves, expected)
    with pytest.raises(ValueError, match=r"dtype uint8 cannot hold .* \(up to \d+\); use uint16"):
        jaximp.leaf_indices(cases[2][0], X, dtype=np.uint8)
    with pytest.raises(ValueError, match="leaf numbers of a traced model are not known"):
        jax.jit(lambda e, x: jaximp.leaf_indices(e, x, dtype=np.uint8))(cases[1][0], jnp.asarray(X, jnp.float32))
    ens = cases[0][0]
    for bad in (np.float32, bool, "leaves"):
        with pytest.raises(TypeError, match="dtype must be an integer type"):
            jaximp.leaf_indices(ens, X, dtype=bad)
    on_device = jaximp.leaf_indices(ens, jnp.asarray(X, jnp.float32), dtype=np.uint8)
    assert isinstance(on_device, jax.Array) and on_device.dtype == jnp.uint8
    np.testing.assert_array_equal(np.asarray(on_device), cases[0][1])
    swapped = np.dtype(np.int32).newbyteorder()
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, X, dtype=swapped), cases[0][1])  # on the host: as asked
    with pytest.raises(ValueError, match="machine's byte order"):
        jaximp.leaf_indices(ens, jnp.asarray(X, jnp.float32), dtype=swapped)
    if not jax.config.jax_enable_x64:
        with pytest.raises(ValueError, match="needs jax.config.update"):
            jaximp.leaf_indices(ens, jnp.asarray(X, jnp.float32), dtype=np.int64)


# Every library's trees -------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Reference:
    """An ensemble, the rows it takes, the library's raw output of them (jaximp's layout: ``[N]``
    for K == 1) and leaf indices (None where the library numbers its leaves otherwise), and
    ``check()``: what else the library tells of the model."""

    ens: object
    rows: object
    raw: np.ndarray
    leaves: np.ndarray | None
    check: object = None


def _catboost_trees(index):
    kind, grow_policy, depth, max_leaves, _ = models.CATBOOST_TREES[index]
    fitted = models.catboost_trees(*models.CATBOOST_TREES[index])
    x = models.explained_rows(fitted.X, 200)

    def check():
        assert fitted.ens.depth <= depth and fitted.ens.n_leaves <= (max_leaves or 1 << depth)

    return Reference(fitted.ens, x, raw_output(fitted.model, x), fitted.model.calc_leaf_indexes(x), check)


def _catboost_categorical(name):
    fitted = models.catboost_categorical(name)
    frame, _ = models.explained(models.CATEGORICAL[name][0])
    data = models.pool(frame)
    return Reference(fitted.ens, frame, raw_output(fitted.model, data), fitted.model.calc_leaf_indexes(data))


def _catboost_categorical_trees(name):
    """Rows with NaN in a float column and unseen categories; the model reloaded from its JSON
    export numbers the leaves (tests/test_importers_catboost.py checks it predicts as trained)."""
    fitted = models.catboost_categorical_trees(name)
    frame, _ = models.explained(models.CATEGORICAL_TREES[name][0])
    data = models.pool(frame)
    return Reference(fitted.ens, frame, raw_output(fitted.model, data), fitted.model.calc_leaf_indexes(data))


def _xgboost(name):
    fitted = models.xgboost_model(name)
    x = models.explained_rows(fitted.X, 200)

    def check():
        assert fitted.ens.n_trees == len(fitted.model.get_dump())

    leaves = fitted.model.predict(xgb.DMatrix(x), pred_leaf=True)
    return Reference(fitted.ens, x, raw_output(fitted.model, x), leaves, check)


def _lightgbm(name):
    """A random forest (``boosting="rf"``) predicts the mean of its trees (``Booster.predict``
    divides by the iterations, ``GBDT::Predict``), which jaximp's raw score is; LightGBM's
    ``raw_score=True`` skips that division."""
    fitted = models.lightgbm_model(name)
    booster, ens, X = fitted.model, fitted.ens, fitted.X
    x = models.lightgbm_rows(booster, X)

    def check():
        if name == "rf":
            assert_close(jaximp.predict(ens, x), booster.predict(x))  # the forest's prediction: the mean
        assert ens.n_trees == booster.num_trees() and ens.n_features == X.shape[1]
        assert ens.feature_names == tuple(booster.feature_name())
        assert ens.loss_function == {"regression": "RMSE", "binary": "Logloss", "multiclass": "MultiClass"}[
            models.LIGHTGBM[name][0]]

    return Reference(ens, x, raw_output(booster, x) * lightgbm_mean_scale(booster), booster.predict(x, pred_leaf=True),
                     check)


def _sklearn(name):
    """GradientBoosting's ``apply`` is ``[N, stages, K]``: stage-major trees; HistGradientBoosting
    numbers no leaves: its node index is checked against the predictor's values."""
    fitted = models.sklearn_model(name)
    model, ens, X = fitted.model, fitted.ens, fitted.X
    x = models.explained_rows(X, 200)
    expected = raw_output(model, x)

    def check():
        if not hasattr(model, "apply"):
            leaves = np.asarray(jaximp.leaf_indices(ens, x))
            values = [p.nodes["value"] for stage in model._predictors for p in stage]
            k = model.n_trees_per_iteration_
            summed = sum(np.eye(k)[t % k] * values[t][leaves[:, t], None] for t in range(len(values)))
            assert_close(summed + model._baseline_prediction.reshape(-1), expected.reshape(len(x), k))
        assert ens.feature_names == tuple(str(i) for i in range(X.shape[1]))
        assert ens.class_names == tuple(getattr(model, "classes_", np.zeros(0)).tolist())

    leaves = model.apply(x).reshape(len(x), -1) if hasattr(model, "apply") else None
    return Reference(ens, x, expected, leaves, check)


def _library_categorical(case):
    """DataFrames (each library coding them its own way) with categories unseen in training,
    negative and fractional codes and NaN."""
    fitted = models.library_categorical(case)
    model, rows = fitted.model, models.library_categorical_rows(case)

    def check():
        assert fitted.ens.node_categorical is not None and np.asarray(fitted.ens.node_categorical).any()

    leaves = None
    if isinstance(model, xgb.Booster):
        leaves = model.predict(xgb.DMatrix(rows, enable_categorical=True), pred_leaf=True)
    elif isinstance(model, lgb.Booster):
        leaves = model.predict(rows, pred_leaf=True)
    return Reference(fitted.ens, rows, raw_output(model, rows), leaves, check)


SKLEARN_DEFAULT = ("dt_reg", "rf_clf", "gb_multi", "hgb_bin")  # each new shape costs seconds of compilation


def _case(build, arg, name, default=True):
    return pytest.param(build, arg, id=name, marks=() if default else slow)


GENERAL = (
    [_case(_catboost_trees, i, f"catboost-trees-case{i}") for i in range(len(models.CATBOOST_TREES))]
    + [_case(_catboost_categorical, name, f"catboost-categorical-{name}") for name in models.CATEGORICAL]
    + [_case(_catboost_categorical_trees, name, f"catboost-categorical-trees-{name}")
       for name in models.CATEGORICAL_TREES]
    + [_case(_xgboost, name, f"xgboost-{name}") for name in models.XGBOOST]
    + [_case(_lightgbm, name, f"lightgbm-{name}") for name in models.LIGHTGBM]
    + [_case(_sklearn, name, f"sklearn-{name}", name in SKLEARN_DEFAULT) for name in models.SKLEARN]
    + [_case(_library_categorical, case, f"{case.split('-')[0]}-categorical-{case.split('-')[1]}")
       for case in models.LIBRARY_CATEGORICAL]
)


@pytest.mark.parametrize("build, arg", GENERAL)
def test_against_the_library(build, arg):
    case = build(arg)
    got = jaximp.predict(case.ens, case.rows)
    assert got.shape == case.raw.shape and got.dtype == np.float32
    assert_close(got, case.raw)
    if case.leaves is not None:
        np.testing.assert_array_equal(jaximp.leaf_indices(case.ens, case.rows), case.leaves)
    if case.check is not None:
        case.check()


# The heap descent of general trees -------------------------------------------------------------------------------


def border_rows(ens, n=600, seed=0):
    """``f32[n, E]`` rows whose every column takes each of its nodes' borders, the floats just
    below and above them, NaN, -inf, +inf, 0.0 and -0.0, in shuffled combinations."""
    rng = np.random.default_rng(seed)
    features, borders = np.asarray(ens.node_features).ravel(), np.asarray(ens.node_borders).ravel()
    edges = np.float32([np.nan, -np.inf, np.inf, 0.0, -0.0])
    columns = []
    for f in range(ens.n_evaluated):
        b = np.unique(borders[(features == f) & np.isfinite(borders)])
        with np.errstate(over="ignore"):  # the float above the largest: +inf
            below, above = np.nextafter(b, np.float32(-np.inf)), np.nextafter(b, np.float32(np.inf))
        values = np.concatenate([edges, b, below, above])
        columns.append(rng.permutation(np.resize(values, max(n, values.size)))[:n])
    return np.stack(columns, axis=1).astype(np.float32)


def descent_leaves(params, x, block=256):
    """The leaves of rows ``x f32[n, E]`` by the general trees' leaf kernel with ``params``."""
    return np.asarray(jax.jit(functools.partial(trees.leaf_kernel, block=block, tuning=TUNING))(params, jnp.asarray(x)))


HEAP = [case for case in GENERAL if case.id.split("-")[0] in ("catboost", "xgboost", "lightgbm", "sklearn")
        and "categorical-" not in case.id.removeprefix("catboost-") and not case.marks]


@pytest.mark.parametrize("build, arg", HEAP + [_case(_catboost_categorical_trees, name, f"catboost-trees-{name}")
                                               for name in models.CATEGORICAL_TREES])
def test_heap_and_mask_descents_equal_the_pointer_descent_at_every_border(build, arg):
    """Every model of bounded depth descends as a heap over bins, and every model of at most 32
    leaves can read them as leaf masks (deeper ones do): both reach the leaves the pointer descent
    (checked against each library above) reaches, on rows at, just below and just above each
    border, and at NaN, infinities and signed zeros (a featurized model: its rows)."""
    case = build(arg)
    ens = case.ens
    x = border_rows(ens) if ens.featurizer is None else np.asarray(as_features(case.rows, ens, "test")).T
    expected = descent_leaves((ens, None), x)
    by_heap, by_masks = heap_of(ens), masks_of(ens)
    assert (by_heap is None) == (ens.depth > heap.MAX_DEPTH)  # LightGBM's multiclass trees: 11 deep
    assert (by_masks is None) == (ens.n_leaves > masks.MAX_LEAVES)
    assert by_heap is None or by_heap.depth == ens.depth
    for layout in (by_heap, by_masks):
        if layout is not None:
            np.testing.assert_array_equal(descent_leaves((ens, layout), x), expected)
    assert trees.prepare(ens)[1] is (by_masks if by_heap is None else by_heap)


def test_deep_trees_of_few_leaves_read_as_masks_against_lightgbm():
    """LightGBM's leaf-wise trees of 31 leaves grow deeper than a heap holds, and read their leaves
    as masks at any depth: LightGBM's leaves and raw scores, NaN and thresholds included."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(2000, 10)).astype(np.float32)
    y = np.exp(2 * X[:, 0]) + np.sin(4 * X[:, 1]) + X[:, 2] * X[:, 3] + np.sum(np.sin(3 * X[:, 4:]), axis=1)
    X[rng.random(X.shape) < 0.03] = np.nan
    booster = lgb.train(models.lightgbm_params("regression", num_leaves=31, max_depth=-1, min_data_in_leaf=1,
                                               min_sum_hessian_in_leaf=0.0), lgb.Dataset(X, y), num_boost_round=30)
    ens = jaximp.from_lightgbm(booster)
    assert ens.depth > heap.MAX_DEPTH and ens.n_leaves <= masks.MAX_LEAVES
    assert heap_of(ens) is None and isinstance(trees.prepare(ens)[1], masks.Masks)
    rows = models.lightgbm_rows(booster, X)
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, rows), booster.predict(rows, pred_leaf=True))
    assert_close(jaximp.predict(ens, rows), booster.predict(rows, raw_score=True))
    x = border_rows(ens)
    np.testing.assert_array_equal(descent_leaves(trees.prepare(ens), x), descent_leaves((ens, None), x))


def test_heap_of_sixteen_bit_bins_against_scikit_learn():
    """A forest with more than 254 distinct thresholds on a feature reads 16-bit bins, and its
    leaves at every threshold equal scikit-learn's ``apply``."""
    from sklearn.ensemble import RandomForestRegressor

    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 2)).astype(np.float32)
    model = RandomForestRegressor(n_estimators=12, max_depth=9, random_state=0).fit(X, X[:, 0] * X[:, 1])
    ens = jaximp.from_sklearn(model)
    layout = heap_of(ens)
    assert layout is not None and layout.bits == 16 and layout.borders.shape[1] > 254
    x = border_rows(ens)
    x = x[np.isfinite(x).all(axis=1)]  # scikit-learn's forests take no NaN or infinity
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, x), model.apply(x))
    assert_close(jaximp.predict(ens, x), model.predict(x))


def test_models_the_heap_does_not_fit_descend_by_pointers():
    """Set-membership splits, trees deeper than the heap's limit and ensembles batched by
    ``jax.vmap`` have no heap layout; they predict as their library does (above)."""
    categorical = models.library_categorical(models.LIBRARY_CATEGORICAL[0]).ens
    assert categorical.node_categorical is not None and heap_of(categorical) is None
    deep = models.lightgbm_deep().ens
    assert deep.depth > heap.MAX_DEPTH and heap_of(deep) is None
    ens = models.xgboost_model("squarederror").ens
    x = border_rows(ens, n=64)
    stacked = jax.tree_util.tree_map(lambda a: jnp.stack([a, a]), ens)
    predict = functools.partial(trees.predict_kernel, block=64, tuning=TUNING)
    batched = jax.vmap(lambda e: predict(trees.prepare(e), jnp.asarray(x)))(stacked)
    assert_close(batched[0, :, 0], jaximp.predict(ens, x))


def test_sklearn_rows_equal_to_thresholds():
    """Diabetes columns hold float64 values a float32 apart, so sklearn's thresholds (float64
    midpoints of float32 values) often round up to the float32 of a row: rows equal to every
    threshold go where scikit-learn sends them (x32 <= t), which rounding the thresholds to the
    nearest float32 would not."""
    from sklearn import ensemble
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    model = ensemble.RandomForestRegressor(4, max_depth=8, random_state=0).fit(X, y)
    ens = jaximp.from_sklearn(model)
    probe = []
    for estimator in model.estimators_:
        t = estimator.tree_
        for node in np.flatnonzero(t.children_left >= 0):
            row = X[node % len(X)].copy()
            row[t.feature[node]] = t.threshold[node]
            probe.append(row)
    probe = np.asarray(probe)  # float64, cast to float32 by both
    thresholds = np.concatenate([e.tree_.threshold[e.tree_.children_left >= 0] for e in model.estimators_])
    assert np.sum(np.float32(thresholds) > thresholds) > 20  # rounding to nearest would send these right
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, probe), model.apply(probe))
    assert_close(jaximp.predict(ens, probe), model.predict(probe))


def test_sklearn_hist_gradient_boosting_thresholds_and_nan_splits():
    """HistGradientBoosting compares float64 values with float64 thresholds: float32 rows on
    either side of every threshold (the float32 at or below it, the next one up), and NaN, go
    where it sends them, including splits on missing values alone (threshold +inf)."""
    from sklearn import ensemble

    X, y = models.make_data("regression", n=400, n_features=4)
    X[:150, 1] = np.nan
    y[:150] += 3.0  # missingness matters: splits on NaN
    model = ensemble.HistGradientBoostingRegressor(max_iter=8, max_leaf_nodes=12, random_state=0).fit(X, y)
    ens = jaximp.from_sklearn(model)
    nodes = [p.nodes for stage in model._predictors for p in stage]
    assert any(np.isinf(n["num_threshold"][n["is_leaf"] == 0]).any() for n in nodes)
    probe = []
    for n in nodes:
        for node in n[n["is_leaf"] == 0]:
            t = node["num_threshold"]
            below = np.float32(t) if np.float32(t) <= t else np.nextafter(np.float32(t), np.float32(-np.inf))
            for value in (below, np.nextafter(below, np.float32(np.inf)), np.nan):
                row = X[len(probe) % len(X)].copy()
                row[node["feature_idx"]] = value
                probe.append(row)
    probe = np.asarray(probe, np.float32)
    assert_close(jaximp.predict(ens, probe), model.predict(probe))
    # the splits on NaN count as splits
    weight = np.asarray(jaximp.split_importance(ens, "weight"))
    assert weight.sum() == sum(int((n["is_leaf"] == 0).sum()) for n in nodes)


@pytest.mark.parametrize("case", ["xgboost-reg", "lightgbm-reg"])
def test_categorical_code_matrices(case):
    """Numbers are the codes: unseen codes, negative and fractional ones, huge ones and NaN go
    where the library sends them."""
    fitted = models.library_categorical(case)
    model, ens = fitted.model, fitted.ens
    rng = np.random.default_rng(9)
    codes = np.asarray([0, 1, 5, 9, 15, 16, 31, 40, 95, -1, -0.5, -0.0, 0.5, 2.7, 1e10, -1e10, np.nan])
    x = np.column_stack([rng.normal(size=(200, 2)), rng.choice(codes, (200, 2))]).astype(np.float32)
    data = (xgb.DMatrix(x, feature_types=["q", "q", "c", "c"], feature_names=models.COLUMNS, enable_categorical=True)
            if isinstance(model, xgb.Booster) else x)
    assert_close(np.reshape(jaximp.predict(ens, x), (len(x), -1)), raw_output(model, data).reshape(len(x), -1))
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, x), model.predict(data, pred_leaf=True))


# LightGBM's decision rules around zero, on edited model texts --------------------------------------------------


F32 = np.float32
SPECIALS = np.asarray([0.0, -0.0, LIGHTGBM_ZERO, -LIGHTGBM_ZERO, np.nextafter(F32(LIGHTGBM_ZERO), F32(1)),
                       np.nextafter(F32(-LIGHTGBM_ZERO), F32(-1)), 1e-36, -1e-36, 1e-30, -1e-30, 1e-45, -1e-45,
                       0.3, -0.3, 0.5, -0.5, np.nan], np.float32)
THRESHOLDS = [0.0, LIGHTGBM_ZERO, -LIGHTGBM_ZERO, 1e-36, -1e-36, 1e-35, -1e-35, 0.3, -0.3, 0.1234567891234,
              float(np.nextafter(F32(-LIGHTGBM_ZERO), F32(-1))), float(np.nextafter(F32(LIGHTGBM_ZERO), F32(1)))]


@functools.cache
def stump_text():
    X = np.random.default_rng(0).normal(size=(300, 2)).astype(np.float32)
    booster = lgb.train(models.lightgbm_params("regression", num_leaves=2, min_data_in_leaf=5), lgb.Dataset(X, X[:, 0]),
                        num_boost_round=1)
    return booster.model_to_string()


def edited(threshold, decision_type):
    """The one-split model with its threshold and decision type replaced."""
    text = stump_text()
    text = re.sub(r"\nthreshold=\S+", f"\nthreshold={threshold!r}", text, count=1)
    return re.sub(r"\ndecision_type=\S+", f"\ndecision_type={decision_type}", text, count=1)


@pytest.mark.parametrize("decision_type", [0, 2, 4, 6, 8, 10])  # None, Zero, NaN x default right / left
def test_lightgbm_decision_rules_around_zero(decision_type, tmp_path):
    """Every threshold near zero, every missing type and default direction, on the values next
    to zero, in the zero band and NaN: jaximp's leaves are LightGBM's (missing type Zero included,
    whose zero band goes the default way while the values around it go by the threshold)."""
    x = np.stack([SPECIALS, np.zeros_like(SPECIALS)], axis=1)
    path = tmp_path / "model.txt"
    for threshold in THRESHOLDS:
        text = edited(threshold, decision_type)
        path.write_text(text)
        leaves = lgb.Booster(model_str=text).predict(x, pred_leaf=True)[:, 0]
        ens = jaximp.from_lightgbm(path)
        np.testing.assert_array_equal(jaximp.leaf_indices(ens, x)[:, 0], leaves, err_msg=repr(threshold))


# Contracts: jit, recompilation, grad ----------------------------------------------------------------------------


def test_jit_and_no_jit_agree(regression_model):
    _, ens, X, _ = regression_model
    jitted = jax.jit(functools.partial(raw_prediction, tuning=TUNING))(ens, jnp.asarray(X))
    with jax.disable_jit():
        eager = raw_prediction(ens, jnp.asarray(X), tuning=TUNING)
    np.testing.assert_allclose(jitted, eager, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ens.predict(X), jitted[:, 0], rtol=1e-6, atol=1e-6)


def count_compilations(fn):
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    logger = logging.getLogger("jax")
    logger.addHandler(handler)
    try:
        with jax.log_compiles():
            fn()
    finally:
        logger.removeHandler(handler)
    return buffer.getvalue().count("Compiling ")


def test_second_call_does_not_recompile(regression_model):
    _, ens, X, _ = regression_model
    ens.predict(X[:300], batch_size=128)
    assert count_compilations(lambda: ens.predict(X[100:400], batch_size=128)) == 0
    # A new N with the same step shape does not recompile either.
    assert count_compilations(lambda: ens.predict(X[:257], batch_size=128)) == 0


def test_grad_through_predict(regression_model):
    # d(sum_i predict(x_i)) / d leaf_values[t, l] = scale * (number of rows in leaf l of tree t).
    _, ens, X, _ = regression_model
    grad = jax.grad(lambda values: dataclasses.replace(ens, leaf_values=values).predict(X).sum())(ens.leaf_values)
    leaves = jaximp.leaf_indices(ens, X)
    counts = np.stack([np.bincount(leaves[:, t], minlength=ens.n_leaves) for t in range(ens.n_trees)])
    np.testing.assert_allclose(grad[..., 0], float(ens.scale) * counts, rtol=1e-6)
