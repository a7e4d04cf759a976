"""Host-side checks and normalisation of the rows users pass in.

Everything a kernel sees is ``f32[N, F]`` in the model's column order: this module turns NumPy
and JAX arrays, pandas and polars DataFrames and ``catboost.Pool`` objects into that,
or raises a ``TypeError``/``ValueError`` naming the argument and what was expected.

Subnormal values (``0 < |x| < 2**-126``, e.g. ``1e-40``) become ``±2**-126``, the smallest normal
float32 of their sign: XLA on CPU flushes subnormals to zero inside every kernel, which would
send ``1e-40`` the way of ``0`` at a split on ``x > 0``; the smallest normal value of the same sign
compares with every normal border (and 0) as the subnormal does, so the libraries' decisions
are kept.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._models.ensemble import Ensemble, has_real_names
from jaximp._models.thresholds import MIN_NORMAL
from jaximp._rows.codes import encode_rows, needs_codes
from jaximp._rows.featurize import featurize_columns
from jaximp._rows.frames import EvaluatedRows, check_shape, frame_columns, frame_positions, is_pool
from jaximp._rows.hashing import hash_column
from jaximp._rows.pools import pool_rows
from jaximp._rows.thresholds import library_rows


@library_rows  # LightGBM: rows compared with its float64 thresholds, columns by its names
def as_features(X: Any, ens: Ensemble, fn_name: str, arg: str = "X") -> np.ndarray | jax.Array:
    """``f32[N, F]`` rows of ``X`` in the model's column order, NaN where a value equals the
    model's ``missing_value`` (XGBoost's ``missing``).

    Args:
        X: NumPy/JAX array ``[N, F]``, pandas or polars DataFrame, or ``catboost.Pool`` (one
            with categorical features read by CatBoost, ``jaximp._rows.pools``).
        ens: the model, whose ``n_features`` and ``feature_names`` the columns must match.
        fn_name: the public function, for error messages.
        arg: the argument's name, for error messages.

    Returns:
        ``f32[N, F]``: a NumPy array, or a JAX array when ``X`` is one (kept on its device).
        For a model with categorical features, ``u8[N, E]`` NumPy: the bins of its evaluated
        split features (see :func:`as_raw_columns` and ``jaximp._models.featurizer``). For a model
        with set-membership splits (XGBoost, LightGBM, scikit-learn), categorical columns hold
        category codes, as the library codes them (``jaximp._models.categories``).

    Raises:
        TypeError: an unsupported type or non-numeric data.
        ValueError: wrong rank, wrong column count, missing named columns, or no rows.
    """
    rows = _as_features(X, ens, fn_name, arg)
    missing = getattr(ens, "missing_value", None)  # a TreeEnsemble of an XGBoost model
    return rows if missing is None else _mark_missing(rows, missing)


def _mark_missing(rows: np.ndarray | jax.Array, missing: float) -> np.ndarray | jax.Array:
    """``rows`` with every value equal to ``missing`` (in float32) NaN, as XGBoost's
    ``DMatrix(X, missing=missing)`` drops them."""
    value = np.float32(missing)
    if isinstance(rows, jax.Array):
        return jnp.where(rows == value, jnp.nan, rows)
    marked = np.where(rows == value, np.float32(np.nan), rows)
    return marked.view(type(rows)) if isinstance(rows, EvaluatedRows) else marked


def _as_features(X: Any, ens: Ensemble, fn_name: str, arg: str) -> np.ndarray | jax.Array:
    """:func:`as_features` before missing values are marked."""
    if ens.featurizer is not None:
        if isinstance(X, EvaluatedRows):  # checked and featurized already
            return X
        if is_pool(X):  # its raw values stay inside CatBoost: read through a probe
            return pool_rows(X, ens, fn_name, arg)
        column, n_rows = _columns_of(X, ens, fn_name, arg)  # the values hashed while the floats are binned
        floats = _float_columns(column, n_rows, ens, fn_name, arg)
        return featurize_columns(ens.featurizer, floats, _cat_hashers(column, ens, fn_name, arg)).view(EvaluatedRows)
    if isinstance(X, (list, tuple)):
        X = _list_rows(X, ens, fn_name, arg)
    codes = getattr(ens, "category_codes", None)  # a TreeEnsemble with set-membership splits
    if codes is not None and needs_codes(X, codes):
        return without_subnormals(encode_rows(X, ens, fn_name, arg))
    columns = frame_columns(X)
    if columns is not None:
        X = _select_frame(X, columns, ens, fn_name, arg)
    elif is_pool(X):
        X = _pool_matrix(X, ens, fn_name, arg)
    if isinstance(X, jax.Array):
        if not (np.issubdtype(X.dtype, np.number) or X.dtype == bool):
            raise TypeError(f"{fn_name}: {arg} must hold numbers; got dtype {X.dtype}")
        _check_real(X.dtype, fn_name, arg)
        check_shape(X.shape, ens, fn_name, arg)
        return without_subnormals(X.astype(np.float32))
    if not isinstance(X, (np.ndarray, list, tuple)):
        raise TypeError(
            f"{fn_name}: {arg} must be a NumPy or JAX array, a pandas or polars DataFrame or a "
            f"catboost.Pool; got {type(X).__name__}"
        )
    if np.ma.is_masked(X):  # np.asarray would read the masked entries' hidden values
        raise TypeError(f"{fn_name}: {arg} must not be a masked array with masked entries; pass {arg}.filled(np.nan) "
                        "to read them as missing values")
    try:
        array = np.asarray(X)
    except ValueError as e:
        raise ValueError(f"{fn_name}: {arg} must be a rectangular [N, {ens.n_features}] array ({e})") from e
    _check_real(array.dtype, fn_name, arg)
    if array.dtype == object or not (np.issubdtype(array.dtype, np.number) or array.dtype == bool):
        try:
            array = array.astype(np.float32)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{fn_name}: {arg} must hold numbers; got dtype {array.dtype}") from e
    check_shape(array.shape, ens, fn_name, arg)
    with np.errstate(over="ignore"):  # beyond float32: +-inf, as the libraries read them
        return without_subnormals(np.ascontiguousarray(array, dtype=np.float32))


def _list_rows(X: list | tuple, ens: Ensemble, fn_name: str, arg: str) -> np.ndarray:
    """A list of rows as an array; rows that mix numbers and strings (raw categorical values) as
    an object array, each value kept as it is (NumPy would turn every number into a string)."""
    try:
        array = np.asarray(X)
        if array.dtype.kind in "US":
            array = np.asarray(X, dtype=object)
    except ValueError as e:
        raise ValueError(f"{fn_name}: {arg} must be a rectangular [N, {ens.n_features}] array ({e})") from e
    return array


def without_subnormals(x: Any) -> Any:
    """``f32`` rows ``x`` with each subnormal value replaced by the smallest normal float32 of its
    sign (see the module docstring); ``x`` itself when it holds none (host rows: the caller's
    array is never changed). JAX rows (on a device, or traced) are mapped by a jitted kernel
    that reads the bits, which XLA's flushing does not touch."""
    if isinstance(x, jax.Array):
        return _device_without_subnormals(x)
    tiny = (np.abs(x) < MIN_NORMAL) & (x != 0)
    if not tiny.any():
        return x
    x = x.copy()  # keeps an EvaluatedRows marker
    x[tiny] = np.copysign(MIN_NORMAL, x[tiny])
    return x


