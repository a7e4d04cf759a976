"""LossFunctionChange, permutation importance and Interaction of non-symmetric trees (TreeEnsemble).

Oracles:
* CatBoost's ``get_feature_importance`` (LossFunctionChange, Interaction) on the model reloaded
  from its JSON export, CatBoost's reference for Depthwise/Lossguide trees (a freshly trained
  model's numbers change after the round trip; catboost issue 2136, jaximp issue 10);
* a brute force with the same row draws: CatBoost predicts every permuted copy of X and scores
  it with its own ``eval_metrics``; sklearn's ``permutation_importance`` on the sklearn-compatible
  CatBoost estimator, within sampling error (its permutations are its own);
* CatBoost's depth-first walk (catboost/libs/fstr/feature_str.cpp, ``DFS``) transcribed over the
  JSON trees in float64, for Interaction's per-output ("abs") variant where CatBoost's MultiClass
  score is cancellation noise.

Tolerances as in tests/test_permutation.py and tests/test_trees.py: float32 scores of magnitude ~1
over a few hundred rows agree to rtol/atol 1e-5; normalised Interaction (magnitude 100) to
``rtol=1e-5, atol=1e-5 * magnitude``.
"""

from __future__ import annotations

import functools
import json

import catboost
import jax
import numpy as np
import pytest
from conftest import json_reloaded, make_data
from sklearn.inspection import permutation_importance as sklearn_permutation_importance

import jaximp
from jaximp._importances.permutation import _row_draws, as_key
from jaximp._importers.catboost_trees import tree_ensemble_from_json

RTOL, ATOL = 1e-5, 1e-5
_LOSS = {"regression": "RMSE", "binary": "Logloss", "multiclass": "MultiClass"}
GRID = [  # (kind, grow_policy, depth, max_leaves, nan_mode)
    ("regression", "Depthwise", 6, None, "Min"),
    ("regression", "Lossguide", 10, 64, "Max"),
    ("binary", "Lossguide", 8, 20, "Min"),
    ("multiclass", "Depthwise", 5, None, "Max"),
]


@functools.cache
def trained(kind, grow_policy, depth, max_leaves, nan_mode):
    """``(ens, CatBoost model reloaded from JSON, X with NaN, y, weights, json dict)``."""
    X, y = make_data(kind, n=500, n_features=6, nan_fraction=0.05)
    params = dict(loss_function=_LOSS[kind], depth=depth, iterations=12, grow_policy=grow_policy,
                  nan_mode=nan_mode, learning_rate=0.3, random_seed=0, verbose=0, thread_count=1,
                  allow_writing_files=False)
    if max_leaves:
        params["max_leaves"] = max_leaves
    model = catboost.CatBoost(params).fit(X, y)
    model_json, reloaded = json_reloaded(model)
    w = np.random.default_rng(1).uniform(0.2, 3.0, size=len(X))
    return tree_ensemble_from_json(model_json), reloaded, X, y, w, model_json


def case_id(case):
    return "-".join(map(str, case[:3]))


@pytest.fixture(scope="module", params=GRID, ids=case_id)
def case(request):
    return trained(*request.param)


def catboost_interaction(model, n_features):
    """CatBoost's Interaction rows as a symmetric ``[F, F]`` matrix."""
    matrix = np.zeros((n_features, n_features))
    for f, g, score in model.get_feature_importance(type="Interaction"):
        matrix[int(f), int(g)] = matrix[int(g), int(f)] = score
    return matrix


def assert_close(got, expected):
    expected = np.asarray(expected, np.float64)
    magnitude = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(np.asarray(got, np.float64), expected, rtol=RTOL, atol=RTOL * magnitude)


# 1. LossFunctionChange -------------------------------------------------------------------


@pytest.mark.parametrize("case", [  # RMSE of TreeEnsembles by default: test_trees.py, test_trees_no_weights.py
    pytest.param(GRID[0], marks=pytest.mark.slow), pytest.param(GRID[1], marks=pytest.mark.slow), GRID[2], GRID[3]],
    indirect=True, ids=case_id)
def test_loss_function_change_matches_catboost(case):
    ens, model, X, y, w, _ = case
    for weight in (None, w):
        want = model.get_feature_importance(catboost.Pool(X, y, weight=weight), type="LossFunctionChange")
        got = jaximp.loss_function_change(ens, X, y, sample_weight=weight)
        assert got.shape == (X.shape[1],) and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(jaximp.loss_function_change(ens, X, y, batch_size=37),
                                  jaximp.loss_function_change(ens, X, y))


