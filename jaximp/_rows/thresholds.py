"""Rows as the model's library reads them: its feature names, and values compared with its float64
thresholds (LightGBM; ``jaximp._models.thresholds``).

:func:`library_rows` wraps ``jaximp._rows.inputs.as_features``: for a model that carries
``value_thresholds``, a DataFrame's columns are matched by LightGBM's names (spaces read as
underscores), the rows are checked and converted as for any model, and then each column that
needs it is brought to the float32 values the nodes' borders decide exactly as LightGBM decides
the values it reads (see ``jaximp._models.thresholds`` for the modes):

* precision: LightGBM reads a float64 NumPy array (and a list that becomes one) in float64, any
  other array in float32; a pandas DataFrame in float64 as soon as one column needs it (its
  ``result_type`` with float32), which for every value is its own column's values in float64;
  a polars DataFrame column by column. jaximp reads each the same way, so a float32 row, or an
  int8 one, is compared in float32 and a float64 row in float64;
* float32 rows of a model with neither bins nor missing zeros are returned as they are (no cost);
  otherwise the columns that change are rewritten (rows on the host come back marked as checked,
  so that passing them on does not convert them twice); a ``jax.Array`` is converted on its
  device (a float64 one, under ``jax_enable_x64``, compared in float64).

Cost (float64 rows only, measured on one CPU core, 200,000 rows of 10 columns, a LightGBM model
of 100 trees of 63 leaves): about 17 ns per value for the conversion, where reading the rows as
float32 takes under 5; only values whose float32 rounding lands next to a border are searched
among the column's thresholds. Float32 rows cost nothing unless a column is in bins or reads
zeros as missing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaximp._models.thresholds import ValueThresholds
from jaximp._rows.frames import EvaluatedRows, frame_columns, frame_positions

_WIDE_KINDS = "iuf"  # integer and float dtypes; float32 and narrower ones read exactly in float32
_NARROW = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.uint8),
           np.dtype(np.uint16), np.dtype(bool))
_CODE_LIMIT = float(1 << 31)  # category codes past int32 go the other values' way whatever their size


def library_rows(as_features: Callable) -> Callable:
    """Wrap ``as_features(X, ens, fn_name, arg)`` so that a model with ``value_thresholds``
    reads rows as its library does (see the module docstring); other models are unchanged."""

    @functools.wraps(as_features)
    def checked(X: Any, ens: Any, fn_name: str, arg: str = "X") -> Any:
        table = getattr(ens, "value_thresholds", None)
        if table is None or isinstance(X, EvaluatedRows):
            return as_features(X, ens, fn_name, arg)
        X = library_names(X, ens)
        x = as_features(X, ens, fn_name, arg)
        if isinstance(x, jax.Array):
            wide = X if isinstance(X, jax.Array) and X.dtype == np.float64 else None
            return _device_values(x, wide, table)
        return _host_values(x, _wide_columns(X, ens, table, fn_name, arg), table)

    return checked


def library_names(X: Any, ens: Any) -> Any:
    """``X`` with each DataFrame column renamed to the model's feature it names as LightGBM names
    features (spaces replaced by underscores), where the frame lacks that feature's exact name."""
    columns = frame_columns(X)
    table = getattr(ens, "value_thresholds", None)
    if columns is None or table is None or table.library != "LightGBM":
        return X
    wanted, present = set(ens.feature_names), set(columns)
    renamed = {}
    for c in columns:
        lightgbm = c.replace(" ", "_")
        if c not in wanted and lightgbm != c and lightgbm in wanted and lightgbm not in present:
            renamed[c] = lightgbm
    if not renamed or len(set(renamed.values())) != len(renamed):
        return X
    if type(X).__module__.startswith("pandas"):
        return X.set_axis([renamed.get(str(c), c) for c in X.columns], axis=1)
    return X.rename(renamed)


