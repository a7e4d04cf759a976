"""A row's values are its own: explained alone, among many rows, or in steps of any size, a row
gets the same bits. Nothing about a row's arithmetic depends on how many rows came with it (the
layout of a general tree's SHAP kernels is chosen from the model and the platform, never from the
number of rows), nor on whether the compilation cache is on.

Oracle: the same function on the same row in another company; every model type and every method.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from models import Fitted, depthwise_multiclass, lightgbm_deep, lightgbm_model, sklearn_model, train, xgboost_model

import jaximp


def _catboost() -> Fitted:
    model, X, y, _ = train("multiclass", depth=4, iterations=10, nan_fraction=0.05)
    return Fitted(model=model, ens=jaximp.from_catboost(model), X=X, y=y)


MODELS = {
    "xgboost": lambda: xgboost_model("squarederror"),
    "lightgbm": lambda: lightgbm_model("regression"),
    "lightgbm_127_leaves": lightgbm_deep,
    "catboost_symmetric": _catboost,
    "catboost_depthwise": depthwise_multiclass,
    "sklearn_forest": lambda: sklearn_model("rf_reg"),
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def fitted(request):
    f = MODELS[request.param]()
    rows = np.asarray(f.X, np.float32)
    return f.ens, np.tile(rows, (-(-1500 // len(rows)), 1))[:1500]  # more rows than one block


def _calls(ens, background):
    return {
        "predict": lambda x, **kw: jaximp.predict(ens, x, **kw),
        "leaf_indices": lambda x, **kw: jaximp.leaf_indices(ens, x, **kw),
        "path_dependent": lambda x, **kw: jaximp.shap_values(ens, x, **kw),
        "approximate": lambda x, **kw: jaximp.shap_values(ens, x, method="approximate", **kw),
        "interventional": lambda x, **kw: jaximp.shap_values(ens, x, method="interventional",
                                                             background=background, **kw),
    }


def test_a_rows_values_do_not_depend_on_the_other_rows(fitted):
    ens, rows = fitted
    for name, call in _calls(ens, rows[::30]).items():
        many = np.asarray(call(rows))
        np.testing.assert_array_equal(np.asarray(call(rows[:5])), many[:5], err_msg=f"{name}: 5 rows alone")
        np.testing.assert_array_equal(np.asarray(call(rows[7:8])), many[7:8], err_msg=f"{name}: one row alone")
        np.testing.assert_array_equal(np.asarray(call(rows, batch_size=64)), many, err_msg=f"{name}: batch_size=64")


def test_a_rows_interaction_values_do_not_depend_on_the_other_rows(fitted):
    ens, rows = fitted
    many = np.asarray(jaximp.shap_interaction_values(ens, rows[:300]))
    np.testing.assert_array_equal(np.asarray(jaximp.shap_interaction_values(ens, rows[:3])), many[:3])
    np.testing.assert_array_equal(np.asarray(jaximp.shap_interaction_values(ens, rows[:300], batch_size=64)), many)


def test_the_compilation_cache_does_not_change_a_rows_values(tmp_path):
    """The same rows with JAX's persistent cache off and on (the deep LightGBM model, whose SHAP
    layout once followed the cache)."""
    f = lightgbm_deep()
    rows = np.asarray(f.X[:200], np.float32)
    off = np.asarray(jaximp.shap_values(f.ens, rows))
    saved = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", str(tmp_path))
    try:
        on = np.asarray(jaximp.shap_values(f.ens, rows))
    finally:
        jax.config.update("jax_compilation_cache_dir", saved)
    np.testing.assert_array_equal(on, off)
