"""jaximp on Dask collections: one task per chunk of rows, for data spread over a cluster.

Each function takes a ``dask.array`` ``[N, F]`` (row chunks; the columns are joined into one
chunk) or a ``dask.dataframe`` (one task per partition; categorical columns go in raw, as in
memory) and builds a graph in which the model, with its per-tree tables already computed
(``jaximp.Explainer``), is a single key: Dask sends it to each worker once, and every chunk on
that worker reads it from there. Results are dask arrays (chunk sizes those of the input rows,
unknown for a DataFrame whose partition lengths are unknown) or, for the global importances,
NumPy arrays computed from per-chunk float64 sums.

Multi-GPU: run one worker per GPU (dask-cuda's ``LocalCUDACluster``, or ``dask worker
--nworkers N`` with ``CUDA_VISIBLE_DEVICES`` set per worker); each worker's JAX then sees one
GPU, and chunks are explained where they are scheduled.

Example:
    >>> import dask.array as da, jaximp.dask                          # doctest: +SKIP
    >>> X = da.from_zarr("rows.zarr")                                  # doctest: +SKIP
    >>> phi = jaximp.dask.shap_values(ens, X)       # dask.array [N, F]  # doctest: +SKIP
    >>> jaximp.dask.shap_importance(ens, X)         # NumPy f32[F]       # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import numpy as np

try:
    import dask
    import dask.array as da
except ImportError as e:  # pragma: no cover - dask is an optional dependency
    raise ImportError("jaximp.dask needs dask (pip install 'jaximp[dask]')") from e

__all__ = ["leaf_indices", "predict", "shap_importance", "shap_values"]


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
    from jaximp._leaves import predict as _predict

    return np.asarray(_predict(ens, rows))


def _leaves_chunk(ens: Any, rows: Any) -> np.ndarray:
    from jaximp._leaves import leaf_indices as _leaf_indices

    return np.asarray(_leaf_indices(ens, rows))


def _shap_chunk(explainer: Any, rows: Any) -> np.ndarray:
    return np.asarray(explainer.shap_values(rows))


def _abs_sum_chunk(explainer: Any, rows: Any) -> np.ndarray:
    """``f64[F(, K)]`` sum of the chunk's ``|SHAP|`` and, last along axis 0, its row count."""
    phi = np.abs(np.asarray(explainer.shap_values(rows), np.float64))
    count = np.full((1,) + phi.shape[2:], len(phi), np.float64)
    return np.concatenate([phi.sum(axis=0), count])


def predict(ens: Any, X: Any) -> da.Array:
    """Raw predictions of every row (``jaximp.predict``): ``f32[N]`` or ``f32[N, K]`` as a dask array."""
    return _per_chunk(_predict_chunk, X, _ship(ens), "predict", _out_shape(ens), np.float32)


def leaf_indices(ens: Any, X: Any) -> da.Array:
    """Leaf index of every row in every tree (``jaximp.leaf_indices``): ``i32[N, T]`` as a dask array."""
    return _per_chunk(_leaves_chunk, X, _ship(ens), "leaf_indices", (ens.n_trees,), np.int32)


def shap_values(ens: Any, X: Any, *, method: str = "path_dependent", background: Any = None) -> da.Array:
    """SHAP values of every row (``jaximp.shap_values``): ``f32[N, F]`` or ``f32[N, F, K]`` as a
    dask array. The per-tree tables are computed once, here, and shipped with the model."""
    from jaximp._shap import Explainer

    explainer = Explainer(ens, background=background, method=method)
    return _per_chunk(_shap_chunk, X, _ship(explainer), "shap_values", (ens.n_features, *_out_shape(ens)),
                      np.float32)


def shap_importance(ens: Any, X: Any, *, method: str = "path_dependent", background: Any = None,
                    **compute_kwargs: Any) -> np.ndarray:
    """Mean ``|SHAP|`` of every feature over all rows (``jaximp.shap_importance``), computed now.

    Each chunk returns only its float64 sum of ``|SHAP|`` (``[F(, K)]``) and its row count; the
    sums are added by a tree reduction, so no worker or the client holds a per-row result.

    Returns:
        NumPy ``f32[F]`` (``f32[F, K]`` when K > 1).
    """
    from jaximp._shap import Explainer

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
