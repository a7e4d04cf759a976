"""CTR bins of many rows, with the bins of the categories already seen memoized.

A CTR's value depends on a row only through its projection key: the hashes of its categorical
values and the bits of its binarized float features and one-hot elements. For a projection of
categorical columns with vocabularies (the distinct categories seen so far) of sizes V1, V2, ...
and b bits, the value is a function of the table position
``((id1 * V2 + id2) * ...) * 2**b + pattern``: a dense table per CTR, computed once per position
(hash, look-up in the model's CTR table, the CTR formula) and kept. A small table is computed
whole, a large one (several columns, high cardinalities) as rows reach its positions; a grown
vocabulary starts the table again. A row then costs an index computation and one gather per
CTR. Projections too large for a table (over ``_MAX_TABLE`` positions) hash every row and look
up its distinct keys (``Ctr.values``).

A binarized float element ``value > border`` is read from the float feature's bins when the
border is one of the feature's own (``bin > k``), a quarter of the bytes of the values.

The memo only keeps a pure function of the model (the value at a given table position never
changes), so results do not depend on what was seen before.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from typing import Any, NamedTuple

import numpy as np

from jaximp._rows.threads import in_turn

_MAX_BITS = 12  # a projection with more bits than this hashes every row instead
_MAX_TABLE = 1 << 24  # nor does one of more table positions (categories x bit patterns) per CTR
_WHOLE_TABLE = 1 << 16  # tables up to this many positions are computed whole, larger ones as rows need them


class _Rows(NamedTuple):
    """What a call's projections read: the rows column-major, each categorical column's
    vocabulary positions (``ids``), and where the CTRs' bins go."""

    float_columns: np.ndarray  # f32[n_float, N]
    cat_columns: np.ndarray  # i64[n_cat, N]
    has_nan: np.ndarray  # bool[n_float]
    nan_fill: np.ndarray
    float_bins: np.ndarray | None  # [n_float, N]
    ids: dict[int, np.ndarray]  # categorical feature -> i32[N]
    out: np.ndarray  # [n_ctrs, N], of the bins' dtype


def _unseen(dtype: Any) -> int:
    """The mark of table positions not computed yet: the dtype's largest value, which no bin
    takes (``u8`` bins count at most 254 borders)."""
    return np.iinfo(dtype).max


_ARROW_ROWS = 4096  # fewer rows: NumPy's take, whose call costs a fraction of Arrow's


def _gatherer(index: np.ndarray) -> Any:
    """``gather(table, out)``: ``out[:] = table.numpy[index]`` for a :class:`_Table` row that
    ``index`` (unsigned or int32, every value in bounds) reads. Arrow's take, when pyarrow is
    installed, is about 1.5 times NumPy's on many one-byte values (NumPy converts the indices to
    intp and checks each one); NumPy's costs less to call, which counts for few rows."""
    arrow = _arrow()
    if arrow is None or len(index) < _ARROW_ROWS:
        return lambda table, out: np.take(table.numpy, index, out=out)
    pa, pc = arrow
    indices, options = pa.array(index), pc.TakeOptions(boundscheck=False)  # the indices not copied

    def gather(table: _Table, out: np.ndarray) -> None:
        out[...] = np.asarray(pc.call_function("take", [table.arrow, indices], options))

    return gather


class _Table(NamedTuple):
    """One CTR's bins at every table position: a NumPy row and the Arrow array over its memory
    (made once: wrapping costs more than a gather of a thousand rows)."""

    numpy: np.ndarray
    arrow: Any


def _rows_of(table: np.ndarray) -> list[_Table]:
    """The rows of a ``[CTRs, positions]`` table, each with its Arrow array (None without pyarrow);
    positions written into ``table`` later show through both."""
    arrow = _arrow()
    return [_Table(row, arrow[0].array(row) if arrow else None) for row in table]