@jax.jit
def _device_without_subnormals(x: jax.Array) -> jax.Array:
    bits = jax.lax.bitcast_convert_type(x, jnp.int32)
    subnormal = ((bits & 0x7F800000) == 0) & ((bits & 0x007FFFFF) != 0)
    normal = jnp.where(bits < 0, -MIN_NORMAL, MIN_NORMAL)
    return jnp.where(subnormal, normal, x)


@dataclasses.dataclass(frozen=True)
class RawColumns:
    """The rows of a model with categorical features, checked, before featurization.

    Attributes:
        floats: ``f32[N, n_float]`` the float features, in the model's float-feature order.
        cat_hashes: ``i64[N, n_cat]`` CatBoost's int32 hash of each categorical value.

    Both are column-major (Fortran order) as :func:`as_raw_columns` makes them: featurizing
    reads them a column at a time.
    """

    floats: np.ndarray
    cat_hashes: np.ndarray


def featurize(ens: Ensemble, raw: RawColumns) -> EvaluatedRows:
    """``u8[N, E]`` (or ``i32``) the bins of the evaluated split features of checked raw rows."""
    return featurize_columns(ens.featurizer, raw.floats, raw.cat_hashes).view(EvaluatedRows)


def as_raw_columns(X: Any, ens: Ensemble, fn_name: str, arg: str = "X") -> RawColumns:
    """The float and (hashed) categorical columns of ``X`` for a model with categorical features.

    Categorical columns take raw values as CatBoost does: strings, integers or booleans (a
    pandas ``category`` column of those too); floats and missing values are refused, as
    CatBoost refuses them. A ``catboost.Pool`` with categorical features keeps its raw values
    to itself (:func:`as_features` reads its evaluated features through CatBoost), so what needs
    the raw columns (permuting them, displaying them) refuses it with a pointer to the data it
    was built from.

    Raises:
        TypeError: an unsupported type, a non-numeric float column, or a categorical column
            holding floats or missing values.
        ValueError: wrong rank or column count, missing named columns, or no rows.
    """
    column, n_rows = _columns_of(X, ens, fn_name, arg)
    return RawColumns(_float_columns(column, n_rows, ens, fn_name, arg), _cat_hashes(column, n_rows, ens, fn_name, arg))