# 2. Interaction ---------------------------------------------------------------------------


def json_interaction(model_json, n_features, output_reduction):
    """CatBoost's ``DFS`` (feature_str.cpp) over the JSON trees, every leaf a terminal node as
    the JSON loader builds them, in float64: ``[F, F]`` normalised to 100 over the pairs."""
    totals = np.zeros((n_features, n_features))
    for tree in model_json["trees"]:
        per_tree = {}

        def visit(node, path):
            if "split" not in node:
                value = np.atleast_1d(np.asarray(node["value"], np.float64))
                for i, (f, s) in enumerate(path):
                    for g, t in path[i + 1:]:
                        if f != g:
                            key = (min(f, g), max(f, g))
                            per_tree[key] = per_tree.get(key, 0.0) + s * t * value
                return
            f = node["split"]["float_feature_index"]
            visit(node["left"], path + [(f, -1.0)])
            visit(node["right"], path + [(f, 1.0)])

        visit(tree, [])
        for (f, g), delta in per_tree.items():
            totals[f, g] += abs(delta.sum()) if output_reduction == "sum" else np.abs(delta).sum()
    return 100.0 * (totals + totals.T) / totals.sum()


def test_interaction_matches_catboost(case):
    ens, model, _, _, _, model_json = case
    got = np.asarray(jaximp.interaction(ens))
    assert got.shape == (ens.n_features,) * 2
    np.testing.assert_array_equal(got, got.T)
    np.testing.assert_array_equal(np.diag(got), 0.0)
    assert abs(np.triu(got).sum() - 100.0) < 1e-3
    if ens.loss_function == "MultiClass":
        # CatBoost adds the classes before |.|; MultiClass leaves sum to zero over classes, so its
        # score is float64 cancellation noise: the per-output definition is checked instead
        assert_close(got, json_interaction(model_json, ens.n_features, "abs"))
        np.testing.assert_array_equal(got, jaximp.interaction(ens, output_reduction="abs"))
    else:
        assert_close(got, catboost_interaction(model, ens.n_features))
        assert_close(got, json_interaction(model_json, ens.n_features, "sum"))


def test_interaction_is_differentiable_and_handles_stumps():
    ens = trained(*GRID[0])[0]
    grad = jax.grad(lambda v: jaximp.interaction(ens.__class__(**{**ens.__dict__, "leaf_values": v}))[0, 1])(
        ens.leaf_values)
    assert grad.shape == ens.leaf_values.shape and np.isfinite(np.asarray(grad)).all()
    X, y = make_data("regression", n=200)
    stumps = catboost.CatBoostRegressor(iterations=3, depth=1, grow_policy="Depthwise", verbose=0,
                                        thread_count=1, allow_writing_files=False).fit(X, y)
    np.testing.assert_array_equal(jaximp.interaction(jaximp.from_catboost(stumps)), 0.0)


# 3. Permutation importance -----------------------------------------------------------------


def _brute_force(model, X, y, w, draws, groups, metric):
    """``f64[G, R]``: permute X in NumPy, predict and score with CatBoost (minus its metric)."""
    def score(rows, Xp):
        pool = catboost.Pool(Xp, y[rows], weight=None if w is None else w[rows])
        return -model.eval_metrics(pool, [metric])[metric][-1]

    out = np.zeros((len(groups), len(draws)))
    for r, (rows, source) in enumerate(draws):
        base = score(rows, X[rows])
        for g, cols in enumerate(groups):
            permuted = X[rows].copy()
            permuted[:, cols] = X[source][:, cols]
            out[g, r] = base - score(rows, permuted)
    return out


@pytest.mark.parametrize("index, weighted, max_samples", [(0, False, 1.0), (3, True, 0.6)])
def test_permutation_matches_brute_force_with_the_same_draws(index, weighted, max_samples):
    ens, model, X, y, w, _ = trained(*GRID[index])
    w = w if weighted else None
    groups = [[f] for f in range(X.shape[1])] + [[0, 2], [ens.feature_names[1], 3, 4]]
    got = jaximp.permutation_importance(ens, X, y, n_repeats=3, random_state=7, sample_weight=w,
                                        max_samples=max_samples, feature_groups=groups)
    draws = _row_draws(as_key(7, "test"), 3, len(X), int(max_samples * len(X)))
    want = _brute_force(model, X, y, w, draws, [[f] for f in range(X.shape[1])] + [[0, 2], [1, 3, 4]],
                        _LOSS[GRID[index][0]])
    assert got.importances.shape == (len(groups), 3)
    np.testing.assert_allclose(got.importances, want, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got.importances_mean, want.mean(1), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got.importances_std, want.std(1), rtol=RTOL, atol=ATOL)


