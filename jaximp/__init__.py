"""jaximp: exact feature importances and SHAP values for tree ensembles, in JAX.

The whole public API is listed here; everything else lives in private modules.

Results live where the rows are: rows in host memory (NumPy, pandas, polars, ``catboost.Pool``,
lists) give NumPy arrays; rows given as a ``jax.Array`` give ``jax.Array``s on that array's
device. Functions of the model alone (``prediction_values_change(ens)`` without rows,
``interaction``, ``split_importance``, ``expected_value`` and ``Explainer.expected_value``, a
background included) return ``jax.Array``s. ``get_feature_importance`` returns CatBoost's own
layouts (float64 NumPy arrays), and ``jaximp.dask`` dask arrays.

Architecture:
    The package is laid out as the pipeline, one private folder a stage; a stage imports only
    the stages before it (an import-linter contract in ``pyproject.toml``, checked by the test
    suite)::

        model object or file -> _importers -> _models <- every stage reads the model
        rows (arrays, frames)  ->  _rows -> _leaves -> _shap -> _importances -> _frontends

    ============== ====================================== ======================================
    stage          receives                               returns
    ============== ====================================== ======================================
    _importers     a CatBoost, XGBoost, LightGBM or       an ``ObliviousEnsemble`` (symmetric
                   scikit-learn model, or its file         trees) or a ``TreeEnsemble``
    _models        (the data model: both layouts, the     -
                   attribution to columns, the shape
                   legend)
    _rows          user rows (NumPy, JAX, pandas,         checked rows ``f32[N, E]`` (bins or
                   polars, ``catboost.Pool``)              category codes); padded steps, devices
    _leaves        the model and checked rows             leaves ``i32[N, T]``, predictions
                                                          ``f32[N(, K)]``, histograms ``f32[T, L]``
    _shap          the model, rows, a background          SHAP values ``f32[N, F(, K)]``, expected
                                                          values, interactions ``f32[N, F, F(, K)]``
    _importances   the model (and rows, targets)          importances ``f32[F]``, ``f32[F, F]``, a
                                                          ``Bunch``
    _frontends     CatBoost's arguments, files, the       CatBoost's layouts, Parquet files,
                   command line, Dask collections          reports, plots, dask arrays
    ============== ====================================== ======================================

    One model, two layouts: ``TreeEnsemble`` is the general model and ``ObliviousEnsemble`` the
    fast layout of symmetric trees (``ens.layout``). A stage whose kernels differ by layout
    chooses them once, in one table: ``_leaves.predict.KERNELS`` (leaf indices, predictions,
    histograms), ``_shap.values.KERNELS`` (SHAP tables and lookups; an oblivious model deeper
    than its tables allow runs as general trees), and in ``_importances`` one per capability
    (PredictionValuesChange, Interaction, split statistics, LossFunctionChange, permutation
    importance). Shape letters mean the same everywhere (legend: :mod:`jaximp._models`).

Examples:
    The docstrings' examples use this model, ``ens``, ``X`` and ``y``:

    >>> import catboost, jaximp
    >>> import numpy as np
    >>> from sklearn.datasets import load_diabetes
    >>> X, y = load_diabetes(return_X_y=True, as_frame=True)       # 442 rows, 10 features
    >>> model = catboost.CatBoostRegressor(iterations=20, depth=4, verbose=0,
    ...                                    allow_writing_files=False).fit(X, y)
    >>> ens = jaximp.from_catboost(model)
    >>> ens
    ObliviousEnsemble(trees=20, depth=4, features=10, outputs=1, loss='RMSE')
"""

from jaximp._frontends.compilation_cache import enable_compilation_cache as enable_compilation_cache
from jaximp._frontends.compilation_cache import enable_from_environment as _enable_from_environment
from jaximp._frontends.dropin import get_feature_importance as get_feature_importance
from jaximp._frontends.files import explain_files as explain_files
from jaximp._frontends.shap_explainer import TreeExplainer as TreeExplainer
from jaximp._importances.interaction import interaction as interaction
from jaximp._importances.loss_change import loss_function_change as loss_function_change
from jaximp._importances.permutation import permutation_importance as permutation_importance
from jaximp._importances.pvc import prediction_values_change as prediction_values_change
from jaximp._importances.splits import split_importance as split_importance
from jaximp._importers.catboost import from_catboost as from_catboost
from jaximp._importers.lightgbm import from_lightgbm as from_lightgbm
from jaximp._importers.sklearn import from_sklearn as from_sklearn
from jaximp._importers.xgboost import from_xgboost as from_xgboost
from jaximp._leaves.predict import leaf_indices as leaf_indices
from jaximp._leaves.predict import predict as predict
from jaximp._models.oblivious import ObliviousEnsemble as ObliviousEnsemble
from jaximp._models.trees import TreeEnsemble as TreeEnsemble
from jaximp._shap.explainer import Explainer
from jaximp._shap.interactions import Interactions as Interactions
from jaximp._shap.interactions import banzhaf_values as banzhaf_values
from jaximp._shap.interactions import interaction_importance as interaction_importance
from jaximp._shap.interactions import interaction_values as interaction_values
from jaximp._shap.soft import soft_leaf_probabilities as soft_leaf_probabilities
from jaximp._shap.soft import soft_predict as soft_predict
from jaximp._shap.soft import soft_shap_values as soft_shap_values
from jaximp._shap.values import expected_value as expected_value
from jaximp._shap.values import shap_importance as shap_importance
from jaximp._shap.values import shap_interaction_importance as shap_interaction_importance
from jaximp._shap.values import shap_interaction_values as shap_interaction_values
from jaximp._shap.values import shap_values as shap_values

__version__ = "0.1.0"

__all__ = [
    "Explainer",
    "Interactions",
    "ObliviousEnsemble",
    "TreeEnsemble",
    "TreeExplainer",
    "banzhaf_values",
    "enable_compilation_cache",
    "expected_value",
    "explain_files",
    "from_catboost",
    "from_lightgbm",
    "from_sklearn",
    "from_xgboost",
    "get_feature_importance",
    "interaction",
    "interaction_importance",
    "interaction_values",
    "leaf_indices",
    "loss_function_change",
    "permutation_importance",
    "predict",
    "prediction_values_change",
    "shap_importance",
    "shap_interaction_importance",
    "shap_interaction_values",
    "shap_values",
    "soft_leaf_probabilities",
    "soft_predict",
    "soft_shap_values",
    "split_importance",
]


_enable_from_environment()  # JAXIMP_COMPILATION_CACHE=1: the persistent compilation cache, on import


def __getattr__(name: str):
    """``jaximp.dask`` (Dask collections; needs dask) and ``jaximp.plots`` (needs matplotlib) are
    imported on first use."""
    if name in ("dask", "plots"):
        import importlib

        return importlib.import_module(f"jaximp.{name}")
    raise AttributeError(f"module 'jaximp' has no attribute {name!r}")