def _float_columns(column: Callable[[int], Any], n_rows: int, ens: Ensemble, fn_name: str, arg: str) -> np.ndarray:
    """``f32[N, n_float]`` (each column contiguous) the float features of a categorical model."""
    floats = np.empty((len(ens.featurizer.float_columns), n_rows), np.float32).T
    for i, j in enumerate(ens.featurizer.float_columns):
        floats[:, i] = _float_column(column(j), ens.feature_names[j], fn_name, arg)
    return floats


def _cat_hashes(column: Callable[[int], Any], n_rows: int, ens: Ensemble, fn_name: str, arg: str) -> np.ndarray:
    """``i64[N, n_cat]`` (each column contiguous) the hashes of a categorical model's values."""
    hashes = np.empty((len(ens.featurizer.cat_columns), n_rows), np.int64).T
    for i, hasher in enumerate(_cat_hashers(column, ens, fn_name, arg)):
        hashes[:, i] = hasher()
    return hashes


def _cat_hashers(column: Callable[[int], Any], ens: Ensemble, fn_name: str, arg: str) -> list[Callable[[], np.ndarray]]:
    """Per categorical column, a function of no arguments that hashes its values (``i64[N]``);
    the columns are taken from ``X`` here, in the calling thread."""
    return [functools.partial(_cat_column, column(j), ens.feature_names[j], fn_name, arg)
            for j in ens.featurizer.cat_columns]


def display_values(X: Any, ens: Ensemble, fn_name: str) -> np.ndarray:
    """``object[N, F]`` the raw values of a categorical model's rows, in the model's column order
    (for display: shap's ``Explanation.display_data``)."""
    column, n_rows = _columns_of(X, ens, fn_name, "X")
    out = np.empty((n_rows, ens.n_features), dtype=object)
    for j in range(ens.n_features):
        values = column(j)
        out[:, j] = values.to_list() if hasattr(values, "to_list") else list(values)
    return out


