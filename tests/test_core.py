"""Issue 2: the ensemble, CatBoost import, leaf indices and predictions against CatBoost."""

from __future__ import annotations

import dataclasses
import io
import json
import logging

import catboost
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import KINDS, make_data, summed, train

import jaximp
from jaximp._leaves.oblivious import quantize, raw_prediction


def catboost_raw(model, X):
    """CatBoost's raw prediction with jaximp's layout: ``[N]`` for K == 1 else ``[N, K]``."""
    raw = np.asarray(model.predict(X, prediction_type="RawFormulaVal"), np.float64)
    return raw


def assert_predict_matches(model, ens, X):
    """predict equals RawFormulaVal within float32 rounding; leaf indices equal exactly.

    jaximp sums T float32 leaf values where CatBoost sums in float64: the error is bounded by
    about T * eps32 * max|partial sum|, so atol is 1e-6 * T * max|leaf value sum| (eps32 = 6e-8).
    """
    expected = catboost_raw(model, X)
    got = ens.predict(X)
    assert got.shape == expected.shape and got.dtype == np.float32
    scale = float(np.abs(np.asarray(ens.leaf_values)).max(axis=1).sum(axis=0).max()) + float(np.abs(ens.bias).max())
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6 * ens.n_trees * scale)
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, X), model.calc_leaf_indexes(X))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("depth", [d if d in (1, 2, 5, 8) else pytest.param(d, marks=pytest.mark.slow)
                                   for d in range(1, 9)])
def test_grid_against_catboost(kind, depth):
    model, X, _, _ = train(kind, depth=depth, iterations=12)
    ens = jaximp.from_catboost(model)
    assert (ens.n_trees, ens.depth, ens.n_features) == (model.tree_count_, depth, X.shape[1])
    assert ens.n_outputs == (1 if kind in ("regression", "binary") else 3 if kind == "multiclass" else 2)
    X_new, _ = make_data(kind, n=300, seed=99)
    assert_predict_matches(model, ens, X_new)


@pytest.mark.parametrize("nan_mode", ["Min", "Max"])
@pytest.mark.parametrize("kind", ["regression", "multiclass"])
def test_nan_modes(kind, nan_mode):
    model, X, _, _ = train(kind, depth=5, nan_mode=nan_mode, nan_fraction=0.15)
    ens = jaximp.from_catboost(model)
    assert set(ens.nan_modes) == {nan_mode}
    X_new, _ = make_data(kind, n=300, seed=7, nan_fraction=0.3)
    assert_predict_matches(model, ens, X_new)


def test_nan_in_rows_of_a_model_trained_without_nan():
    # nan_mode="Forbidden" writes "AsIs": CatBoost then evaluates every split on NaN as false.
    model, X, _, _ = train("regression", depth=4, nan_mode="Forbidden")
    ens = jaximp.from_catboost(model)
    assert set(ens.nan_modes) == {"AsIs"}
    X_new, _ = make_data("regression", n=200, seed=3, nan_fraction=0.3)
    assert_predict_matches(model, ens, X_new)


@pytest.mark.parametrize("border_count", [1, 254, 1024])
def test_border_counts(border_count):
    # More than 254 borders switches the bins from uint8 to int32.
    model, X, _, _ = train("regression", depth=6, border_count=border_count, n=3000, iterations=10)
    ens = jaximp.from_catboost(model)
    assert ens.borders.shape[1] <= border_count + 1
    X_new, _ = make_data("regression", n=2000, seed=5)
    assert_predict_matches(model, ens, np.concatenate([X, X_new]))


