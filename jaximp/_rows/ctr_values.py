"""CTR bins of many rows, with the bins of the categories already seen memoized.

A CTR's value depends on a row only through its projection key: the hashes of its categorical
values and the bits of its binarized float features and one-hot elements. Almost every CTR a
CatBoost model builds reads one categorical column and a few bits, so for such a projection the
value is a function of (category, bit pattern): a dense table ``[n_categories, 2**n_bits]`` over
the distinct categories seen so far in that column. The table is computed once per category (hash, look-up in
the model's CTR table, the CTR formula), kept, and extended when new categories arrive; a row
then costs one index computation and one gather per projection. Projections of several
categorical columns hash every row (``Ctr.values``).

The cache only memoizes a pure function of the model (the value of a given category and bit
pattern never changes), so results do not depend on what was seen before.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

_MAX_BITS = 12  # a projection with more bits than this hashes every row instead
_THREADED_ROWS = 8192  # fewer rows: every projection in the calling thread
_WORKERS: dict = {}
_WORKERS_LOCK = threading.Lock()


def worker(name: str) -> Any:
    """The one worker thread named ``name`` (a ``ThreadPoolExecutor``), made on first use: NumPy's
    gathers, searches and ufuncs release the GIL, so a second core can run part of them."""
    with _WORKERS_LOCK:
        if name not in _WORKERS:
            from concurrent.futures import ThreadPoolExecutor

            _WORKERS[name] = ThreadPoolExecutor(1, thread_name_prefix=name)
        return _WORKERS[name]


def _factorize(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(codes i[n], distinct values)`` with ``distinct[codes] == values`` (a hash table in
    pandas when it is installed, else a sort)."""
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is optional
        distinct, codes = np.unique(values, return_inverse=True)
        return codes, distinct
    codes, distinct = pd.factorize(values)
    return codes, np.asarray(distinct)


