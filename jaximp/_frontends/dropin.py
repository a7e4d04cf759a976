"""``get_feature_importance``: CatBoost's ``CatBoost.get_feature_importance`` on jaximp.

The call mirrors CatBoost 1.2.10's signature, type names (strings or ``catboost.EFstrType``
members), output layouts and prettified DataFrames, so that replacing
``model.get_feature_importance(`` with ``jaximp.get_feature_importance(model, `` is the whole
migration. Every number comes from jaximp's public functions; this module only checks the
arguments, picks the function and lays its result out as CatBoost does.

A CatBoost model is imported once with :func:`jaximp.from_catboost` and kept in a cache keyed by
the model object (dropped with it) and checked against a cheap fingerprint of the fitted model
(tree count, a hash of its leaf values, borders, scale and bias, feature names), so that a
refitted or edited model is imported again. Model files are cached by path, size and mtime.
"""

from __future__ import annotations

import hashlib
import os
import warnings
import weakref
from typing import Any

import numpy as np

from jaximp._frontends.pool_rows import evaluated_from_catboost
from jaximp._importances.loss_change import loss_function_change
from jaximp._importances.model_importance import interaction, prediction_values_change
from jaximp._importances.prediction_diff import prediction_diff
from jaximp._importers.catboost import from_catboost
from jaximp._leaves.predict import predict
from jaximp._models.ensemble import Ensemble
from jaximp._rows.frames import is_pool
from jaximp._rows.inputs import as_features
from jaximp._shap.values import expected_value, shap_interaction_values, shap_values

FSTR_TYPES = (
    "PredictionValuesChange", "LossFunctionChange", "FeatureImportance", "Interaction",
    "ShapValues", "PredictionDiff", "ShapInteractionValues", "SageValues",
)
SHAP_MODES = ("Auto", "UsePreCalc", "NoPreCalc")
SHAP_CALC_TYPES = {"Regular": "path_dependent", "Approximate": "approximate", "Exact": "exact"}
MODEL_OUTPUTS = ("Raw", "Probability", "LossFunction")
_GROUPWISE = ("YetiRank", "YetiRankPairwise", "PairLogit", "PairLogitPairwise", "QueryRMSE",
              "QuerySoftMax", "QueryCrossEntropy", "StochasticFilter", "StochasticRank", "LambdaMart",
              "GroupQuantile")
_FN = "get_feature_importance"


