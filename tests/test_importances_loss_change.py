"""LossFunctionChange against CatBoost and its definition, for every layout and library.

Oracles: CatBoost's ``get_feature_importance(type="LossFunctionChange")`` (float64; for
non-symmetric trees on the model reloaded from its JSON export, CatBoost's reference), with and
without row weights; where CatBoost has none (MultiRMSE, XGBoost, LightGBM), the definition
``M(y, raw - phi_f) - M(y, raw)`` with the library's own raw output and SHAP values.

Tolerances: jaximp's float32 SHAP values and predictions (magnitude ~3) give LossFunctionChange
to ``atol=1e-5`` (``rtol=1e-5``); categorical models ``atol=1e-5 * max(1, magnitude)``.
"""

from __future__ import annotations

import dataclasses

import catboost
import jax
import models
import numpy as np
import pytest
from oracles import assert_close, lightgbm_contributions, model_loss, raw_output, xgboost_contributions
from scipy.special import expit

import jaximp
from jaximp import loss_function_change, permutation_importance
from jaximp._rows.targets import as_targets

RTOL, ATOL = 1e-5, 1e-5
slow = pytest.mark.slow


@dataclasses.dataclass(frozen=True)
class Case:
    """An ensemble and its CatBoost model, rows and targets; the row weights to try (None: unit)
    and ``data(w)``, the same rows as CatBoost's Pool; ``relative``: ``atol`` relative to the
    largest change; ``batch_size``: a step whose result must be the same."""

    ens: object
    model: object
    rows: object
    y: object
    data: object
    weights: tuple = (None,)
    relative: bool = False
    batch_size: int | None = None


def _oblivious(kind, weighted):
    model, X, y, w = models.train(kind, weighted=weighted)
    return Case(jaximp.from_catboost(model), model, X, y, lambda w: catboost.Pool(X, y, weight=w), (w,))


def _other_loss(loss):
    X, y = models.make_data("binary" if loss == "CrossEntropy" else "regression")
    if loss == "CrossEntropy":
        y = np.clip(expit(X[:, 0] * 2), 0.05, 0.95)  # probabilistic targets
    model = catboost.CatBoost({"loss_function": loss, "iterations": 20, "depth": 3, "random_seed": 0, "verbose": 0,
                               "thread_count": 1, "allow_writing_files": False}).fit(X, y)
    return Case(jaximp.from_catboost(model), model, X, y, lambda w: catboost.Pool(X, y))


def _summed(kind):
    model, X, y = models.summed(kind)
    return Case(jaximp.from_catboost(model), model, X, y, lambda w: catboost.Pool(X, y))


def _catboost_trees(index):
    fitted = models.catboost_trees(*models.IMPORTANCE_TREES[index], n=500)
    X, y = fitted.X, fitted.y
    return Case(fitted.ens, fitted.model, X, y, lambda w: catboost.Pool(X, y, weight=w),
                (None, models.sample_weights(len(X))), batch_size=37)


def _catboost_categorical(name):
    fitted = models.catboost_categorical(name)
    frame, y = models.explained(models.CATEGORICAL[name][0])
    return Case(fitted.ens, fitted.model, frame, y, lambda w: models.pool(frame, y), relative=True)


def _catboost_categorical_trees(name):
    fitted = models.catboost_categorical_trees(name)
    frame, y = models.explained(models.CATEGORICAL_TREES[name][0])

    def data(w):
        weighted = models.pool(frame, y)
        if w is not None:
            weighted.set_weight(w)
        return weighted

    weights = (None, np.random.default_rng(2).uniform(0.2, 3.0, len(frame)))
    return Case(fitted.ens, fitted.model, frame, y, data, weights, relative=True,
                batch_size=16 if name == "lossguide_mixed" else None)


def _player_of_several_columns(name):
    """A CTR over two categorical columns is one player; its loss change goes to the columns of
    its class's first feature, as CatBoost's."""
    fitted = models.catboost_combinations(name)
    assert any(len(player) > 1 for player in fitted.ens.players)
    frame, y = models.explained("binary")
    return Case(fitted.ens, fitted.model, frame, y, lambda w: models.pool(frame, y), relative=True)


def _case(build, arg, name, default=True):
    return pytest.param(build, arg, id=name, marks=() if default else slow)


AGAINST_CATBOOST = (
    [_case(_oblivious, (kind, weighted), f"oblivious-{kind}-{weighted}")
     for weighted in (False, True) for kind in ("regression", "binary", "multiclass")]
    + [_case(_other_loss, (loss,), f"oblivious-{loss}") for loss in ("MAE", "CrossEntropy")]
    + [_case(_summed, ("regression",), "oblivious-summed-mixed-depths")]
    + [_case(_catboost_trees, (i,), "trees-" + "-".join(map(str, models.IMPORTANCE_TREES[i][:3])), i in (2, 3))
       for i in range(len(models.IMPORTANCE_TREES))]  # RMSE of TreeEnsembles by default: test_no_leaf_weights.py
    + [_case(_catboost_categorical, (name,), f"categorical-{name}")
       for name in ("one_hot", "ctr_types", "combinations_4", "categorical_pairs", "multiclass")]
    + [_case(_catboost_categorical_trees, (name,), f"categorical-trees-{name}",
             name in ("depthwise_ctr", "lossguide_mixed"))  # a CTR model of each grow policy
       for name in models.CATEGORICAL_TREES]
    + [_case(_player_of_several_columns, ("categorical_pairs",), "categorical-trees-player-of-several-columns")]
)


