"""The explainer: a model's SHAP tables computed once, and a ``shap.Explanation`` of any rows."""

from __future__ import annotations

from typing import Any

import numpy as np
from jax import Array

from jaximp._models.ensemble import Ensemble
from jaximp._rows.frames import first_row, one_row
from jaximp._rows.inputs import as_features, as_raw_columns, display_values
from jaximp._shap.values import layout_kernels


class Explainer:
    """A SHAP explainer of a tree ensemble, in the manner of shap's ``TreeExplainer``.

    What does not depend on the rows (each tree's SHAP tables, the expected value) is computed once,
    when the explainer is built; each call then explains rows, with the tables a ``shap_values``
    call builds for itself (the same layout, the same bits): explaining batch after batch, an
    explainer spares each call building them.

    Calling the explainer gives a ``shap.Explanation``, so ``shap.plots.*`` work on it unchanged;
    its values equal [`shap_values`][jaximp.shap_values] with the same method and background (and
    so CatBoost's ``ShapValues`` and shap's ``TreeExplainer(model, feature_perturbation=...)``).

    Args:
        ens: the model (from ``jaximp.from_catboost``, ``from_xgboost``, ``from_lightgbm`` or
            ``from_sklearn``).
        background: ``[B, F]`` background rows for ``method="interventional"`` (NumPy/JAX array,
            pandas or polars DataFrame, ``catboost.Pool``); None otherwise.
        method: ``"path_dependent"`` (default), ``"exact"``, ``"approximate"`` or
            ``"interventional"``; definitions and references in [`shap_values`][jaximp.shap_values].

    Attributes:
        ens: the model explained.
        method: the SHAP method.
        tables: the per-tree tables of ``method``, computed once (for use by jaximp).

    Raises:
        TypeError: ``ens`` is not a jaximp ensemble, or ``background`` is not rows.
        ValueError: an unknown method, a background missing for ``"interventional"`` or given
            to another method, or a background without the model's features.

    Examples:
        >>> explainer = jaximp.Explainer(ens)
        >>> explainer
        Explainer(ObliviousEnsemble(trees=20, depth=4, features=10, outputs=1, loss='RMSE'), method='path_dependent')
        >>> explanation = explainer(X)             # shap.plots.beeswarm(explanation) draws it
        >>> explanation.values.shape, explanation.feature_names[:3]
        ((442, 10), ['age', 'sex', 'bmi'])
        >>> np.array_equal(explainer.shap_values(X), jaximp.shap_values(ens, X))
        True
    """

    def __init__(self, ens: Ensemble, background: Any = None, method: str = "path_dependent"):
        ens, self._kernels = layout_kernels(ens, method, background, "Explainer")
        self.ens = ens
        self.method = method
        self._background_rows = None if background is None else _n_rows(background)
        background = None if background is None else as_features(background, ens, "Explainer", "background")
        self.tables = self._kernels.plan(ens, method, background, fn_name="Explainer")
        self._expected = self._kernels.expected(ens, method, background, plan=self.tables, fn_name="Explainer")

    def __repr__(self) -> str:
        """One line: the model's summary, the method and the background's rows."""
        background = "" if self._background_rows is None else f", background_rows={self._background_rows}"
        return f"Explainer({self.ens!r}, method={self.method!r}{background})"

    @property
    def expected_value(self) -> Array:
        """The expected raw prediction, as [`expected_value`][jaximp.expected_value]: ``f32[]``
        when K == 1, else ``f32[K]``, a ``jax.Array`` (a function of the model and the background
        alone)."""
        return self._expected

    def shap_values(self, X: Any, *, batch_size: int | None = None, devices: Any = None,
                    progress: bool = True, fn_name: str = "Explainer.shap_values") -> Any:
        """SHAP values of the rows ``X``, as [`shap_values`][jaximp.shap_values] computes them.

        Args:
            X: ``[N, F]`` rows (NumPy/JAX array, pandas/polars DataFrame, ``catboost.Pool``), or
                one row given 1-D (an ``[F]`` array or list, a pandas Series).
            batch_size: rows per device step; None picks one for the device.
            devices: None (default device), an int or a list of ``jax.Device`` to shard rows
                over.
            progress: a progress bar (tqdm) when the call lasts over 2 seconds; False silences
                it.
            fn_name: the function name that error messages begin with (set by jaximp's own
                callers; leave it).

        Returns:
            np.ndarray | jax.Array: ``f32[N, F]`` when K == 1, else ``f32[N, F, K]``; ``f32[F]``
                (``f32[F, K]``) for one row given 1-D, as shap's ``TreeExplainer.shap_values``.
                NumPy for rows in host memory, a ``jax.Array`` on the rows' device for rows given as
                one; the model's dtype.

        Raises:
            TypeError: ``X`` is not rows.
            ValueError: ``X`` does not hold the model's features.

        Examples:
            >>> explainer = jaximp.Explainer(ens)
            >>> explainer.shap_values(X[:5]).shape
            (5, 10)
        """
        X, single = one_row(X, self.ens, fn_name)
        x = as_features(X, self.ens, fn_name)
        return first_row(self._values(x, batch_size, devices, progress, fn_name), single)

    def _values(self, x: Any, batch_size: int | None, devices: Any, progress: bool, fn_name: str) -> Any:
        """SHAP values of rows ``x`` checked already (``as_features``) from the explainer's tables."""
        return self._kernels.values(self.ens, self.tables, x, batch_size=batch_size, devices=devices,
                                    fn_name=fn_name, progress=progress)

    def __call__(self, X: Any, *, batch_size: int | None = None, devices: Any = None, progress: bool = True):
        """A ``shap.Explanation`` of the rows ``X`` (needs the shap package).

        Args:
            X: ``[N, F]`` rows (NumPy/JAX array, pandas/polars DataFrame, ``catboost.Pool``), or
                one row given 1-D (an ``[F]`` array or list, a pandas Series).
            batch_size: rows per device step; None picks one for the device.
            devices: None (default device), an int or a list of ``jax.Device`` to shard rows
                over.
            progress: a progress bar (tqdm) when the call lasts over 2 seconds; False silences
                it.

        Returns:
            shap.Explanation: NumPy arrays (what shap's plots read), whatever the rows: ``values``
                ``f32[N, F]`` (``f32[N, F, K]``), ``base_values`` ``f32[N]`` (``f32[N, K]``),
                ``data`` ``f32[N, F]`` and the model's ``feature_names``. With categorical features,
                ``data`` holds the numeric columns and NaN in the categorical ones (shap's plots
                color by number), and ``display_data`` ``object[N, F]`` the raw values. One row
                given 1-D gives that row's explanation without the row axis (``values`` ``f32[F]``,
                ``base_values`` ``f32[]``, ``data`` ``f32[F]``), as ``explainer(X)[i]`` and shap's
                ``TreeExplainer`` give them.

        Raises:
            ImportError: shap is not installed (``Explainer.shap_values`` works without it).
            TypeError: ``X`` is not rows.
            ValueError: ``X`` does not hold the model's features.

        Examples:
            >>> row = jaximp.Explainer(ens)(X.iloc[0])
            >>> row.values.shape, row.base_values.shape, row.data.shape
            ((10,), (), (10,))
        """
        try:
            import shap
        except ImportError as e:  # pragma: no cover - shap is an optional dependency
            raise ImportError("Explainer.__call__: returning a shap.Explanation needs the shap package "
                              "(pip install shap); Explainer.shap_values works without it") from e
        X, single = one_row(X, self.ens, "Explainer")
        x = as_features(X, self.ens, "Explainer")
        values = np.asarray(self._values(x, batch_size, devices, progress, "Explainer"))  # what shap's plots read
        expected = np.asarray(self.expected_value)
        data, display = np.asarray(x), None
        featurizer = self.ens.featurizer
        if featurizer is not None:
            display = display_values(X, self.ens, "Explainer")
            data = np.full((x.shape[0], self.ens.n_features), np.nan, np.float32)
            data[:, list(featurizer.float_columns)] = as_raw_columns(X, self.ens, "Explainer").floats
        base_values = np.broadcast_to(expected, (x.shape[0],) + expected.shape).copy()
        values, base_values, data = first_row((values, base_values, data), single)
        return shap.Explanation(
            values=values,
            base_values=base_values,
            data=data,
            display_data=first_row(display, single),
            feature_names=list(self.ens.feature_names),
        )


def _n_rows(rows: Any) -> int:
    """Rows of an array, DataFrame or ``catboost.Pool`` (``shape[0]``), or of a list."""
    shape = getattr(rows, "shape", None)
    return int(shape[0]) if shape is not None else len(rows)
