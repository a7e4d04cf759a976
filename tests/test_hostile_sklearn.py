"""``jaximp.from_sklearn`` on fitted estimators whose trees are inconsistent (edited, or
unpickled from elsewhere): scikit-learn's numbers or a clear error, within time and memory.

A tree's arrays are changed on a copy, as a pickle from elsewhere would bring them: a
``sklearn.tree._tree.Tree`` rebuilt from its ``__reduce__`` state with changed nodes or values, a
HistGradientBoosting ``TreePredictor`` given a changed ``nodes`` array. Oracles: scikit-learn's
own raw output of the changed model (``predict``, ``predict_proba``, ``decision_function``),
called only where jaximp accepts the model (an inconsistent tree can crash scikit-learn itself);
the error messages. Tolerances: float32 sums, ``rtol=1e-5, atol=1e-4``.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hostile import EXAMPLES, assert_clear_refusal, assert_refused_or_equal, outcome
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from models import library_categorical, library_categorical_rows, make_data, sklearn_model
from sklearn import ensemble, tree
from sklearn.linear_model import LinearRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import jaximp

slow = pytest.mark.slow


def raw_output(model, X):
    """What ``from_sklearn(model).predict`` reproduces (see jaximp._importers.sklearn)."""
    name = type(model).__name__
    if name.startswith(("GradientBoosting", "HistGradientBoosting")) and hasattr(model, "classes_"):
        return model.decision_function(X)
    if hasattr(model, "classes_"):
        return model.predict_proba(X)
    return model.predict(X)  # the models here have the identity link


def rebuilt_tree(original, *, nodes=None, values=None, n_features=None, node_count=None):
    """A copy of a ``Tree`` as unpickled from a state with these nodes, values, feature count
    or node count."""
    cls, args, state = original.__reduce__()
    state = dict(state, nodes=state["nodes"].copy() if nodes is None else nodes,
                 values=state["values"].copy() if values is None else values)
    if node_count is not None:
        state.update(node_count=node_count, nodes=state["nodes"][:node_count], values=state["values"][:node_count])
    copied = cls(args[0] if n_features is None else n_features, *args[1:])
    copied.__setstate__(state)
    return copied


def tree_holders(model):
    """The estimators of ``model`` that hold a ``tree_``, in jaximp's order of trees."""
    if hasattr(model, "tree_"):
        return [model]
    return list(np.ravel(model.estimators_))


def with_tree_field(model, index, field, node, value):
    """A copy of ``model`` whose tree ``index`` has ``tree_.<field>[node] = value``."""
    model = copy.deepcopy(model)
    holder = tree_holders(model)[index]
    nodes = holder.tree_.__reduce__()[2]["nodes"].copy()
    values = holder.tree_.__reduce__()[2]["values"].copy()
    if field == "value":
        values[node] = value
    else:
        nodes[field][node] = value
    holder.tree_ = rebuilt_tree(holder.tree_, nodes=nodes, values=values)
    return model


def with_predictor_field(model, stage, k, field, node, value):
    """A copy of a HistGradientBoosting ``model`` whose predictor ``[stage][k]`` has
    ``nodes[field][node] = value``."""
    model = copy.deepcopy(model)
    predictor = model._predictors[stage][k]
    nodes = predictor.nodes.copy()
    nodes[field][node] = value
    predictor.nodes = nodes
    return model


def rows(fitted, n=60):
    X = fitted.X if hasattr(fitted.X, "iloc") else np.asarray(fitted.X)
    return X[:n]


def check(model, X):
    """The property: scikit-learn's raw output or a clear refusal; returns which."""
    return assert_refused_or_equal(lambda: np.asarray(jaximp.from_sklearn(model).predict(X)),
                                   lambda: raw_output(model, X), rtol=1e-5, atol=1e-4)


def refusal(fn, *words):
    kind, error = outcome(fn)
    assert kind == "refused", f"{kind}: {error!r}"
    assert_clear_refusal(error, *words)
    assert str(error).startswith("from_sklearn: "), str(error)
    return error


# Regression tests: each inconsistency named ---------------------------------------------------


