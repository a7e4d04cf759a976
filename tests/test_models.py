"""The ensemble data model: both layouts as JAX pytrees (flattened and rebuilt, replaced, traced
by jit and vmap, differentiated), their one-line ``repr``, and the players that categorical
features make.

Oracles: the same ensemble before and after each transformation (predictions exactly), the
number of the library's trees and depth, the splits on each path of the JSON trees.
"""

from __future__ import annotations

import dataclasses

import catboost
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from models import CATBOOST_TREES, catboost_categorical, catboost_categorical_trees, catboost_trees, train
from sklearn.ensemble import RandomForestClassifier

import jaximp
from jaximp._models.trees import leaf_paths

# Pytrees ------------------------------------------------------------------------------------------------------


def test_an_oblivious_ensemble_is_a_pytree_with_its_repr():
    """Flattening, ``dataclasses.replace``, jit, vmap (with an ``in_axes`` tree shaped like the
    model, whose leaves are ints and None) and ``eval_shape`` are unaffected by the custom repr,
    and repr works on each of those forms."""
    model, X, _, _ = train("regression", depth=4, iterations=20)
    ens = jaximp.from_catboost(model)
    leaves, treedef = jax.tree_util.tree_flatten(ens)
    rebuilt = jax.tree_util.tree_unflatten(treedef, leaves)
    assert repr(rebuilt) == repr(ens)
    for a, b in zip(jax.tree_util.tree_leaves(rebuilt), leaves):
        np.testing.assert_array_equal(a, b)

    doubled = dataclasses.replace(ens, leaf_values=2 * ens.leaf_values)
    assert type(doubled) is type(ens) and repr(doubled) == repr(ens)
    np.testing.assert_allclose(jaximp.predict(doubled, X) - ens.bias[0],
                               2 * (jaximp.predict(ens, X) - ens.bias[0]), rtol=1e-5, atol=1e-5)

    seen = []

    @jax.jit
    def total(e):
        seen.append(repr(e))  # runs once, while tracing: the leaves are tracers
        return jnp.sum(e.leaf_values)

    np.testing.assert_allclose(total(ens), np.sum(np.asarray(ens.leaf_values)), rtol=1e-6)
    assert seen == [repr(ens)]

    in_axes = dataclasses.replace(jax.tree_util.tree_map(lambda _: None, ens), leaf_values=0)
    assert repr(in_axes) == "ObliviousEnsemble(trees=?, depth=?, features=6, outputs=?, loss='RMSE')"
    stacked = dataclasses.replace(ens, leaf_values=jnp.stack([ens.leaf_values, -ens.leaf_values]))
    sums = jax.vmap(lambda e: jnp.sum(e.leaf_values), in_axes=(in_axes,))(stacked)
    np.testing.assert_allclose(sums, [total(ens), -total(ens)], rtol=1e-6)

    shapes = jax.eval_shape(lambda e: e, ens)
    assert repr(shapes) == repr(ens)


def test_a_tree_ensemble_is_a_pytree():
    fitted = catboost_trees(*CATBOOST_TREES[0])
    ens, X = fitted.ens, fitted.X
    leaves, treedef = jax.tree_util.tree_flatten(ens)
    assert len(leaves) == 9  # the arrays; sizes and names are static
    again = jax.tree_util.tree_unflatten(treedef, leaves)
    np.testing.assert_array_equal(jaximp.predict(again, X[:50]), jaximp.predict(ens, X[:50]))
    grad = jax.grad(lambda v: jaximp.prediction_values_change(
        ens.__class__(**{**ens.__dict__, "leaf_values": v}))[0])(ens.leaf_values)
    assert grad.shape == ens.leaf_values.shape and np.isfinite(np.asarray(grad)).all()


# repr --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind, outputs, loss", [("regression", 1, "RMSE"), ("binary", 1, "Logloss"),
                                                 ("multiclass", 3, "MultiClass"),
                                                 ("multiregression", 2, "MultiRMSE")])
