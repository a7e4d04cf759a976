"""``get_feature_importance``: CatBoost's ``CatBoost.get_feature_importance`` on jaximp.

The call mirrors CatBoost 1.2.10's signature, type names (strings or ``catboost.EFstrType``
members), output layouts and prettified DataFrames, so that replacing
``model.get_feature_importance(`` with ``jaximp.get_feature_importance(model, `` is the whole
migration. Every number comes from jaximp's functions; the drop-in only checks the arguments
(:mod:`~jaximp._frontends.dropin_arguments`), imports the model once
(:mod:`~jaximp._frontends.dropin_cache`), picks the function and lays its result out as CatBoost
does: here for the importances per feature, Interaction and PredictionDiff, in
:mod:`~jaximp._frontends.dropin_shap` for the SHAP types.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from jaximp._frontends.dropin_arguments import (
    FN_NAME,
    FSTR_TYPES,
    GROUPWISE,
    MODEL_OUTPUTS,
    SHAP_CALC_TYPES,
    SHAP_MODES,
    check_combinations,
    check_counted_weights,
    check_verbose,
    choice,
    pool_labels,
    pool_weights,
    readable,
)
from jaximp._frontends.dropin_cache import ensemble_of
from jaximp._frontends.dropin_shap import output_shap_rows, shap_interaction_rows, shap_rows
from jaximp._importances.interaction import interaction
from jaximp._importances.loss_change import loss_function_change
from jaximp._importances.prediction_diff import prediction_diff
from jaximp._importances.pvc import prediction_values_change
from jaximp._models.ensemble import Ensemble
from jaximp._rows.inputs import as_features


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
    """CatBoost's ``model.get_feature_importance(...)``, computed by jaximp: replacing
    ``model.get_feature_importance(`` with ``jaximp.get_feature_importance(model, `` is the whole
    migration.

    Same arguments, defaults, type names and output layouts as CatBoost 1.2.10's
    ``CatBoost.get_feature_importance`` (CatBoost docs, "get_feature_importance"); the numbers
    are CatBoost's to float32 precision (results are returned as float64, like CatBoost's).
    Types (N rows of ``data``, F features, K outputs):

    * ``"FeatureImportance"``: ``"PredictionValuesChange"`` (ranking losses: CatBoost's
      ``"LossFunctionChange"`` over query groups, which jaximp does not compute: ValueError).
    * ``"PredictionValuesChange"``: ``f64[F]`` summing to 100
      ([`jaximp.prediction_values_change`][jaximp.prediction_values_change]); with ``data`` the
      leaf weights are recounted on its rows (a Pool's weights applied).
    * ``"LossFunctionChange"``: ``f64[F]``
      ([`jaximp.loss_function_change`][jaximp.loss_function_change]); ``data`` must be a
      ``catboost.Pool`` with labels (and optionally weights).
    * ``"ShapValues"``: ``f64[N, F+1]``, the expected value in the last column, or
      ``f64[N, K, F+1]`` for K > 1 ([`jaximp.shap_values`][jaximp.shap_values];
      ``shap_calc_type`` "Regular", "Exact", "Approximate"; ``reference_data`` gives the
      interventional values). With
      ``reference_data``, ``model_output="Probability"`` / ``"LossFunction"`` reproduce CatBoost's
      rescaling of each reference's raw values: for a row x and each reference row b,
      ``phi_b(x) * (T(x) - T(b)) / (f(x) - f(b))`` (1 when ``f(x) == f(b)``), averaged over b, with
      ``f`` the raw prediction and ``T`` the model's probability (softmax for MultiClass, else
      the sigmoid; the references always get the per-output sigmoid, as in CatBoost) or the
      row's loss ``L(y_x, .)``; the last column is the mean of ``T(b)``. This costs one
      interventional table per reference row.
    * ``"ShapInteractionValues"``: ``f64[N, F+1, F+1]`` or ``f64[N, K, F+1, F+1]``
      ([`jaximp.shap_interaction_values`][jaximp.shap_interaction_values]); CatBoost puts the
      model's bias (per output) in the last row and column and 0 in their corner.
      ``interaction_indices=(i, j)`` (indices or feature names) gives ``[N, 3, 3]`` with
      ``Phi_ij`` off the diagonal and, on it, the main effects of the combinations of columns
      that read both ``i`` and ``j`` (CTRs over several categorical columns; 0 for models without
      them), or ``[N, 2, 2]`` with ``Phi_ii`` when ``i == j``, as CatBoost does.
    * ``"Interaction"``: ``f64[n_pairs, 3]`` rows ``[f, g, score]`` (``f < g``) of the pairs with a
      non-zero score, by score descending (ties by ``(f, g)``; CatBoost lists the pairs that
      share a tree, in hash order for ties), from [`jaximp.interaction`][jaximp.interaction] with
      ``output_reduction="sum"``: CatBoost's definition even for MultiClass, where it is float
      rounding noise (about 1e-8 in float32, so those rows do not match CatBoost's noise; use
      ``jaximp.interaction(ens)`` for a meaningful MultiClass score).
    * ``"PredictionDiff"``: ``f64[F]`` for exactly 2 rows: per feature, CatBoost's largest
      one-feature move of each row's prediction towards the other's (moving the feature's
      bin and adding the single-split leaf changes), the two summed and made absolute. Numeric
      models with one output only, as in CatBoost (oblivious and non-symmetric trees).
    * ``"SageValues"``: not supported (ValueError): CatBoost's is a Monte Carlo estimate drawn
      from its internal random generator, so its numbers cannot be reproduced.

    A ``catboost.Pool`` with categorical features is read as CatBoost reads it, for a model
    object, a model file or a jaximp ensemble alike. Non-symmetric models
    (``grow_policy="Depthwise"``/``"Lossguide"``, numeric or categorical features) import as a
    ``jaximp.TreeEnsemble`` and take PredictionValuesChange, LossFunctionChange,
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
        sage_n_samples: CatBoost's SageValues setting; accepted for compatibility (SageValues
            is not supported).
        sage_batch_size: CatBoost's SageValues setting; accepted for compatibility.
        sage_detect_convergence: CatBoost's SageValues setting; accepted for compatibility.
        log_cout: CatBoost's log stream; accepted for compatibility (jaximp logs nothing).
        log_cerr: CatBoost's error log stream; accepted for compatibility.

    Returns:
        np.ndarray | pd.DataFrame: CatBoost's layout of the type (see above), as float64 NumPy
            arrays: ``f64[F]`` for the importances per feature, ``f64[N, F+1]`` / ``f64[N, K, F+1]``
            for ShapValues, ``f64[N, F+1, F+1]`` / ``f64[N, K, F+1, F+1]`` for
            ShapInteractionValues, ``f64[n_pairs, 3]`` for Interaction; with ``prettified=True``,
            CatBoost's pandas DataFrames.

    Raises:
        TypeError: ``model`` is not a model, a path or an ensemble; arguments of a wrong type.
        ValueError: an unknown type, shap_mode, shap_calc_type or model_output; data missing
            where the type needs it, or without the labels it needs; arguments that the type does
            not use (``reference_data``, ``interaction_indices``, a non-default
            ``shap_calc_type`` or ``model_output``); unsupported types and models (see above).

    Examples:
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
    check_verbose(verbose)
    kind = choice("type", type if fstr_type is None else fstr_type, FSTR_TYPES, " or a catboost.EFstrType")
    if not isinstance(prettified, (bool, np.bool_)):
        raise TypeError(f"{FN_NAME}: prettified must be a bool; got {prettified!r}")
    choice("shap_mode", shap_mode, SHAP_MODES)
    calc = choice("shap_calc_type", shap_calc_type, SHAP_CALC_TYPES)
    choice("model_output", model_output, MODEL_OUTPUTS)
    ens = ensemble_of(model)
    if kind == "FeatureImportance":
        kind = "LossFunctionChange" if ens.loss_function in GROUPWISE else "PredictionValuesChange"
        if kind == "LossFunctionChange":
            raise ValueError(f"{FN_NAME}: type='FeatureImportance' of a ranking model ({ens.loss_function}) is "
                             "CatBoost's LossFunctionChange over query groups, which jaximp does not "
                             "compute; use type='PredictionValuesChange'")
    check_combinations(kind, data, calc, model_output, reference_data, interaction_indices)
    check_counted_weights(ens, kind, data, reference_data)
    pool, data = data, readable(model, ens, data)
    reference_data = readable(model, ens, reference_data)

    if kind == "PredictionValuesChange":
        weight = pool_weights(pool) if data is not pool else None
        return _per_feature(ens, prediction_values_change(ens, data, sample_weight=weight), prettified)
    if kind == "LossFunctionChange":
        y, w = pool_labels(pool, kind, "labels")
        return _per_feature(ens, loss_function_change(ens, data, y, sample_weight=w), prettified)
    if kind == "PredictionDiff":
        return _per_feature(ens, _prediction_diff(ens, data), prettified)
    if kind == "Interaction":
        if data is not None:
            warnings.warn(f"{FN_NAME}: data is not used by type='Interaction' (a property of the model "
                          "alone); CatBoost ignores it too", stacklevel=2)
        return _interaction_rows(ens, prettified)
    if kind == "ShapValues":
        if reference_data is not None and model_output != "Raw":
            values = output_shap_rows(ens, data, reference_data, model_output, labelled=pool)
        else:
            values = shap_rows(ens, data, calc, reference_data)
        if values.ndim == 2 and prettified:
            import pandas as pd

            return pd.DataFrame(values)
        return values
    if kind == "ShapInteractionValues":
        return shap_interaction_rows(ens, data, interaction_indices)
    raise ValueError(  # SageValues
        f"{FN_NAME}: type must be one of the supported types; got 'SageValues', which jaximp does not "
        "compute: CatBoost's SageValues is a Monte Carlo estimate (random batches, feature orders "
        "and marginal imputations drawn from its internal random generator, seed 228, with "
        "early stopping), so its numbers cannot be reproduced outside CatBoost, and its estimand "
        "(the expected loss with the features outside a coalition drawn independently from their "
        "marginals) has no closed form for tree ensembles, the loss not being additive over "
        "trees; use type='LossFunctionChange' or jaximp.permutation_importance"
    )


