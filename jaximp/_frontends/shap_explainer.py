"""``jaximp.TreeExplainer``: shap's ``TreeExplainer``, its signature, layouts, types and numbers,
computed by jaximp.

The games are shap 0.51's (``shap/explainers/_tree.py``):

* ``feature_perturbation="tree_path_dependent"`` (``"auto"`` without ``data``): path-dependent
  TreeSHAP over the trees' training covers. With ``data``, shap recounts each node's cover from
  the background rows (a node no row reaches gets the cover 1e-6); so does jaximp, on the leaves
  (an internal node's cover is its leaves' sum).
* ``"interventional"`` (``"auto"`` with ``data``): interventional SHAP over every background row;
  ``model_output="probability"`` and ``"log_loss"`` explain the transformed output as shap does
  (:mod:`jaximp._shap.outputs`).

shap's plain ``data=bg`` keeps a sample of 100 rows (``shap.maskers.Independent``'s
``max_samples``); jaximp uses every row it is given, and a masker's rows when given one, so
``data=shap.maskers.Independent(bg, max_samples=100)`` gives shap's background (and its bits).
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import jax.numpy as jnp
import numpy as np

from jaximp._frontends.shap_models import FN, explained
from jaximp._leaves.predict import leaf_histogram, predict
from jaximp._models.selection import reached_leaves
from jaximp._rows.batching import unit_weights
from jaximp._rows.inputs import as_features
from jaximp._shap.explainer import Explainer
from jaximp._shap.outputs import MODEL_OUTPUTS, output_transform
from jaximp._shap.values import expected_value, shap_interaction_values, shap_values

PERTURBATIONS = ("auto", "interventional", "tree_path_dependent")
METHODS = {"tree_path_dependent": "path_dependent", "interventional": "interventional"}
UNREACHED_COVER = 1e-6  # shap's cover of a node no background row reaches
_DEPRECATED = object()
_LABELS_LATER = object()  # log_loss's labels come with each call


class TreeExplainer:
    """shap's ``TreeExplainer``, computed by jaximp: ``import jaximp as shap_fast`` and
    ``shap_fast.TreeExplainer(model, ...)`` is the whole migration.

    The signature, the return layouts, the types and the attribute names are shap 0.51's, so
    ``shap.plots.*`` and code written for shap run unchanged, and the numbers equal shap's
    ``TreeExplainer`` on the same inputs (float32 sums: to about 1e-6 relative). Where jaximp
    does more than shap: every background row is used (shap's plain ``data=bg`` keeps a sample of
    100; give ``shap.maskers.Independent(bg, max_samples=100)`` for shap's exact background);
    categorical splits of XGBoost and LightGBM with a background; interventional interaction
    values (shap returns zeros); ``approximate=True`` (Saabas) for every library; ``tree_limit``
    for CatBoost; a multiclass ``GradientBoostingClassifier``; rows given as a ``jax.Array`` give
    ``jax.Array`` values on their device; and ``batch_size=`` / ``devices=`` as keyword arguments
    of every call (as in [`shap_values`][jaximp.shap_values]).

    Args:
        model: a CatBoost, XGBoost, LightGBM or scikit-learn tree model (or Booster), an sklearn
            ``Pipeline`` whose last step is one (the other steps transform every row and the
            background first), a jaximp ensemble, or a model file that ``jaximp explain`` reads.
        data: None, or the background: ``[B, F]`` rows (array, DataFrame) or a
            ``shap.maskers.Independent`` (its rows). Every row is used.
        model_output: ``"raw"`` (the raw margin), ``"probability"`` (a binary classifier's
            probability, or a forest's class probabilities) or ``"log_loss"`` (the loss of each
            row, given its label ``y``); the last two need a background, as in shap.
        feature_perturbation: ``"auto"`` (interventional with ``data``, else tree path
            dependent), ``"interventional"`` (without ``data`` shap warns and uses the tree path
            dependent game, and so does jaximp) or ``"tree_path_dependent"``.
        feature_names: the names of the Explanation's features (else the DataFrame's columns).
        approximate: deprecated in shap (pass it to ``shap_values``); warns and is ignored.
        link: ignored, as shap ignores it.
        linearize_link: ignored, as shap ignores it.

    Attributes:
        expected_value: the mean output the values distribute from: a NumPy float for one output,
            ``f32[K]`` for K outputs; with ``model_output="log_loss"`` a function of the label
            ``y`` (a scalar, or ``[N]`` labels giving ``[N]``), as shap's.
        feature_perturbation: the game used, ``"interventional"`` or ``"tree_path_dependent"``.
        model_output: as given.
        data: the background as shap keeps it (a DataFrame's ``values``), or None.
        data_feature_names: the feature names, when given or read from ``data``'s columns.
        ens: jaximp's ensemble of the model (what the values are computed from).

    Raises:
        TypeError: a model jaximp does not import, or a masker other than ``Independent``.
        ValueError: an unknown ``feature_perturbation`` or ``model_output``, a transformed
            ``model_output`` without a background or for a model without that output (a
            regression's probability), or ``data`` without the model's features.

    Examples:
        >>> import xgboost
        >>> booster = xgboost.train({"max_depth": 3}, xgboost.DMatrix(X, y), 10)
        >>> explainer = jaximp.TreeExplainer(booster)
        >>> explainer.shap_values(X).shape
        (442, 10)
        >>> explanation = explainer(X[:100])       # shap.plots.beeswarm(explanation) draws it
        >>> explanation.values.shape, explanation.base_values.shape
        ((100, 10), (100,))
    """

    def __init__(self, model: Any, data: Any = None, model_output: str = "raw",
                 feature_perturbation: str = "auto", feature_names: list[str] | None = None,
                 approximate: Any = _DEPRECATED, link: Any = None, linearize_link: Any = None):
        if approximate is not _DEPRECATED:
            warnings.warn("TreeExplainer: the approximate argument of the constructor is deprecated, as in shap; "
                          "pass approximate=True to shap_values or to the call instead", DeprecationWarning,
                          stacklevel=2)
        self._explained = explained(model)
        data = _masker_rows(data)
        if feature_names is not None:
            self.data_feature_names = list(feature_names)
        elif _is_frame(data):
            self.data_feature_names = [str(c) for c in data.columns]
        self.feature_perturbation = _perturbation(feature_perturbation, data)
        self.model_output = _model_output(model_output, self.feature_perturbation, data)
        self.data = None if data is None else (data.values if _is_frame(data) else data)
        self._method = METHODS[self.feature_perturbation]
        background = self._explained.rows(data)
        ens = self._explained.ens
        if self.feature_perturbation == "tree_path_dependent" and background is not None:
            ens = _recounted(ens, background)
            background = None
        self.ens = ens
        self._background = background
        self._transform = output_transform(ens, model_output, self._method,
                                           _LABELS_LATER if model_output == "log_loss" else None, FN)
        self._explainers: dict[str, Explainer] = {}
        self.expected_value = self._expected_value()

    def __repr__(self) -> str:
        """One line: the model's summary, the game and the output."""
        background = "" if self._background is None else f", background_rows={_n_rows(self._background)}"
        return (f"TreeExplainer({self.ens!r}, feature_perturbation={self.feature_perturbation!r}, "
                f"model_output={self.model_output!r}{background})")

    # ----------------------------------------------------------------------------------------

    def shap_values(self, X: Any, y: Any = None, tree_limit: int | None = None, approximate: bool = False,
                    check_additivity: bool = True, *, batch_size: int | None = None, devices: Any = None,
                    progress: bool = True) -> Any:
        """SHAP values of the rows ``X``, as shap's ``TreeExplainer.shap_values``.

        Args:
            X: ``[N, F]`` rows (NumPy/JAX array, pandas/polars DataFrame, ``catboost.Pool``), or one
                row given 1-D; rows of the pipeline's input for a ``Pipeline``.
            y: ``[N]`` labels, for ``model_output="log_loss"`` only.
            tree_limit: None (the model's default: XGBoost's early-stopping round), -1 (every
                tree) or how many trees to use, counted as shap counts them
                (:mod:`jaximp._frontends.shap_models`).
            approximate: Saabas values (``jaximp.shap_values(..., method="approximate")``) of the
                raw output, whatever the background.
            check_additivity: check that each row's values add up to its output less the expected
                value (shap's tolerance, 1e-2), raising shap's ``ExplainerError`` (a ValueError
                without shap) when they do not; a prediction per row.
            batch_size: rows per device step; None picks one for the device.
            devices: None, an int or a list of ``jax.Device`` to shard rows over.
            progress: a progress bar (tqdm) when the call lasts over 2 seconds; False silences it.

        Returns:
            np.ndarray | jax.Array: ``f[N, F]`` for one output, ``f[N, F, K]`` for K outputs, and
                ``f[F]`` (``f[F, K]``) for one row given 1-D, as shap 0.51. NumPy for rows in host
                memory, a ``jax.Array`` on the rows' device for rows given as one.

        Raises:
            TypeError: ``X`` is not rows (an ``xgboost.DMatrix`` among them), or a bad
                ``tree_limit``.
            ValueError: ``X`` does not hold the model's features, ``y`` missing for (or given
                without) ``model_output="log_loss"``, ``approximate=True`` with a transformed
                output, or ``tree_limit=0``.
        """
        rows = self._explained.rows(X)
        ens = self._limited(tree_limit)
        kw = dict(batch_size=batch_size, devices=devices, progress=progress)
        if approximate:
            if self.model_output != "raw":
                raise ValueError(f"{FN}.shap_values: approximate=True (Saabas) explains the raw output only, as in "
                                 f"shap; got model_output={self.model_output!r}")
            values = self._raw_explainer(ens, "approximate").shap_values(rows, **kw)
            method = "approximate"
        elif self.model_output == "raw":
            values = self._raw_explainer(ens, self._method).shap_values(rows, **kw)
            method = self._method
        else:
            values = shap_values(ens, rows, method=self._method, background=self._background,
                                 model_output=self.model_output, y=y, **kw)
            method = None
        if check_additivity and method is not None:
            self._check_additivity(ens, method, rows, values, batch_size, devices)
        return values

    def shap_interaction_values(self, X: Any, y: Any = None, tree_limit: int | None = None, *,
                                batch_size: int | None = None, devices: Any = None, progress: bool = True) -> Any:
        """SHAP interaction values of the rows ``X``, as shap's
        ``TreeExplainer.shap_interaction_values`` (the raw output).

        With the interventional game the values are the Shapley interaction index of the
        interventional game (shap returns zeros there): see
        [`shap_interaction_values`][jaximp.shap_interaction_values].

        Args:
            X: ``[N, F]`` rows, or one row given 1-D.
            y: unused (shap's signature).
            tree_limit: as for :meth:`shap_values`.
            batch_size: rows per device step; None picks one for the device.
            devices: None, an int or a list of ``jax.Device`` to shard rows over.
            progress: a progress bar (tqdm) when the call lasts over 2 seconds; False silences it.

        Returns:
            np.ndarray | jax.Array: ``f[N, F, F]`` for one output, ``f[N, F, F, K]`` for K outputs
                (``f[F, F]`` / ``f[F, F, K]`` for one row given 1-D), as shap 0.51.

        Raises:
            TypeError: ``X`` is not rows.
            ValueError: ``X`` does not hold the model's features, or ``model_output`` is not
                ``"raw"`` (as in shap).
        """
        if self.model_output != "raw":
            raise ValueError(f"{FN}.shap_interaction_values: only model_output='raw' has SHAP interaction values, "
                             f"as in shap; got model_output={self.model_output!r}")
        return shap_interaction_values(self._limited(tree_limit), self._explained.rows(X), method=self._method,
                                       background=self._background, batch_size=batch_size, devices=devices,
                                       progress=progress)

    def __call__(self, X: Any, y: Any = None, interactions: bool = False, check_additivity: bool = True,
                 approximate: bool = False, *, batch_size: int | None = None, devices: Any = None,
                 progress: bool = True):
        """A ``shap.Explanation`` of the rows ``X``, as shap's ``TreeExplainer.__call__`` (needs shap).

        Args:
            X: ``[N, F]`` rows, or one row given 1-D.
            y: ``[N]`` labels, for ``model_output="log_loss"``.
            interactions: the Explanation of the SHAP interaction values instead.
            check_additivity: as for :meth:`shap_values`.
            approximate: Saabas values, as for :meth:`shap_values`.
            batch_size: rows per device step; None picks one for the device.
            devices: None, an int or a list of ``jax.Device`` to shard rows over.
            progress: a progress bar (tqdm) when the call lasts over 2 seconds; False silences it.

        Returns:
            shap.Explanation: NumPy arrays (what shap's plots read): ``values`` as
                :meth:`shap_values` (or :meth:`shap_interaction_values`), ``base_values`` the
                expected value per row (``f[N]`` or ``f[N, K]``; with ``"log_loss"``, that of each
                row's label), ``data`` the rows (a DataFrame's ``values``; a pipeline's transformed
                rows) and ``feature_names`` (a DataFrame's columns, else ``feature_names``).

        Raises:
            ImportError: shap is not installed.
            ValueError: ``interactions=True`` with ``approximate=True`` (as in shap), or what
                :meth:`shap_values` raises.
        """
        import shap

        start = time.time()
        if interactions and approximate:
            raise ValueError(f"{FN}: approximate=True has no interaction values, as in shap (drop one of them)")
        if interactions:
            values = self.shap_interaction_values(X, batch_size=batch_size, devices=devices, progress=progress)
        else:
            values = self.shap_values(X, y=y, check_additivity=check_additivity, approximate=approximate,
                                      batch_size=batch_size, devices=devices, progress=progress)
        values = np.asarray(values)
        single = values.ndim == 1 + interactions + (self.ens.n_outputs > 1)  # one row given 1-D
        n = 1 if single else values.shape[0]
        if self.model_output == "log_loss":
            base = np.asarray(self.expected_value(np.asarray(y, np.float64).reshape(-1)))
        else:
            base = np.broadcast_to(np.asarray(self.expected_value), (n,) + np.shape(self.expected_value)).copy()
        base = base[0] if single else base
        return shap.Explanation(values, base_values=base, data=self._explanation_data(X),
                                feature_names=self._feature_names(X), compute_time=time.time() - start)

    # ----------------------------------------------------------------------------------------

    def _limited(self, tree_limit: Any) -> Any:
        """The ensemble of the trees ``tree_limit`` keeps (the explainer's own covers kept)."""
        ask_library = self._method == "path_dependent" and self.data is None  # shap's shortcut to the library
        return self._explained.limited(tree_limit, self.ens, ask_library)

    def _raw_explainer(self, ens: Any, method: str) -> Explainer:
        """A ``jaximp.Explainer`` of ``ens`` for ``method`` (its tables built once per method for
        the explainer's own trees; a ``tree_limit`` gets fresh ones)."""
        background = self._background if method == "interventional" else None
        if ens is not self.ens:
            return Explainer(ens, background, method)
        if method not in self._explainers:
            self._explainers[method] = Explainer(ens, background, method)
        return self._explainers[method]

    def _expected_value(self) -> Any:
        if self.model_output == "raw":
            return _host_scalar(expected_value(self.ens, method=self._method, background=self._background))
        margins = np.asarray(predict(self.ens, self._background, progress=False), np.float64)
        if self.model_output == "probability":
            probability = 1 / (1 + np.exp(-margins)) if self._transform == "logistic" else margins
            return _host_scalar(probability.mean(axis=0))
        transform = self._transform

        def expected_loss(y: Any) -> Any:
            """The mean loss over the background of rows labelled ``y`` (a scalar, or ``[N]``)."""
            labels = np.asarray(y, np.float64)[..., None]  # [..., 1] against the background's [B]
            if transform == "squared_loss":
                loss = (margins - labels) ** 2
            else:
                loss = np.logaddexp(0.0, margins) - labels * margins
            return _host_scalar(loss.mean(axis=-1))

        return expected_loss

    def _check_additivity(self, ens: Any, method: str, rows: Any, values: Any, batch_size: Any, devices: Any) -> None:
        """shap's ``assert_additivity``: values plus expected value against the raw prediction."""
        base = expected_value(ens, method=method, background=self._background if method == "interventional" else None)
        output = predict(ens, rows, batch_size=batch_size, devices=devices, progress=False)
        feature_axis = -2 if ens.n_outputs > 1 else -1
        xp = np if isinstance(values, np.ndarray) else jnp
        total = xp.asarray(values).sum(axis=feature_axis) + xp.asarray(base)
        output = xp.reshape(xp.asarray(output), total.shape)
        close = xp.abs(total - output) <= 1e-2 + 1e-2 * xp.abs(output)
        if bool(xp.all(close)):
            return
        worst = int(xp.argmax(xp.abs(total - output)))
        got, want = np.ravel(np.asarray(total))[worst], np.ravel(np.asarray(output))[worst]
        message = ("Additivity check failed in TreeExplainer! Please ensure the data matrix you passed to the "
                   "explainer is the same shape that the model was trained on. This check failed because for one of "
                   f"the samples the sum of the SHAP values was {got:f}, while the model output was {want:f}. If this "
                   "difference is acceptable you can set check_additivity=False to disable this check.")
        raise _explainer_error()(message)

    def _feature_names(self, X: Any) -> list[str] | None:
        if self._explained.transform is not None:
            return self._explained.feature_names_out() or getattr(self, "data_feature_names", None)
        if _is_frame(X):
            return [str(c) for c in X.columns]
        return getattr(self, "data_feature_names", None)

    def _explanation_data(self, X: Any) -> Any:
        if self._explained.transform is not None:
            X = self._explained.rows(X)
        if _is_frame(X):
            return X.values
        if hasattr(X, "__array__") and not isinstance(X, np.ndarray) and type(X).__name__ != "Pool":
            return np.asarray(X)
        return X


# --------------------------------------------------------------------------------------------
# Arguments


def _masker_rows(data: Any) -> Any:
    """The background rows of ``data``: itself, or a ``shap.maskers.Independent``'s rows."""
    kind = type(data)
    if data is None or not kind.__module__.startswith("shap"):
        return data
    if kind.__name__ != "Independent":
        raise TypeError(f"{FN}: data may be a shap.maskers.Independent masker, as in shap; got a "
                        f"{kind.__name__} masker")
    if getattr(data, "clustering", None) is not None:
        raise ValueError(f"{FN}: a clustered masker is not supported, as in shap; pass an unclustered one")
    return data.data


def _perturbation(feature_perturbation: Any, data: Any) -> str:
    if not isinstance(feature_perturbation, str) or feature_perturbation not in PERTURBATIONS:
        raise ValueError(f"{FN}: feature_perturbation must be one of {', '.join(map(repr, PERTURBATIONS))}; got "
                         f"{feature_perturbation!r:.100}")
    if feature_perturbation == "auto":
        return "interventional" if data is not None else "tree_path_dependent"
    if feature_perturbation == "interventional" and data is None:
        warnings.warn("TreeExplainer: feature_perturbation='interventional' needs a background (data=...); without one "
                      "the tree path dependent game is used, as shap does (it will refuse in a future shap release)",
                      FutureWarning, stacklevel=3)
        return "tree_path_dependent"
    return feature_perturbation


def _model_output(model_output: Any, perturbation: str, data: Any) -> str:
    if not isinstance(model_output, str) or model_output not in MODEL_OUTPUTS:
        raise ValueError(f"{FN}: model_output must be one of {', '.join(map(repr, MODEL_OUTPUTS))}; got "
                         f"{model_output!r:.100}")
    if model_output != "raw" and (perturbation != "interventional" or data is None):
        raise ValueError(f"{FN}: model_output={model_output!r} needs feature_perturbation='interventional' and a "
                         "background (data=...), as in shap; the tree path dependent game explains the raw output "
                         "only")
    return model_output


def _recounted(ens: Any, background: Any) -> Any:
    """The ensemble with each leaf's cover counted on the background rows (shap's tree path
    dependent game with data), a leaf no row reaches given shap's cover of 1e-6."""
    import dataclasses

    x = as_features(background, ens, FN, "data")
    counts = leaf_histogram(ens, x, unit_weights(x), fn_name=FN)
    unreached = jnp.asarray(reached_leaves(ens)) & (counts == 0)
    weights = jnp.where(unreached, jnp.asarray(UNREACHED_COVER, counts.dtype), counts)
    return dataclasses.replace(ens, leaf_weights=weights.astype(ens.leaf_weights.dtype), leaf_weights_known=True)


def _host_scalar(value: Any) -> Any:
    """A NumPy scalar for one value, else a NumPy array (shap's ``expected_value`` types)."""
    array = np.asarray(value)
    return array[()] if array.ndim == 0 else array


def _explainer_error() -> type:
    """shap's ``ExplainerError`` when shap is installed (code catching it works unchanged), else
    ``ValueError``."""
    try:
        from shap.utils._exceptions import ExplainerError
    except ImportError:
        return ValueError
    return ExplainerError


def _is_frame(X: Any) -> bool:
    return hasattr(X, "columns") and hasattr(X, "values") and type(X).__module__.startswith("pandas")


def _n_rows(rows: Any) -> int:
    shape = getattr(rows, "shape", None)
    return int(shape[0]) if shape is not None else len(rows)
