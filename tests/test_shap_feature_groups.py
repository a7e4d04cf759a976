"""Feature groups as players (``feature_groups=`` of ``jaximp.shap_values``,
``interaction_values`` and ``banzhaf_values``) against shapiq's ``ExactComputer`` on the
brute-force game whose players are the groups.

* The games of each library's own trees (tests/oracles.py), a coalition of groups being the
  union of their features: path-dependent and interventional, rows with missing values.
* Closed forms: groups of one feature give the per-feature values, bit for bit; one group of
  every feature gets the whole ``f(x) - v({})``; group values of the loss add up as the
  per-feature ones do.
* CatBoost's categorical players (CTRs over several columns) inside groups.
* Bad groups: clear errors, no result.
"""

from __future__ import annotations

import models
import numpy as np
import pytest
from oracles import assert_close, exact_indices, oblivious_trees, tiny_model

import jaximp

GROUPS = [[0, 2], [1], [3]]  # four features in three groups


def with_missing(x):
    x = np.array(x, np.float32)
    x[0, 1] = np.nan
    x[1, [0, 2]] = np.nan
    return x


LIBRARIES = [("catboost", "regression-Depthwise"), ("xgboost", "multiclass"), ("lightgbm", "regression"),
             ("sklearn", "hgb")]


@pytest.mark.parametrize("method", ["path_dependent", "interventional"])
@pytest.mark.parametrize("library, name", LIBRARIES)
def test_group_shapley_values_against_exact_computer(library, name, method):
    fitted, x, background, trees = tiny_model(library, name)
    background = with_missing((background if background is not None else fitted.X[200:215])[:9])
    background = background if method == "interventional" else None
    x = with_missing(x[:2])
    ens = fitted.ens
    phi = jaximp.shap_values(ens, x, method=method, background=background, feature_groups=GROUPS)
    k = ens.n_outputs
    assert phi.shape == (2, len(GROUPS)) + ((k,) if k > 1 else ())
    for output in range(k):
        for row in range(2):
            expected = exact_indices(trees, x[row], ens.n_features, "SV", 1, output, background, groups=GROUPS)
            got = phi[row] if k == 1 else phi[row, :, output]
            assert_close(got, [expected[(g,)] for g in range(len(GROUPS))])


@pytest.mark.parametrize("method", ["path_dependent", "interventional"])
@pytest.mark.parametrize("index, order", [("k-SII", 2), ("STII", 2), ("BV", 1)])  # at most 2 groups on a path
def test_group_indices_against_exact_computer(index, order, method):
    fitted, x, background, trees = tiny_model("xgboost", "regression")
    background = with_missing(background[:9]) if method == "interventional" else None
    x = with_missing(x[:2])
    inter = jaximp.interaction_values(fitted.ens, x, index=index, order=order, method=method,
                                      background=background, feature_groups=GROUPS)
    assert inter.feature_names == tuple("+".join(fitted.ens.feature_names[c] for c in g) for g in GROUPS)
    assert all(0 <= g < len(GROUPS) for s in inter.subsets for g in s)
    for row in range(2):
        expected = exact_indices(trees, x[row], fitted.ens.n_features, index, order, 0, background, groups=GROUPS)
        assert_close(inter.values[row], [expected[s] for s in inter.subsets])
    banzhaf = jaximp.banzhaf_values(fitted.ens, x, method=method, background=background, feature_groups=GROUPS)
    expected = exact_indices(trees, x[0], fitted.ens.n_features, "BV", 1, 0, background, groups=GROUPS)
    assert_close(banzhaf[0], [expected[(g,)] for g in range(len(GROUPS))])


def test_catboost_symmetric_trees():
    model, X, _, _ = models.train("regression", depth=3, iterations=4)
    ens = jaximp.from_catboost(model)
    groups = [[0, 3], [1, 2, 4], [5]]
    x = with_missing(X[:2])
    phi = jaximp.shap_values(ens, x, feature_groups=groups)
    inter = jaximp.interaction_values(ens, x, index="k-SII", order=2, feature_groups=groups)
    trees = oblivious_trees(ens)
    for row in range(2):
        expected = exact_indices(trees, x[row], ens.n_features, "SV", 1, groups=groups)
        assert_close(phi[row], [expected[(g,)] for g in range(3)])
        expected = exact_indices(trees, x[row], ens.n_features, "k-SII", 2, groups=groups)
        assert_close(inter.values[row], [expected[s] for s in inter.subsets])


