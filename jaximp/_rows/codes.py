"""Categorical columns of XGBoost, LightGBM and scikit-learn models: split bitsets and row codes.

A set-membership split reads a category *code*, a small non-negative integer (see
``jaximp._models.trees``). Each library turns a column's raw values into codes its own way, and
jaximp does the same on the host before any kernel runs (:func:`encode_rows`):

* XGBoost: numbers are the codes (``DMatrix(..., feature_types=["c", ...])``). A pandas
  ``category`` column is coded by the training categories that the model stores (``cats``,
  XGBoost >= 3.1: a category's code is its position among the training frame's categories,
  whatever the order of the new frame's); a model without stored categories takes the frame's
  own codes (``cat.codes``). A category unseen in training has no code: XGBoost 3.2 refuses it
  when it sorts after every training category and otherwise codes it as the next training
  category in sorted order (a ``lower_bound`` without an equality check, ``Recode`` in
  src/encoder/ordinal.h); jaximp refuses every unseen category.
* LightGBM: numbers are the codes. The training frame's ``category`` columns' categories are
  stored as ``pandas_categorical``, one list per such column in the frame's order; a new frame's
  ``category`` columns are matched to the lists in order and recoded by them
  (``cat.set_categories``), so an unseen category reads as missing (``_data_from_pandas``,
  lightgbm/basic.py). A frame with another number of ``category`` columns is refused, as LightGBM
  refuses it, a column of numbers given as ``category`` included; a model trained on an array
  (no ``pandas_categorical``) reads a frame's ``category`` columns by their own codes, as
  LightGBM does.
* scikit-learn (HistGradientBoosting): every value of a categorical column, a number or not, is
  looked up among the sorted distinct training values (its ``OrdinalEncoder``,
  ``handle_unknown="use_encoded_value", unknown_value=nan``), so an unseen value reads as missing.

Missing values (NaN, None, a category column's missing entries) become NaN, which each split
sends its own missing-value way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jaximp._models.categories import CategoryCodes
from jaximp._rows.frames import EvaluatedRows, check_shape, frame_columns, frame_positions


def needs_codes(X: Any, codes: CategoryCodes) -> bool:
    """Whether ``X`` must go through :func:`encode_rows` (a DataFrame, or any rows of a model
    that looks numbers up) rather than being read as numbers."""
    if isinstance(X, EvaluatedRows):  # encoded already
        return False
    return frame_columns(X) is not None or codes.lookup_numbers


def encode_rows(X: Any, ens: Any, fn_name: str, arg: str = "X") -> np.ndarray:
    """``f32[N, F]`` (an ``EvaluatedRows``) the rows of ``X`` with each categorical column's
    values turned into its model's codes (see the module docstring), NaN where missing.

    Raises:
        TypeError: an unsupported type, or a non-numeric column the model reads as numbers.
        ValueError: wrong shape or columns, no rows, an XGBoost category unseen in training,
            or LightGBM ``category`` columns that do not match the training frame's.
    """
    codes = ens.category_codes
    names = frame_columns(X)
    if names is not None:
        positions = frame_positions(names, ens, fn_name, arg)
        pandas = type(X).__module__.startswith("pandas")
        series = [X.iloc[:, p] if pandas else X.get_column(X.columns[p]) for p in positions]
        n_rows = X.shape[0]
    else:
        if not isinstance(X, (np.ndarray, list, tuple)) and not hasattr(X, "__array__"):
            raise TypeError(f"{fn_name}: {arg} must be a NumPy or JAX array or a pandas or polars "
                            f"DataFrame; got {type(X).__name__}")
        array = np.asarray(X)
        check_shape(array.shape, ens, fn_name, arg)
        series = [array[:, j] for j in range(array.shape[1])]
        n_rows = array.shape[0]
    if n_rows == 0:
        raise ValueError(f"{fn_name}: {arg} must have at least one row; got 0 rows")
    categories = _column_categories(series, codes, fn_name, arg)
    out = np.empty((n_rows, ens.n_features), np.float32)
    for j, values in enumerate(series):
        out[:, j] = _column_codes(values, categories[j], codes, ens.feature_names[j], fn_name, arg)
    return out.view(EvaluatedRows)


def _is_category(values: Any) -> bool:
    """A pandas ``category`` or polars ``Categorical``/``Enum`` column."""
    return type(getattr(values, "dtype", None)).__name__ in ("CategoricalDtype", "Categorical", "Enum")


def _column_categories(series: list, codes: CategoryCodes, fn_name: str, arg: str) -> list:
    """Per column, the training categories its values are coded by (None: numbers, or the
    frame's own codes); LightGBM's lists go to the frame's ``category`` columns in order.

    A LightGBM model trained on an array (``frame_categories`` None) takes a frame's own codes,
    as LightGBM does; one trained on a DataFrame (a tuple, empty when the frame had no
    ``category`` column) takes exactly as many ``category`` columns as that frame had, as
    LightGBM does: a column of numbers given as ``category`` would otherwise be read by its codes
    (0, 1, 2, ...), not its values."""
    frame = codes.frame_categories
    if frame is None or (not frame and codes.library != "LightGBM"):
        return list(codes.columns)
    frame_columns = [j for j, values in enumerate(series) if _is_category(values)]
    if len(frame_columns) != len(frame):
        numeric = [j for j in frame_columns if np.asarray(series[j].cat.categories).dtype.kind in "biuf"]
        names = [str(getattr(series[j], "name", j)) for j in numeric]
        hint = (f"; pass the numbers of {names[:5]} as numbers, not categories (e.g. X.astype("
                f"{{{names[0]!r}: 'float64'}}))" if numeric else "")
        raise ValueError(f"{fn_name}: {arg} must have as many category columns as the frame the "
                         f"{codes.library} model was trained on ({len(frame)}); got "
                         f"{len(frame_columns)} (LightGBM raises 'categorical_feature do not match' too){hint}")
    categories = list(codes.columns)
    for j, values in zip(frame_columns, codes.frame_categories):
        categories[j] = values
    return categories


def _column_codes(values: Any, categories: tuple | None, codes: CategoryCodes, name: str, fn_name: str,
                  arg: str) -> np.ndarray:
    """``f32[N]`` one column's codes (or numbers), NaN where missing."""
    if _is_category(values):
        if type(values).__module__.startswith("polars"):  # coded by value: polars' codes are its own
            if categories is None:
                raise TypeError(f"{fn_name}: {arg}'s column {name!r} is categorical but the model stores "
                                "no categories for it; pass its codes as numbers")
            return _lookup(np.asarray(values.cast(str).to_list(), dtype=object), categories, codes, name,
                           fn_name, arg)
        frame_codes = np.asarray(values.cat.codes, np.float32)
        if categories is None:  # the frame's own codes
            return np.where(frame_codes < 0, np.float32(np.nan), frame_codes)
        # recode the frame's categories by the training ones, then look up each row's category
        recode = _lookup(np.asarray(values.cat.categories, dtype=object), categories, codes, name,
                         fn_name, arg, present=np.isin(np.arange(len(values.cat.categories)), frame_codes))
        index = frame_codes.astype(np.int64)
        return np.where(index < 0, np.float32(np.nan), recode[np.maximum(index, 0)])
    raw = values.to_numpy() if hasattr(values, "to_numpy") else np.asarray(values)
    if categories is not None and codes.lookup_numbers:
        return _lookup(raw, categories, codes, name, fn_name, arg)
    if categories is not None:  # a frame's column where the training frame had categories
        raise TypeError(f"{fn_name}: {arg}'s column {name!r} must be a category column, as in training "
                        f"({codes.library} refuses other types there too); or pass the category codes as "
                        "numbers in an array")
    try:
        return np.asarray(raw, np.float32)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{fn_name}: {arg}'s column {name!r} must hold numbers (the {codes.library} "
                        f"model reads it as numbers or category codes); got dtype {raw.dtype}") from e


