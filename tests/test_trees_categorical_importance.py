"""Interaction, LossFunctionChange and permutation importance of non-symmetric CatBoost trees
(Depthwise, Lossguide) with categorical features.

Oracles:
* CatBoost's ``get_feature_importance`` on the model reloaded from its JSON export, CatBoost's
  reference for non-symmetric trees (tests/test_trees_importance.py): Interaction (per original
  column, self-pairs dropped after normalising, so the scores sum to less than 100) and
  LossFunctionChange (per original column);
* CatBoost's depth-first walk (catboost/libs/fstr/feature_str.cpp, ``DFS``, and
  calc_fstr.cpp, ``CalcFeatureInteraction``) transcribed over the JSON trees in float64, keyed
  on CatBoost's internal features read from the JSON splits, for MultiClass, whose CatBoost
  score is cancellation noise (see ``jaximp.interaction``);
* for permutation importance, a brute force with the same row draws: the raw columns permuted
  in pandas, CatBoost predicting and scoring (``eval_metrics``) every permuted copy.

Depthwise and Lossguide models build no CTR over combinations, so the zoo is completed by
oblivious models with such CTRs written as non-symmetric trees (each oblivious tree unrolled to
the binary tree it is, in CatBoost's JSON layout for non-symmetric trees) and reloaded by
CatBoost: CTRs over several categorical columns and binarized float features, whose
Interaction credits, LossFunctionChange players and straddled permutation groups only they have.

Tolerances as in tests/test_trees_categorical.py: ``rtol=1e-5``, ``atol=1e-5 * magnitude``
(float32 over a dozen trees against CatBoost's float64).
"""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import pytest
from conftest import json_reloaded
from test_categorical import ZOO as OBLIVIOUS_ZOO
from test_categorical import assert_close, explained, pool
from test_categorical import trained as oblivious_trained
from test_trees_categorical import ZOO, raw, trained

import jaximp
from jaximp._importances.permutation import _row_draws, as_key
from jaximp._importers.catboost_trees import tree_ensemble_from_json

_METRIC = {"regression": "RMSE", "binary": "Logloss", "multiclass": "MultiClass"}


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
def combinations(name: str):
    """``(oblivious model, the same trees as a non-symmetric model reloaded by CatBoost, its ens)``
    of a binary oblivious zoo model with CTRs over combinations."""
    model = oblivious_trained(name)[0]

    def hook(model_json):
        model_json["trees"] = [unrolled(tree, 1) for tree in model_json.pop("oblivious_trees")]

    model_json, reloaded = json_reloaded(model, hook)
    return model, reloaded, tree_ensemble_from_json(model_json)


def catboost_interaction(model, n_features: int) -> np.ndarray:
    """CatBoost's Interaction rows as a symmetric ``[F, F]`` matrix."""
    matrix = np.zeros((n_features, n_features))
    for f, g, score in model.get_feature_importance(type="Interaction"):
        matrix[int(f), int(g)] = matrix[int(g), int(f)] = score
    return matrix


def json_interaction(model_json: dict, output_reduction: str) -> np.ndarray:
    """CatBoost's ``DFS`` and ``CalcFeatureInteraction`` over the JSON trees in float64, for
    models whose internal features are each credited to at most one column (Depthwise and
    Lossguide build no CTR over combinations), where the pairs' orientation plays no part.

    A split's internal feature: its float feature, its categorical feature for a one-hot value
    (all values of a column are one feature), its CTR (found from ``split_index``: the float
    features' borders, then the one-hot values, then the CTRs' borders). Credited columns: a
    float feature's, a CTR's categorical column, none for one-hot features.
    """
    info = model_json["features_info"]
    floats = info.get("float_features", [])
    cats = info.get("categorical_features", [])
    first_ctr = sum(len(f.get("borders") or []) for f in floats) + sum(len(c.get("values", [])) for c in cats)
    ctr_ends = np.cumsum([len(c["borders"]) for c in info.get("ctrs", [])])
    cat_column = {c["feature_index"]: c["flat_feature_index"] for c in cats}
    n_features = len(floats) + len(cats)

    def internal(split):
        if split["split_type"] == "FloatFeature":
            column = floats[split["float_feature_index"]]["flat_feature_index"]
            return ("float", split["float_feature_index"]), (column,)
        if split["split_type"] == "OneHotFeature":
            return ("one_hot", split["cat_feature_index"]), ()
        k = int(np.searchsorted(ctr_ends, split["split_index"] - first_ctr, side="right"))
        elements = info["ctrs"][k]["elements"]
        assert len(elements) == 1 and elements[0]["combination_element"] == "cat_feature_value"
        return ("ctr", k), (cat_column[elements[0]["cat_feature_index"]],)

    scores, total = np.zeros((n_features, n_features)), 0.0
    for tree in model_json["trees"]:
        per_tree, credit = {}, {}

        def visit(node, path):
            if "split" not in node:
                value = np.atleast_1d(np.asarray(node["value"], np.float64))
                for i, (a, s) in enumerate(path):
                    for b, t in path[i + 1:]:
                        if a != b:
                            key = tuple(sorted((a, b)))
                            per_tree[key] = per_tree.get(key, 0.0) + s * t * value
                return
            key, columns = internal(node["split"])
            credit[key] = columns
            visit(node["left"], path + [(key, -1.0)])
            visit(node["right"], path + [(key, 1.0)])

        visit(tree, [])
        for (a, b), delta in per_tree.items():
            score = abs(delta.sum()) if output_reduction == "sum" else np.abs(delta).sum()
            total += score
            for f in credit[a]:
                for g in credit[b]:
                    if f != g:
                        scores[min(f, g), max(f, g)] += score
    return 100.0 * (scores + scores.T) / total