def get_feature_importance(
    model: Any,
    data: Any = None,
    type: Any = "FeatureImportance",
    prettified: bool = False,
    thread_count: int = -1,
    verbose: bool | int = False,
    fstr_type: Any = None,
    shap_mode: str = "Auto",
    model_output: str = "Raw",
    interaction_indices: Any = None,
    shap_calc_type: Any = "Regular",
    reference_data: Any = None,
    sage_n_samples: int = 128,
    sage_batch_size: int = 512,
    sage_detect_convergence: bool = True,
    log_cout: Any = None,
    log_cerr: Any = None,
) -> Any:
    """CatBoost's ``model.get_feature_importance(...)``, computed by jaximp.

    Same arguments, defaults, type names and output layouts as CatBoost 1.2.10's
    ``CatBoost.get_feature_importance`` (CatBoost docs, "get_feature_importance"); the numbers
    are CatBoost's to float32 precision (results are returned as float64, like CatBoost's).
    Types (N rows of ``data``, F features, K outputs):

    * ``"FeatureImportance"``: ``"PredictionValuesChange"`` (ranking losses: CatBoost's
      ``"LossFunctionChange"`` over query groups, which jaximp does not compute: ValueError).
    * ``"PredictionValuesChange"``: ``f64[F]`` summing to 100
      (:func:`jaximp.prediction_values_change`); with ``data`` the leaf weights are recounted on
      its rows (a Pool's weights applied).
    * ``"LossFunctionChange"``: ``f64[F]`` (:func:`jaximp.loss_function_change`); ``data`` must
      be a ``catboost.Pool`` with labels (and optionally weights).
    * ``"ShapValues"``: ``f64[N, F+1]``, the expected value in the last column, or
      ``f64[N, K, F+1]`` for K > 1 (:func:`jaximp.shap_values`; ``shap_calc_type`` "Regular",
      "Exact", "Approximate"; ``reference_data`` gives the interventional values). With
      ``reference_data``, ``model_output="Probability"`` / ``"LossFunction"`` reproduce CatBoost's
      rescaling of each reference's raw values: for a row x and each reference row b,
      ``phi_b(x) * (T(x) - T(b)) / (f(x) - f(b))`` (1 when ``f(x) == f(b)``), averaged over b, with
      ``f`` the raw prediction and ``T`` the model's probability (softmax for MultiClass, else
      the sigmoid; the references always get the per-output sigmoid, as in CatBoost) or the
      row's loss ``L(y_x, .)``; the last column is the mean of ``T(b)``. This costs one
      interventional table per reference row.
    * ``"ShapInteractionValues"``: ``f64[N, F+1, F+1]`` or ``f64[N, K, F+1, F+1]``
      (:func:`jaximp.shap_interaction_values`); CatBoost puts the model's bias (per output) in
      the last row and column and 0 in their corner. ``interaction_indices=(i, j)`` (indices or
      feature names) gives ``[N, 3, 3]`` with ``Phi_ij`` off the diagonal and zeros on it, or
      ``[N, 2, 2]`` with ``Phi_ii`` when ``i == j``, as CatBoost does.
    * ``"Interaction"``: ``f64[P, 3]`` rows ``[f, g, score]`` (``f < g``) of the pairs with a
      non-zero score, by score descending (ties by ``(f, g)``; CatBoost lists the pairs that
      share a tree, in hash order for ties), from :func:`jaximp.interaction` with
      ``output_reduction="sum"``: CatBoost's definition even for MultiClass, where it is float
      rounding noise (about 1e-8 in float32, so those rows do not match CatBoost's noise; use
      ``jaximp.interaction(ens)`` for a meaningful MultiClass score).
    * ``"PredictionDiff"``: ``f64[F]`` for exactly 2 rows: per feature, CatBoost's largest
      one-feature move of each row's prediction towards the other's (moving the feature's
      bin and adding the single-split leaf changes), the two summed and made absolute. Numeric
      models with one output only, as in CatBoost (oblivious and non-symmetric trees).
    * ``"SageValues"``: not supported (ValueError): CatBoost's is a Monte Carlo estimate drawn
      from its internal random generator, so its numbers cannot be reproduced.

    Non-symmetric models (``grow_policy="Depthwise"``/``"Lossguide"``, numeric or categorical
    features; a categorical Pool's splits are probed by CatBoost) import
    as a ``jaximp.TreeEnsemble`` and take PredictionValuesChange, LossFunctionChange,
    Interaction, ShapValues ("Regular", "Approximate", ``reference_data``) and
    ShapInteractionValues, with the layouts above and the numbers of the model reloaded from
    its JSON export (CatBoost's own reference for such trees: a freshly trained model's
    LossFunctionChange, Interaction and SHAP values change after that round trip in CatBoost).
    CatBoost refuses "Exact" SHAP for them, and so does jaximp. PredictionDiff too, with the
    quirks of CatBoost's walk of such trees reproduced.

    ``prettified=True`` returns CatBoost's pandas objects: for PredictionValuesChange,
    LossFunctionChange and PredictionDiff a DataFrame with columns ``"Feature Id"``,
    ``"Importances"`` sorted by importance descending (stable); for Interaction one with
    ``"First Feature Index"``, ``"Second Feature Index"``, ``"Interaction"``; for ShapValues with
    K == 1 ``pandas.DataFrame(values)`` (integer column labels); the other layouts are arrays.

    Args:
        model: a fitted CatBoost model, the path of a ``.cbm``/``.json`` model file, or a jaximp
            ensemble (``jaximp.from_catboost``).
        data: the rows: ``catboost.Pool``, NumPy/JAX array, pandas or polars DataFrame; a Pool
            with labels for LossFunctionChange and for ``model_output="LossFunction"``.
        type: one of the type names above (or a ``catboost.EFstrType`` member).
        prettified: return CatBoost's DataFrames (see above).
        thread_count: accepted for compatibility; jaximp's computations run on XLA's threads.
        verbose: bool or non-negative int, as CatBoost checks it; jaximp logs nothing.
        fstr_type: deprecated alias of ``type`` (wins when given, as in CatBoost).
        shap_mode: "Auto", "UsePreCalc" or "NoPreCalc"; jaximp always precomputes per-leaf
            tables, so the numbers do not depend on it.
        model_output: "Raw", or with ``reference_data`` "Probability" or "LossFunction".
        interaction_indices: None or two feature indices or names, for ShapInteractionValues.
        shap_calc_type: "Regular", "Approximate" or "Exact" (or a ``catboost.EShapCalcType``).
        reference_data: background rows for interventional ShapValues.
        sage_n_samples, sage_batch_size, sage_detect_convergence: CatBoost's SageValues settings;
            accepted for compatibility (SageValues is not supported).
        log_cout, log_cerr: accepted for compatibility; jaximp logs nothing.

    Returns:
        See the types above.

    Raises:
        TypeError: ``model`` is not a model, a path or an ensemble; arguments of a wrong type.
        ValueError: an unknown type, shap_mode, shap_calc_type or model_output; data missing
            where the type needs it, or without the labels it needs; arguments that the type does
            not use (``reference_data``, ``interaction_indices``, a non-default
            ``shap_calc_type`` or ``model_output``); unsupported types and models (see above).

    Example:
        >>> pool = catboost.Pool(X, y)
        >>> values = jaximp.get_feature_importance(model, pool, type="ShapValues")
        >>> values.shape, values.dtype                  # f64[N, F + 1], the expected value last
        ((442, 11), dtype('float64'))
        >>> np.allclose(values, model.get_feature_importance(pool, type="ShapValues"),
        ...             rtol=1e-5, atol=1e-3)           # float32 sums
        True
        >>> jaximp.get_feature_importance(model, type="PredictionValuesChange", prettified=True).columns
        Index(['Feature Id', 'Importances'], dtype=...)
    """
    _check_verbose(verbose)
    kind = _fstr_type(type if fstr_type is None else fstr_type)
    if not isinstance(prettified, (bool, np.bool_)):
        raise TypeError(f"{_FN}: prettified must be a bool; got {prettified!r}")
    if not isinstance(shap_mode, str) or shap_mode not in SHAP_MODES:
        raise ValueError(f"{_FN}: shap_mode must be one of {', '.join(map(repr, SHAP_MODES))}; "
                         f"got {shap_mode!r}")
    calc = _enum_name(shap_calc_type)
    if calc not in SHAP_CALC_TYPES:
        raise ValueError(f"{_FN}: shap_calc_type must be one of {', '.join(map(repr, SHAP_CALC_TYPES))}; "
                         f"got {shap_calc_type!r}")
    if not isinstance(model_output, str) or model_output not in MODEL_OUTPUTS:
        raise ValueError(f"{_FN}: model_output must be one of {', '.join(map(repr, MODEL_OUTPUTS))}; "
                         f"got {model_output!r}")
    ens = _ensemble(model)
    if kind == "FeatureImportance":
        kind = "LossFunctionChange" if ens.loss_function in _GROUPWISE else "PredictionValuesChange"
        if kind == "LossFunctionChange":
            raise ValueError(f"{_FN}: type='FeatureImportance' of a ranking model ({ens.loss_function}) is "
                             "CatBoost's LossFunctionChange over query groups, which jaximp does not "
                             "compute; use type='PredictionValuesChange'")
    _check_combinations(kind, data, calc, model_output, reference_data, interaction_indices)
    _check_counted_weights(ens, kind, data, reference_data)
    pool, data = data, _readable(model, ens, data)
    reference_data = _readable(model, ens, reference_data)

    if kind == "PredictionValuesChange":
        weight = _labels(pool, kind, "weights", need_label=False)[1] if data is not pool else None
        return _per_feature(ens, prediction_values_change(ens, data, sample_weight=weight), prettified)
    if kind == "LossFunctionChange":
        y, w = _labels(pool, kind, "labels")
        return _per_feature(ens, loss_function_change(ens, data, y, sample_weight=w), prettified)
    if kind == "PredictionDiff":
        return _per_feature(ens, _prediction_diff(ens, data), prettified)
    if kind == "Interaction":
        if data is not None:
            warnings.warn(f"{_FN}: data is not used by type='Interaction' (a property of the model "
                          "alone); CatBoost ignores it too", stacklevel=2)
        return _interaction_rows(ens, prettified)
    if kind == "ShapValues":
        if reference_data is not None and model_output != "Raw":
            values = _transformed_shap(ens, data, reference_data, model_output, labelled=pool)
        else:
            values = _shap(ens, data, calc, reference_data)
        if values.ndim == 2 and prettified:
            import pandas as pd

            return pd.DataFrame(values)
        return values
    if kind == "ShapInteractionValues":
        return _shap_interactions(ens, data, interaction_indices)
    raise ValueError(  # SageValues
        f"{_FN}: type must be one of the supported types; got 'SageValues', which jaximp does not "
        "compute: CatBoost's SageValues is a Monte Carlo estimate (random batches, feature orders "
        "and marginal imputations drawn from its internal random generator, seed 228, with "
        "early stopping), so its numbers cannot be reproduced outside CatBoost, and its estimand "
        "(the expected loss with the features outside a coalition drawn independently from their "
        "marginals) has no closed form for tree ensembles, the loss not being additive over "
        "trees; use type='LossFunctionChange' or jaximp.permutation_importance"
    )


