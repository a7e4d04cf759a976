"""Rows on a device stay there: once a call's programs are compiled, explaining ``jax.Array`` rows
sends nothing to the device and reads nothing back that the call did not ask for explicitly
(``jax.transfer_guard("disallow")`` refuses every implicit transfer), with a number of rows that
is a multiple of no step size.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from models import train, xgboost_model

import jaximp


def _models():
    model, _, _, _ = train("regression", depth=4, iterations=10)  # the RMSE loss
    return {"oblivious": jaximp.from_catboost(model), "trees": xgboost_model("squarederror").ens}


@pytest.fixture(scope="module", params=["oblivious", "trees"])
def device_rows(request):
    ens = _models()[request.param]
    rows = np.random.default_rng(0).normal(size=(1500, ens.n_features)).astype(np.float32)
    y = jax.device_put(rows[:, 0] - rows[:, 1])
    weight = jax.device_put(np.linspace(0.5, 2.0, len(rows), dtype=np.float32))
    return ens, jax.device_put(rows), jax.device_put(rows[:100]), jax.device_put(rows[:300]), y, weight


def _permutation(scoring, max_samples=1.0):
    def call(ens, x, bg, few, y, w):
        r = jaximp.permutation_importance(ens, x, y, scoring=scoring, n_repeats=3, random_state=0, sample_weight=w,
                                          max_samples=max_samples)
        return r.importances
    return call


def _indices(index, order, interventional=False, reduce=False):
    def call(ens, x, bg, few, y, w):
        fn = jaximp.interaction_importance if reduce else jaximp.interaction_values
        game = dict(method="interventional", background=bg) if interventional else {}
        return fn(ens, few, index=index, order=order, **game).values
    return call


CALLS = {  # (ens, rows, background, fewer rows, targets, weights) -> a result on the rows' device
    "predict": lambda ens, x, bg, few, y, w: jaximp.predict(ens, x),
    "leaf_indices": lambda ens, x, bg, few, y, w: jaximp.leaf_indices(ens, x),
    "path_dependent": lambda ens, x, bg, few, y, w: jaximp.shap_values(ens, x),
    "approximate": lambda ens, x, bg, few, y, w: jaximp.shap_values(ens, x, method="approximate"),
    "interventional": lambda ens, x, bg, few, y, w: jaximp.shap_values(ens, x, method="interventional",
                                                                       background=bg),
    "shap_importance": lambda ens, x, bg, few, y, w: jaximp.shap_importance(ens, x),
    "interactions": lambda ens, x, bg, few, y, w: jaximp.shap_interaction_values(ens, few),
    "interactions_interventional": lambda ens, x, bg, few, y, w: jaximp.shap_interaction_values(
        ens, few, method="interventional", background=bg),
    "interaction_values": _indices("k-SII", 2),
    "interaction_values_interventional": _indices("k-SII", 2, interventional=True),
    "interaction_values_stii": _indices("STII", 2),
    "interaction_values_bv_interventional": _indices("BV", 1, interventional=True),
    "interaction_importance": _indices("k-SII", 2, reduce=True),
    "interaction_importance_sii_interventional": _indices("SII", 2, interventional=True, reduce=True),
    "banzhaf_values": lambda ens, x, bg, few, y, w: jaximp.banzhaf_values(ens, few),
    "banzhaf_values_interventional": lambda ens, x, bg, few, y, w: jaximp.banzhaf_values(
        ens, few, method="interventional", background=bg),
    "shap_values_log_loss": lambda ens, x, bg, few, y, w: jaximp.shap_values(
        ens, few, method="interventional", background=bg, model_output="log_loss", y=jax.lax.slice_in_dim(y, 0, 300)),
    "shap_values_groups": lambda ens, x, bg, few, y, w: jaximp.shap_values(
        ens, few, feature_groups=[[0, 1], list(range(2, ens.n_features))]),
    "loss_function_change": lambda ens, x, bg, few, y, w: jaximp.loss_function_change(ens, x, y, sample_weight=w),
    "permutation_loss": _permutation(None),
    "permutation_r2_subsample": _permutation("r2", max_samples=0.6),
    "permutation_function": _permutation(lambda y, raw, w: -jnp.sum(w * jnp.abs(raw - y)) / jnp.sum(w)),
}


@pytest.mark.parametrize("fn", sorted(CALLS))
def test_device_rows_need_no_implicit_transfer_once_warm(device_rows, fn):
    ens, x = device_rows[:2]
    warm = jax.block_until_ready(CALLS[fn](*device_rows))  # compiles
    with jax.transfer_guard("disallow"):
        again = jax.block_until_ready(CALLS[fn](*device_rows))
    assert isinstance(again, jax.Array) and again.devices() == x.devices()
    np.testing.assert_array_equal(np.asarray(again), np.asarray(warm))
