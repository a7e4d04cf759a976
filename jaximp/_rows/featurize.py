"""Raw columns of a categorical model -> the bins of its evaluated features.

The kernels only compare bins with split thresholds (``bin = #{borders < value}``), so the
featurizer hands them bins directly (``u8``): no border search is spent on the many CTRs a model
has, and the rows move 4 times fewer bytes than float values would. See
``jaximp._models.featurizer`` for what the evaluated features are.
"""

from __future__ import annotations

import threading
import weakref

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

    Args:
        floats: ``f32[N, n_float]`` the float features, in float-feature order.
        cat_hashes: ``i64[N, n_cat]`` the int32 hash of each categorical value.
    """
    n = floats.shape[0]
    out = np.empty((featurizer.n_evaluated, n), featurizer.bin_dtype)  # feature-major, transposed at the end
    fill = np.asarray(featurizer.float_nan_fill, np.float32)
    nan = np.isnan(floats)
    for f, borders in enumerate(featurizer.float_borders):  # NaN per the feature's mode
        column = floats[:, f]
        out[f] = np.searchsorted(borders, np.where(nan[:, f], fill[f], column) if nan[:, f].any() else column)
    n_float = len(featurizer.float_columns)
    for j, (c, value) in enumerate(featurizer.one_hot):
        out[n_float + j] = cat_hashes[:, c] == value
    out[n_float + len(featurizer.one_hot):] = ctr_values(featurizer)(floats, cat_hashes, fill, featurizer.bin_dtype)
    return out.T