def _wide_columns(X: Any, ens: Any, table: ValueThresholds, fn_name: str, arg: str) -> dict[int, np.ndarray]:
    """``{column: f64[N]}``: the model's columns that LightGBM reads in float64 (beyond float32's
    precision) and that have thresholds or category codes; empty for rows read in float32."""
    work = table.work_columns(wide=True)
    if not work:
        return {}
    names = frame_columns(X)
    if names is None:
        if isinstance(X, (list, tuple)):
            try:
                X = np.asarray(X)
            except ValueError:
                return {}
        if not isinstance(X, np.ndarray) or X.dtype != np.float64 or X.ndim != 2:
            return {}
        columns = X.T[work]  # one transposed copy: each column contiguous
        return dict(zip(work, columns))
    positions = frame_positions(names, ens, fn_name, arg)
    pandas = type(X).__module__.startswith("pandas")
    out = {}
    for j in work:
        values = X.iloc[:, positions[j]] if pandas else X.get_column(X.columns[positions[j]])
        dtype = getattr(values, "dtype", None)
        kind = getattr(dtype, "kind", None) or getattr(getattr(dtype, "numpy_dtype", None), "kind", None)
        if type(dtype).__name__ in ("CategoricalDtype", "Categorical", "Enum"):
            continue  # category codes: small integers, exact
        if pandas:
            if kind not in _WIDE_KINDS or np.dtype(getattr(dtype, "numpy_dtype", dtype)) in _NARROW:
                continue
            out[j] = values.to_numpy(dtype=np.float64, na_value=np.nan)
        else:  # polars: every column read at its own type
            if not (dtype.is_numeric() and str(dtype) not in ("Float32", "Int8", "Int16", "UInt8", "UInt16")):
                continue
            out[j] = np.asarray(values.to_numpy(), np.float64)
    return out


def _host_values(x: np.ndarray, wide: dict[int, np.ndarray], table: ValueThresholds) -> np.ndarray:
    """``f32[N, F]`` the checked rows with each column that changes brought to its decided values
    (``wide``: float64 values of the columns read in float64), marked as checked; ``x`` itself
    when nothing changes."""
    work = sorted(set(table.work_columns(wide=False)) | set(wide))
    if not work:
        return x
    out = np.array(x, dtype=np.float32, copy=True)
    with np.errstate(over="ignore", invalid="ignore"):
        for j in work:
            out[:, j] = column_values(table, j, wide.get(j, out[:, j]))
    return out.view(EvaluatedRows)


def column_values(table: ValueThresholds, j: int, values: np.ndarray) -> np.ndarray:
    """``f32[N]`` the values of column ``j`` (``f32[N]`` or ``f64[N]``) that its nodes' borders
    decide as the library decides ``values``: codes truncated, the zero band read as 0 or NaN,
    bins, or float64 values clipped between their thresholds' borders (see
    ``jaximp._models.thresholds``)."""
    float32 = values.dtype == np.float32
    if table.categorical[j]:
        return values if float32 else np.trunc(np.clip(values, -_CODE_LIMIT, _CODE_LIMIT)).astype(np.float32)
    if table.binned[j] or not float32:
        return _exact(table, j, values)
    return np.where(np.abs(values) <= table.zero_band, np.float32(np.nan), values)  # zeros missing


def _exact(table: ValueThresholds, j: int, values: np.ndarray) -> np.ndarray:
    """``f32[n]`` the decided values of ``values`` (any float dtype): bins, or for a column in
    value mode the float32 value of each, clipped between the borders of the thresholds around it
    where rounding could cross one.

    Rounding ``x`` to the nearest float32 ``y`` moves it less than a float32 step, so it crosses a
    threshold only when a border lies within one step of ``y``: the float32 values next to the
    borders, the zero band's edges and the infinities (``y`` past float32) are marked in a small
    hashed table (false marks cost a search, never a wrong value), and only the values whose ``y``
    is marked are searched among the thresholds and clipped.
    """
    with np.errstate(over="ignore", invalid="ignore"):  # past float32: infinities, clipped where needed
        return _exact_values(table, j, values)