# 1. Interaction -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ZOO))
def test_interaction_matches_catboost(name):
    _, reloaded, model_json, ens, _, _ = trained(name)
    got = np.asarray(jaximp.interaction(ens))
    assert got.shape == (ens.n_features,) * 2 and got.dtype == np.float32
    np.testing.assert_array_equal(got, got.T)
    np.testing.assert_array_equal(np.diag(got), 0.0)
    if ens.loss_function == "MultiClass":  # CatBoost's "sum" is float64 cancellation noise here
        np.testing.assert_array_equal(got, jaximp.interaction(ens, output_reduction="abs"))
        assert_close(got, json_interaction(model_json, "abs"))
    else:
        want = catboost_interaction(reloaded, ens.n_features)
        assert_close(got, want)
        assert_close(got, json_interaction(model_json, "sum"))
        assert abs(np.triu(got, 1).sum() - np.triu(want, 1).sum()) < 1e-3
    assert np.triu(got, 1).sum() < 100.0 - 1e-3  # one-hot or self pairs counted in the total only


@pytest.mark.parametrize("name", ["combinations_2", "categorical_pairs"])
def test_interaction_of_ctrs_over_combinations(name):
    """CTRs over several columns (and binarized float features) credit each internal pair to
    several column pairs, in CatBoost's order of the internal features."""
    oblivious, reloaded, ens = combinations(name)
    frame, _ = explained(OBLIVIOUS_ZOO[name][0])
    assert_close(np.asarray(ens.predict(frame)), raw(oblivious, frame)[:, 0])
    assert any(len(columns) > 1 for columns in ens.featurizer.interaction_features()[1])
    assert_close(jaximp.interaction(ens), catboost_interaction(reloaded, ens.n_features))


# 2. LossFunctionChange ------------------------------------------------------------------------


@pytest.mark.parametrize("name", [  # by default, a CTR model of each grow policy (one-hot splits included)
    n if n in ("depthwise_ctr", "lossguide_mixed") else pytest.param(n, marks=pytest.mark.slow) for n in ZOO])
def test_loss_function_change_matches_catboost(name):
    _, reloaded, _, ens, _, _ = trained(name)
    frame, y = explained(ZOO[name][0])
    weight = np.random.default_rng(2).uniform(0.2, 3.0, len(frame))
    for w in (None, weight):
        data = pool(frame, y)
        if w is not None:
            data.set_weight(w)
        want = reloaded.get_feature_importance(data, type="LossFunctionChange")
        got = jaximp.loss_function_change(ens, frame, y, sample_weight=w)
        assert got.shape == (ens.n_features,) and got.dtype == np.float32
        assert_close(got, want)
    if name == "lossguide_mixed":
        np.testing.assert_array_equal(jaximp.loss_function_change(ens, frame, y, batch_size=16),
                                      jaximp.loss_function_change(ens, frame, y))


def test_loss_function_change_of_a_player_of_several_columns():
    """A CTR over two categorical columns is one player; its loss change goes to the columns of
    its class's first feature, as CatBoost's."""
    _, reloaded, ens = combinations("categorical_pairs")
    assert any(len(player) > 1 for player in ens.players)
    frame, y = explained("binary")
    assert_close(jaximp.loss_function_change(ens, frame, y),
                 reloaded.get_feature_importance(pool(frame, y), type="LossFunctionChange"))


# 3. Permutation importance --------------------------------------------------------------------


def brute_force(model, frame, y, w, draws, groups, metric):
    """``f64[G, R]``: raw columns permuted in pandas, CatBoost's prediction scored by CatBoost
    (minus its metric)."""
    def score(rows, rows_frame):
        data = pool(rows_frame.reset_index(drop=True), y[rows])
        if w is not None:
            data.set_weight(w[rows])
        return -model.eval_metrics(data, [metric])[metric][-1]

    out = np.zeros((len(groups), len(draws)))
    for r, (rows, source) in enumerate(draws):
        base = score(rows, frame.iloc[rows])
        for g, columns in enumerate(groups):
            permuted = frame.iloc[rows].copy()
            permuted[columns] = frame.iloc[source][columns].to_numpy()
            out[g, r] = base - score(rows, permuted)
    return out