class CtrValues:
    """Evaluates the CTRs of a featurizer, grouped by projection.

    Args:
        ctrs: the model's CTRs (``jaximp._models.featurizer.Ctr``), in evaluated-feature order.
        projection_hash: ``(keys: list of i64[n], n) -> u64[n]``, CatBoost's key of a projection.
    """

    def __init__(self, ctrs: Sequence[Any], projection_hash: Any):
        self._hash = projection_hash
        groups: dict[tuple, list[int]] = {}
        for j, ctr in enumerate(ctrs):
            groups.setdefault((ctr.cat_features, ctr.float_elements, ctr.one_hot_elements), []).append(j)
        self._ctrs = list(ctrs)
        self._groups = list(groups.items())  # [(projection, CTR positions)]
        self._single = sorted({cats[0] for (cats, *_), _ in self._groups if len(cats) == 1})
        self._lock = threading.Lock()
        self._vocab: dict[int, np.ndarray] = {}  # categorical feature -> sorted known hashes
        self._tables: dict[tuple, tuple[int, np.ndarray]] = {}  # projection -> (vocab size, table)

    def __getstate__(self) -> dict:
        """Pickled (Dask ships models to workers) without the lock and the memo, rebuilt there."""
        state = dict(self.__dict__)
        del state["_lock"]
        state["_vocab"], state["_tables"] = {}, {}
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __call__(self, floats: np.ndarray, cat_hashes: np.ndarray, nan_fill: np.ndarray,
                 dtype: Any = np.uint8, out: np.ndarray | None = None) -> np.ndarray:
        """``[n_ctrs, N]`` every CTR's bin (``dtype``) for the rows (float features
        ``f32[N, n_float]``, hashes ``i64[N, n_cat]``, NaN fill per float feature), CTR-major;
        written into ``out`` when given (rows of a larger array)."""
        n = floats.shape[0]
        out = np.empty((len(self._ctrs), n), dtype) if out is None else out
        bits_cache: dict[tuple, np.ndarray] = {}
        float_columns = np.ascontiguousarray(floats.T)
        has_nan = np.isnan(float_columns).any(axis=1)

        def bit(element: tuple) -> np.ndarray:  # ("f", feature, border) or ("c", cat, value)
            if element not in bits_cache:
                kind, index, value = element
                if kind == "f":
                    column = float_columns[index]
                    x = np.where(np.isnan(column), nan_fill[index], column) if has_nan[index] else column
                    bits_cache[element] = (x > np.float32(value)).view(np.uint8)
                else:
                    bits_cache[element] = (cat_hashes[:, index] == value).view(np.uint8)
            return bits_cache[element]

        shifted: dict[tuple[int, int], np.ndarray] = {}

        def shifted_ids(cat: int, n_bits: int) -> np.ndarray:  # each row's category, << n_bits
            if (cat, n_bits) not in shifted:
                if (cat, 0) not in shifted:
                    shifted[cat, 0] = self._categories(cat, cat_hashes[:, cat])
                shifted[cat, n_bits] = shifted[cat, 0] << n_bits
            return shifted[cat, n_bits]

        def run(groups: list) -> None:
            for (cats, float_elements, one_hot_elements), members in groups:
                elements = [("f", f, b) for f, b in float_elements] + [("c", c, v) for c, v in one_hot_elements]
                if len(cats) == 1 and len(elements) <= _MAX_BITS:
                    index = shifted_ids(cats[0], len(elements))
                    if elements:  # the bit pattern, first element highest
                        pattern = bit(elements[0]).astype(np.uint16)
                        for element in elements[1:]:
                            pattern <<= 1
                            pattern |= bit(element)
                        index = index | pattern
                    table = self._dense(cats[0], elements, members, dtype)  # [len(members), V 2**b]
                    for row, j in enumerate(members):
                        np.take(table[row], index, out=out[j])
                else:  # several categorical columns: the rows' distinct keys, looked up once
                    keys = [cat_hashes[:, c] for c in cats] + [bit(e).astype(np.int64) for e in elements]
                    codes, distinct = _factorize(self._hash(keys, n))
                    for j in members:
                        np.take(self._ctrs[j].bins(distinct).astype(dtype), codes, out=out[j])

        with self._lock:
            for cat in self._single:  # every vocabulary extended here, before any table is read
                shifted_ids(cat, 0)
            if n < _THREADED_ROWS or len(self._groups) < 2:
                run(self._groups)
            else:  # half of the projections in a second thread (NumPy's gathers release the GIL)
                half = worker("jaximp-ctrs").submit(run, self._groups[1::2])
                try:
                    run(self._groups[::2])
                finally:
                    half.result()
        return out

    def _categories(self, cat: int, hashes: np.ndarray) -> np.ndarray:
        """``i32[n]`` the position of each hash in the column's vocabulary, extended first with
        the hashes it lacks."""
        codes, distinct = _factorize(hashes)
        vocab = self._vocab.get(cat, np.zeros(0, np.int64))
        at = np.searchsorted(vocab, distinct)
        if not (len(vocab) and (vocab[np.minimum(at, len(vocab) - 1)] == distinct).all()):
            vocab = np.union1d(vocab, distinct)
            self._vocab[cat] = vocab
            at = np.searchsorted(vocab, distinct)
        return at.astype(np.int32)[codes]

    def _dense(self, cat: int, elements: list, members: list[int], dtype: Any) -> np.ndarray:
        """``[len(members), n_categories 2**n_bits]`` the CTR bins of every known category and bit pattern."""
        vocab = self._vocab[cat]
        projection = (cat, tuple(elements))
        size, table = self._tables.get(projection, (0, None))
        if size != len(vocab):
            table = self._table(vocab, len(elements), members).astype(dtype)
            self._tables[projection] = (len(vocab), table)
        return table

    def _table(self, vocab: np.ndarray, n_bits: int, members: list[int]) -> np.ndarray:
        """The CTRs of every (category, bit pattern): row ``v * 2**b + pattern``."""
        patterns = np.arange(1 << n_bits)
        category = np.repeat(vocab, len(patterns))
        pattern = np.tile(patterns, len(vocab))
        keys = [category] + [(pattern >> (n_bits - 1 - i)) & 1 for i in range(n_bits)]
        key = self._hash(keys, len(category))
        return np.stack([self._ctrs[j].bins(key) for j in members])