def _exact_values(table: ValueThresholds, j: int, values: np.ndarray) -> np.ndarray:
    thresholds, borders = table.column(j)
    if table.binned[j]:
        wide = _zero_band(table, j, values.astype(np.float64))
        bins = np.searchsorted(thresholds, wide, side="left")
        return np.where(np.isnan(wide), np.nan, bins).astype(np.float32)
    rounded = values.astype(np.float32)
    marks, low, high = _clipping(table, j)
    bits = rounded.view(np.uint32)
    marked = np.flatnonzero(marks[(bits ^ (bits >> 15)) & np.uint32(len(marks) - 1)])
    if table.zero_missing[j]:
        rounded[np.abs(rounded) <= table.zero_band] = np.nan
    if len(marked):
        wide = _zero_band(table, j, values[marked].astype(np.float64))
        k = np.searchsorted(thresholds, wide, side="left")
        rounded[marked] = np.minimum(np.maximum(wide.astype(np.float32), low[k]), high[k])
    return rounded


def _zero_band(table: ValueThresholds, j: int, wide: np.ndarray) -> np.ndarray:
    """``wide`` with its zero band read as the library reads it: 0.0, or NaN (missing zeros)."""
    return np.where(np.abs(wide) <= table.zero_band, np.nan if table.zero_missing[j] else 0.0, wide)


def _clipping(table: ValueThresholds, j: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(marks bool[2**b], low f32[n + 1], high f32[n + 1])`` of a value-mode column, made once
    per model: the hashed float32 values near which rounding may cross a threshold, and the
    float32 values a value above ``k`` thresholds may take, ``(borders[k - 1], borders[k]]``."""
    cache = table.scratch.setdefault("clipping", {})
    if j not in cache:
        _, borders = table.column(j)
        inf = np.float32(np.inf)
        near = np.concatenate([borders, np.float32([table.zero_band, -table.zero_band, inf, -inf])])
        near = np.concatenate([np.nextafter(near, -inf), near, np.nextafter(near, inf)]).astype(np.float32)
        size = 1 << max(10, int(np.ceil(np.log2(16 * len(near)))))
        marks = np.zeros(size, bool)
        bits = near.view(np.uint32)
        marks[(bits ^ (bits >> 15)) & np.uint32(size - 1)] = True
        low = np.concatenate([[-inf], np.nextafter(borders, inf)]).astype(np.float32)
        high = np.concatenate([borders, [inf]]).astype(np.float32)
        cache[j] = (marks, low, high)
    return cache[j]


def _device_values(x: jax.Array, wide: jax.Array | None, table: ValueThresholds) -> jax.Array:
    """The same on a ``jax.Array``'s device: ``x f32[N, F]``, ``wide f64[N, F]`` the rows read in
    float64 (under ``jax_enable_x64``) or None."""
    work = set(table.work_columns(wide=wide is not None))
    if not work:
        return x
    columns = [_device_column(table, j, x[:, j] if wide is None else wide[:, j]) if j in work else x[:, j]
               for j in range(x.shape[1])]
    return jnp.stack(columns, axis=1)


def _device_column(table: ValueThresholds, j: int, values: jax.Array) -> jax.Array:
    float32 = values.dtype == jnp.float32
    if table.categorical[j]:
        return values if float32 else jnp.trunc(jnp.clip(values, -_CODE_LIMIT, _CODE_LIMIT)).astype(jnp.float32)
    thresholds, borders = table.column(j)
    band = jnp.abs(values) <= table.zero_band
    if table.zero_missing[j]:
        values = jnp.where(band, jnp.nan, values)
    elif not float32 or table.binned[j]:
        values = jnp.where(band, 0.0, values)
    if table.binned[j]:
        search = jnp.asarray(borders) if float32 else jnp.asarray(thresholds, values.dtype)  # x > floor32(t) iff x > t
        bins = jnp.searchsorted(search, values, side="left")
        return jnp.where(jnp.isnan(values), jnp.nan, bins.astype(jnp.float32))
    if float32:
        return values
    k = jnp.searchsorted(jnp.asarray(thresholds, values.dtype), values, side="left")
    _, low, high = _clipping(table, j)
    low, high = jnp.asarray(low), jnp.asarray(high)
    return jnp.minimum(jnp.maximum(values.astype(jnp.float32), low[k]), high[k])
