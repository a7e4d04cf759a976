"""jaximp on Dask collections: one task per chunk of rows, for data spread over a cluster.

Each function takes a ``dask.array`` ``[N, F]`` (row chunks; the columns are joined into one
chunk) or a ``dask.dataframe`` (one task per partition; categorical columns go in raw, as in
memory) and builds a graph in which the model, with its per-tree tables already computed
(``jaximp.Explainer``), is a single key: Dask sends it to each worker once, and every chunk on
that worker reads it from there. Results are dask arrays (chunk sizes those of the input rows,
unknown for a DataFrame whose partition lengths are unknown) or, for the global importances,
NumPy arrays computed from per-chunk float64 sums.

The public names, their user documentation and an example are in :mod:`jaximp.dask`.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np

try:
    import dask
    import dask.array as da
except ImportError as e:  # pragma: no cover - dask is an optional dependency
    raise ImportError("jaximp.dask needs dask (pip install 'jaximp[dask]')") from e

from jaximp._importances.permutation import permutation_setup, permuted_sums
from jaximp._importances.scoring import ROW_SCORES
from jaximp._leaves.predict import leaf_indices as _leaf_indices
from jaximp._leaves.predict import leaf_number_dtype
from jaximp._leaves.predict import predict as _predict
from jaximp._models.ensemble import check_model
from jaximp._rows.targets import as_targets
from jaximp._shap.explainer import Explainer

__all__ = ["leaf_indices", "permutation_importance", "predict", "shap_importance", "shap_values"]


def _chunks(X: Any, fn_name: str) -> tuple[list, tuple]:
    """``(one delayed block of rows per chunk, the chunks' row counts)``; NaN counts when a
    DataFrame's partition lengths are unknown."""
    if isinstance(X, da.Array):
        if X.ndim != 2:
            raise ValueError(f"jaximp.dask.{fn_name}: X must be a 2-d dask array [N, F]; got {X.ndim} dimensions")
        X = X.rechunk({1: -1})  # whole rows in each chunk
        return list(X.to_delayed()[:, 0]), X.chunks[0]
    if hasattr(X, "to_delayed") and hasattr(X, "npartitions") and hasattr(X, "columns"):  # dask DataFrame
        parts = list(X.to_delayed())
        return parts, (np.nan,) * len(parts)
    raise TypeError(f"jaximp.dask.{fn_name}: X must be a dask.array or a dask.dataframe; got {type(X).__name__}")


def _per_chunk(fn, X: Any, shipped: Any, fn_name: str, width: tuple, dtype: Any) -> da.Array:
    """``fn(shipped, chunk) -> [n, *width]`` over every chunk, joined along rows."""
    parts, lengths = _chunks(X, fn_name)
    task = dask.delayed(fn, pure=True)
    blocks = [da.from_delayed(task(shipped, part), shape=(n, *width), dtype=dtype)
              for part, n in zip(parts, lengths)]
    return da.concatenate(blocks, axis=0) if len(blocks) > 1 else blocks[0]


def _ship(obj: Any) -> Any:
    """``obj`` as one graph key, so that it travels to each worker once."""
    return dask.delayed(obj, pure=True, traverse=False)


def _out_shape(ens: Any) -> tuple:
    return () if ens.n_outputs == 1 else (ens.n_outputs,)


def _predict_chunk(ens: Any, rows: Any) -> np.ndarray:
    return np.asarray(_predict(ens, rows))


def _leaves_chunk(ens: Any, rows: Any, dtype: Any = np.int32) -> np.ndarray:
    return np.asarray(_leaf_indices(ens, rows, dtype=dtype))


def _shap_chunk(explainer: Any, rows: Any) -> np.ndarray:
    return np.asarray(explainer.shap_values(rows))


def _abs_sum_chunk(explainer: Any, rows: Any) -> np.ndarray:
    """``f64[F(, K)]`` sum of the chunk's ``|SHAP|`` and, last along axis 0, its row count."""
    phi = np.abs(np.asarray(explainer.shap_values(rows), np.float64))
    count = np.full((1,) + phi.shape[2:], len(phi), np.float64)
    return np.concatenate([phi.sum(axis=0), count])


def predict(ens: Any, X: Any) -> da.Array:
    """Raw predictions of every row, as a lazy dask array: ``jaximp.predict`` per chunk.

    Equal to CatBoost's ``predict(X, prediction_type="RawFormulaVal")`` and the other libraries'
    raw outputs (see ``jaximp.predict``).

    Args:
        ens: the model (from ``jaximp.from_catboost``, ``from_xgboost``, ``from_lightgbm`` or
            ``from_sklearn``).
        X: ``dask.array [N, F]`` (chunked along rows; the columns are joined into one chunk) or
            a dask DataFrame (one task per partition; columns matched to the model's feature
            names, categorical columns raw).

    Returns:
        dask.array.Array: ``f32[N]`` when K == 1, else ``f32[N, K]``: a dask array, chunked as the
            rows (chunk sizes unknown for a DataFrame whose partition lengths are unknown).

    Raises:
        TypeError: ``X`` is not a dask array or DataFrame.
        ValueError: ``X`` is a dask array that is not 2-d.

    Examples:
        >>> import dask.dataframe as dd
        >>> frame = dd.from_pandas(X, npartitions=3)             # columns matched by name
        >>> raw = jaximp.dask.predict(ens, frame).compute()
        >>> np.allclose(raw, ens.predict(X), rtol=1e-5, atol=1e-5)
        True
    """
    return _per_chunk(_predict_chunk, X, _ship(ens), "predict", _out_shape(ens), np.float32)


def leaf_indices(ens: Any, X: Any, *, dtype: Any = np.int32) -> da.Array:
    """The leaf each row reaches in each tree, as a lazy dask array: ``jaximp.leaf_indices`` per
    chunk.

    Equal to CatBoost's ``calc_leaf_indexes`` and the other libraries' leaf numbers (see
    ``jaximp.leaf_indices``).

    Args:
        ens: the model.
        X: ``dask.array [N, F]`` (chunked along rows; the columns are joined into one chunk) or
            a dask DataFrame (one task per partition; columns matched to the model's feature
            names, categorical columns raw).
        dtype: the integer type of the result (``np.uint8`` takes a quarter of the memory for
            trees of at most 256 leaves), as for ``jaximp.leaf_indices``.

    Returns:
        dask.array.Array: ``i32[N, T]`` (of ``dtype`` when given): a dask array, chunked as the
            rows.

    Raises:
        TypeError: ``X`` is not a dask array or DataFrame, or ``dtype`` not an integer type.
        ValueError: ``X`` is a dask array that is not 2-d, or ``dtype`` cannot hold the model's
            leaf numbers.

    Examples:
        >>> import dask.array as da
        >>> rows = da.from_array(X.to_numpy(np.float32), chunks=(100, 10))
        >>> np.array_equal(jaximp.dask.leaf_indices(ens, rows).compute(), jaximp.leaf_indices(ens, X))
        True
    """
    check_model(ens, "jaximp.dask.leaf_indices")
    dtype = leaf_number_dtype(ens, dtype, device=False)
    return _per_chunk(functools.partial(_leaves_chunk, dtype=dtype), X, _ship(ens), "leaf_indices",
                      (ens.n_trees,), dtype)


def shap_values(ens: Any, X: Any, *, method: str = "path_dependent", background: Any = None) -> da.Array:
    """SHAP values of every row, as a lazy dask array: ``jaximp.shap_values`` per chunk.

    Equal to CatBoost's ``get_feature_importance(type="ShapValues")`` and shap's
    ``TreeExplainer`` for the same method (see ``jaximp.shap_values``). The SHAP tables are
    computed once, when the graph is built, and sent with the model.

    Args:
        ens: the model.
        X: ``dask.array [N, F]`` (chunked along rows; the columns are joined into one chunk) or
            a dask DataFrame (one task per partition; columns matched to the model's feature
            names, categorical columns raw).
        method: ``"path_dependent"``, ``"exact"``, ``"approximate"`` or ``"interventional"``,
            as for ``jaximp.shap_values``.
        background: ``[B, F]`` background rows (in memory) for ``method="interventional"``.

    Returns:
        dask.array.Array: ``f32[N, F]`` when K == 1, else ``f32[N, F, K]``: a dask array, chunked as
            the rows.

    Raises:
        TypeError: ``X`` is not a dask array or DataFrame.
        ValueError: ``X`` is a dask array that is not 2-d, an unknown method, or a background
            missing or unexpected.

    Examples:
        >>> import dask.array as da
        >>> rows = da.from_array(X.to_numpy(np.float32), chunks=(100, 10))
        >>> phi = jaximp.dask.shap_values(ens, rows, method="interventional", background=X[:100])
        >>> phi.shape
        (442, 10)
    """
    explainer = Explainer(ens, background=background, method=method)
    return _per_chunk(_shap_chunk, X, _ship(explainer), "shap_values", (ens.n_features, *_out_shape(ens)),
                      np.float32)


def shap_importance(ens: Any, X: Any, *, method: str = "path_dependent", background: Any = None,
                    **compute_kwargs: Any) -> np.ndarray:
    """Mean absolute SHAP value of every feature over all rows (``jaximp.shap_importance``),
    computed now.

    Each chunk returns only its float64 sum of ``|SHAP|`` and its row count; the sums are added
    by a tree reduction, so neither a worker nor the client holds a per-row result.

    Args:
        ens: the model.
        X: ``dask.array [N, F]`` (chunked along rows; the columns are joined into one chunk) or
            a dask DataFrame (one task per partition; columns matched to the model's feature
            names, categorical columns raw).
        method: ``"path_dependent"``, ``"exact"``, ``"approximate"`` or ``"interventional"``,
            as for ``jaximp.shap_values``.
        background: ``[B, F]`` background rows (in memory) for ``method="interventional"``.
        **compute_kwargs: passed to ``dask.compute`` (``scheduler=``, ...).

    Returns:
        np.ndarray: ``f32[F]`` when K == 1, else ``f32[F, K]``: a NumPy array.

    Raises:
        TypeError: ``X`` is not a dask array or DataFrame.
        ValueError: ``X`` is a dask array that is not 2-d, an unknown method, a background
            missing or unexpected, or no rows.

    Examples:
        >>> import dask.array as da
        >>> rows = da.from_array(X.to_numpy(np.float32), chunks=(100, 10))
        >>> np.allclose(jaximp.dask.shap_importance(ens, rows), jaximp.shap_importance(ens, X),
        ...             rtol=1e-5, atol=1e-5)
        True
    """
    explainer = Explainer(ens, background=background, method=method)
    parts, _ = _chunks(X, "shap_importance")
    task = dask.delayed(_abs_sum_chunk, pure=True)
    shipped = _ship(explainer)
    width = (ens.n_features + 1, *_out_shape(ens))
    sums = [da.from_delayed(task(shipped, part), shape=width, dtype=np.float64) for part in parts]
    total = np.asarray(da.stack(sums).sum(axis=0).compute(**compute_kwargs))
    n = total[-1]
    if not np.all(n > 0):
        raise ValueError("jaximp.dask.shap_importance: X holds no rows")
    return (total[:-1] / n).astype(np.float32)


# --------------------------------------------------------------------------------------------
# Permutation importance


def _permuted_score_chunk(ens: Any, groups: list, score: Any, x: np.ndarray, donors: np.ndarray, y: np.ndarray,
                          w: Any) -> np.ndarray:
    """``f64[(G + 1) (1 + n_terms)]``: the chunk's weight and its weighted sums of the score's row
    terms, without and with each group's columns taken from ``donors`` (the rows whose values each
    row receives), scored block by block on the worker's device."""
    fn_name = "jaximp.dask.permutation_importance"
    n = len(x)
    targets = as_targets(np.asarray(y), ens, n, fn_name)
    weights = np.ones(n, np.float32) if w is None else np.asarray(w, np.float32)
    both = np.concatenate([np.asarray(x, np.float32), np.asarray(donors, np.float32)])
    own, donor = np.arange(n), n + np.arange(n)  # row i receives its group's values from row n + i
    sums = permuted_sums(ens, both, groups, own, donor[:, None], targets, weights[:, None], score,
                         batch_size=None, devices=None, fn_name=fn_name)  # [1, G + 1, 1 + n_terms]
    return sums.reshape(-1)


def permutation_importance(ens: Any, X: Any, y: Any, *, scoring: Any = None, n_repeats: int = 5,
                           random_state: Any = None, sample_weight: Any = None, max_samples: float = 1.0,
                           feature_groups: Any = None, **compute_kwargs: Any):
    """Permutation importance of rows in a dask array (``jaximp.permutation_importance``,
    scikit-learn's definition), computed now.

    For scores that are sums over rows: the model's own loss and the scorers MSE, RMSE, MAE,
    accuracy, log loss and Brier score. Repeat ``r`` draws the same row permutation as the
    in-memory function for the same ``random_state``, so the importances equal the in-memory
    ones to float32 rounding of each row's loss. Each repeat shuffles the rows once with Dask,
    and each chunk returns only its weighted loss with and without each feature permuted.

    Args:
        ens: a numeric model (``ObliviousEnsemble`` or ``TreeEnsemble``).
        X: ``dask.array [N, F]``, or a dask DataFrame of numeric columns (matched to the model's
            feature names when it has them all).
        y: ``[N]`` targets (NumPy or dask array, dask Series), class labels of a classifier.
        scoring: None (the model's loss) or one of ``"neg_mean_squared_error"``,
            ``"neg_root_mean_squared_error"``, ``"neg_mean_absolute_error"``, ``"accuracy"``,
            ``"neg_log_loss"``, ``"neg_brier_score"`` (others are not sums over rows or need the
            targets' totals: compute them in memory).
        n_repeats: R >= 1, times each feature is permuted.
        random_state: an int, None (fresh entropy), a ``jax.random`` key or a NumPy
            ``Generator``/``RandomState``, as for ``jaximp.permutation_importance``.
        sample_weight: ``[N]`` non-negative row weights (NumPy or dask), or None.
        max_samples: rows used per repeat: a float in ``(0, 1]`` (a fraction of N) or an int in
            ``[1, N]``, as for ``jaximp.permutation_importance``.
        feature_groups: None (one result per feature), or a list of G lists of column indices
            or feature names permuted together.
        **compute_kwargs: passed to ``dask.compute`` (``scheduler=``, ...).

    Returns:
        sklearn.utils.Bunch: ``importances_mean f64[F]``, ``importances_std f64[F]`` and
            ``importances f64[F, R]``, NumPy arrays; G in place of F with ``feature_groups``.

    Raises:
        TypeError: ``X`` is not a 2-d dask array or DataFrame, or an argument of the wrong type.
        ValueError: a model with categorical features, ``y`` or ``sample_weight`` not one per
            row, a scorer that is not a sum over rows (compute it in memory), or another bad
            argument (the message names it).

    Examples:
        >>> import dask.array as da
        >>> rows = da.from_array(X.to_numpy(np.float32), chunks=(100, 10))
        >>> r = jaximp.dask.permutation_importance(ens, rows, y.to_numpy(), n_repeats=3, random_state=0)
        >>> in_memory = jaximp.permutation_importance(ens, X, y, n_repeats=3, random_state=0)
        >>> np.allclose(r.importances, in_memory.importances, rtol=1e-5, atol=1e-4)  # float32 losses
        True
    """
    from sklearn.utils import Bunch

    fn_name = "jaximp.dask.permutation_importance"
    check_model(ens, fn_name)
    if ens.featurizer is not None:
        raise ValueError(f"{fn_name}: models with categorical features are not supported on Dask yet; "
                         "use jaximp.permutation_importance in memory")
    if hasattr(X, "to_dask_array") and hasattr(X, "columns"):  # a dask DataFrame of numeric columns
        names = list(ens.feature_names)
        X = (X[names] if set(names) <= set(X.columns) else X).to_dask_array(lengths=True)
    y, sample_weight = (a.to_dask_array(lengths=True) if hasattr(a, "to_dask_array") else a for a in (y, sample_weight))
    if not isinstance(X, da.Array) or X.ndim != 2:
        raise TypeError(f"{fn_name}: X must be a 2-d dask.array [N, F] or a dask DataFrame; got {type(X).__name__}")
    X = X.rechunk({1: -1}).astype(np.float32)
    if any(np.isnan(c) for c in X.chunks[0]):
        X = X.compute_chunk_sizes()
    n = X.shape[0]
    y = da.asarray(y)
    w = None if sample_weight is None else da.asarray(sample_weight)
    if y.shape[0] != n or (w is not None and w.shape != (n,)):
        raise ValueError(f"{fn_name}: y and sample_weight must have one entry per row of X ({n})")
    setup = permutation_setup(ens, n, scoring=scoring, n_repeats=n_repeats, random_state=random_state,
                              max_samples=max_samples, feature_groups=feature_groups, fn_name=fn_name)
    score = setup.row_score
    if score is None or scoring == "r2":
        names = sorted(name for name in ROW_SCORES if name != "r2")
        raise ValueError(f"{fn_name}: scoring must be None (the model's loss) or one of {names} on Dask; "
                         f"got {scoring!r} (compute it in memory with jaximp.permutation_importance)")
    all_rows = setup.take.shape[1] == n
    shipped = _ship(ens)
    task = dask.delayed(_permuted_score_chunk, pure=True)
    sums = []
    for take, source in zip(*jax.device_get((setup.take, setup.source))):  # the draws index the dask arrays
        rows = X if all_rows else X[take]
        donors = X[source].rechunk(rows.chunks)
        parts = [a.rechunk({0: rows.chunks[0]}).to_delayed().ravel()
                 for a in (y if all_rows else y[take], w if (w is None or all_rows) else w[take])
                 if a is not None]
        ys, ws = parts[0], (parts[1] if w is not None else [None] * len(parts[0]))
        sums.append([task(shipped, setup.groups, score, xc, dc, yc, wc) for xc, dc, yc, wc in
                     zip(rows.to_delayed()[:, 0], donors.to_delayed()[:, 0], ys, ws)])
    totals = np.asarray([np.sum(parts, axis=0) for parts in dask.compute(*sums, **compute_kwargs)])
    totals = totals.reshape(len(setup.take), len(setup.groups) + 1, -1)  # [R, G + 1, 1 + n_terms]
    scores = score.final(totals[..., 1:], totals[..., 0], None)  # [R, G + 1]
    importances = (scores[:, :1] - scores[:, 1:]).T  # [G, R]
    return Bunch(importances_mean=importances.mean(axis=1), importances_std=importances.std(axis=1),
                 importances=importances)