@pytest.mark.parametrize("border_count", [1, 20, 254, 1024])
def test_both_quantizers_count_the_borders_below(border_count):
    # The fence search (many blocks) and the search loop (one block) are both #{borders < x},
    # on random values, NaN, +-inf and every border itself.
    model, _, _, _ = train("regression", depth=6, border_count=border_count, n=3000, iterations=10,
                           nan_mode="Max", nan_fraction=0.05)
    ens = jaximp.from_catboost(model)
    borders = np.asarray(ens.borders)
    X, _ = make_data("regression", n=500, seed=3, nan_fraction=0.05)
    finite = borders[np.isfinite(borders)]
    on_borders = np.resize(finite, (len(finite) // 6 + 1) * 6).reshape(-1, 6)
    X = np.concatenate([X, on_borders, np.full((2, 6), np.inf), np.full((2, 6), -np.inf)]).astype(np.float32)
    filled = np.where(np.isnan(X), [np.inf if m == "Max" else -np.inf for m in ens.nan_modes], X)
    expected = np.stack([np.searchsorted(borders[f], filled[:, f], side="left") for f in range(6)])
    for fused in (False, True):
        np.testing.assert_array_equal(np.asarray(quantize(ens, jnp.asarray(X), fused=fused)), expected)


@pytest.mark.parametrize("kind", KINDS)
def test_sample_weights(kind):
    model, X, _, w = train(kind, depth=4, weighted=True)
    ens = jaximp.from_catboost(model)
    assert_predict_matches(model, ens, X)
    # The leaf weights are the training weights reaching each leaf (zero on padded leaves).
    np.testing.assert_allclose(np.asarray(ens.leaf_weights).sum(axis=1), w.sum(), rtol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_summed_models_of_mixed_depth(kind):
    model, X, _ = summed(kind, depths=(2, 5, 3))
    ens = jaximp.from_catboost(model)
    assert ens.depth == 5
    mask = np.asarray(ens.split_mask)
    assert sorted(set(mask.sum(axis=1))) == [2, 3, 5]
    assert_predict_matches(model, ens, X)


def test_scale_and_bias():
    model, X, _, _ = train("regression", depth=3)
    model = catboost.sum_models([model], weights=[1.0])
    model.set_scale_and_bias(2.5, 0.75)
    ens = jaximp.from_catboost(model)
    assert float(ens.scale) == 2.5 and np.allclose(ens.bias, 0.75)
    assert_predict_matches(model, ens, X)


def test_files_cbm_and_json(tmp_path):
    model, X, _, _ = train("multiclass", depth=3)
    model.save_model(tmp_path / "m.cbm")
    model.save_model(tmp_path / "m.json", format="json")
    expected = jaximp.from_catboost(model).predict(X)
    np.testing.assert_array_equal(jaximp.from_catboost(str(tmp_path / "m.cbm")).predict(X), expected)
    np.testing.assert_array_equal(jaximp.from_catboost(tmp_path / "m.json").predict(X), expected)
    assert jaximp.from_catboost(model).class_names == (0, 1, 2)
    assert jaximp.from_catboost(model).loss_function == "MultiClass"


# Inputs ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def named():
    """A model trained on a DataFrame with named columns."""
    pd = pytest.importorskip("pandas")
    X, y = make_data("regression", n=300)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    model = catboost.CatBoostRegressor(iterations=10, depth=3, verbose=0, thread_count=1).fit(frame, y)
    return model, jaximp.from_catboost(model), frame


def test_pandas_columns_are_matched_by_name(named):
    model, ens, frame = named
    assert ens.feature_names == tuple(frame.columns)
    shuffled = frame[frame.columns[::-1]].assign(extra=1.0)
    np.testing.assert_array_equal(ens.predict(shuffled), ens.predict(frame.to_numpy()))
    np.testing.assert_allclose(ens.predict(shuffled), model.predict(frame), rtol=1e-5, atol=1e-5)


def test_polars_and_pool_inputs(named):
    pl = pytest.importorskip("polars")
    model, ens, frame = named
    expected = ens.predict(frame.to_numpy())
    polars_frame = pl.from_pandas(frame).select(list(frame.columns[::-1]))
    np.testing.assert_array_equal(ens.predict(polars_frame), expected)
    np.testing.assert_array_equal(ens.predict(catboost.Pool(frame)), expected)


def test_float64_rows_are_compared_like_catboost():
    # CatBoost compares float32 features with float32 borders: float64 rows that are not
    # float32 numbers, and rows equal to a border, must land in CatBoost's leaves.
    model, X, _, _ = train("regression", depth=6)
    ens = jaximp.from_catboost(model)
    rng = np.random.default_rng(11)
    rows = rng.normal(size=(500, X.shape[1]))
    borders = np.asarray(ens.split_borders)[:, 0]
    rows[:50, np.asarray(ens.split_features)[:50, 0]] = borders[:50]
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, rows), model.calc_leaf_indexes(rows))


def test_float64_jax_and_list_inputs(regression_model):
    model, ens, X, _ = regression_model
    expected = ens.predict(X)
    np.testing.assert_array_equal(ens.predict(X.astype(np.float64)), expected)
    np.testing.assert_array_equal(ens.predict(jnp.asarray(X)), expected)
    np.testing.assert_array_equal(ens.predict(X[:5].tolist()), expected[:5])
    np.testing.assert_array_equal(jaximp.predict(ens, X), expected)


@pytest.mark.parametrize(
    "bad, error, match",
    [
        (np.zeros((4, 5), np.float32), ValueError, "must have 6 columns"),
        (np.zeros(6, np.float32), ValueError, "rank 2"),
        (np.zeros((0, 6), np.float32), ValueError, "at least one row"),
        (np.full((2, 6), "a"), TypeError, "must hold numbers"),
        ({"a": 1}, TypeError, "must be a NumPy or JAX array"),
    ],
)
def test_bad_rows(regression_model, bad, error, match):
    _, ens, _, _ = regression_model
    with pytest.raises(error, match=match):
        ens.predict(bad)
    with pytest.raises(error, match="leaf_indices: X"):
        jaximp.leaf_indices(ens, bad)


def test_bad_frames(named):
    _, ens, frame = named
    with pytest.raises(ValueError, match=r"missing \['f2'\]"):
        ens.predict(frame.drop(columns="f2"))
    with pytest.raises(TypeError, match=r"non-numeric columns \['f1'\]"):
        ens.predict(frame.assign(f1="x"))


def test_bad_models(tmp_path):
    with pytest.raises(TypeError, match="model_or_path must be a CatBoost model"):
        jaximp.from_catboost(42)
    with pytest.raises(ValueError, match="existing file"):
        jaximp.from_catboost(tmp_path / "missing.cbm")
    (tmp_path / "bad.cbm").write_bytes(b"not a model")
    with pytest.raises(ValueError, match="not a readable CatBoost model"):
        jaximp.from_catboost(tmp_path / "bad.cbm")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ValueError, match="not a readable CatBoost JSON model"):
        jaximp.from_catboost(tmp_path / "bad.json")
    model, _, _, _ = train("regression", depth=2)
    model.save_model(tmp_path / "m.json", format="json")
    broken = json.loads((tmp_path / "m.json").read_text())
    del broken["oblivious_trees"][0]["leaf_values"]
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    with pytest.raises(ValueError, match="corrupt"):
        jaximp.from_catboost(tmp_path / "broken.json")
    with pytest.raises(ValueError, match="fitted"):
        jaximp.from_catboost(catboost.CatBoostRegressor())
    with pytest.raises(TypeError, match="predict: ens must be a jaximp.ObliviousEnsemble"):
        jaximp.predict(model, np.zeros((2, 6), np.float32))
    with pytest.raises(TypeError, match="leaf_indices: ens must be a jaximp.ObliviousEnsemble"):
        jaximp.leaf_indices(model, np.zeros((2, 6), np.float32))