def _lookup(values: np.ndarray, categories: tuple, codes: CategoryCodes, name: str, fn_name: str, arg: str,
            present: np.ndarray | None = None) -> np.ndarray:
    """``f32[n]`` the position of each value among ``categories``; NaN where missing or unseen
    (or a ``ValueError`` for an unseen value, with ``codes.unseen == "error"``, among the values
    marked ``present``)."""
    values = np.asarray(values)
    table = np.asarray(categories)
    if values.dtype.kind in "biuf" and table.dtype.kind in "biuf":  # numbers: sorted search
        v = values.astype(np.float64)
        order = np.argsort(table, kind="stable")
        sorted_table = table[order].astype(np.float64)
        at = np.clip(np.searchsorted(sorted_table, v), 0, max(len(table) - 1, 0))
        hit = (sorted_table[at] == v) if len(table) else np.zeros(len(v), bool)
        found = np.where(hit, order[at], -1)
        missing = np.isnan(v)
    else:
        position = {c: i for i, c in enumerate(categories)}
        is_missing = np.frompyfunc(lambda c: c is None or (isinstance(c, float) and c != c), 1, 1)
        missing = np.asarray(is_missing(values.astype(object)), bool) if values.size else np.zeros(0, bool)
        get = np.frompyfunc(lambda c: position.get(c, -1) if isinstance(c, (str, bytes, int, float, bool,
                                                                               np.generic)) else -1, 1, 1)
        found = np.asarray(get(values.astype(object)), np.int64) if values.size else np.zeros(0, np.int64)
    unseen = (found < 0) & ~missing & (True if present is None else present)
    if codes.unseen == "error" and np.any(unseen):
        examples = sorted({str(v) for v in values[unseen][:5]})
        raise ValueError(f"{fn_name}: {arg}'s column {name!r} must hold categories seen in training; got "
                         f"{examples}, which have no code ({codes.library} refuses them too, or codes one "
                         "as the training category next in sorted order); set them missing to predict")
    return np.where(found >= 0, found, np.nan).astype(np.float32)