def test_children_out_of_range_are_refused():
    fitted = sklearn_model("dt_reg")
    n = fitted.model.tree_.node_count
    bad = with_tree_field(fitted.model, 0, "left_child", 0, n + 5)
    refusal(lambda: jaximp.from_sklearn(bad), "node 0", "children")
    bad = with_tree_field(fitted.model, 0, "right_child", 0, -7)
    refusal(lambda: jaximp.from_sklearn(bad), "children")
    truncated = copy.deepcopy(fitted.model)
    truncated.tree_ = rebuilt_tree(truncated.tree_, node_count=n // 2)
    refusal(lambda: jaximp.from_sklearn(truncated), "children")


def test_cycles_and_shared_nodes_are_refused():
    model = sklearn_model("dt_reg").model
    left = model.tree_.children_left
    inner = int(left[0])  # an internal node under the root
    self_loop = with_tree_field(model, 0, "left_child", inner, inner)
    refusal(lambda: jaximp.from_sklearn(self_loop), "not a tree", "child of 2")
    to_root = with_tree_field(model, 0, "right_child", inner, 0)
    refusal(lambda: jaximp.from_sklearn(to_root), f"node {inner} has children", "outside")
    # a cycle that no root reaches, every node the child of one: the root adopts its grandchild
    # and ``inner`` becomes its own left child
    nodes = model.tree_.__reduce__()[2]["nodes"].copy()
    nodes["left_child"][0], nodes["left_child"][inner] = left[inner], inner
    cycle = copy.deepcopy(model)
    cycle.tree_ = rebuilt_tree(model.tree_, nodes=nodes)
    refusal(lambda: jaximp.from_sklearn(cycle), "not a tree", f"node {inner} is not reached", "cycle")


def test_features_thresholds_and_values_are_checked():
    fitted = sklearn_model("rf_clf")
    model, n_features = fitted.model, fitted.model.n_features_in_
    holders = tree_holders(model)
    inner = int(np.flatnonzero(holders[2].tree_.children_left != -1)[0])
    leaf = int(np.flatnonzero(holders[2].tree_.children_left == -1)[0])
    refusal(lambda: jaximp.from_sklearn(with_tree_field(model, 2, "feature", inner, n_features + 3)),
            "estimators_[2]", f"node {inner}", "feature", "n_features_in_")
    refusal(lambda: jaximp.from_sklearn(with_tree_field(model, 2, "threshold", inner, np.nan)), "threshold nan")
    refusal(lambda: jaximp.from_sklearn(with_tree_field(model, 2, "value", leaf, 1e300)), "float32")
    refusal(lambda: jaximp.from_sklearn(with_tree_field(model, 2, "value", leaf, np.inf)), "float32")
    refusal(lambda: jaximp.from_sklearn(with_tree_field(model, 2, "weighted_n_node_samples", leaf, np.nan)),
            "weighted sample count nan")
    refusal(lambda: jaximp.from_sklearn(with_tree_field(model, 2, "impurity", inner, np.inf)), "impurity")
    # a tree reading another number of features than the model
    wider = copy.deepcopy(model)
    wider.estimators_[1].tree_ = rebuilt_tree(wider.estimators_[1].tree_, n_features=n_features + 1)
    refusal(lambda: jaximp.from_sklearn(wider), "estimators_[1]", "n_features_in_")
    # values that are consistent but unusual: scikit-learn's numbers (class values not summing to 1,
    # a leaf value in float32's range, a threshold of -inf)
    X = rows(fitted)
    assert check(with_tree_field(model, 2, "value", leaf, 0.25), X) == "value"
    assert check(with_tree_field(model, 0, "threshold", 0, -np.inf), X) == "value"
    regression = sklearn_model("dt_reg").model
    big_leaf = int(np.flatnonzero(regression.tree_.children_left == -1)[0])
    assert check(with_tree_field(regression, 0, "value", big_leaf, 3e38), rows(sklearn_model("dt_reg"))) == "value"


def test_swapped_children_give_scikit_learns_numbers():
    fitted = sklearn_model("gb_multi")
    model = copy.deepcopy(fitted.model)
    holder = tree_holders(model)[4]
    nodes = holder.tree_.__reduce__()[2]["nodes"].copy()
    nodes["left_child"][0], nodes["right_child"][0] = nodes["right_child"][0], nodes["left_child"][0]
    holder.tree_ = rebuilt_tree(holder.tree_, nodes=nodes)
    assert check(model, rows(fitted)) == "value"


def test_estimators_that_are_not_trees_are_refused():
    fitted = sklearn_model("rf_reg")
    empty = copy.deepcopy(fitted.model)
    empty.estimators_ = []
    refusal(lambda: jaximp.from_sklearn(empty), "no trees")
    foreign = copy.deepcopy(fitted.model)
    foreign.estimators_[3] = LinearRegression()
    refusal(lambda: jaximp.from_sklearn(foreign), "estimators_[3]", "decision tree")
    missing = copy.deepcopy(fitted.model)
    del missing.estimators_
    refusal(lambda: jaximp.from_sklearn(missing), "inconsistent", "estimators_")
    boosting = copy.deepcopy(sklearn_model("gb_multi").model)
    boosting.estimators_ = boosting.estimators_[:, :2]
    refusal(lambda: jaximp.from_sklearn(boosting), "estimators_", "[n_stages, 3]")


def test_hist_gradient_boosting_nodes_are_checked():
    fitted = sklearn_model("hgb_reg")
    model = fitted.model
    nodes = model._predictors[1][0].nodes
    inner = int(np.flatnonzero(~nodes["is_leaf"].astype(bool))[0])
    n = len(nodes)
    refusal(lambda: jaximp.from_sklearn(with_predictor_field(model, 1, 0, "left", inner, n + 2)),
            "_predictors[1][0]", "children")
    refusal(lambda: jaximp.from_sklearn(with_predictor_field(model, 1, 0, "right", inner, 0)), "children")
    refusal(lambda: jaximp.from_sklearn(with_predictor_field(model, 1, 0, "feature_idx", inner, 99)), "feature 99")
    refusal(lambda: jaximp.from_sklearn(with_predictor_field(model, 1, 0, "is_categorical", inner, 1)),
            "categorical")
    refusal(lambda: jaximp.from_sklearn(with_predictor_field(model, 1, 0, "num_threshold", inner, np.nan)),
            "threshold nan")
    short = copy.deepcopy(model)
    short._predictors[2] = []
    refusal(lambda: jaximp.from_sklearn(short), "n_trees_per_iteration_")
    # a leaf turned internal names its (zero) children: the root, refused
    leaf = int(np.flatnonzero(nodes["is_leaf"].astype(bool))[0])
    refusal(lambda: jaximp.from_sklearn(with_predictor_field(model, 1, 0, "is_leaf", leaf, 0)), "children")
    assert check(with_predictor_field(model, 1, 0, "value", leaf, 123.5), rows(fitted)) == "value"


def test_categorical_bitsets_are_checked():
    fitted = library_categorical("sklearn-reg")
    model = fitted.model
    def categorical_splits(s):
        nodes = model._predictors[s][0].nodes
        return np.flatnonzero(nodes["is_categorical"].astype(bool) & ~nodes["is_leaf"].astype(bool))

    s = next(s for s in range(len(model._predictors)) if categorical_splits(s).size)
    nodes, split = model._predictors[s][0].nodes, categorical_splits(s)
    bad = with_predictor_field(model, s, 0, "bitset_idx", int(split[0]), 10**6)
    refusal(lambda: jaximp.from_sklearn(bad), "bitset")
    X = library_categorical_rows("sklearn-reg")
    flipped = 1 - nodes["missing_go_to_left"][split[0]]
    changed = with_predictor_field(model, s, 0, "missing_go_to_left", int(split[0]), flipped)
    assert check(changed, X) == "value"


def test_unfitted_and_unsupported_estimators():
    for estimator in (tree.DecisionTreeClassifier(), ensemble.ExtraTreesRegressor(),
                      ensemble.GradientBoostingClassifier(), ensemble.HistGradientBoostingRegressor()):
        refusal(lambda e=estimator: jaximp.from_sklearn(e), "must be fitted", "fit")
    X, y = make_data("regression", n=60, n_features=4)
    pipeline = make_pipeline(StandardScaler(), tree.DecisionTreeRegressor(max_depth=2)).fit(X, y)
    kind, error = outcome(lambda: jaximp.from_sklearn(pipeline))
    assert kind == "refused" and isinstance(error, TypeError)
    assert_clear_refusal(error, "pipeline's last step")
    import xgboost

    booster = xgboost.XGBRegressor(n_estimators=2, max_depth=2).fit(X, y)
    kind, error = outcome(lambda: jaximp.from_sklearn(booster))
    assert kind == "refused" and isinstance(error, TypeError)
    assert_clear_refusal(error, "from_xgboost")
    kind, error = outcome(lambda: jaximp.from_sklearn(None))
    assert kind == "refused" and isinstance(error, TypeError)


# Property: any one change of any tree array -----------------------------------------------------------


TREE_MODELS = ("dt_reg", "rf_clf", "gb_multi")
_INTS = st.sampled_from([-7, -2, -1, 0, 1, 2, 3, 5, 2**31 - 1, -(2**40)])
_FLOATS = st.sampled_from([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -3.25, 1e-45, 1e30, -1e300, 3.5e38])
_TREE_FIELDS = {"left_child": _INTS, "right_child": _INTS, "feature": _INTS, "threshold": _FLOATS,
                "impurity": _FLOATS, "weighted_n_node_samples": _FLOATS, "value": _FLOATS,
                "missing_go_to_left": st.sampled_from([0, 1, 7])}


@st.composite
def tree_changes(draw):
    """(fitted, changed model): one entry of one tree array of one model set to a hostile value
    (an index near the tree's own nodes, or the node itself)."""
    fitted = sklearn_model(draw(st.sampled_from(TREE_MODELS)))
    holders = tree_holders(fitted.model)
    index = draw(st.integers(0, len(holders) - 1))
    n = holders[index].tree_.node_count
    node = draw(st.integers(0, n - 1))
    field = draw(st.sampled_from(sorted(_TREE_FIELDS)))
    value = draw(st.one_of(_TREE_FIELDS[field], st.integers(0, n + 1), st.just(node)))
    if field == "missing_go_to_left":
        value = int(value) % 256
    return fitted, with_tree_field(fitted.model, index, field, node, value)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree_changes())
