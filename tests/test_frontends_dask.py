"""jaximp.dask on a real distributed.LocalCluster with worker processes.

Oracle: the in-memory functions on the same rows (per-row results identical: each chunk runs
the same compiled block program; global importances agree to float32 rounding of each chunk's
mean, ``rtol=1e-5``).

Each new program compiles in every worker process: by default, permutation importance runs once,
on a dask DataFrame (which it turns into a dask.array); arrays, scorers, weights, groups and
non-symmetric trees run with ``-m slow``.
"""

from __future__ import annotations

import dask.array as da
import dask.dataframe as dd
import distributed
import numpy as np
import pandas as pd
import pytest
from models import make_data, train

import jaximp


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as c:
            yield c


@pytest.fixture(scope="module")
def model():
    model, X, _, _ = train("multiclass", depth=4, iterations=10, nan_fraction=0.05)
    return jaximp.from_catboost(model), X


def test_row_functions_equal_memory(client, model):
    ens, X = model
    Xd = da.from_array(X, chunks=(96, 2))  # uneven row chunks, columns split (joined per chunk)
    phi = jaximp.dask.shap_values(ens, Xd)
    assert isinstance(phi, da.Array) and phi.chunks[0] == Xd.chunks[0] and phi.shape == (len(X), ens.n_features, 3)
    np.testing.assert_array_equal(phi.compute(), jaximp.shap_values(ens, X))
    np.testing.assert_array_equal(jaximp.dask.predict(ens, Xd).compute(), jaximp.predict(ens, X))
    np.testing.assert_array_equal(jaximp.dask.leaf_indices(ens, Xd).compute(), jaximp.leaf_indices(ens, X))
    narrow = jaximp.dask.leaf_indices(ens, Xd, dtype=np.uint8)
    assert narrow.dtype == np.uint8 and narrow.compute().dtype == np.uint8
    np.testing.assert_array_equal(narrow.compute(), jaximp.leaf_indices(ens, X))
    with pytest.raises(TypeError, match="dtype must be an integer type"):
        jaximp.dask.leaf_indices(ens, Xd, dtype=np.float32)
    background = X[:30]
    np.testing.assert_array_equal(
        jaximp.dask.shap_values(ens, Xd, method="interventional", background=background).compute(),
        jaximp.shap_values(ens, X, method="interventional", background=background))


def test_shap_importance_equals_memory(client, model):
    ens, X = model
    got = jaximp.dask.shap_importance(ens, da.from_array(X, chunks=(70, -1)))
    expected = np.abs(np.asarray(jaximp.shap_values(ens, X), np.float64)).mean(0)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * expected.max())
    assert got.shape == (ens.n_features, 3) and got.dtype == np.float32


def test_dataframes_with_categorical_columns(client):
    import catboost

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.choice(list("pqrstu"), 300), "num": rng.normal(size=300).astype(np.float32)})
    y = frame.a.isin(["p", "q"]).astype(float) + frame.num
    model = catboost.CatBoostRegressor(iterations=10, depth=3, cat_features=["a"], random_seed=0, verbose=0,
                                       thread_count=1, allow_writing_files=False).fit(frame, y)
    ens = jaximp.from_catboost(model)
    ddf = dd.from_pandas(frame, npartitions=3)
    phi = jaximp.dask.shap_values(ens, ddf)
    np.testing.assert_array_equal(phi.compute(), jaximp.shap_values(ens, frame))
    np.testing.assert_array_equal(jaximp.dask.predict(ens, ddf).compute(), jaximp.predict(ens, frame))


def test_bad_input(model):
    ens, X = model
    with pytest.raises(TypeError, match="dask.array or a dask.dataframe"):
        jaximp.dask.predict(ens, X)
    with pytest.raises(ValueError, match="2-d"):
        jaximp.dask.predict(ens, da.from_array(X[:, 0]))


@pytest.mark.slow
@pytest.mark.parametrize("kw", [dict(), dict(max_samples=0.5, sample_weight=True, feature_groups=[[0, 1], [3]]),
                                dict(scoring="accuracy", sample_weight=True)])
def test_permutation_importance_equals_memory(client, model, kw):
    ens, X = model
    _, _, y, _ = train("multiclass", depth=4, iterations=10, nan_fraction=0.05)
    if kw.get("sample_weight"):
        kw = dict(kw, sample_weight=np.random.default_rng(0).uniform(0.5, 2.0, len(X)))
    expected = jaximp.permutation_importance(ens, X, y, n_repeats=3, random_state=7, **kw)
    Xd = da.from_array(X, chunks=(150, -1))
    got = jaximp.dask.permutation_importance(ens, Xd, da.from_array(y, chunks=100), n_repeats=3, random_state=7, **kw)
    scale = float(np.abs(expected.importances).max())
    np.testing.assert_allclose(got.importances, expected.importances, rtol=1e-5, atol=1e-5 * scale)
    unused = np.all(expected.importances == 0, axis=1)
    np.testing.assert_array_equal(got.importances[unused], 0.0)


def test_permutation_importance_of_a_dataframe_equals_memory(client, model):
    import dask.dataframe as dd
    import pandas as pd

    ens, X = model
    _, _, y, _ = train("multiclass", depth=4, iterations=10, nan_fraction=0.05)
    frame = pd.DataFrame(X, columns=list(ens.feature_names)).iloc[:, ::-1]  # columns matched by name
    expected = jaximp.permutation_importance(ens, X, y, n_repeats=2, random_state=1)
    got = jaximp.dask.permutation_importance(ens, dd.from_pandas(frame, npartitions=3),
                                             dd.from_pandas(pd.Series(y), npartitions=3), n_repeats=2,
                                             random_state=1)
    scale = float(np.abs(expected.importances).max())
    np.testing.assert_allclose(got.importances, expected.importances, rtol=1e-5, atol=1e-5 * scale)


def test_permutation_importance_refuses_scores_that_are_not_sums_over_rows(model):
    ens, X = model
    _, _, y, _ = train("multiclass", depth=4, iterations=10, nan_fraction=0.05)
    for scoring in ("roc_auc_ovr", "f1_macro"):
        with pytest.raises(ValueError, match="scoring must be None .the model's loss. or one of"):
            jaximp.dask.permutation_importance(ens, da.from_array(X, chunks=(150, -1)), y, scoring=scoring)


@pytest.mark.slow
def test_permutation_importance_of_non_symmetric_trees(client, tmp_path):
    import catboost

    X, y = make_data("regression", n=400, n_features=5, nan_fraction=0.05)
    path = tmp_path / "model.json"
    catboost.CatBoostRegressor(iterations=8, depth=4, grow_policy="Lossguide", max_leaves=10, random_seed=0,
                               verbose=0, thread_count=1, allow_writing_files=False).fit(X, y).save_model(
        str(path), format="json")
    ens = jaximp.from_catboost(str(path))
    expected = jaximp.permutation_importance(ens, X, y, n_repeats=2, random_state=3)
    got = jaximp.dask.permutation_importance(ens, da.from_array(X, chunks=(130, -1)), y, n_repeats=2, random_state=3)
    scale = float(np.abs(expected.importances).max())
    np.testing.assert_allclose(got.importances, expected.importances, rtol=1e-5, atol=1e-5 * scale)
