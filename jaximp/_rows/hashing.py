"""CatBoost's hashes of categorical values and of CTR projections.

Hashing (CatBoost ``CalcCatFeatureHash``): a categorical value is turned into a string (``str``
as is, integers and booleans in decimal; floats and NaN are refused, as CatBoost refuses them),
hashed with CityHash64 v1.0.2 (``clickhouse-cityhash``), and its low 32 bits kept as a signed
``int32``. A CTR's key is the projection hash: ``h = 0``, then ``h = m * (h + m * e)``
(mod 2**64, ``m = 0x4906ba494954cb65``) over the projection's categorical values (their ``int32``
hashes sign-extended), then its binarized float features and one-hot elements (0/1).
"""

from __future__ import annotations

from typing import Any

import numpy as np

_MAGIC = np.uint64(0x4906BA494954CB65)


def cat_hash(value: Any) -> int:
    """CatBoost's ``CalcCatFeatureHash`` of one categorical value, as a signed int32.

    Raises:
        TypeError: ``value`` is neither a string nor an integer (CatBoost refuses floats and
            NaN too: "cat_features must be integer or string").
    """
    from clickhouse_cityhash.cityhash import CityHash64

    if isinstance(value, bytes):
        key = value
    elif isinstance(value, str):
        key = value.encode("utf-8")
    elif isinstance(value, (int, np.integer, bool, np.bool_)):  # True -> "1", as CatBoost
        key = str(int(value)).encode()
    else:
        raise TypeError(f"categorical values must be strings or integers; got {value!r}")
    h = CityHash64(key) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def hash_column(values: Any) -> np.ndarray:
    """``i64[N]`` the int32 hash of each value of one categorical column (each distinct value
    hashed once).

    Args:
        values: a 1-D NumPy array (object, string or integer dtype) or a pandas Series
            (``category`` dtype included).

    Raises:
        TypeError: a value that is neither a string nor an integer (NaN and None included).
    """
    codes, uniques = _factorize(values)
    if (codes < 0).any():
        raise TypeError("categorical values must be strings or integers; got a missing value "
                        "(NaN/None: CatBoost refuses them too, convert them to a string such as 'nan')")
    if any(isinstance(u, (int, np.integer)) for u in uniques):
        _check_numbers(values)
    table = np.fromiter((_memo_hash(u) for u in uniques), np.int64, len(uniques))
    return table[codes]


def _check_numbers(values: Any) -> None:
    """Refuse an object column's values that are neither strings nor integers (``5.0``) when it
    holds integers: factorizing compares values with ``==``, which folds ``5.0`` into ``5`` (or
    ``5`` into ``5.0``, by order), so that only the value kept would be checked. Columns without
    integers need no scan: a float equals no string.

    Raises:
        TypeError: the first such value, as :func:`cat_hash` refuses it.
    """
    array = values.to_numpy() if hasattr(values, "to_numpy") else np.asarray(values)
    if array.dtype != object:
        return
    for kind in set(map(type, array.ravel())):
        if not issubclass(kind, (str, bytes, int, np.integer, np.bool_)):
            cat_hash(next(v for v in array.ravel() if type(v) is kind))


_MEMO: dict = {}  # (type, value) -> cat_hash(value), for the values seen before (a pure function)
_MEMO_SIZE = 1 << 20  # values kept at most; the memo starts over beyond


def _memo_hash(value: Any) -> int:
    """``cat_hash(value)``, from the memo when the value was hashed before: looking a string up
    costs a small fraction of hashing it in Python, and rows come back with the same categories
    call after call."""
    key = (type(value), value)  # by type too: 5.0 == 5 would find the hash of 5, which cat_hash refuses
    try:
        h = _MEMO.get(key)
    except TypeError:  # unhashable: cat_hash says what it takes
        return cat_hash(value)
    if h is None:
        h = cat_hash(value)
        if len(_MEMO) >= _MEMO_SIZE:
            _MEMO.clear()
        _MEMO[key] = h
    return h


def _factorize(values: Any) -> tuple[np.ndarray, Any]:
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is optional; NumPy's unique works too
        pd = None
    if pd is not None:
        if isinstance(values, pd.Series) and isinstance(values.dtype, pd.CategoricalDtype):
            return np.asarray(values.cat.codes), list(values.cat.categories)
        if isinstance(values, pd.Series) and isinstance(values.dtype, pd.StringDtype):
            codes, uniques = values.factorize(use_na_sentinel=True)  # in C (Arrow's for Arrow strings)
            return np.asarray(codes), uniques.tolist()
        codes, uniques = pd.factorize(np.asarray(values, dtype=object), use_na_sentinel=True)
        return codes, list(uniques)
    array = np.asarray(values, dtype=object)
    if any(v is None or (isinstance(v, float) and np.isnan(v)) for v in array):
        return np.full(len(array), -1), []
    uniques, codes = np.unique(array, return_inverse=True)
    return codes, list(uniques)


def projection_hash(keys: list[np.ndarray], n: int) -> np.ndarray:
    """``u64[n]`` CatBoost's ``CalcHash`` folded over ``keys`` (each ``[n]``, int64 values)."""
    h = np.zeros(n, np.uint64)
    with np.errstate(over="ignore"):
        for key in keys:
            h = _MAGIC * (h + _MAGIC * key.astype(np.int64).view(np.uint64))
    return h
