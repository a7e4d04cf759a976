"""Rows on a device stay there: once a call's programs are compiled, explaining ``jax.Array`` rows
sends nothing to the device and reads nothing back that the call did not ask for explicitly
(``jax.transfer_guard("disallow")`` refuses every implicit transfer), with a number of rows that
is a multiple of no step size.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from models import train, xgboost_model

import jaximp


def _models():
    model, _, _, _ = train("regression", depth=4, iterations=10)
    return {"oblivious": jaximp.from_catboost(model), "trees": xgboost_model("squarederror").ens}


@pytest.fixture(scope="module", params=["oblivious", "trees"])
def device_rows(request):
    ens = _models()[request.param]
    rows = np.random.default_rng(0).normal(size=(1500, ens.n_features)).astype(np.float32)
    return ens, jax.device_put(rows), jax.device_put(rows[:100]), jax.device_put(rows[:300])


CALLS = {  # (ens, rows, background, fewer rows) -> a result on the rows' device
    "predict": lambda ens, x, bg, few: jaximp.predict(ens, x),
    "leaf_indices": lambda ens, x, bg, few: jaximp.leaf_indices(ens, x),
    "path_dependent": lambda ens, x, bg, few: jaximp.shap_values(ens, x),
    "approximate": lambda ens, x, bg, few: jaximp.shap_values(ens, x, method="approximate"),
    "interventional": lambda ens, x, bg, few: jaximp.shap_values(ens, x, method="interventional", background=bg),
    "shap_importance": lambda ens, x, bg, few: jaximp.shap_importance(ens, x),
    "interactions": lambda ens, x, bg, few: jaximp.shap_interaction_values(ens, few),
}


@pytest.mark.parametrize("fn", sorted(CALLS))
def test_device_rows_need_no_implicit_transfer_once_warm(device_rows, fn):
    ens, x = device_rows[:2]
    warm = jax.block_until_ready(CALLS[fn](*device_rows))  # compiles
    with jax.transfer_guard("disallow"):
        again = jax.block_until_ready(CALLS[fn](*device_rows))
    assert isinstance(again, jax.Array) and again.devices() == x.devices()
    np.testing.assert_array_equal(np.asarray(again), np.asarray(warm))
