"""The drop-in's arguments: CatBoost's names of types and settings, the checks of what each type
takes, and the Pool's rows, labels and weights as jaximp reads them.

Every check raises the error CatBoost's users would expect from ``get_feature_importance``
(its name first), before anything is computed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jaximp._frontends.pool_rows import evaluated_rows
from jaximp._rows.frames import is_pool

FN_NAME = "get_feature_importance"
FSTR_TYPES = (
    "PredictionValuesChange", "LossFunctionChange", "FeatureImportance", "Interaction",
    "ShapValues", "PredictionDiff", "ShapInteractionValues", "SageValues",
)
SHAP_MODES = ("Auto", "UsePreCalc", "NoPreCalc")
SHAP_CALC_TYPES = {"Regular": "path_dependent", "Approximate": "approximate", "Exact": "exact"}
MODEL_OUTPUTS = ("Raw", "Probability", "LossFunction")
# the losses whose FeatureImportance is CatBoost's LossFunctionChange over query groups
GROUPWISE = ("YetiRank", "YetiRankPairwise", "PairLogit", "PairLogitPairwise", "QueryRMSE",
             "QuerySoftMax", "QueryCrossEntropy", "StochasticFilter", "StochasticRank", "LambdaMart",
             "GroupQuantile")
# the types that need data -> what to pass
_NEEDS_DATA = {
    "LossFunctionChange": "labelled rows, catboost.Pool(X, y)",
    "ShapValues": "the rows to explain, e.g. catboost.Pool(X)",
    "ShapInteractionValues": "the rows to explain, e.g. catboost.Pool(X)",
    "PredictionDiff": "the 2 rows to compare",
}


def _enum_name(value: Any) -> Any:
    """The name of a CatBoost enum member (EFstrType, EShapCalcType), else the value itself."""
    if type(value).__name__ in ("EFstrType", "EShapCalcType") and hasattr(value, "name"):
        return value.name
    return value


def choice(arg: str, value: Any, choices: Any, also: str = "") -> str:
    """``value``, or the name of the CatBoost enum member it is, when it is one of ``choices``.

    Raises:
        ValueError: anything else, naming ``arg``, the choices (and ``also``) and ``value``.
    """
    name = _enum_name(value)
    if not isinstance(name, str) or name not in choices:
        raise ValueError(f"{FN_NAME}: {arg} must be one of {', '.join(map(repr, choices))}{also}; "
                         f"got {value!r}")
    return name


def check_verbose(verbose: Any) -> None:
    """``verbose`` a bool or a non-negative int, as CatBoost checks it."""
    if not isinstance(verbose, (bool, int, np.integer)):
        raise TypeError(f"{FN_NAME}: verbose must be a bool or an int; got {verbose!r}")
    if int(verbose) < 0:
        raise ValueError(f"{FN_NAME}: verbose must be non-negative; got {verbose!r}")


def check_combinations(kind: str, data: Any, calc: str, model_output: str, reference_data: Any,
                       interaction_indices: Any) -> None:
    """Data where the type needs it, and no argument that the type does not use."""
    if kind in _NEEDS_DATA and data is None:
        raise ValueError(f"{FN_NAME}: data must be given for type={kind!r} ({_NEEDS_DATA[kind]}); got None")
    if reference_data is not None and kind != "ShapValues":
        raise ValueError(f"{FN_NAME}: reference_data must be None for type={kind!r} (only interventional "
                         f"ShapValues use it); got a {type(reference_data).__name__}")
    if interaction_indices is not None and kind != "ShapInteractionValues":
        raise ValueError(f"{FN_NAME}: interaction_indices must be None for type={kind!r} (only "
                         f"ShapInteractionValues use it); got {interaction_indices!r}")
    if calc != "Regular":
        if kind not in ("ShapValues", "LossFunctionChange", "ShapInteractionValues"):
            raise ValueError(f"{FN_NAME}: shap_calc_type must be 'Regular' for type={kind!r}, which uses no "
                             f"SHAP values; got {calc!r}")
        if kind == "LossFunctionChange":
            raise ValueError(f"{FN_NAME}: shap_calc_type must be 'Regular' for type='LossFunctionChange': "
                             f"jaximp.loss_function_change removes path-dependent SHAP values; got {calc!r}")
        if kind == "ShapInteractionValues":
            raise ValueError(f"{FN_NAME}: shap_calc_type must be 'Regular' for type='ShapInteractionValues' "
                             f"(CatBoost supports only it); got {calc!r}")
        if reference_data is not None:
            raise ValueError(f"{FN_NAME}: shap_calc_type must be 'Regular' with reference_data (the "
                             f"interventional values have one definition); got {calc!r}")
    if model_output != "Raw":
        if kind != "ShapValues" or reference_data is None:
            raise ValueError(f"{FN_NAME}: model_output must be 'Raw' unless type='ShapValues' with "
                             "reference_data (CatBoost then returns raw values anyway); "
                             f"got {model_output!r}")


def check_counted_weights(ens: Any, kind: str, data: Any, reference_data: Any) -> None:
    """A non-symmetric model file without leaf weights: CatBoost counts them on ``data`` with the
    Pool's row weights (``CollectLeavesStatistics``), which jaximp's SHAP does not take yet."""
    counted = kind in ("ShapValues", "ShapInteractionValues", "LossFunctionChange") and reference_data is None
    if not (counted and ens.layout == "trees" and not ens.leaf_weights_known and is_pool(data)):
        return
    if pool_weights(data) is not None:
        raise ValueError(f"{FN_NAME}: data must have unit row weights for type={kind!r} of a non-symmetric "
                         "model without leaf weights: CatBoost then counts the leaf weights on data "
                         "weighted by the Pool's weights, which jaximp does not reproduce yet; got a "
                         "weighted Pool")


def readable(model: Any, ens: Any, data: Any) -> Any:
    """``data`` as jaximp reads it: a ``catboost.Pool`` with categorical features keeps their raw
    values to itself, so its rows are read once by CatBoost through a probe of the model
    (``jaximp._frontends.pool_rows``); anything else as it is."""
    return evaluated_rows(ens, data, FN_NAME)


def pool_weights(pool: Any) -> np.ndarray | None:
    """``f32[N]`` a Pool's row weights, or None when they are all 1."""
    weight = np.asarray(pool.get_weight(), np.float32)
    return None if np.all(weight == 1.0) else weight


def pool_labels(data: Any, kind: str, what: str) -> tuple[np.ndarray, np.ndarray | None]:
    """``(labels [N], weights f32[N] or None)`` of a labelled Pool.

    Raises:
        ValueError: ``data`` is not a Pool with labels (``what`` names what ``kind`` needs them for).
    """
    label = data.get_label() if is_pool(data) else None
    if label is None:
        got = "a Pool without labels" if is_pool(data) else f"a {type(data).__name__}"
        raise ValueError(f"{FN_NAME}: data must be a catboost.Pool with labels, catboost.Pool(X, y), for "
                         f"type={kind!r} (it needs the {what}); got {got}")
    return np.asarray(label), pool_weights(data)