def test_repr_of_an_oblivious_ensemble_is_one_short_line(kind, outputs, loss):
    model, X, _, _ = train(kind, depth=4, iterations=20)
    ens = jaximp.from_catboost(model)
    expected = (f"ObliviousEnsemble(trees={model.tree_count_}, depth={model.get_all_params()['depth']}, "
                f"features={X.shape[1]}, outputs={outputs}, loss={loss!r})")
    assert repr(ens) == str(ens) == expected
    explainer = jaximp.Explainer(ens, method="approximate")
    assert repr(explainer) == f"Explainer({expected}, method='approximate')"
    if kind == "regression":
        for background in (X[:37], X[:37].tolist()):  # an array, a list of rows
            explainer = jaximp.Explainer(ens, background=background, method="interventional")
            assert repr(explainer) == f"Explainer({expected}, method='interventional', background_rows=37)"


def test_repr_of_tree_ensembles():
    """Non-symmetric CatBoost trees and scikit-learn trees; a loss the model does not know is left out."""
    _, X, y, _ = train("regression")
    model = catboost.CatBoostRegressor(iterations=7, depth=3, grow_policy="Lossguide", max_leaves=6, verbose=0,
                                       allow_writing_files=False, thread_count=1).fit(X, y)
    ens = jaximp.from_catboost(model)
    assert repr(ens) == f"TreeEnsemble(trees=7, depth={ens.depth}, features={X.shape[1]}, outputs=1, loss='RMSE')"
    assert 1 <= ens.depth <= 5  # 6 leaves: at most 5 levels
    forest = RandomForestClassifier(n_estimators=4, max_depth=3, random_state=0).fit(X, y > 0)
    ens = jaximp.from_sklearn(forest)
    assert ens.loss_function == ""  # leaves hold class fractions: no logits, no loss
    assert repr(ens) == f"TreeEnsemble(trees=4, depth=3, features={X.shape[1]}, outputs=2)"
    assert repr(jaximp.Explainer(ens, method="approximate")) == f"Explainer({ens!r}, method='approximate')"


def test_repr_summarises_a_model_of_any_size():
    """The arrays are never printed: 150 trees of depth 8 (38,400 leaves) give the same short line."""
    model, X, _, _ = train("regression", depth=8, iterations=150)
    ens = jaximp.from_catboost(model)
    assert repr(ens) == f"ObliviousEnsemble(trees=150, depth=8, features={X.shape[1]}, outputs=1, loss='RMSE')"
    explainer = jaximp.Explainer(ens, method="approximate")
    assert "\n" not in repr(explainer) and len(repr(explainer)) < 150


# Players of categorical features ------------------------------------------------------------------------------


def test_combination_classes_of_several_categorical_columns():
    """Oblivious models have CTRs over several categorical columns: SHAP credits them as one player."""
    assert any(len(player) > 1 for player in catboost_categorical("categorical_pairs").ens.players)


def test_a_column_split_twice_in_a_path_is_one_player():
    """Paths that split on two evaluated features of one column (a one-hot value and a CTR, or
    two CTR types) exist in the non-symmetric models, so the SHAP tests check that CatBoost's
    player is the combination class (the column), not the split's feature."""
    for name in ("depthwise_ctr", "lossguide_mixed"):
        ens = catboost_categorical_trees(name).ens
        nodes, _, mask = (np.asarray(a) for a in leaf_paths(ens))
        tree = np.arange(ens.n_trees)[:, None, None]
        features = np.where(mask, np.asarray(ens.node_features)[tree, nodes], -1)
        players = np.where(mask, np.asarray(ens.node_players)[tree, nodes], -1)
        merged = [len(set(f)) > len(set(p)) for f, p in zip(features.reshape(-1, ens.depth),
                                                           players.reshape(-1, ens.depth))]
        assert any(merged), name