@pytest.mark.parametrize("name, weighted, max_samples", [
    ("depthwise_one_hot", False, 1.0), ("depthwise_ctr", True, 0.5), ("lossguide_mixed", False, 1.0),
    ("lossguide_ctr_complexity", True, 1.0),
])
def test_permutation_matches_brute_force_with_the_same_draws(name, weighted, max_samples):
    """Each raw column permuted, its one-hot values and CTRs following it; groups by index and
    name across float and categorical columns."""
    _, reloaded, _, ens, _, _ = trained(name)
    kind = ZOO[name][0]
    frame, y = explained(kind)
    w = np.random.default_rng(3).uniform(0.2, 3.0, len(frame)) if weighted else None
    groups = [[c] for c in frame.columns] + [["c0", "c1"], ["f0", "c2", "c3"]]
    got = jaximp.permutation_importance(ens, frame, y, n_repeats=2, random_state=5, sample_weight=w,
                                        max_samples=max_samples, feature_groups=[[0]] + groups[1:])
    draws = _row_draws(as_key(5, "test"), 2, len(frame), int(max_samples * len(frame)))
    want = brute_force(reloaded, frame, y, w, draws, groups, _METRIC[kind])
    assert got.importances.shape == (len(groups), 2)
    np.testing.assert_allclose(got.importances, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got.importances_mean, want.mean(1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got.importances_std, want.std(1), rtol=1e-4, atol=1e-5)


def test_permutation_of_columns_a_ctr_combines():
    """A CTR over two columns straddles a group holding one of them: that group's rows are
    featurized again and predicted by the trees."""
    _, reloaded, ens = combinations("categorical_pairs")
    frame, y = explained("binary")
    groups = [[c] for c in frame.columns] + [["c1", "c3"]]
    got = jaximp.permutation_importance(ens, frame, y, n_repeats=2, random_state=1, feature_groups=groups)
    want = brute_force(reloaded, frame, y, None, _row_draws(as_key(1, "test"), 2, len(frame), len(frame)),
                       groups, "Logloss")
    np.testing.assert_allclose(got.importances, want, rtol=1e-4, atol=1e-5)


def test_permutation_semantics():
    """sklearn's layout; a column no split reads scores exactly 0; results do not depend on the
    batch size; an sklearn scorer by name."""
    _, _, _, ens, _, _ = trained("lossguide_mixed")
    frame, y = explained("multiclass")
    unused = [c for c in range(ens.n_features) if all(c not in player for player in ens.players)]
    assert unused  # column c1 is never split on in this model
    kw = dict(n_repeats=3, random_state=0, scoring="accuracy")
    got = jaximp.permutation_importance(ens, frame, y, **kw)
    assert got.importances.shape == (ens.n_features, 3)
    np.testing.assert_array_equal(got.importances_mean, got.importances.mean(1))
    np.testing.assert_array_equal(got.importances_std, got.importances.std(1))
    np.testing.assert_array_equal(got.importances[unused], 0.0)
    again = jaximp.permutation_importance(ens, frame, y, batch_size=16, **kw)
    np.testing.assert_array_equal(again.importances, got.importances)


# 4. The drop-in, with a categorical Pool ------------------------------------------------------


@pytest.mark.parametrize("name", ["depthwise_ctr", pytest.param("lossguide_ctr_complexity", marks=pytest.mark.slow)])
def test_dropin_takes_categorical_non_symmetric_models(name):
    """get_feature_importance of the freshly trained model object gives the numbers of the model
    reloaded from its JSON export, CatBoost's layouts included."""
    model, reloaded, _, _, _, _ = trained(name)
    frame, y = explained(ZOO[name][0])
    data = pool(frame, y)
    assert_close(jaximp.get_feature_importance(model, data, type="LossFunctionChange"),
                 reloaded.get_feature_importance(data, type="LossFunctionChange"))
    rows = jaximp.get_feature_importance(model, type="Interaction")
    want = reloaded.get_feature_importance(type="Interaction")
    assert rows.shape == want.shape
    np.testing.assert_array_equal(rows[:, :2], want[:, :2])  # same pairs, same order (no ties here)
    assert_close(rows[:, 2], want[:, 2])
    frame_out = jaximp.get_feature_importance(model, data, type="LossFunctionChange", prettified=True)
    assert isinstance(frame_out, pd.DataFrame)
    assert list(frame_out.columns) == list(reloaded.get_feature_importance(data, type="LossFunctionChange",
                                                                           prettified=True).columns)
