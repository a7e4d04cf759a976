"""Raw columns of a categorical model -> the bins of its evaluated features.

The kernels only compare bins with split thresholds (``bin = #{borders < value}``), so the
featurizer hands them bins directly (``u8``): no border search is spent on the many CTRs a model
has, and the rows move 4 times fewer bytes than float values would. See
``jaximp._models.featurizer`` for what the evaluated features are.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from jaximp._models.featurizer import Featurizer
from jaximp._rows.ctr_values import CtrValues
from jaximp._rows.hashing import projection_hash

_ENGINES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def ctr_values(featurizer: Featurizer) -> CtrValues:
    """The CTR evaluator of a featurizer, made once and kept while the featurizer lives (it
    memoizes the CTR bins of the categories already seen, a pure function of the model)."""
    with _LOCK:
        engine = _ENGINES.get(featurizer)
        if engine is None:
            engine = _ENGINES[featurizer] = CtrValues(featurizer.ctrs, projection_hash)
        return engine


def featurize_columns(featurizer: Featurizer, floats: np.ndarray, cat_hashes: np.ndarray) -> np.ndarray:
    """``[N, E]`` the bin of every evaluated feature: ``#{borders < value}``, as ``u8`` (``i32``
    when a feature has more than 254 borders).

    The float features' border searches run in a second thread (NumPy's search releases the
    GIL) while this one computes the one-hot elements and the CTRs, for many rows.

    Args:
        floats: ``f32[N, n_float]`` the float features, in float-feature order.
        cat_hashes: ``i64[N, n_cat]`` the int32 hash of each categorical value.
    """
    n = floats.shape[0]
    out = np.empty((featurizer.n_evaluated, n), featurizer.bin_dtype)  # feature-major, transposed at the end
    fill = np.asarray(featurizer.float_nan_fill, np.float32)
    n_float = len(featurizer.float_columns)
    searching = None
    if n >= _THREADED_ROWS and n_float:
        searching = _searcher().submit(_float_bins, featurizer, floats, fill, out[:n_float])
    else:
        _float_bins(featurizer, floats, fill, out[:n_float])
    try:
        for j, (c, value) in enumerate(featurizer.one_hot):
            out[n_float + j] = cat_hashes[:, c] == value
        out[n_float + len(featurizer.one_hot):] = ctr_values(featurizer)(floats, cat_hashes, fill,
                                                                         featurizer.bin_dtype)
    finally:
        if searching is not None:
            searching.result()
    return out.T


_THREADED_ROWS = 8192  # fewer rows: the float searches run in the calling thread
_SEARCHER: list = []


def _searcher() -> Any:
    """The one worker thread that searches float borders beside the CTRs (made on first use)."""
    with _LOCK:
        if not _SEARCHER:
            from concurrent.futures import ThreadPoolExecutor

            _SEARCHER.append(ThreadPoolExecutor(1, thread_name_prefix="jaximp-borders"))
        return _SEARCHER[0]


def _float_bins(featurizer: Featurizer, floats: np.ndarray, fill: np.ndarray, out: np.ndarray) -> None:
    """``out[f]`` the bins of float feature ``f`` of ``floats f32[N, n_float]``, NaN per the feature's
    mode (``fill``)."""
    nan = np.isnan(floats)
    for f, borders in enumerate(featurizer.float_borders):
        column = floats[:, f]
        out[f] = np.searchsorted(borders, np.where(nan[:, f], fill[f], column) if nan[:, f].any() else column)
