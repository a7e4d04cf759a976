"""Rows as the user gives them: DataFrame columns matched to the model's, shapes checked, one
row given 1-D, and the marker of rows that are checked already."""

from __future__ import annotations

from collections import Counter
from typing import Any

import jax
import numpy as np

from jaximp._models.ensemble import Ensemble, has_real_names


class EvaluatedRows(np.ndarray):
    """``u8[N, E]`` (or ``i32``) the bins of a categorical model's evaluated split features, or
    ``f32[N, F]`` rows whose categorical columns hold their codes: a NumPy array marked as
    already checked and featurized (or coded), so that passing it on does not do it again."""


def check_shape(shape: tuple, ens: Ensemble, fn_name: str, arg: str) -> None:
    """A ``ValueError`` naming ``fn_name`` unless ``shape`` is ``(N >= 1, F)``."""
    if len(shape) != 2:
        hint = f" (one row: {arg}.reshape(1, -1))" if len(shape) == 1 else ""
        raise ValueError(f"{fn_name}: {arg} must have rank 2, [N, {ens.n_features}]{hint}; got shape {shape}")
    if shape[1] != ens.n_features:
        raise ValueError(
            f"{fn_name}: {arg} must have {ens.n_features} columns, the model's features; got {shape[1]}"
        )
    if shape[0] == 0:
        raise ValueError(f"{fn_name}: {arg} must have at least one row; got shape {shape}")


def one_row(X: Any, ens: Ensemble, fn_name: str, arg: str = "X") -> tuple[Any, bool]:
    """``(X, False)`` for rows ``[N, F]``, or ``(X as a one-row matrix [1, F], True)`` for a single
    row given 1-D, as shap's ``TreeExplainer`` takes it: a NumPy or JAX array (a traced one too,
    under ``jax.vmap`` over rows), a list or tuple of F values, or a pandas ``Series`` (a row of
    a DataFrame, ``X.iloc[i]``, its index naming the columns). Anything else is returned as is,
    for the row checks to accept or refuse.

    Raises:
        ValueError: a 1-D array or list whose length is not F (with how to pass N rows of a
            one-feature model: ``X.reshape(-1, 1)``).
    """
    if isinstance(X, (np.ndarray, jax.Array)) and X.ndim == 1:
        row = X[None]
    elif isinstance(X, (list, tuple)) and X and all(np.ndim(v) == 0 and not isinstance(v, (list, tuple)) for v in X):
        row = [list(X)]
    elif type(X).__module__.startswith("pandas") and type(X).__name__ == "Series":
        return X.to_frame().T.infer_objects(), True  # its index names the columns: checked as a frame's
    else:
        return X, False
    if len(row[0]) != ens.n_features:
        raise ValueError(
            f"{fn_name}: {arg} must have {ens.n_features} columns, the model's features; got a 1-D {arg} of "
            f"{len(row[0])} values, which is one row (N rows of one feature: {arg}.reshape(-1, 1))"
        )
    return row, True


def first_row(result: Any, single: bool) -> Any:
    """``result`` (arrays with a leading row axis, any pytree) without its row axis when the rows
    were a single row given 1-D (:func:`one_row`): a scalar for ``[1]``, ``[...]`` for
    ``[1, ...]``."""
    return jax.tree_util.tree_map(lambda a: a[0], result) if single else result


def frame_columns(X: Any) -> list[str] | None:
    module = type(X).__module__
    if module.startswith("pandas") and hasattr(X, "columns") and hasattr(X, "dtypes"):
        return [str(c) for c in X.columns]
    if module.startswith("polars") and hasattr(X, "columns") and hasattr(X, "schema"):
        return list(X.columns)
    return None

def frame_positions(columns: list[str], ens: Ensemble, fn_name: str, arg: str) -> list[int]:
    """Position in the frame of each of the model's columns (by name when the model has names).

    Raises:
        ValueError: a column of the model missing, or present more than once (which one is meant
            is ambiguous; pandas allows duplicated names, and ``str`` of ``0`` and ``"0"`` are one).
    """
    if has_real_names(ens):
        counts = Counter(columns)
        duplicated = [name for name in ens.feature_names if counts[name] > 1]
        if duplicated:
            raise ValueError(
                f"{fn_name}: {arg} must have each of the model's feature columns once; {_names(duplicated)} "
                f"appear more than once (rename or drop the copies; {arg}.loc[:, ~{arg}.columns.duplicated()] "
                "keeps the first of each)"
            )
        missing = [name for name in ens.feature_names if name not in set(columns)]
        if missing:
            raise ValueError(
                f"{fn_name}: {arg} must have the model's feature columns; missing {_names(missing)}"
            )
        positions = [columns.index(name) for name in ens.feature_names]
    else:
        if len(columns) != ens.n_features:
            raise ValueError(
                f"{fn_name}: {arg} must have {ens.n_features} columns, the model's features; "
                f"got {len(columns)}"
            )
        positions = list(range(len(columns)))
    return positions


def _names(names: list[str]) -> str:
    return f"{names[:10]}" + (f" and {len(names) - 10} more" if len(names) > 10 else "")


def is_pool(X: Any) -> bool:
    return type(X).__name__ == "Pool" and type(X).__module__.startswith("catboost")
