"""Raw columns of a categorical model -> the bins of its evaluated features.

The kernels only compare bins with split thresholds (``bin = #{borders < value}``), so the
featurizer hands them bins directly (``u8``): no border search is spent on the many CTRs a model
has, and the rows move 4 times fewer bytes than float values would. A float feature's bins are
counted by a table of its borders per bucket of values (:func:`bucket_search`), not a binary
search. See ``jaximp._models.featurizer`` for what the evaluated features are.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from jaximp._models.featurizer import Featurizer
from jaximp._rows.ctr_values import CtrValues
from jaximp._rows.hashing import projection_hash
from jaximp._rows.threads import in_turn, worker

_ENGINES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def ctr_values(featurizer: Featurizer) -> CtrValues:
    """The CTR evaluator of a featurizer, made once and kept while the featurizer lives (it
    memoizes the CTR bins of the categories already seen, a pure function of the model)."""
    with _LOCK:
        engine = _ENGINES.get(featurizer)
        if engine is None:
            engine = _ENGINES[featurizer] = CtrValues(featurizer.ctrs, projection_hash, featurizer.float_borders)
        return engine


def featurize_columns(featurizer: Featurizer, floats: np.ndarray,
                      cat_hashes: np.ndarray | Sequence[Callable[[], np.ndarray]]) -> np.ndarray:
    """``[N, E]`` the bin of every evaluated feature: ``#{borders < value}``, as ``u8`` (``i32``
    when a feature has more than 254 borders).

    For many rows, the float features' bins are counted in a second thread (NumPy releases the
    GIL) while this one hashes the categorical values (when ``cat_hashes`` are functions; the
    second thread takes its turn once the bins are counted), computes the one-hot elements and
    looks up the categories; the CTRs, whose binarized float elements read those bins, come
    last, shared by both threads.

    Args:
        floats: ``f32[N, n_float]`` the float features, in float-feature order.
        cat_hashes: ``i64[N, n_cat]`` the int32 hash of each categorical value, or per
            categorical column a function that computes its ``i64[N]`` hashes.
    """
    n = floats.shape[0]
    out = np.empty((featurizer.n_evaluated, n), featurizer.bin_dtype)  # feature-major, transposed at the end
    fill = np.asarray(featurizer.float_nan_fill, np.float32)
    n_float = len(featurizer.float_columns)
    helper = worker("jaximp-borders") if n >= _THREADED_ROWS else None
    counting = helper.submit(_float_bins, featurizer, floats, fill, out) if helper is not None and n_float else None
    if counting is None:
        _float_bins(featurizer, floats, fill, out)
    try:
        if not isinstance(cat_hashes, np.ndarray):
            cat_hashes = _hashes(cat_hashes, n, helper)
        for j, (c, value) in enumerate(featurizer.one_hot):
            out[n_float + j] = cat_hashes[:, c] == value
        ctr_values(featurizer)(floats, cat_hashes, fill, featurizer.bin_dtype,
                               out=out[n_float + len(featurizer.one_hot):], float_bins=out[:n_float],
                               bins_ready=counting.result if counting is not None else lambda: None, helper=helper)
    finally:
        if counting is not None:
            counting.result()
    return out.T


_THREADED_ROWS = 8192  # fewer rows: the float features' bins in the calling thread


def _hashes(hashers: Sequence[Callable[[], np.ndarray]], n: int, helper: Any) -> np.ndarray:
    """``i64[N, n_cat]`` (each column contiguous) the columns ``hashers`` compute, in this thread
    and in ``helper``'s (when given) in turn; the first column's error, if any, is raised."""
    out = np.empty((len(hashers), n), np.int64)
    errors: dict[int, Exception] = {}

    def fill(columns: Iterator[int]) -> None:
        for i in columns:
            try:
                out[i] = hashers[i]()
            except Exception as e:  # noqa: BLE001 - raised below, the first column's first
                errors[i] = e

    in_turn(fill, range(len(hashers)), helper)
    if errors:
        raise errors[min(errors)]
    return out.T


def _float_bins(featurizer: Featurizer, floats: np.ndarray, fill: np.ndarray, out: np.ndarray) -> None:
    """``out[f]`` the bins of float feature ``f`` of ``floats f32[N, n_float]``, NaN per the feature's
    mode (``fill``)."""
    for f, search in enumerate(_searches(featurizer)):
        column = floats[:, f]
        nan = np.isnan(column)
        out[f] = search(np.where(nan, fill[f], column) if nan.any() else column)


_SEARCHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_PREFIX_BITS = 16  # buckets of float32 values sharing their top 16 bits: 0.8% of a value wide
_MAX_PER_BUCKET = 4  # borders one bucket may hold; more: a binary search


_TABLES = 128  # float features with a table (512 KB each); the others keep the binary search


def _searches(featurizer: Featurizer) -> list:
    """Per float feature, ``values f32[N] -> #{borders < value}`` (made once per featurizer)."""
    with _LOCK:
        searches = _SEARCHES.get(featurizer)
        if searches is None:
            searches = _SEARCHES[featurizer] = [
                bucket_search(b, table=f < _TABLES) for f, b in enumerate(featurizer.float_borders)]
        return searches