def test_groups_of_one_feature_are_the_features():
    fitted = models.xgboost_model("logistic")
    x, background = fitted.X[:30], fitted.X[200:240]
    singletons = [[f] for f in range(fitted.ens.n_features)]
    for kw in (dict(), dict(method="interventional", background=background),
               dict(method="interventional", background=background, model_output="log_loss", y=fitted.y[:30])):
        np.testing.assert_array_equal(jaximp.shap_values(fitted.ens, x, feature_groups=singletons, **kw),
                                      jaximp.shap_values(fitted.ens, x, **kw))
    names = [[name] for name in reversed(fitted.ens.feature_names)]  # by name, in another order
    np.testing.assert_array_equal(jaximp.shap_values(fitted.ens, x, feature_groups=names),
                                  jaximp.shap_values(fitted.ens, x)[:, ::-1])


def test_one_group_gets_the_whole_difference():
    fitted = models.xgboost_model("squarederror")
    x, background = fitted.X[:30], fitted.X[200:240]
    everything = [list(range(fitted.ens.n_features))]
    for method, bg in (("path_dependent", None), ("interventional", background)):
        phi = jaximp.shap_values(fitted.ens, x, method=method, background=bg, feature_groups=everything)
        base = jaximp.expected_value(fitted.ens, method=method, background=bg)
        assert_close(phi[:, 0], np.asarray(jaximp.predict(fitted.ens, x)) - base)
    loss = jaximp.shap_values(fitted.ens, x, method="interventional", background=background, model_output="log_loss",
                              y=fitted.y[:30], feature_groups=[[0, 1, 2], [3, 4, 5]])
    per_feature = jaximp.shap_values(fitted.ens, x, method="interventional", background=background,
                                     model_output="log_loss", y=fitted.y[:30])
    assert_close(loss.sum(axis=1), per_feature.sum(axis=1))


def test_catboost_combinations_inside_groups():
    fitted = models.catboost_categorical("categorical_pairs")
    ens, frame = fitted.ens, fitted.X.iloc[:20]
    several = next(columns for columns in ens.players if len(columns) > 1)
    inside = [list(several)] + [[c] for c in range(ens.n_features) if c not in several]
    phi = jaximp.shap_values(ens, frame, feature_groups=inside)
    assert phi.shape == (20, len(inside))
    assert_close(phi.sum(axis=1), np.asarray(jaximp.shap_values(ens, frame)).sum(axis=1))
    split = [[several[0]]] + [[c] for c in range(ens.n_features) if c != several[0]]
    with pytest.raises(ValueError, match="must be in the same feature group"):
        jaximp.shap_values(ens, frame, feature_groups=split)


@pytest.mark.parametrize("groups, error, message", [
    ([[0, 1], [1, 2], [3, 4, 5]], ValueError, "must not overlap"),
    ([[0, 1], [2]], ValueError, "must cover every column"),
    ([[0, 1, 2], ["nope"], [3, 4, 5]], ValueError, "not a column of the model"),
    ([[0, 1, 2], [9], [3, 4, 5]], ValueError, "outside"),
    ([[0, 1, 2], [], [3, 4, 5]], ValueError, "is empty"),
    ([[0, 1, 2], [1.5], [3, 4, 5]], TypeError, "column names or indices"),
    ("0,1", TypeError, "list of lists"),
    ([0, 1, 2, 3, 4, 5], TypeError, "list of lists"),
])
def test_bad_groups(groups, error, message):
    fitted = models.xgboost_model("squarederror")
    for call in (lambda: jaximp.shap_values(fitted.ens, fitted.X[:5], feature_groups=groups),
                 lambda: jaximp.interaction_values(fitted.ens, fitted.X[:5], feature_groups=groups),
                 lambda: jaximp.banzhaf_values(fitted.ens, fitted.X[:5], feature_groups=groups)):
        with pytest.raises(error, match=message):
            call()