@functools.cache
def _arrow() -> Any:
    """``(pyarrow, pyarrow.compute)``, or None without pyarrow."""
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
    except ImportError:  # pragma: no cover - pyarrow is optional
        return None
    return pa, pc


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
        float_borders: each float feature's sorted borders: a binarized float element whose
            border is one of them is read from the feature's bins (``bin > k`` exactly when
            ``value > borders[k]``), a quarter of the bytes of its float values.
    """

    def __init__(self, ctrs: Sequence[Any], projection_hash: Any, float_borders: Sequence[np.ndarray] = ()):
        self._hash = projection_hash
        members: dict[tuple, list[int]] = {}
        for j, ctr in enumerate(ctrs):
            members.setdefault((ctr.cat_features, ctr.float_elements, ctr.one_hot_elements), []).append(j)
        self._ctrs = list(ctrs)
        # [(categorical features, elements, CTR positions)]; an element is ("f", float feature,
        # border, the border's position among the feature's borders or None) or ("c", categorical
        # feature, value hash, None), in the projection's order (floats, then one-hot values)
        self._groups = [(cats, [("f", f, b, _position(float_borders, f, b)) for f, b in floats]
                         + [("c", c, v, None) for c, v in one_hot], js)
                        for (cats, floats, one_hot), js in members.items()]
        self._columns = sorted({c for cats, _, _ in self._groups for c in cats})
        self._lock = threading.Lock()
        self._vocab: dict[int, np.ndarray] = {}  # categorical feature -> sorted known hashes
        self._tables: dict[tuple, tuple] = {}  # projection -> (vocabulary sizes, table, its _Table rows)

    def __getstate__(self) -> dict:
        """Pickled (Dask ships models to workers) without the lock and the memo, rebuilt there."""
        state = dict(self.__dict__)
        del state["_lock"]
        state["_vocab"], state["_tables"] = {}, {}
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __call__(self, floats: np.ndarray, cat_hashes: np.ndarray, nan_fill: np.ndarray, dtype: Any = np.uint8,
                 out: np.ndarray | None = None, float_bins: np.ndarray | None = None,
                 bins_ready: Callable[[], Any] = lambda: None, helper: Executor | None = None) -> np.ndarray:
        """``[n_ctrs, N]`` every CTR's bin (``dtype``) for the rows (float features
        ``f32[N, n_float]``, hashes ``i64[N, n_cat]``, NaN fill per float feature), CTR-major;
        written into ``out`` when given (rows of a larger array, of ``dtype``). ``float_bins``: the float
        features' bins ``[n_float, N]`` (NaN filled the same way), read once ``bins_ready()``
        returns (called after the categories are looked up, which it may overlap).

        ``helper``: a thread that evaluates projections while this one does too (NumPy's and
        Arrow's gathers release the GIL): each thread takes the next projection left, so that
        neither waits for the other."""
        n = floats.shape[0]
        out = np.empty((len(self._ctrs), n), dtype) if out is None else out
        float_columns = np.ascontiguousarray(floats.T)
        rows = _Rows(float_columns, np.ascontiguousarray(cat_hashes.T), np.isnan(float_columns).any(axis=1),
                     nan_fill, float_bins, {}, out)
        with self._lock:
            # every vocabulary extended first: i32[n] each row's position in its column's vocabulary
            rows.ids.update({cat: self._categories(cat, rows.cat_columns[cat]) for cat in self._columns})
            bins_ready()
            in_turn(lambda groups: self._evaluate(groups, rows), self._groups, helper)
        return out

    def _evaluate(self, groups: Iterator[tuple], rows: _Rows) -> None:
        """``rows.out[j]`` for the CTRs of ``groups`` (projections): the rows' table positions, then
        a gather per CTR. Every array a projection needs is written into buffers made once per
        call (and per thread): fresh pages for each of hundreds of projections cost more than the
        work."""
        out = rows.out
        n, dtype = out.shape[1], out.dtype
        bits, patterns = np.empty(n, bool), {np.dtype(t): np.empty(n, t) for t in (np.uint8, np.uint16)}
        combined = {np.dtype(t): np.empty(n, t) for t in (np.uint16, np.int32)}

        def bit(element: tuple) -> np.ndarray:
            """The element's 0/1 of every row (``u8``, in the ``bits`` buffer)."""
            kind, index, value, position = element
            if kind == "c":
                np.equal(rows.cat_columns[index], value, out=bits)
            elif rows.float_bins is not None and position is not None:
                np.greater(rows.float_bins[index], position, out=bits)
            else:
                column = rows.float_columns[index]
                x = np.where(np.isnan(column), rows.nan_fill[index], column) if rows.has_nan[index] else column
                np.greater(x, np.float32(value), out=bits)
            return bits.view(np.uint8)

        shifted: dict[tuple[int, int], np.ndarray] = {}

        def shifted_ids(cat: int, n_bits: int) -> np.ndarray:  # ids << n_bits, u16 where the table allows
            if (cat, n_bits) not in shifted:
                narrow = len(self._vocab[cat]) << n_bits <= 1 << 16
                shifted[cat, n_bits] = (rows.ids[cat] << n_bits).astype(np.uint16 if narrow else np.int32)
            return shifted[cat, n_bits]

        unseen = _unseen(dtype)
        for cats, elements, members in groups:
            sizes = tuple(len(self._vocab[c]) for c in cats)
            if len(elements) > _MAX_BITS or math.prod(sizes) << len(elements) > _MAX_TABLE:
                keys = [rows.cat_columns[c] for c in cats] + [bit(e).astype(np.int64) for e in elements]
                codes, distinct = _factorize(self._hash(keys, n))  # the rows' distinct keys, looked up once
                for j in members:
                    np.take(self._ctrs[j].bins(distinct).astype(dtype), codes, out=out[j])
                continue
            if len(cats) == 1:
                index = shifted_ids(cats[0], len(elements))
            else:  # the categories' mixed-radix number (< _MAX_TABLE), in the int32 buffer
                index = np.multiply(rows.ids[cats[0]], np.int32(sizes[1]), out=combined[np.dtype(np.int32)])
                for c, size in zip(cats[1:], (*sizes[2:], 1)):
                    np.add(index, rows.ids[c], out=index)
                    np.multiply(index, np.int32(size), out=index)
                np.left_shift(index, np.int32(len(elements)), out=index)
            if len(elements) == 1:
                index = np.bitwise_or(index, bit(elements[0]), out=combined[index.dtype])
            elif elements:  # the bit pattern, first element highest; u8 up to 8 bits (p + p: shifts are slower)
                pattern = patterns[np.dtype(np.uint8 if len(elements) <= 8 else np.uint16)]
                np.copyto(pattern, bit(elements[0]))
                for element in elements[1:]:
                    np.add(pattern, pattern, out=pattern)
                    np.bitwise_or(pattern, bit(element), out=pattern)
                index = np.bitwise_or(index, pattern, out=combined[index.dtype])
            self._gather(cats, sizes, elements, members, index, out, dtype, unseen)

    def _gather(self, cats: tuple, sizes: tuple, elements: list, members: list[int], index: np.ndarray,
                out: np.ndarray, dtype: Any, unseen: int) -> None:
        """``out[j]`` the bins of each CTR ``j`` of ``members`` (one projection) for the rows' table
        positions ``index`` (< prod(sizes) 2**n_bits: the ids are checked < their vocabulary's
        size, the pattern has n_bits bits), from the projection's table. A table of up to
        ``_WHOLE_TABLE`` positions is computed whole; a larger one as rows reach its positions
        (``unseen`` marks the others)."""
        projection = (cats, tuple(elements))
        shape, table, rows = self._tables.get(projection, (None, None, None))
        if shape != sizes:  # new, or a vocabulary grew (its categories moved)
            positions = math.prod(sizes) << len(elements)
            if positions <= _WHOLE_TABLE:
                table = self._table(cats, sizes, len(elements), members, np.arange(positions), dtype)
            else:
                table = np.full((len(members), positions), unseen, dtype)
            rows = _rows_of(table)
            self._tables[projection] = (sizes, table, rows)
        gather = _gatherer(index)
        gather(rows[0], out[members[0]])
        if table.shape[1] > _WHOLE_TABLE and out[members[0]].max() == unseen:  # positions not computed yet
            new = np.unique(index[out[members[0]] == unseen])
            table[:, new] = self._table(cats, sizes, len(elements), members, new, dtype)
            gather(rows[0], out[members[0]])
        for row, j in zip(rows[1:], members[1:]):
            gather(row, out[j])

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
        if len(at) and not 0 <= at.min() <= at.max() < len(vocab):  # the gathers read tables unchecked
            raise AssertionError("a category's position is outside its vocabulary")
        return at.astype(np.int32)[codes]

    def _table(self, cats: tuple, sizes: tuple, n_bits: int, members: list[int], positions: np.ndarray,
               dtype: Any) -> np.ndarray:
        """``[len(members), len(positions)]`` the CTR bins (``dtype``) at table ``positions``: the
        categories' mixed-radix number, shifted left by ``n_bits``, or'ed with the bit pattern
        (first element highest)."""
        rest, keys = positions.astype(np.int64) >> n_bits, []
        for c, size in zip(cats[::-1], sizes[::-1]):
            keys.insert(0, self._vocab[c][rest % size])
            rest //= size
        keys += [(positions >> (n_bits - 1 - i)) & 1 for i in range(n_bits)]
        key = self._hash(keys, len(positions))
        bins = np.stack([self._ctrs[j].bins(key) for j in members])
        if (bins >= _unseen(dtype)).any():
            raise AssertionError("a CTR bin collides with the mark of unseen table positions")
        return bins.astype(dtype)


def _position(float_borders: Sequence[np.ndarray], feature: int, border: float) -> int | None:
    """The position of ``border`` among the float feature's borders, or None when it is not one."""
    borders = np.asarray(float_borders[feature] if feature < len(float_borders) else (), np.float32)
    k = int(np.searchsorted(borders, np.float32(border)))
    return k if k < len(borders) and borders[k] == np.float32(border) else None