def _columns_of(X: Any, ens: Ensemble, fn_name: str, arg: str):
    """``(column(j) -> the values of the model's column j, N)`` for raw rows of any form."""
    if is_pool(X):
        raise TypeError(
            f"{fn_name}: {arg} must hold the raw categorical values; a catboost.Pool does not give "
            "them back: pass the DataFrame or array the Pool was built from"
        )
    columns = frame_columns(X)
    if columns is not None:
        positions = frame_positions(columns, ens, fn_name, arg)
        if type(X).__module__.startswith("pandas"):
            column = lambda j: X.iloc[:, positions[j]]  # noqa: E731
        else:
            column = lambda j: X.get_column(X.columns[positions[j]])  # noqa: E731
        n_rows = X.shape[0]
    else:
        if isinstance(X, jax.Array):
            X = np.asarray(X)
        if not isinstance(X, (np.ndarray, list, tuple)):
            raise TypeError(
                f"{fn_name}: {arg} must be a NumPy array, a pandas or polars DataFrame or a list of "
                f"rows; got {type(X).__name__}"
            )
        array = X if isinstance(X, np.ndarray) else np.asarray(X, dtype=object)
        check_shape(array.shape, ens, fn_name, arg)
        column = lambda j: array[:, j]  # noqa: E731
        n_rows = array.shape[0]
    if n_rows == 0:
        raise ValueError(f"{fn_name}: {arg} must have at least one row; got 0 rows")
    return column, n_rows


def _float_column(values: Any, name: str, fn_name: str, arg: str) -> np.ndarray:
    values = values.to_numpy() if hasattr(values, "to_numpy") else np.asarray(values)
    _check_real(values.dtype, fn_name, f"{arg}'s column {name!r}")
    try:
        return np.asarray(values, np.float32)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{fn_name}: {arg}'s column {name!r} must hold numbers (a float feature); "
                        f"got dtype {values.dtype}") from e


def _cat_column(values: Any, name: str, fn_name: str, arg: str) -> np.ndarray:
    if type(values).__module__.startswith("polars"):
        values = values.cast(str) if str(values.dtype) in ("Categorical", "Enum") else values
        values = np.asarray(values.to_list(), dtype=object)
    dtype = getattr(values, "dtype", None)
    if _is_float_dtype(dtype):
        raise TypeError(
            f"{fn_name}: {arg}'s column {name!r} must hold strings or integers (a categorical "
            f"feature, as in training); got dtype {dtype} (CatBoost refuses floats too)"
        )
    try:
        return hash_column(values)
    except TypeError as e:
        raise TypeError(f"{fn_name}: {arg}'s column {name!r} is categorical: {e}") from e


def _is_float_dtype(dtype: Any) -> bool:
    try:
        return np.dtype(dtype).kind == "f"
    except TypeError:  # pandas extension dtypes (category, string): their values are checked
        return False


def as_weights(sample_weight: Any, n_rows: int, fn_name: str, *, allow_all_zero: bool = False) -> np.ndarray:
    """``f32[N]`` row weights: ones for None; else finite, non-negative and (unless
    ``allow_all_zero``) not all 0.

    Raises:
        TypeError: non-numeric weights.
        ValueError: a wrong shape, negative or non-finite weights, or all zeros.
    """
    if sample_weight is None:
        return np.ones(n_rows, np.float32)
    if isinstance(sample_weight, jax.core.Tracer):  # under jax.grad, jit or vmap: values unchecked
        if sample_weight.shape != (n_rows,):
            raise ValueError(f"{fn_name}: sample_weight must have shape ({n_rows},), one weight per row; "
                             f"got {sample_weight.shape}")
        return sample_weight.astype(jnp.result_type(float, sample_weight))
    if isinstance(sample_weight, jax.Array):  # checked on its device: a few numbers are read back
        return _device_weights(sample_weight, n_rows, fn_name, allow_all_zero)
    w = np.asarray(sample_weight)
    if not (np.issubdtype(w.dtype, np.number) or w.dtype == bool):
        raise TypeError(f"{fn_name}: sample_weight must hold numbers; got dtype {w.dtype}")
    if w.shape != (n_rows,):
        raise ValueError(f"{fn_name}: sample_weight must have shape ({n_rows},), one weight per row; got {w.shape}")
    w = w.astype(np.float32)
    bad = w[~(np.isfinite(w) & (w >= 0))][:5]
    if allow_all_zero and bad.size:
        raise ValueError(f"{fn_name}: sample_weight must be finite and non-negative; got values such as {bad}")
    if not allow_all_zero and (bad.size or not np.sum(w) > 0):
        raise ValueError(f"{fn_name}: sample_weight must be finite, non-negative and not all 0")
    return w


