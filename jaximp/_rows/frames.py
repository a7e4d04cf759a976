"""Rows as the user gives them: DataFrame columns matched to the model's, shapes checked, and
the marker of rows that are checked already."""

from __future__ import annotations

from typing import Any

import numpy as np

from jaximp._models.ensemble import Ensemble, has_real_names


class EvaluatedRows(np.ndarray):
    """``u8[N, E]`` (or ``i32``) the bins of a categorical model's evaluated split features, or
    ``f32[N, F]`` rows whose categorical columns hold their codes: a NumPy array marked as
    already checked and featurized (or coded), so that passing it on does not do it again."""

def check_shape(shape: tuple, ens: Ensemble, fn_name: str, arg: str) -> None:
    if len(shape) != 2:
        hint = " (one row: X.reshape(1, -1))" if len(shape) == 1 else ""
        raise ValueError(f"{fn_name}: {arg} must have rank 2, [N, {ens.n_features}]{hint}; got shape {shape}")
    if shape[1] != ens.n_features:
        raise ValueError(
            f"{fn_name}: {arg} must have {ens.n_features} columns, the model's features; got {shape[1]}"
        )
    if shape[0] == 0:
        raise ValueError(f"{fn_name}: {arg} must have at least one row; got shape {shape}")

def frame_columns(X: Any) -> list[str] | None:
    module = type(X).__module__
    if module.startswith("pandas") and hasattr(X, "columns") and hasattr(X, "dtypes"):
        return [str(c) for c in X.columns]
    if module.startswith("polars") and hasattr(X, "columns") and hasattr(X, "schema"):
        return list(X.columns)
    return None

def frame_positions(columns: list[str], ens: Ensemble, fn_name: str, arg: str) -> list[int]:
    """Position in the frame of each of the model's columns (by name when the model has names)."""
    if has_real_names(ens):
        missing = [name for name in ens.feature_names if name not in set(columns)]
        if missing:
            raise ValueError(
                f"{fn_name}: {arg} must have the model's feature columns; missing {missing[:10]}"
                + (f" and {len(missing) - 10} more" if len(missing) > 10 else "")
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

def is_pool(X: Any) -> bool:
    return type(X).__name__ == "Pool" and type(X).__module__.startswith("catboost")