def test_permutation_does_not_depend_on_batch_size_or_devices():
    ens, _, X, y, _, _ = trained(*GRID[3])
    kw = dict(n_repeats=2, random_state=3, scoring="accuracy")
    first = jaximp.permutation_importance(ens, X, y, **kw)
    np.testing.assert_array_equal(jaximp.permutation_importance(ens, X, y, batch_size=64, **kw).importances,
                                  first.importances)
    if len(jax.devices()) >= 2:
        again = jaximp.permutation_importance(ens, X, y, batch_size=64, devices=2, **kw)
        np.testing.assert_array_equal(again.importances, first.importances)


@pytest.mark.parametrize("kind, grow_policy, scoring", [
    ("regression", "Depthwise", "neg_root_mean_squared_error"), ("binary", "Lossguide", "neg_log_loss"),
])
def test_permutation_agrees_with_sklearn_within_sampling_error(kind, grow_policy, scoring):
    X, y = make_data(kind, n=400)
    cls = catboost.CatBoostClassifier if kind == "binary" else catboost.CatBoostRegressor
    model = cls(iterations=20, depth=5, grow_policy=grow_policy, learning_rate=0.3, random_seed=0, verbose=0,
                thread_count=1, allow_writing_files=False).fit(X, y)
    repeats = 30
    want = sklearn_permutation_importance(model, X, y, scoring=scoring, n_repeats=repeats, random_state=0)
    got = jaximp.permutation_importance(jaximp.from_catboost(model), X, y, scoring=scoring, n_repeats=repeats,
                                        random_state=0)
    standard_error = np.sqrt((got.importances_std**2 + want.importances_std**2) / repeats)
    assert np.all(np.abs(got.importances_mean - want.importances_mean) <= 4 * standard_error + ATOL)
    assert got.importances_mean[0] > 10 * standard_error[0]  # the test has power: feature 0 matters


def test_unused_features_get_exactly_zero():
    X, y = make_data("regression", n=300)
    X[:, 4] = 1.0  # constant: no borders, never split on
    model = catboost.CatBoostRegressor(iterations=6, depth=4, grow_policy="Lossguide", max_leaves=10,
                                       random_seed=0, verbose=0, thread_count=1, allow_writing_files=False,
                                       ignored_features=[5]).fit(X, y)
    ens = jaximp.from_catboost(model)
    assert not np.isin([4, 5], np.asarray(ens.node_features)[np.asarray(ens.node_borders) < np.inf]).any()
    got = jaximp.permutation_importance(ens, X, y, n_repeats=2, random_state=0, feature_groups=[[4], [4, 5], [0]])
    np.testing.assert_array_equal(got.importances[:2], 0.0)
    assert np.all(got.importances[2] > 0)
    np.testing.assert_array_equal(np.asarray(jaximp.interaction(ens))[4:], 0.0)


# 4. The drop-in ----------------------------------------------------------------------------


