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
    """SHAP explainer of a tree ensemble, with its per-tree tables computed once, in the manner
    of shap's ``TreeExplainer``: calling it gives a ``shap.Explanation``, so shap's plots work.

    Args:
        ens: the model (``ObliviousEnsemble`` or ``TreeEnsemble``).
        background: ``[B, F]`` rows for ``method="interventional"`` (NumPy/JAX array, pandas or
            polars DataFrame, catboost.Pool); None otherwise.
        method: ``"path_dependent"`` (default), ``"exact"``, ``"approximate"`` or
            ``"interventional"``; definitions and references in :func:`shap_values`.

    Raises:
        TypeError, ValueError: ``ens`` is not an ensemble, an unknown method, a missing or
            unexpected background, or a background with the wrong columns.

    Examples:
        >>> explainer = jaximp.Explainer(ens)
        >>> explainer
        Explainer(ObliviousEnsemble(trees=20, depth=4, features=10, outputs=1, loss='RMSE'), method='path_dependent')
        >>> explanation = explainer(X)             # shap.plots.beeswarm(explanation) draws it
        >>> explanation.values.shape, explanation.feature_names[:3]
        ((442, 10), ['age', 'sex', 'bmi'])
        >>> np.allclose(explainer.shap_values(X), jaximp.shap_values(ens, X))
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
        """The expected raw prediction, as :func:`expected_value`: ``f32[]`` when K == 1, else
        ``f32[K]``, a ``jax.Array`` (a function of the model and the background alone)."""
        return self._expected

    def shap_values(self, X: Any, *, batch_size: int | None = None, devices: Any = None,
                    progress: bool = True, fn_name: str = "Explainer.shap_values") -> Any:
        """SHAP values ``f32[N, F]`` (K == 1) or ``f32[N, F, K]`` from the explainer's tables,
        as :func:`shap_values` computes them: NumPy for rows in host memory, a ``jax.Array`` on
        the rows' device for rows given as one; ``f32[F]`` (``f32[F, K]``) for one row given
        1-D, as shap's ``TreeExplainer.shap_values``. The dtype is the model's."""
        X, single = one_row(X, self.ens, fn_name)
        x = as_features(X, self.ens, fn_name)
        return first_row(self._kernels.values(self.ens, self.tables, x, batch_size=batch_size, devices=devices,
                                              fn_name=fn_name, progress=progress), single)

    def __call__(self, X: Any, *, batch_size: int | None = None, devices: Any = None, progress: bool = True):
        """A ``shap.Explanation`` of the rows ``X``.

        Returns:
            ``shap.Explanation`` with ``values`` ``f32[N, F]`` (``f32[N, F, K]``), ``base_values``
                ``f32[N]`` (``f32[N, K]``), ``data`` ``f32[N, F]`` and the model's feature names.
                With categorical features, ``data`` holds the float columns and NaN in the
                categorical ones (shap's plots color by number), and ``display_data`` ``object[N, F]``
                the raw values. One row given 1-D (an ``[F]`` array or list, a pandas Series) gives
                the explanation of that row, without the row axis: ``values`` ``f32[F]``
                (``f32[F, K]``), ``base_values`` ``f32[]`` (``f32[K]``), ``data`` ``f32[F]``, as
                ``explainer(X)[i]`` and shap's ``TreeExplainer`` give them. NumPy arrays whatever the
                rows (shap's ``Explanation`` and plots read NumPy).

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
        values = np.asarray(self.shap_values(x, batch_size=batch_size, devices=devices, progress=progress,
                                             fn_name="Explainer"))  # shap's Explanation and plots read NumPy
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
