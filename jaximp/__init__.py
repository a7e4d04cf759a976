"""jaximp: exact feature importances and SHAP values for tree ensembles, in JAX.

The whole public API is listed here; everything else lives in private modules.
"""

from jaximp._catboost import from_catboost as from_catboost
from jaximp._importance import interaction as interaction
from jaximp._importance import prediction_values_change as prediction_values_change
from jaximp._importance import split_importance as split_importance
from jaximp._leaves import leaf_indices as leaf_indices
from jaximp._leaves import predict as predict
from jaximp._model import ObliviousEnsemble as ObliviousEnsemble

__version__ = "0.1.0"

__all__ = [
    "ObliviousEnsemble",
    "from_catboost",
    "interaction",
    "leaf_indices",
    "predict",
    "prediction_values_change",
    "split_importance",
]
