"""Interaction indices of any order and Banzhaf values (``jaximp.interaction_values``,
``banzhaf_values``, ``interaction_importance``) against shapiq.

* shapiq's ``ExactComputer`` on the brute-force game: the trees of each library read
  independently of jaximp's importers (tests/oracles.py), their path-dependent game enumerated
  over every coalition of the features, every index and order up to 3, multiclass outputs and
  rows with missing values included.
* shapiq's ``TreeExplainer`` (TreeSHAP-IQ) on a scikit-learn random forest.
* The axioms as properties: Shapley values, k-SII, STII and FSII sum to ``f(x) - v({})``; k-SII
  of the largest order equals the Möbius transform; order-1 SII are the SHAP values.
* Bad input: clear errors, no result.

Tolerances: jaximp sums float32 products of the leaves' games where the enumeration is float64:
``rtol=1e-5, atol=1e-5 * max(1, magnitude)`` (``oracles.assert_close``).
"""

from __future__ import annotations

import dataclasses

import models
import numpy as np
import pytest
import shapiq
from oracles import assert_close, exact_indices, oblivious_trees, tiny_model

import jaximp
from jaximp import banzhaf_values, interaction_importance, interaction_values
from jaximp._shap import interactions

slow = pytest.mark.slow

INDEX_ORDERS = [("SV", 1), ("BV", 1), ("SII", 2), ("SII", 3), ("k-SII", 2), ("k-SII", 3), ("STII", 2), ("STII", 3),
                ("FSII", 2), ("FSII", 3), ("BII", 2), ("BII", 3), ("Moebius", 2), ("Moebius", 3)]


def assert_exact(inter, expected, output=None, row=0):
    """Every listed subset's value at ``row`` equals shapiq's, and shapiq's values of the subsets
    not listed are zero."""
    values = np.asarray(inter.values)[row]
    values = values if output is None else values[:, output]
    got = np.array([expected[s] for s in inter.subsets])
    assert_close(values, got)
    listed = set(inter.subsets)
    rest = [expected[s] for s in expected.interaction_lookup if 0 < len(s) <= inter.order and s not in listed]
    np.testing.assert_allclose(rest, 0.0, atol=1e-9)


def with_missing(x):
    x = np.array(x, np.float32)
    x[0, 1] = np.nan
    x[1, [0, 2]] = np.nan
    return x


# Every index and order, one model ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def boosted():
    """A tiny CatBoost Depthwise model of depth 3 (its trees read from its JSON export; paths of
    three features), and rows with missing values."""
    fitted, x, _, trees = tiny_model("catboost", "regression-Depthwise")
    return fitted, with_missing(x[:3]), trees


@pytest.mark.parametrize("read", ["values", "formula"])
@pytest.mark.parametrize("index, order", INDEX_ORDERS)
def test_every_index_against_exact_computer(boosted, index, order, read, monkeypatch):
    read_leaves_by(read, monkeypatch)
    fitted, x, trees = boosted
    inter = interaction_values(fitted.ens, x, index=index, order=order)
    assert inter.index == index and inter.order == order and inter.values.shape == (3, len(inter.subsets))
    assert all(len(s) <= order and list(s) == sorted(s) for s in inter.subsets)
    assert [len(s) for s in inter.subsets] == sorted(len(s) for s in inter.subsets)
    for row in range(3):
        assert_exact(inter, exact_indices(trees, x[row], fitted.ens.n_features, index, order), row=row)


# Every library --------------------------------------------------------------------------------------------------


LIBRARIES = [  # (library, model): multiclass and regression, each library's own trees
    ("catboost", "regression-Depthwise"),
    pytest.param("catboost", "multiclass-Lossguide", marks=slow),
    ("xgboost", "multiclass"),
    pytest.param("xgboost", "regression", marks=slow),
    ("lightgbm", "regression"),
    pytest.param("lightgbm", "multiclass", marks=slow),
    ("sklearn", "hgb"),
]


@pytest.mark.parametrize("library, name", LIBRARIES)
@pytest.mark.parametrize("index, order", [("k-SII", 2), ("FSII", 2)])
def test_libraries_against_exact_computer(library, name, index, order):
    fitted, x, _, trees = tiny_model(library, name)
    x = with_missing(x[:2])
    inter = interaction_values(fitted.ens, x, index=index, order=order)
    k = fitted.ens.n_outputs
    for output in range(k):
        for row in range(2):
            expected = exact_indices(trees, x[row], fitted.ens.n_features, index, order, output)
            assert_exact(inter, expected, output=None if k == 1 else output, row=row)


