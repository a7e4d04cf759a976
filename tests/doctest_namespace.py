"""The names that jaximp's docstring examples use, for ``pytest --doctest-modules``: a pytest
plugin (``-p doctest_namespace`` in pyproject.toml), so that it reaches the examples in
``jaximp/`` without a conftest inside the package.

Every example reads ``model``, ``ens``, ``X`` and ``y`` as the ``jaximp`` package docstring
builds them: a CatBoost regressor of 20 trees of depth 4 trained on scikit-learn's bundled
diabetes data (442 rows, 10 named features, as a pandas DataFrame), trained once per session.
"""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

# A module whose examples need an optional library is left out when that library is missing
# (all of them are in the "test" extra).
_NEEDS = {("jaximp", "dask.py"): "dask", ("_frontends", "dask.py"): "dask", ("_importers", "xgboost.py"): "xgboost",
          ("_importers", "lightgbm.py"): "lightgbm", ("_frontends", "files.py"): "pyarrow",
          ("_shap", "explainer.py"): "shap"}


def pytest_ignore_collect(collection_path: pathlib.Path, config):
    """Skip the examples of a module whose optional library is missing."""
    package = _NEEDS.get((collection_path.parent.name, collection_path.name))
    if package is not None and importlib.util.find_spec(package) is None:
        return True
    return None


@pytest.fixture(scope="session")
def _docs_model():
    import catboost
    from sklearn.datasets import load_diabetes

    import jaximp

    X, y = load_diabetes(return_X_y=True, as_frame=True)
    model = catboost.CatBoostRegressor(iterations=20, depth=4, verbose=0, allow_writing_files=False)
    model.fit(X, y)
    return model, jaximp.from_catboost(model), X, y


@pytest.fixture(autouse=True)
def _docs_namespace(request, doctest_namespace):
    """``np``, ``catboost``, ``jaximp``, ``model``, ``ens``, ``X``, ``y`` for doctests; the JAX
    compilation-cache settings an example changes are put back afterwards."""
    if not isinstance(request.node, pytest.DoctestItem):
        yield
        return
    import catboost
    import jax
    import numpy as np

    import jaximp

    model, ens, X, y = request.getfixturevalue("_docs_model")
    doctest_namespace.update(np=np, catboost=catboost, jaximp=jaximp, model=model, ens=ens, X=X, y=y)
    names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
             "jax_persistent_cache_min_entry_size_bytes")
    saved = {name: getattr(jax.config, name) for name in names}
    yield
    if any(getattr(jax.config, name) != value for name, value in saved.items()):
        from jax.experimental.compilation_cache import compilation_cache

        for name, value in saved.items():
            jax.config.update(name, value)
        compilation_cache.reset_cache()
