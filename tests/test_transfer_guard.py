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


CALLS = {  # (ens, rows, background, fewer rows, targets, weights) -> a result on the rows' device
    "predict": lambda ens, x, bg, few, y, w: jaximp.predict(ens, x),
    "leaf_indices": lambda ens, x, bg, few, y, w: jaximp.leaf_indices(ens, x),
    "path_dependent": lambda ens, x, bg, few, y, w: jaximp.shap_values(ens, x),
    "approximate": lambda ens, x, bg, few, y, w: jaximp.shap_values(ens, x, method="approximate"),
    "interventional": lambda ens, x, bg, few, y, w: jaximp.shap_values(ens, x, method="interventional",
                                                                       background=bg),
    "shap_importance": lambda ens, x, bg, few, y, w: jaximp.shap_importance(ens, x),
    "interactions": lambda ens, x, bg, few, y, w: jaximp.shap_interaction_values(ens, few),
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