def _device_weights(w: Array, n_rows: int, fn_name: str, allow_all_zero: bool) -> Array:
    """:func:`as_weights` of weights in a ``jax.Array``, left on its device."""
    if not (jnp.issubdtype(w.dtype, jnp.number) or w.dtype == bool):
        raise TypeError(f"{fn_name}: sample_weight must hold numbers; got dtype {w.dtype}")
    if w.shape != (n_rows,):
        raise ValueError(f"{fn_name}: sample_weight must have shape ({n_rows},), one weight per row; got {w.shape}")
    w = w.astype(jnp.float32)
    valid, positive = jax.device_get(_weights_summary(w))
    if not valid or not (allow_all_zero or positive):
        zero = "" if allow_all_zero else " and not all 0"
        raise ValueError(f"{fn_name}: sample_weight must be finite and non-negative{zero}")
    return w


@jax.jit
def _weights_summary(w: Array) -> tuple[Array, Array]:
    """``(every weight is finite and >= 0, their sum is > 0)``, computed where ``w`` is."""
    return jnp.all(jnp.isfinite(w) & (w >= 0)), jnp.sum(w) > 0


def _select_frame(X: Any, columns: list[str], ens: Ensemble, fn_name: str, arg: str) -> np.ndarray:
    positions = frame_positions(columns, ens, fn_name, arg)
    if type(X).__module__.startswith("pandas"):
        frame = X.iloc[:, positions]
        bad = [str(c) for c, dt in zip(frame.columns, frame.dtypes) if not _numeric_pandas(dt)]
    else:
        frame = X.select([X.columns[i] for i in positions])
        bad = [c for c, dt in frame.schema.items() if not (dt.is_numeric() or str(dt) == "Boolean")]
    if bad:
        raise TypeError(f"{fn_name}: {arg} must hold numbers; non-numeric columns {bad[:10]}")
    if type(X).__module__.startswith("pandas"):
        for dtype in set(frame.dtypes):
            _check_real(dtype, fn_name, arg)
    array = frame.to_numpy(dtype=np.float32) if type(X).__module__.startswith("pandas") else frame.to_numpy()
    return np.asarray(array, np.float32)


def _check_real(dtype: Any, fn_name: str, arg: str) -> None:
    """A ``TypeError`` for complex numbers (a cast would drop the imaginary part) and for dates and
    durations (a cast would read their integer counts as feature values)."""
    try:
        kind = np.dtype(dtype).kind
    except TypeError:  # pandas extension dtypes: numeric ones are real
        return
    if kind in "cmM":
        what = {"c": "complex numbers", "m": "durations", "M": "dates"}[kind]
        raise TypeError(f"{fn_name}: {arg} must hold real numbers; got {what} (dtype {dtype}): convert them to "
                        "the numbers the model was trained on")


def _numeric_pandas(dtype: Any) -> bool:
    import pandas as pd

    return pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype)


def _pool_matrix(pool: Any, ens: Ensemble, fn_name: str, arg: str) -> np.ndarray:
    if pool.get_cat_feature_indices() or pool.get_text_feature_indices() or pool.get_embedding_feature_indices():
        raise TypeError(f"{fn_name}: {arg} must be a catboost.Pool of numeric features only")
    try:
        array = np.asarray(pool.get_features(), np.float32)
    except Exception as e:  # catboost raises its own error types for quantized pools
        raise TypeError(f"{fn_name}: {arg} must be a catboost.Pool of raw numeric features ({e})") from e
    names = [str(n) for n in pool.get_feature_names() or ()]
    default = [str(i) for i in range(len(names))]
    if has_real_names(ens) and names and names != default:  # matched by name, as a DataFrame
        check_shape((array.shape[0], ens.n_features), ens, fn_name, arg)
        return array[:, frame_positions(names, ens, fn_name, arg)]
    return array