# --------------------------------------------------------------------------------------------
# Arguments


def _enum_name(value: Any) -> Any:
    """The name of a CatBoost enum member (EFstrType, EShapCalcType), else the value itself."""
    if type(value).__name__ in ("EFstrType", "EShapCalcType") and hasattr(value, "name"):
        return value.name
    return value


def _fstr_type(value: Any) -> str:
    name = _enum_name(value)
    if not isinstance(name, str) or name not in FSTR_TYPES:
        raise ValueError(f"{_FN}: type must be one of {', '.join(map(repr, FSTR_TYPES))} or a "
                         f"catboost.EFstrType; got {value!r}")
    return name


def _check_verbose(verbose: Any) -> None:
    if not isinstance(verbose, (bool, int, np.integer)):
        raise TypeError(f"{_FN}: verbose must be a bool or an int; got {verbose!r}")
    if int(verbose) < 0:
        raise ValueError(f"{_FN}: verbose must be non-negative; got {verbose!r}")


_NEEDS_DATA = {
    "LossFunctionChange": "labelled rows, catboost.Pool(X, y)",
    "ShapValues": "the rows to explain, e.g. catboost.Pool(X)",
    "ShapInteractionValues": "the rows to explain, e.g. catboost.Pool(X)",
    "PredictionDiff": "the 2 rows to compare",
}