@pytest.mark.parametrize("index, order", [("k-SII", 2), ("STII", 3)])
def test_catboost_symmetric_trees(index, order):
    model, X, _, _ = models.train("multiclass", depth=3, iterations=4)
    ens = jaximp.from_catboost(model)
    x = with_missing(X[:2])
    inter = interaction_values(ens, x, index=index, order=order)
    trees = oblivious_trees(ens)
    for output in range(ens.n_outputs):
        for row in range(2):
            expected = exact_indices(trees, x[row], ens.n_features, index, order, output)
            assert_exact(inter, expected, output=output, row=row)


# The interventional game ---------------------------------------------------------------------------------------


INTERVENTIONAL = [  # (library, model): the background's leaf tables, and the pairing with background rows
    ("catboost", "regression-Depthwise"),
    ("xgboost", "multiclass"),
    pytest.param("lightgbm", "multiclass", marks=slow),
    pytest.param("sklearn", "hgb", marks=slow),
]


def read_leaves_by(how, monkeypatch):
    """Make every leaf's index values come from ``how``: "values" (value tables, the default on
    small models), "families" (per-row lookups in the family tables: a tuning without value
    tables), "formula" (path-dependent: computed per row), "paired" (interventional: the rows
    paired with the background)."""
    from jaximp._rows import tuning
    from jaximp._shap import interactions

    if how in ("families", "formula"):
        monkeypatch.setattr(tuning, "CPU", dataclasses.replace(tuning.CPU, index_table_entries=0))
    if how == "paired":
        monkeypatch.setattr(interactions, "MAX_TABLE_DEPTH", 0)


@pytest.mark.parametrize("read", ["values", "families", "paired"])
@pytest.mark.parametrize("library, name", INTERVENTIONAL)
@pytest.mark.parametrize("index, order", [("k-SII", 2), ("FSII", 3), ("BV", 1)])
def test_interventional_against_exact_computer(library, name, index, order, read, monkeypatch):
    read_leaves_by(read, monkeypatch)
    fitted, x, background, trees = tiny_model(library, name)
    background = with_missing(background[:9]) if background is not None else with_missing(fitted.X[200:209])
    x = with_missing(x[:2])
    inter = interaction_values(fitted.ens, x, index=index, order=min(order, 2 if library == "lightgbm" else 3),
                               method="interventional", background=background)
    k = fitted.ens.n_outputs
    for output in range(k):
        for row in range(2):
            expected = exact_indices(trees, x[row], fitted.ens.n_features, index, inter.order, output, background)
            assert_exact(inter, expected, output=None if k == 1 else output, row=row)
    base = jaximp.expected_value(fitted.ens, method="interventional", background=background)
    assert_close(np.asarray(inter.baseline), np.asarray(base))


def test_interventional_values_are_flat_in_the_background(xgboost_model):
    """The background enters through per-leaf tables: the Shapley values over it are the
    interventional SHAP values, and a background of repeated rows gives the same numbers."""
    fitted, x = xgboost_model
    background = fitted.X[100:140]
    inter = interaction_values(fitted.ens, x, index="SV", order=1, method="interventional", background=background)
    phi = jaximp.shap_values(fitted.ens, x, method="interventional", background=background)
    assert_close(inter.values, phi[:, [s[0] for s in inter.subsets]])
    repeated = interaction_values(fitted.ens, x, index="SV", order=1, method="interventional",
                                  background=np.concatenate([background] * 5))
    assert_close(repeated.values, inter.values)


def test_interventional_shap_interaction_values(xgboost_model):
    """shap's layout (half the pair's SII off the diagonal, the main effect on it) of the
    interventional game: each row sums to its interventional SHAP values."""
    fitted, x = xgboost_model
    background = fitted.X[100:130]
    inter = jaximp.shap_interaction_values(fitted.ens, x, method="interventional", background=background)
    f = fitted.ens.n_features
    assert inter.shape == (len(x), f, f)
    np.testing.assert_allclose(inter, np.swapaxes(inter, 1, 2), rtol=0, atol=0)
    phi = jaximp.shap_values(fitted.ens, x, method="interventional", background=background)
    assert_close(inter.sum(2), phi)
    sii = interaction_values(fitted.ens, x, index="SII", order=2, method="interventional", background=background)
    for m, s in enumerate(sii.subsets):
        if len(s) == 2:
            assert_close(inter[:, s[0], s[1]], 0.5 * sii.values[:, m])
    one = jaximp.shap_interaction_values(fitted.ens, x[2], method="interventional", background=background)
    np.testing.assert_array_equal(one, inter[2])
    with pytest.raises(ValueError, match="background must be given"):
        jaximp.shap_interaction_values(fitted.ens, x, method="interventional")