def _order_keys(values: np.ndarray) -> np.ndarray:
    """``u32`` keys in the order of the float32 ``values`` (not NaN; -0.0 taken as +0.0)."""
    bits = (np.asarray(values, np.float32) + np.float32(0.0)).view(np.uint32)  # -0.0 + 0.0 = +0.0
    return np.where(bits >> 31, ~bits, bits | np.uint32(1 << 31))


def _top_bits(values: np.ndarray) -> np.ndarray:
    """``u16`` the top 16 bits of each float32 value (sign, exponent, 7 bits of mantissa): a
    strided view, no pass over the values."""
    halves = np.ascontiguousarray(values, np.float32).view(np.uint16)
    return halves[1::2] if np.little_endian else halves[0::2]


def bucket_search(borders: np.ndarray, table: bool = True):
    """``values f32[N] -> intp[N]`` ``#{borders < value}`` (``np.searchsorted(borders, values)``
    for sorted float32 ``borders`` and values without NaN) by a table instead of a binary search.
    The table takes 512 KB (NumPy's index type: narrower indices would be converted on every
    gather, which costs more than the search saves).

    A value's top 16 bits name its bucket (0.8% of the value wide). The table holds the number
    of borders below each bucket, and a value is compared with the few borders inside its
    bucket only (at most ``_MAX_PER_BUCKET``; most buckets hold none or one): a look-up and a
    compare per border of the bucket, no branch to mispredict, over 10x faster than NumPy's
    binary search on a model's usual hundred-odd borders. A border of a later bucket is above
    every value of this one, so comparing with the borders that follow the bucket's own adds
    nothing, and every value is compared with as many. -0.0 and +0.0 fall in buckets side by
    side, and a border -0.0 is taken as +0.0, so that neither counts as below the other.
    Borders too dense for the table, or ``table=False`` (the table saved for the first float
    features of a wide model), keep the binary search.
    """
    borders = np.asarray(borders, np.float32)
    order = _order_keys(borders) >> (32 - _PREFIX_BITS)  # sorted, as the borders are
    width = int(np.bincount(order, minlength=1).max(initial=0))
    if not table or width > _MAX_PER_BUCKET:
        return functools.partial(np.searchsorted, borders)
    top = np.arange(1 << _PREFIX_BITS, dtype=np.uint32)  # every bucket's top bits, in order
    below = np.searchsorted(order, np.where(top >> 15, 0xFFFF - top, top | 0x8000)).astype(np.intp)
    padded = np.concatenate([borders, np.full(max(width, 1), np.inf, np.float32)])

    def search(values: np.ndarray) -> np.ndarray:
        values = np.ascontiguousarray(values, np.float32)
        at = np.take(below, _top_bits(values))
        bins = at.copy()
        for j in range(width):
            bins += values > np.take(padded[j:], at)
        return bins

    return search