def _check_combinations(kind: str, data: Any, calc: str, model_output: str, reference_data: Any,
                        interaction_indices: Any) -> None:
    if kind in _NEEDS_DATA and data is None:
        raise ValueError(f"{_FN}: data must be given for type={kind!r} ({_NEEDS_DATA[kind]}); got None")
    if reference_data is not None and kind != "ShapValues":
        raise ValueError(f"{_FN}: reference_data must be None for type={kind!r} (only interventional "
                         f"ShapValues use it); got a {type(reference_data).__name__}")
    if interaction_indices is not None and kind != "ShapInteractionValues":
        raise ValueError(f"{_FN}: interaction_indices must be None for type={kind!r} (only "
                         f"ShapInteractionValues use it); got {interaction_indices!r}")
    if calc != "Regular":
        if kind not in ("ShapValues", "LossFunctionChange", "ShapInteractionValues"):
            raise ValueError(f"{_FN}: shap_calc_type must be 'Regular' for type={kind!r}, which uses no "
                             f"SHAP values; got {calc!r}")
        if kind == "LossFunctionChange":
            raise ValueError(f"{_FN}: shap_calc_type must be 'Regular' for type='LossFunctionChange': "
                             f"jaximp.loss_function_change removes path-dependent SHAP values; got {calc!r}")
        if kind == "ShapInteractionValues":
            raise ValueError(f"{_FN}: shap_calc_type must be 'Regular' for type='ShapInteractionValues' "
                             f"(CatBoost supports only it); got {calc!r}")
        if reference_data is not None:
            raise ValueError(f"{_FN}: shap_calc_type must be 'Regular' with reference_data (the "
                             f"interventional values have one definition); got {calc!r}")
    if model_output != "Raw":
        if kind != "ShapValues" or reference_data is None:
            raise ValueError(f"{_FN}: model_output must be 'Raw' unless type='ShapValues' with "
                             "reference_data (CatBoost then returns raw values anyway); "
                             f"got {model_output!r}")