# shapiq's TreeExplainer ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("index, order", [("k-SII", 2), ("SII", 3)])
def test_random_forest_against_shapiq_tree_explainer(index, order):
    from sklearn.ensemble import RandomForestRegressor

    X, y = models.make_data("regression", n=300, n_features=5)
    forest = RandomForestRegressor(n_estimators=5, max_depth=5, random_state=0).fit(X, y)
    ens = jaximp.from_sklearn(forest)
    x = X[:3]
    inter = interaction_values(ens, x, index=index, order=order)
    explainer = shapiq.TreeExplainer(model=forest, index=index, max_order=order, min_order=0)
    for row in range(3):
        expected = explainer.explain(x[row])
        assert_close(np.asarray(inter.values)[row], np.array([expected[s] for s in inter.subsets]))
        assert_close(np.asarray(inter.baseline), np.asarray(expected.baseline_value))


# Axioms ----------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def xgboost_model():
    fitted = models.xgboost_model("squarederror")
    return fitted, models.explained_rows(fitted.X, 20)


@pytest.mark.parametrize("index, order", [("SV", 1), ("k-SII", 2), ("k-SII", 3), ("STII", 2), ("FSII", 3)])
def test_efficient_indices_sum_to_the_prediction(xgboost_model, index, order):
    fitted, x = xgboost_model
    inter = interaction_values(fitted.ens, x, index=index, order=order)
    assert_close(inter.values.sum(1) + inter.baseline, jaximp.predict(fitted.ens, x))
    assert_close(np.asarray(inter.baseline), np.asarray(jaximp.expected_value(fitted.ens)))


def test_shapley_values_are_the_shap_values(xgboost_model):
    fitted, x = xgboost_model
    inter = interaction_values(fitted.ens, x, index="SV", order=1)
    phi = jaximp.shap_values(fitted.ens, x)
    columns = [s[0] for s in inter.subsets]
    assert_close(inter.values, phi[:, columns])
    assert_close(np.delete(phi, columns, axis=1), 0.0)
    sii = interaction_values(fitted.ens, x, index="SII", order=2)
    singles = [m for m, s in enumerate(sii.subsets) if len(s) == 1]
    assert_close(sii.values[:, singles], inter.values)  # SII of one feature is its Shapley value


def test_k_sii_of_the_largest_order_is_the_moebius_transform():
    fitted, x, _, _ = tiny_model("catboost", "regression-Depthwise")  # at most three features on a path
    k_sii = interaction_values(fitted.ens, x, index="k-SII", order=3)
    moebius = interaction_values(fitted.ens, x, index="Moebius", order=3)
    assert k_sii.subsets == moebius.subsets
    assert_close(k_sii.values, moebius.values)


def test_banzhaf_values(boosted):
    fitted, x, trees = boosted
    bv = banzhaf_values(fitted.ens, x)
    assert bv.shape == (3, fitted.ens.n_features) and isinstance(bv, np.ndarray)
    for row in range(3):
        expected = exact_indices(trees, x[row], fitted.ens.n_features, "BV", 1)
        assert_close(bv[row], np.array([expected[(i,)] for i in range(fitted.ens.n_features)]))
    assert banzhaf_values(fitted.ens, x[0]).shape == (fitted.ens.n_features,)


def test_interaction_importance_is_the_mean_absolute_value(xgboost_model):
    fitted, x = xgboost_model
    for index in ("SII", "k-SII"):
        mean_abs = interaction_importance(fitted.ens, x, index=index, order=2)
        values = interaction_values(fitted.ens, x, index=index, order=2)
        assert mean_abs.subsets == values.subsets
        assert_close(mean_abs.values, np.abs(values.values).mean(0))