@pytest.mark.parametrize("build, args", AGAINST_CATBOOST)
def test_against_catboost(build, args):
    case = build(*args)
    for w in case.weights:
        want = case.model.get_feature_importance(case.data(w), type="LossFunctionChange")
        got = loss_function_change(case.ens, case.rows, case.y, sample_weight=w)
        assert got.shape == (case.ens.n_features,) and got.dtype == np.float32
        if case.relative:
            assert_close(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    if case.batch_size is not None:
        np.testing.assert_array_equal(loss_function_change(case.ens, case.rows, case.y, batch_size=case.batch_size),
                                      loss_function_change(case.ens, case.rows, case.y))


def test_multiregression_follows_the_definition():
    # CatBoost raises "Multi-dimensional target fstr is unimplemented yet"; the definition with
    # its MultiRMSE metric and its own SHAP values is the oracle.
    model, X, y, w = models.train("multiregression", weighted=True)
    with pytest.raises(catboost.CatBoostError, match="Multi-dimensional target"):
        model.get_feature_importance(catboost.Pool(X, y, weight=w), type="LossFunctionChange")
    phi = model.get_feature_importance(catboost.Pool(X, y), type="ShapValues")  # [N, K, F + 1]
    raw = raw_output(model, X)

    def multi_rmse(a):
        return np.sqrt(np.sum(w * np.sum((a - y) ** 2, axis=1)) / np.sum(w))

    want = [multi_rmse(raw - phi[:, :, f]) - multi_rmse(raw) for f in range(X.shape[1])]
    got = loss_function_change(jaximp.from_catboost(model), X, y, sample_weight=w)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("case", ["xgboost-multi", "lightgbm-reg"])
def test_categorical_libraries_follow_the_definition(case):
    """``M(y, raw - phi_f) - M(y, raw)`` with the library's raw output and its own SHAP values."""
    fitted = models.library_categorical(case)
    model, ens, df, y = fitted.model, fitted.ens, fitted.X, fitted.y
    out = raw_output(model, df).reshape(len(df), -1)
    phi = (xgboost_contributions(model, df, pred_contribs=True)[:, :-1] if case.startswith("xgboost")
           else lightgbm_contributions(model, df)[0])  # [N, F, K]
    want = [model_loss(ens.loss_function, y, out - phi[:, f]) - model_loss(ens.loss_function, y, out)
            for f in range(ens.n_features)]
    assert_close(loss_function_change(ens, df, y), want)


def test_batch_independent_and_bad_inputs():
    model, X, y, _ = models.train("multiclass")
    ens = jaximp.from_catboost(model)
    first = loss_function_change(ens, X, y)
    for batch_size in (37, 256):
        np.testing.assert_array_equal(loss_function_change(ens, X, y, batch_size=batch_size), first)
    if len(jax.devices()) >= 2:  # rows sharded over two devices
        np.testing.assert_array_equal(loss_function_change(ens, X, y, batch_size=64, devices=2), first)
    with pytest.raises(TypeError, match="loss_function_change: ens must be a jaximp.ObliviousEnsemble"):
        loss_function_change(model, X, y)
    with pytest.raises(TypeError, match="permutation_importance: ens must be a jaximp.ObliviousEnsemble"):
        permutation_importance(model, X, y)
    with pytest.raises(ValueError, match=r"loss_function_change: y must have shape \(400,\)"):
        loss_function_change(ens, X, y[:10])
    with pytest.raises(ValueError, match=r"loss_function_change: y must hold the model's class labels"):
        loss_function_change(ens, X, y + 5)
    quantile = catboost.CatBoost({"loss_function": "Quantile:alpha=0.8", "iterations": 2, "depth": 2, "verbose": 0,
                                  "thread_count": 1, "allow_writing_files": False}).fit(X, y.astype(float))
    with pytest.raises(ValueError, match=r"loss_function_change: the model's loss_function must be one of"):
        loss_function_change(jaximp.from_catboost(quantile), X, y)
    assert as_targets(y, ens, len(X), "f").dtype == np.int32


def test_bad_inputs_of_tree_ensembles():
    """LossFunctionChange, permutation importance, Interaction and split statistics of a
    TreeEnsemble refuse what they cannot take."""
    fitted = models.catboost_trees(*models.IMPORTANCE_TREES[0], n=500)
    ens, X, y = fitted.ens, fitted.X, fitted.y
    with pytest.raises(ValueError, match=r"loss_function_change: y must have shape \(500,\)"):
        loss_function_change(ens, X, y[:10])
    with pytest.raises(ValueError, match=r"loss_function_change: X must have 6 columns|X must have shape"):
        loss_function_change(ens, X[:, :4], y)
    with pytest.raises(ValueError, match=r"permutation_importance: y must have shape \(500,\)"):
        permutation_importance(ens, X, y[:3])
    with pytest.raises(ValueError, match=r"feature_groups\[0\] must hold column indices in \[0, 6\)"):
        permutation_importance(ens, X, y, feature_groups=[[9]])
    with pytest.raises(ValueError, match="n_repeats must be an int >= 1"):
        permutation_importance(ens, X, y, n_repeats=0)
    with pytest.raises(ValueError, match="scoring 'accuracy' is defined for binary and multiclass"):
        permutation_importance(ens, X, y, scoring="accuracy")
    with pytest.raises(ValueError, match="output_reduction must be None or one of"):
        jaximp.interaction(ens, output_reduction="max")
    no_loss = dict(fitted.json, model_info={k: v for k, v in fitted.json["model_info"].items()
                                            if k not in ("params", "loss_function")})
    with pytest.raises(ValueError, match="loss_function"):
        loss_function_change(models.from_json(no_loss), X, y)
    with pytest.raises(ValueError, match="split_importance: type must be one of"):
        jaximp.split_importance(ens, "mdi")