@pytest.mark.slow  # by default: the drop-in on categorical Depthwise models (test_trees_categorical*.py)
def test_dropin_takes_non_symmetric_models():
    """get_feature_importance of a freshly trained Depthwise model object: CatBoost's layouts, and
    the numbers of that model reloaded from its JSON export (CatBoost's trained-model walk for
    Interaction and its SHAP differ, see jaximp._importances.interaction_trees)."""
    X, y = make_data("regression", n=300, nan_fraction=0.05)
    trained_model = catboost.CatBoostRegressor(iterations=8, depth=5, grow_policy="Depthwise", random_seed=0,
                                               verbose=0, thread_count=1, allow_writing_files=False).fit(X, y)
    _, model = json_reloaded(trained_model)
    pool = catboost.Pool(X, y)
    for kind in ("LossFunctionChange", "PredictionValuesChange"):
        np.testing.assert_allclose(jaximp.get_feature_importance(trained_model, pool, type=kind),
                                   model.get_feature_importance(pool, type=kind), rtol=RTOL, atol=ATOL)
        frame = jaximp.get_feature_importance(trained_model, pool, type=kind, prettified=True)
        want = model.get_feature_importance(pool, type=kind, prettified=True)
        assert list(frame.columns) == list(want.columns) and list(frame["Feature Id"]) == list(want["Feature Id"])
    rows = jaximp.get_feature_importance(trained_model, type="Interaction")
    want = model.get_feature_importance(type="Interaction")
    assert rows.shape == want.shape
    np.testing.assert_array_equal(rows[:, :2], want[:, :2])  # same pairs, same order (no ties here)
    assert_close(rows[:, 2], want[:, 2])
    frame = jaximp.get_feature_importance(trained_model, type="Interaction", prettified=True)
    assert list(frame.columns) == list(model.get_feature_importance(type="Interaction", prettified=True).columns)
    pair = catboost.Pool(X[:2])
    assert_close(jaximp.get_feature_importance(trained_model, pair, type="PredictionDiff"),
                 model.get_feature_importance(pair, type="PredictionDiff"))
    with pytest.raises(ValueError, match="method must be one of"):
        jaximp.get_feature_importance(trained_model, pool, type="ShapValues", shap_calc_type="Exact")


# 5. Bad input ------------------------------------------------------------------------------


def test_bad_inputs_raise_clear_errors():
    ens, _, X, y, _, model_json = trained(*GRID[0])
    with pytest.raises(ValueError, match=r"loss_function_change: y must have shape \(500,\)"):
        jaximp.loss_function_change(ens, X, y[:10])
    with pytest.raises(ValueError, match=r"loss_function_change: X must have 6 columns|X must have shape"):
        jaximp.loss_function_change(ens, X[:, :4], y)
    with pytest.raises(ValueError, match=r"permutation_importance: y must have shape \(500,\)"):
        jaximp.permutation_importance(ens, X, y[:3])
    with pytest.raises(ValueError, match=r"feature_groups\[0\] must hold column indices in \[0, 6\)"):
        jaximp.permutation_importance(ens, X, y, feature_groups=[[9]])
    with pytest.raises(ValueError, match="n_repeats must be an int >= 1"):
        jaximp.permutation_importance(ens, X, y, n_repeats=0)
    with pytest.raises(ValueError, match="scoring 'accuracy' is defined for binary and multiclass"):
        jaximp.permutation_importance(ens, X, y, scoring="accuracy")
    with pytest.raises(ValueError, match="output_reduction must be None or one of"):
        jaximp.interaction(ens, output_reduction="max")
    no_loss = json.loads(json.dumps(model_json))
    no_loss["model_info"].pop("params", None)
    no_loss["model_info"].pop("loss_function", None)
    stripped = tree_ensemble_from_json(no_loss)
    with pytest.raises(ValueError, match="loss_function"):
        jaximp.loss_function_change(stripped, X, y)
    with pytest.raises(ValueError, match="split_importance: type must be one of"):
        jaximp.split_importance(ens, "mdi")


@pytest.mark.parametrize("kind", ["regression", pytest.param("multiclass", marks=pytest.mark.slow)])
def test_split_importance_equals_the_oblivious_definition_on_the_unrolled_trees(kind):
    """A symmetric model unrolled into general trees (``from_oblivious``: the same nodes that
    the oblivious definition counts) has the same split statistics; gains and covers computed
    from leaf weights, as for CatBoost's non-symmetric models."""
    from jaximp._models.trees import from_oblivious

    X, y = make_data(kind, n=400, n_features=5, seed=3)
    cls = catboost.CatBoostClassifier if kind == "multiclass" else catboost.CatBoostRegressor
    model = cls(iterations=15, depth=4, verbose=0, random_seed=0).fit(X, y)
    ens = jaximp.from_catboost(model)
    tree = from_oblivious(ens)
    for type in ("weight", "split", "gain", "total_gain", "cover", "total_cover"):
        np.testing.assert_allclose(jaximp.split_importance(tree, type), jaximp.split_importance(ens, type),
                                   rtol=1e-5, err_msg=type)
    with pytest.raises(ValueError, match="scikit-learn models only"):
        jaximp.split_importance(tree, "impurity")
    with pytest.raises(ValueError, match="scikit-learn models only"):
        jaximp.split_importance(ens, "impurity")