def test_interaction_importance_holds_one_step_of_values(xgboost_model, monkeypatch):
    """Every index, k-SII too (aggregated from SII within each step), is reduced step by step:
    no call holds the ``[N, M]`` values, and the sum does not depend on the steps."""
    fitted, x = xgboost_model
    rows = np.repeat(x, 700 // len(x) + 1, axis=0)[:700]
    whole = interaction_importance(fitted.ens, rows, index="k-SII", order=2)

    def refused(*args, **kwargs):
        raise AssertionError("interaction_importance mapped every row")
    monkeypatch.setattr(interactions, "map_rows", refused)
    for batch_size in (None, 256):
        stepped = interaction_importance(fitted.ens, rows, index="k-SII", order=2, batch_size=batch_size)
        np.testing.assert_array_equal(stepped.values, whole.values)


# Layouts of the result ---------------------------------------------------------------------------------------------


def test_dense_and_shapiq_layouts(boosted):
    fitted, x, _ = boosted
    inter = interaction_values(fitted.ens, x, index="k-SII", order=2)
    dense = inter.to_dense()
    f = fitted.ens.n_features
    assert dense.shape == (3, f, f)
    np.testing.assert_array_equal(dense, np.swapaxes(dense, 1, 2))
    for m, s in enumerate(inter.subsets):
        i, j = (s[0], s[0]) if len(s) == 1 else s
        assert dense[1, i, j] == inter.values[1, m]
    assert dense.sum() == pytest.approx(
        sum(inter.values[:, m].sum() * (1 if len(s) == 1 else 2) for m, s in enumerate(inter.subsets)), rel=1e-5)
    values = inter.to_shapiq(1)
    assert isinstance(values, shapiq.InteractionValues) and values.index == "k-SII"
    assert values.baseline_value == pytest.approx(float(inter.baseline))
    for m, s in enumerate(inter.subsets):
        assert values[s] == pytest.approx(float(inter.values[1, m]))
    one = interaction_values(fitted.ens, x[1], index="k-SII", order=2)
    assert one.values.shape == (len(one.subsets),)
    np.testing.assert_array_equal(one.values, inter.values[1])  # a row alone: the same bits
    assert one.to_dense().shape == (f, f)


@pytest.mark.parametrize("method", ["path_dependent", "interventional"])
def test_value_tables_hold_the_values_computed_per_row(xgboost_model, method, monkeypatch):
    """A leaf's value tables are its values computed for every pattern, bit for bit."""
    fitted, x = xgboost_model
    background = fitted.X[200:230] if method == "interventional" else None
    kw = dict(index="FSII", order=3, method=method, background=background)
    looked_up = interaction_values(fitted.ens, x, **kw).values
    read_leaves_by("formula", monkeypatch)
    np.testing.assert_array_equal(interaction_values(fitted.ens, x, **kw).values, looked_up)


def test_a_rows_values_are_its_own(xgboost_model):
    fitted, x = xgboost_model
    many = np.concatenate([x] * 60)
    together = interaction_values(fitted.ens, many, index="FSII", order=3)
    alone = interaction_values(fitted.ens, x[3:4], index="FSII", order=3)
    batched = interaction_values(fitted.ens, many, index="FSII", order=3, batch_size=7)
    np.testing.assert_array_equal(alone.values[0], together.values[3])
    np.testing.assert_array_equal(batched.values, together.values)


def test_device_rows_give_device_results(xgboost_model):
    import jax

    fitted, x = xgboost_model
    inter = interaction_values(fitted.ens, jax.numpy.asarray(x), index="k-SII", order=2)
    assert isinstance(inter.values, jax.Array)
    np.testing.assert_array_equal(np.asarray(inter.values), interaction_values(fitted.ens, x).values)


# Bad input ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, message", [
    (dict(index="Shapley"), "index must be one of"),
    (dict(index=None), "index must be one of"),
    (dict(order=0), "order must be an int of at least 1"),
    (dict(order=2.0), "order must be an int of at least 1"),
    (dict(order=True), "order must be an int of at least 1"),
    (dict(index="SV", order=2), "pass order=1"),
    (dict(order=9), "largest useful order"),
    (dict(method="exact"), "method must be one of"),
    (dict(background=np.zeros((3, 6), np.float32)), "background is only used"),
    (dict(method="interventional"), "background must be given"),
])
def test_bad_arguments(xgboost_model, kwargs, message):
    fitted, x = xgboost_model
    with pytest.raises(ValueError, match=message):
        interaction_values(fitted.ens, x, **kwargs)


def test_bad_model_and_rows(xgboost_model):
    fitted, x = xgboost_model
    with pytest.raises(TypeError):
        interaction_values("model", x)
    with pytest.raises(ValueError):
        interaction_values(fitted.ens, x[:, :3])