def test_pool_columns_are_matched_by_name_or_refused(named):
    model, ens, frame = named
    expected = ens.predict(frame.to_numpy())
    np.testing.assert_array_equal(ens.predict(catboost.Pool(frame[frame.columns[::-1]])), expected)
    with pytest.raises(ValueError, match=r"missing \['f0'\]"):
        ens.predict(catboost.Pool(frame.rename(columns={"f0": "other"})))


def test_a_model_without_trees_is_refused():
    X, y = make_data("regression", n=100)
    model = catboost.CatBoostRegressor(iterations=3, depth=2, verbose=0).fit(X, y)
    model.shrink(ntree_end=0)
    with pytest.raises(ValueError, match="has no trees"):
        jaximp.from_catboost(model)


def test_a_model_file_without_its_loss_is_not_taken_for_rmse(tmp_path):
    model, X, y, _ = train("binary", depth=3)
    model.save_model(tmp_path / "m.json", format="json")
    stripped = json.loads((tmp_path / "m.json").read_text())
    stripped["model_info"].pop("params", None)
    stripped["model_info"].pop("loss_function", None)
    (tmp_path / "stripped.json").write_text(json.dumps(stripped))
    ens = jaximp.from_catboost(tmp_path / "stripped.json")
    np.testing.assert_array_equal(ens.predict(X), jaximp.from_catboost(model).predict(X))  # loss-free
    for call in (lambda: jaximp.loss_function_change(ens, X, y),
                 lambda: jaximp.permutation_importance(ens, X, y, n_repeats=1)):
        with pytest.raises(ValueError, match="loss_function='RMSE'"):
            call()
    named = jaximp.from_catboost(tmp_path / "stripped.json", loss_function="Logloss")
    np.testing.assert_allclose(jaximp.loss_function_change(named, X, y),
                               jaximp.loss_function_change(jaximp.from_catboost(model), X, y), rtol=1e-6)