def _check_counted_weights(ens: Any, kind: str, data: Any, reference_data: Any) -> None:
    """A non-symmetric model file without leaf weights: CatBoost counts them on ``data`` with the
    Pool's row weights (``CollectLeavesStatistics``), which jaximp's SHAP does not take yet."""
    counted = kind in ("ShapValues", "ShapInteractionValues", "LossFunctionChange") and reference_data is None
    if not (counted and ens.layout == "trees" and not ens.leaf_weights_known and is_pool(data)):
        return
    weight = np.asarray(data.get_weight(), np.float32)
    if weight.size and not np.all(weight == 1.0):
        raise ValueError(f"{_FN}: data must have unit row weights for type={kind!r} of a non-symmetric "
                         "model without leaf weights: CatBoost then counts the leaf weights on data "
                         "weighted by the Pool's weights, which jaximp does not reproduce yet; got a "
                         "weighted Pool")


def _readable(model: Any, ens: Any, data: Any) -> Any:
    """``data`` as jaximp reads it: a ``catboost.Pool`` with categorical features keeps their raw
    values to itself, so with a CatBoost model at hand its rows are rebuilt from the model's own
    ``calc_leaf_indexes`` (every split's outcome; see ``evaluated_from_leaves``)."""
    if not (is_pool(data) and data.get_cat_feature_indices() and getattr(ens, "featurizer", None)):
        return data
    import catboost

    if not isinstance(model, catboost.CatBoost):
        raise TypeError(f"{_FN}: data is a catboost.Pool with categorical features, whose raw values "
                        "only CatBoost can read: pass the CatBoost model object (not a file), or the "
                        "DataFrame the Pool was built from")
    return evaluated_from_catboost(model, ens, data)


def _labels(data: Any, kind: str, what: str, need_label: bool = True) -> tuple[np.ndarray, Any]:
    """``(labels, weights or None)`` of a labelled Pool."""
    if not need_label:
        weight = np.asarray(data.get_weight(), np.float32)
        return None, None if np.all(weight == 1.0) else weight
    label = data.get_label() if is_pool(data) else None
    if label is None:
        got = "a Pool without labels" if is_pool(data) else f"a {type(data).__name__}"
        raise ValueError(f"{_FN}: data must be a catboost.Pool with labels, catboost.Pool(X, y), for "
                         f"type={kind!r} (it needs the {what}); got {got}")
    weight = np.asarray(data.get_weight(), np.float32)
    return np.asarray(label), None if np.all(weight == 1.0) else weight


# --------------------------------------------------------------------------------------------
# The model, imported once


class _Entry:
    __slots__ = ("fingerprint", "ens", "ref")

    def __init__(self, fingerprint: Any, ens: Any, ref: Any):
        self.fingerprint, self.ens, self.ref = fingerprint, ens, ref


_MODELS: dict[int, _Entry] = {}  # id(model) -> entry; removed when the model is collected
_FILES: dict[tuple, Any] = {}  # (path, size, mtime_ns) -> ensemble
_MAX_FILES = 8


def _fingerprint(model: Any) -> tuple:
    """A cheap identity of a fitted CatBoost model's content (about 1 ms for 1000 trees)."""
    digest = hashlib.blake2b(np.ascontiguousarray(model.get_leaf_values()).tobytes(), digest_size=16)
    try:
        digest.update(repr(sorted(model.get_borders().items())).encode())
    except Exception:  # noqa: BLE001 - models without float features raise CatBoost's errors
        pass
    scale, bias = model.get_scale_and_bias()
    return (model.tree_count_, digest.hexdigest(), float(scale), tuple(np.atleast_1d(bias).tolist()),
            tuple(model.feature_names_ or ()))