def test_any_changed_tree_array_gives_scikit_learns_numbers_or_refuses(change):
    fitted, model = change
    event(check(model, rows(fitted)))


_PREDICTOR_FIELDS = {"left": st.integers(0, 40), "right": st.integers(0, 40), "feature_idx": _INTS,
                     "num_threshold": _FLOATS, "value": _FLOATS, "is_leaf": st.sampled_from([0, 1]),
                     "missing_go_to_left": st.sampled_from([0, 1]), "gain": _FLOATS,
                     "is_categorical": st.sampled_from([0, 1]), "count": st.integers(0, 1000)}


@st.composite
def predictor_changes(draw):
    fitted = sklearn_model(draw(st.sampled_from(("hgb_reg", "hgb_multi"))))
    model = fitted.model
    stage = draw(st.integers(0, len(model._predictors) - 1))
    k = draw(st.integers(0, len(model._predictors[stage]) - 1))
    node = draw(st.integers(0, len(model._predictors[stage][k].nodes) - 1))
    field = draw(st.sampled_from(sorted(_PREDICTOR_FIELDS)))
    return fitted, with_predictor_field(model, stage, k, field, node, draw(_PREDICTOR_FIELDS[field]))


@settings(max_examples=max(1, EXAMPLES // 2), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(predictor_changes())
def test_any_changed_predictor_node_gives_scikit_learns_numbers_or_refuses(change):
    fitted, model = change
    event(check(model, rows(fitted)))


@slow
@settings(max_examples=10 * EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(tree_changes(), predictor_changes()))
def test_many_changed_arrays(change):
    fitted, model = change
    check(model, rows(fitted))