def test_a_model_file_without_leaf_weights_counts_them_on_the_rows(tmp_path):
    """CatBoost counts leaf weights on the rows it explains when the model carries none, and
    asks for data where it needs training weights."""
    model, X, y, _ = train("regression", depth=4)
    model.save_model(tmp_path / "m.json", format="json")
    stripped = json.loads((tmp_path / "m.json").read_text())
    for tree in stripped["oblivious_trees"]:
        tree.pop("leaf_weights")
    (tmp_path / "stripped.json").write_text(json.dumps(stripped))
    reference = catboost.CatBoost()
    reference.load_model(str(tmp_path / "stripped.json"), format="json")
    ens = jaximp.from_catboost(tmp_path / "stripped.json")
    pool = catboost.Pool(X, y)
    np.testing.assert_allclose(jaximp.shap_values(ens, X),
                               reference.get_feature_importance(pool, type="ShapValues")[:, :-1],
                               rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(jaximp.prediction_values_change(ens, X),
                               reference.get_feature_importance(pool, type="PredictionValuesChange"),
                               rtol=1e-5, atol=1e-4)
    for call in (lambda: jaximp.prediction_values_change(ens), lambda: jaximp.Explainer(ens),
                 lambda: jaximp.expected_value(ens), lambda: jaximp.split_importance(ens, "gain")):
        with pytest.raises(ValueError, match="carries no leaf weights"):
            call()


def test_non_symmetric_model_imports_as_a_tree_ensemble():
    """Depthwise models import as jaximp.TreeEnsemble (tests/test_trees.py and
    tests/test_trees_importance.py check its numbers)."""
    X, y = make_data("regression", n=200)
    model = catboost.CatBoostRegressor(iterations=3, depth=3, grow_policy="Depthwise", verbose=0).fit(X, y)
    ens = jaximp.from_catboost(model)
    assert isinstance(ens, jaximp.TreeEnsemble)
    assert ens.n_trees == 3 and ens.depth == 3


# Contracts: jit, recompilation, batching, devices, grad --------------------------------


def test_jit_and_no_jit_agree(regression_model):
    _, ens, X, _ = regression_model
    jitted = jax.jit(raw_prediction)(ens, jnp.asarray(X))
    with jax.disable_jit():
        eager = raw_prediction(ens, jnp.asarray(X))
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


@pytest.mark.parametrize("batch_size", [1, 7, 64, 1000])
def test_results_do_not_depend_on_batch_size(batch_size):
    model, X, _, _ = train("multiclass", depth=6)
    ens = jaximp.from_catboost(model)
    np.testing.assert_array_equal(ens.predict(X, batch_size=batch_size), ens.predict(X))
    np.testing.assert_array_equal(
        jaximp.leaf_indices(ens, X, batch_size=batch_size), jaximp.leaf_indices(ens, X)
    )


def test_sharding_over_devices(regression_model):
    _, ens, X, _ = regression_model
    expected = ens.predict(X)
    np.testing.assert_array_equal(ens.predict(X, devices=1), expected)
    np.testing.assert_array_equal(ens.predict(X, devices=[jax.devices()[0]]), expected)
    if len(jax.devices()) >= 2:
        np.testing.assert_array_equal(ens.predict(X, devices=2, batch_size=64), expected)
        np.testing.assert_array_equal(jaximp.leaf_indices(ens, X, devices=2), jaximp.leaf_indices(ens, X))
    with pytest.raises(ValueError, match="devices must be between 1 and"):
        ens.predict(X, devices=1000)
    with pytest.raises(TypeError, match="devices must be None, an int or a list"):
        ens.predict(X, devices="gpu")
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        ens.predict(X, batch_size=0)


def test_grad_through_predict(regression_model):
    # d(sum_i predict(x_i)) / d leaf_values[t, l] = scale * (number of rows in leaf l of tree t).
    _, ens, X, _ = regression_model
    grad = jax.grad(lambda values: dataclasses.replace(ens, leaf_values=values).predict(X).sum())(ens.leaf_values)
    leaves = jaximp.leaf_indices(ens, X)
    counts = np.stack([np.bincount(leaves[:, t], minlength=ens.n_leaves) for t in range(ens.n_trees)])
    np.testing.assert_allclose(grad[..., 0], float(ens.scale) * counts, rtol=1e-6)