def _ensemble(model: Any) -> Any:
    if hasattr(model, "n_features") and hasattr(model, "feature_names") and hasattr(model, "loss_function"):
        return model  # a jaximp ensemble
    if isinstance(model, (str, os.PathLike)):
        path = os.path.realpath(os.fspath(model))
        try:
            stat = os.stat(path)
        except OSError:
            return from_catboost(model)  # raises its clear error
        key = (path, stat.st_size, stat.st_mtime_ns)
        if key not in _FILES:
            if len(_FILES) >= _MAX_FILES:
                _FILES.pop(next(iter(_FILES)))
            _FILES[key] = from_catboost(path)
        return _FILES[key]
    try:
        import catboost
    except ImportError:  # pragma: no cover - catboost is a core dependency
        catboost = None
    if catboost is None or not isinstance(model, catboost.CatBoost):
        raise TypeError(f"{_FN}: model must be a fitted CatBoost model, a path to a .cbm or .json file "
                        f"or a jaximp ensemble; got {type(model).__name__}")
    if not model.is_fitted():
        return from_catboost(model)  # raises: not fitted
    fingerprint = _fingerprint(model)
    key = id(model)
    entry = _MODELS.get(key)
    if entry is not None and entry.ref() is model and entry.fingerprint == fingerprint:
        return entry.ens
    ens = from_catboost(model)
    ref = weakref.ref(model, lambda _, key=key: _MODELS.pop(key, None))
    _MODELS[key] = _Entry(fingerprint, ens, ref)
    return ens


# --------------------------------------------------------------------------------------------
# Layouts


def _per_feature(ens: Any, values: Any, prettified: bool) -> Any:
    values = np.asarray(values, np.float64)
    if not prettified:
        return values
    import pandas as pd

    order = sorted(range(len(values)), key=lambda i: values[i], reverse=True)  # stable, as CatBoost
    return pd.DataFrame([(ens.feature_names[i], values[i]) for i in order],
                        columns=["Feature Id", "Importances"])


def _interaction_rows(ens: Any, prettified: bool) -> Any:
    matrix = np.asarray(interaction(ens, output_reduction="sum"), np.float64)
    f, g = np.triu_indices(ens.n_features, k=1)
    score = matrix[f, g]
    keep = score > 0
    f, g, score = f[keep], g[keep], score[keep]
    order = np.lexsort((g, f, -score))
    rows = [[int(f[i]), int(g[i]), float(score[i])] for i in order]
    if prettified:
        import pandas as pd

        return pd.DataFrame(rows, columns=["First Feature Index", "Second Feature Index", "Interaction"])
    return np.array(rows, np.float64).reshape(-1, 3)


def _outputs_first(values: np.ndarray) -> np.ndarray:
    """``[N, F(, K)]`` -> ``[N, F]`` or ``[N, K, F]``."""
    return values if values.ndim == 2 else np.transpose(values, (0, 2, 1))


def _with_expected(values: np.ndarray, expected: Any) -> np.ndarray:
    """Append the expected value (``[K]``) as the last column of ``[N, F]`` or ``[N, K, F]``."""
    expected = np.asarray(expected, np.float64).reshape(-1)
    if values.ndim == 2:
        return np.concatenate([values, np.full((values.shape[0], 1), expected[0])], axis=1)
    column = np.broadcast_to(expected, values.shape[:2])
    return np.concatenate([values, column[..., None]], axis=2)


def _shap(ens: Any, data: Any, calc: str, reference_data: Any) -> np.ndarray:
    method = "interventional" if reference_data is not None else SHAP_CALC_TYPES[calc]
    values = np.asarray(shap_values(ens, data, method=method, background=reference_data), np.float64)
    try:
        expected = np.asarray(expected_value(ens, method=method, background=reference_data), np.float64)
    except ValueError:  # a model file without leaf weights: CatBoost counts them on data
        raw = np.asarray(predict(ens, data), np.float64)
        expected = np.mean(raw - values.sum(axis=1), axis=0)
    return _with_expected(_outputs_first(values), expected)


