"""jaximp on Dask collections: one task per chunk of rows, for data spread over a cluster.

Each function takes a ``dask.array`` ``[N, F]`` or a ``dask.dataframe`` (categorical columns go
in raw, as in memory) and gives the numbers of the in-memory function of the same name
(``jaximp.predict``, ``jaximp.leaf_indices``, ``jaximp.shap_values``, ``jaximp.shap_importance``,
``jaximp.permutation_importance``). The model, with its SHAP tables computed once, is sent to
each worker once. Per-row results are lazy dask arrays chunked as the input rows; the global
importances are computed at once from per-chunk sums and returned as NumPy arrays.

Multi-GPU: run one worker per GPU (dask-cuda's ``LocalCUDACluster``, or ``dask worker
--nworkers N`` with ``CUDA_VISIBLE_DEVICES`` set per worker); each worker's JAX then sees one
GPU, and chunks are explained where they are scheduled.

Needs dask (``pip install 'jaximp[dask]'``); ``import jaximp`` does not load it.

Examples:
    >>> import dask.array as da
    >>> import jaximp.dask
    >>> rows = da.from_array(X.to_numpy(np.float32), chunks=(100, 10))  # or da.from_zarr(...)
    >>> phi = jaximp.dask.shap_values(ens, rows)                        # dask.array [N, F], lazy
    >>> phi.shape, phi.chunks[0]
    ((442, 10), (100, 100, 100, 100, 42))
    >>> np.allclose(phi.compute(), jaximp.shap_values(ens, X), rtol=1e-5, atol=1e-5)
    True
    >>> jaximp.dask.shap_importance(ens, rows).shape                    # NumPy f32[F], computed now
    (10,)
"""

from jaximp._frontends.dask import leaf_indices as leaf_indices
from jaximp._frontends.dask import permutation_importance as permutation_importance
from jaximp._frontends.dask import predict as predict
from jaximp._frontends.dask import shap_importance as shap_importance
from jaximp._frontends.dask import shap_values as shap_values

__all__ = ["leaf_indices", "permutation_importance", "predict", "shap_importance", "shap_values"]