# --------------------------------------------------------------------------------------------
# Layouts


def _per_feature(ens: Any, values: Any, prettified: bool) -> Any:
    """``f64[F]``, or with ``prettified`` CatBoost's DataFrame: ``"Feature Id"``, ``"Importances"``,
    by importance descending (stable)."""
    values = np.asarray(values, np.float64)
    if not prettified:
        return values
    import pandas as pd

    order = sorted(range(len(values)), key=lambda i: values[i], reverse=True)  # stable, as CatBoost
    return pd.DataFrame([(ens.feature_names[i], values[i]) for i in order],
                        columns=["Feature Id", "Importances"])


def _interaction_rows(ens: Any, prettified: bool) -> Any:
    """CatBoost's Interaction: ``f64[n_pairs, 3]`` rows ``[f, g, score]`` (``f < g``) of the pairs
    with a non-zero score, by score descending, ties by ``(f, g)``; with ``prettified`` a
    DataFrame of those columns."""
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


# --------------------------------------------------------------------------------------------
# PredictionDiff (CatBoost compare_documents.cpp)


def _prediction_diff(ens: Any, data: Any) -> np.ndarray:
    """``f64[F]`` CatBoost's PredictionDiff of 2 rows (``jaximp._importances.prediction_diff``), with
    CatBoost's refusals (``GetPredictionDiff``, compare_documents.cpp): one output, numeric
    features, exactly 2 rows."""
    if not isinstance(ens, Ensemble):
        raise ValueError(f"{FN_NAME}: type='PredictionDiff' needs a CatBoost model; got a "
                         f"{type(ens).__name__}")
    if ens.n_outputs != 1:
        raise ValueError(f"{FN_NAME}: type='PredictionDiff' needs a model with one output; got "
                         f"{ens.n_outputs} outputs (CatBoost refuses MultiClass and multi-target "
                         "models too: 'Is not supported for multiclass')")
    if ens.featurizer is not None:
        raise ValueError(f"{FN_NAME}: type='PredictionDiff' needs a model without categorical features "
                         "(CatBoost refuses them too: 'Models with categorical features are not "
                         "supported')")
    x = np.asarray(as_features(data, ens, FN_NAME, arg="data"), np.float32)
    if x.shape[0] != 2:
        raise ValueError(f"{FN_NAME}: data must have exactly 2 rows for type='PredictionDiff' (a pair of "
                         f"documents to compare); got {x.shape[0]} rows")
    return prediction_diff(ens, x)