# --------------------------------------------------------------------------------------------
# ShapValues with model_output="Probability" / "LossFunction" (CatBoost independent_tree_shap.cpp)


def _probability(raw: np.ndarray) -> np.ndarray:
    """CatBoost's ``Probability`` of raw predictions ``[n, K]``: the sigmoid for K == 1, else the
    softmax over the K outputs (for every multi-output loss, as CatBoost's ``predict`` does)."""
    if raw.shape[1] == 1:
        return 1.0 / (1.0 + np.exp(-raw))
    shifted = np.exp(raw - raw.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def _row_loss(ens: Any, y: np.ndarray, raw: np.ndarray) -> np.ndarray:
    """CatBoost's metric of the training loss on one row, ``[N]`` or ``[N, B]`` (raw broadcast)."""
    loss = ens.loss_function
    y = y.reshape(y.shape + (1,) * (raw.ndim - 1))
    if loss in ("RMSE", "MAE"):
        return np.abs(y - raw)
    # log(1 + e^-z) and log(1 + e^z) without overflow
    return y * np.logaddexp(0.0, -raw) + (1.0 - y) * np.logaddexp(0.0, raw)


def _loss_targets(ens: Any, data: Any) -> np.ndarray:
    loss = ens.loss_function
    if loss not in ("RMSE", "MAE", "Logloss", "CrossEntropy"):
        raise ValueError(f"{_FN}: model_output='LossFunction' needs the model's loss to be one of 'RMSE', "
                         f"'MAE', 'Logloss', 'CrossEntropy' for one output; got {loss!r} "
                         "(CatBoost computes it for one-output models only)")
    label, _ = _labels(data, "ShapValues", "labels for model_output='LossFunction'")
    if loss == "Logloss" and ens.class_names:
        names = [str(c) for c in ens.class_names]
        unknown = sorted({str(v) for v in label.tolist()} - set(names))
        if unknown:
            raise ValueError(f"{_FN}: data's labels must be the model's classes {names}; got {unknown[:5]}")
        return np.asarray([names.index(str(v)) for v in label.tolist()], np.float64)
    try:
        return np.asarray(label, np.float64).reshape(-1)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{_FN}: data's labels must be numbers for a {loss} model; got {label.dtype}") from e


def _reference_rows(reference_data: Any) -> list:
    """The reference rows one by one, each a ``[1, ...]`` slice in a form jaximp accepts."""
    if is_pool(reference_data):
        return [reference_data.slice([b]) for b in range(reference_data.num_row())]
    if hasattr(reference_data, "iloc"):
        return [reference_data.iloc[b : b + 1] for b in range(len(reference_data))]
    if type(reference_data).__module__.startswith("polars"):
        return [reference_data.slice(b, 1) for b in range(reference_data.height)]
    array = np.asanyarray(reference_data)  # keeps evaluated rows marked as such
    return [array[b : b + 1] for b in range(array.shape[0])] if array.ndim == 2 else [array]


def _transformed_shap(ens: Any, data: Any, reference_data: Any, model_output: str, *,
                      labelled: Any) -> np.ndarray:
    raw_x = np.asarray(predict(ens, data), np.float64).reshape(-1, ens.n_outputs)  # [N, K]
    refs = _reference_rows(reference_data)
    raw_b = np.asarray(predict(ens, reference_data), np.float64).reshape(-1, ens.n_outputs)  # [B, K]
    if model_output == "Probability":
        t_x = _probability(raw_x)
        t_b = np.broadcast_to(_probability(raw_b)[None], (raw_x.shape[0],) + raw_b.shape)  # [N, B, K]
    else:
        if ens.n_outputs != 1:
            raise ValueError(f"{_FN}: model_output='LossFunction' needs a one-output model, as in "
                             "CatBoost ('Multi-dimensional target fstr is unimplemented'); "
                             f"got {ens.n_outputs} outputs")
        y = _loss_targets(ens, labelled)
        t_x = _row_loss(ens, y, raw_x[:, 0])[:, None]
        t_b = _row_loss(ens, y, raw_b[None, :, 0])[..., None]  # [N, B, 1]
    n, k = raw_x.shape
    total = np.zeros((n, k, ens.n_features), np.float64)
    for b, row in enumerate(refs):
        phi = np.asarray(shap_values(ens, data, method="interventional", background=row), np.float64)
        phi = phi.reshape(n, ens.n_features, k).transpose(0, 2, 1)  # [N, K, F]
        dx = raw_x - raw_b[b]
        same = dx == 0
        coef = np.where(same, 1.0, (t_x - t_b[:, b]) / np.where(same, 1.0, dx))
        total += phi * coef[..., None]
    total /= len(refs)
    expected = np.mean(t_b, axis=1)  # [N, K]
    out = np.concatenate([total, expected[..., None]], axis=2)
    return out[:, 0] if k == 1 else out


# --------------------------------------------------------------------------------------------
# ShapInteractionValues


def _feature_index(ens: Any, value: Any) -> int:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if 0 <= int(value) < ens.n_features:
            return int(value)
    elif isinstance(value, str) and value in ens.feature_names:
        return list(ens.feature_names).index(value)
    raise ValueError(f"{_FN}: interaction_indices must hold feature indices in [0, {ens.n_features}) or "
                     f"the model's feature names; got {value!r}")


def _bias(ens: Any) -> np.ndarray:
    return np.asarray(ens.bias, np.float64).reshape(-1)


def _shap_interactions(ens: Any, data: Any, interaction_indices: Any) -> np.ndarray:
    pair = None
    if interaction_indices is not None:
        if isinstance(interaction_indices, (str, bytes)) or not hasattr(interaction_indices, "__len__") \
                or len(interaction_indices) != 2:
            raise ValueError(f"{_FN}: interaction_indices must be two feature indices or names; "
                             f"got {interaction_indices!r}")
        pair = [_feature_index(ens, v) for v in interaction_indices]
    values = np.asarray(shap_interaction_values(ens, data), np.float64)
    if values.ndim == 3:
        values = values[..., None]
    values = np.transpose(values, (0, 3, 1, 2))  # [N, K, F, F]
    n, k = values.shape[:2]
    if pair is not None:
        i, j = pair
        if i == j:
            values = values[:, :, [i]][:, :, :, [i]]
        else:
            phi = values[:, :, i, j]
            values = np.zeros((n, k, 2, 2))
            values[:, :, 0, 1] = values[:, :, 1, 0] = phi
    size = values.shape[-1]
    out = np.zeros((n, k, size + 1, size + 1))
    out[:, :, :size, :size] = values
    bias = _bias(ens)[None, :, None]
    out[:, :, size, :size] = bias
    out[:, :, :size, size] = bias
    return out[:, 0] if k == 1 else out


# --------------------------------------------------------------------------------------------
# PredictionDiff (CatBoost compare_documents.cpp)


def _prediction_diff(ens: Any, data: Any) -> np.ndarray:
    """``f64[F]`` CatBoost's PredictionDiff of 2 rows (``jaximp._importances.prediction_diff``), with
    CatBoost's refusals (``GetPredictionDiff``, compare_documents.cpp): one output, numeric
    features, exactly 2 rows."""
    if not isinstance(ens, Ensemble):
        raise ValueError(f"{_FN}: type='PredictionDiff' needs a CatBoost model; got a "
                         f"{type(ens).__name__}")
    if ens.n_outputs != 1:
        raise ValueError(f"{_FN}: type='PredictionDiff' needs a model with one output; got "
                         f"{ens.n_outputs} outputs (CatBoost refuses MultiClass and multi-target "
                         "models too: 'Is not supported for multiclass')")
    if ens.featurizer is not None:
        raise ValueError(f"{_FN}: type='PredictionDiff' needs a model without categorical features "
                         "(CatBoost refuses them too: 'Models with categorical features are not "
                         "supported')")
    x = np.asarray(as_features(data, ens, _FN, arg="data"), np.float32)
    if x.shape[0] != 2:
        raise ValueError(f"{_FN}: data must have exactly 2 rows for type='PredictionDiff' (a pair of "
                         f"documents to compare); got {x.shape[0]} rows")
    return prediction_diff(ens, x)
