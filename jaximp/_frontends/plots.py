"""Plots of feature importances, interactions and SHAP values (matplotlib).

Each function draws on ``ax`` (a new figure when None, sized to the number of features, with
constrained layout) and returns the Axes; nothing is shown or saved, so any backend works, ``Agg``
included. ``jaximp.plots`` needs matplotlib, imported on first use (not by ``import jaximp``).

Examples:
    >>> ax = jaximp.plots.importance(jaximp.prediction_values_change(ens), ens.feature_names)
    >>> len(ax.get_yticklabels())                   # then ax.figure.savefig("pvc.png")
    10
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["importance", "interaction_heatmap", "summary"]

_MAX_LABEL = 40  # characters of a feature name shown on an axis; longer names end in "..."


# --------------------------------------------------------------------------------------------
# Inputs


def _labels(feature_names: Any, n: int, fn_name: str) -> list[str]:
    """``n`` axis labels: the feature names (shortened past ``_MAX_LABEL`` characters), or
    ``"0".."n-1"`` when ``feature_names`` is None."""
    if feature_names is None:
        return [str(i) for i in range(n)]
    try:
        if isinstance(feature_names, str):
            raise TypeError
        names = [str(name) for name in feature_names]
    except TypeError:
        raise TypeError(f"{fn_name}: feature_names must be a sequence of names; "
                        f"got {type(feature_names).__name__}") from None
    if len(names) != n:
        raise ValueError(f"{fn_name}: feature_names must have one name per feature ({n}); got {len(names)} names")
    return [name if len(name) <= _MAX_LABEL else name[: _MAX_LABEL - 3] + "..." for name in names]


def _finite(values: Any, fn_name: str, arg: str, ndims: tuple[int, ...]) -> np.ndarray:
    """``values`` as a finite float64 NumPy array with one of the ``ndims`` numbers of axes."""
    try:
        a = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{fn_name}: {arg} must be an array of numbers; got {type(values).__name__}") from e
    if a.ndim not in ndims:
        shapes = " or ".join({1: "[F]", 2: "[F, K]" if 1 in ndims else "[N, F]", 3: "[N, F, K]"}[d] for d in ndims)
        raise ValueError(f"{fn_name}: {arg} must have shape {shapes}; got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{fn_name}: {arg} must not be empty; got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{fn_name}: {arg} must be finite; got {int((~np.isfinite(a)).sum())} NaN or infinite values")
    return a


@dataclasses.dataclass(frozen=True)
class _Series:
    """One importance to draw: its name (None when it is the only one), its values ``f64[F]`` or
    ``f64[F, K]``, and their spread over repeats ``f64[F]`` (error bars) or None."""

    name: str | None
    mean: np.ndarray
    spread: np.ndarray | None

    def scaled(self, factor: float) -> _Series:
        return _Series(self.name, self.mean * factor, None if self.spread is None else self.spread * factor)


def _series(values: Any, fn_name: str) -> list[_Series]:
    """The importances that ``importance`` takes, checked, one ``_Series`` each."""
    def one(v: Any, arg: str, ndims: tuple[int, ...]):
        if hasattr(v, "importances_mean") and hasattr(v, "importances_std"):  # permutation importance
            mean = _finite(v.importances_mean, fn_name, f"{arg}.importances_mean", (1,))
            std = _finite(v.importances_std, fn_name, f"{arg}.importances_std", (1,))
            if std.shape != mean.shape:
                raise ValueError(f"{fn_name}: {arg}.importances_std must have the shape of importances_mean "
                                 f"{mean.shape}; got {std.shape}")
            return mean, std
        return _finite(v, fn_name, arg, ndims), None

    if isinstance(values, Mapping) and not hasattr(values, "importances_mean"):  # sklearn's Bunch is a dict
        if not values:
            raise ValueError(f"{fn_name}: values must hold at least one importance; got an empty mapping")
        series = [_Series(str(name), *one(v, f"values[{name!r}]", (1,))) for name, v in values.items()]
        sizes = {s.mean.shape[0] for s in series}
        if len(sizes) > 1:
            raise ValueError(f"{fn_name}: every importance in values must have one value per feature; got "
                             f"{ {s.name: s.mean.shape[0] for s in series} }")
        return series
    return [_Series(None, *one(values, "values", (1, 2)))]


def _new_axes(width: float, height: float):
    import matplotlib.pyplot as plt  # on first use: import jaximp does not load matplotlib
    return plt.subplots(figsize=(width, height), layout="constrained")[1]


def _title_and_note(ax: Any, title: str | None, notes: list[str], raised: bool = False) -> None:
    """The Axes title, and the ``notes`` (what was left out) in small grey type above the top right
    corner; the title then goes a line higher (also when ``raised``: a legend above the plot)."""
    if notes:
        ax.text(1.0, 1.0, ", ".join(notes), transform=ax.transAxes, ha="right", va="bottom", fontsize="small",
                color="0.4")
    if title is not None:
        ax.set_title(title, pad=18.0 if notes or raised else 6.0)  # points: a line of small type above the default pad


def _check_top(top: Any, fn_name: str) -> None:
    if top is not None and (isinstance(top, bool) or not isinstance(top, int | np.integer) or top < 1):
        raise ValueError(f"{fn_name}: top must be a positive int or None (every feature); got {top!r}")


# --------------------------------------------------------------------------------------------
# Importance bars


def importance(values: Any, feature_names: Sequence[str] | None, *, ax: Any = None, top: int | None = 20,
               normalize: bool | None = None, class_names: Sequence[str] | None = None,
               title: str | None = None, xlabel: str | None = None) -> Any:
    """Horizontal bars of feature importances, the most important feature on top.

    ``values`` may be:

    - one importance ``f[F]`` (PredictionValuesChange, mean ``|SHAP|``, LossFunctionChange,
      split importance...): one bar per feature, its value written at the bar's end;
    - the result of [`permutation_importance`][jaximp.permutation_importance] (or sklearn's): bars of
      ``importances_mean`` with ``importances_std`` (the spread over repeats) as error bars;
    - a multi-output importance ``f[F, K]`` (mean ``|SHAP|`` of a multiclass model): bars stacked
      by output, the length of a bar being the total over outputs, with a legend of
      ``class_names``; the values must be non-negative;
    - a mapping ``{name: f[F] or permutation result}``: several importances side by side, one
      colour each, sorted by the first. Importances have different units (PredictionValuesChange
      sums to 100, mean ``|SHAP|`` is in the model's raw output, permutation importance in the
      score), so with ``normalize`` each is divided by its total ``sum(|value|)`` and shown as a
      percentage of it (error bars scaled alike): the bars then compare each feature's share.

    Args:
        values: see above; NumPy or JAX arrays.
        feature_names: the F feature names (``ens.feature_names``), or None for ``0..F-1``.
        ax: the matplotlib Axes to draw on; None: a new figure.
        top: show the ``top`` most important features (by the first importance); None: all.
        normalize: show each importance as a percentage of its total; None: only for a mapping
            of two or more importances.
        class_names: the K output names of an ``f[F, K]`` importance; None: ``output 0..K-1``.
        title: the Axes title; None: none.
        xlabel: the x-axis label; None: one naming what is drawn.

    Returns:
        matplotlib.axes.Axes: the matplotlib Axes.

    Raises:
        TypeError: values of a wrong type.
        ValueError: values of a wrong shape, empty or not finite, importances of different
            lengths, ``feature_names`` or ``class_names`` of a wrong length, negative values to
            stack, or a bad ``top``.

    Examples:
        >>> result = jaximp.permutation_importance(ens, X, y, n_repeats=3, random_state=0)
        >>> ax = jaximp.plots.importance({"permutation": result,
        ...                               "PredictionValuesChange": jaximp.prediction_values_change(ens)},
        ...                              ens.feature_names)
        >>> len(ax.get_yticklabels())
        10
    """
    fn_name = "importance"
    _check_top(top, fn_name)
    series = _series(values, fn_name)
    n_features = series[0].mean.shape[0]
    labels = _labels(feature_names, n_features, fn_name)
    if normalize is None:
        normalize = len(series) > 1
    if normalize:
        series = [s.scaled(_share(s.mean)) for s in series]
    first = series[0].mean
    key = first.sum(axis=1) if first.ndim == 2 else first
    order = np.argsort(-key, kind="stable")[: top or n_features]
    n = len(order)
    if ax is None:
        ax = _new_axes(7.0, max(2.4, 0.9 + n * (0.26 + 0.1 * len(series))))
    positions = np.arange(n)
    if first.ndim == 2:
        _stacked(ax, first[order], positions, class_names, fn_name)
    elif len(series) == 1:
        _bars(ax, first[order], series[0].spread, order, positions)
    else:
        _grouped(ax, series, order, positions)
    ax.set_yticks(positions, [labels[i] for i in order])
    ax.set_ylim(n - 0.5, -0.5)  # the most important feature on top
    ax.axvline(0.0, color="0.3", linewidth=0.8)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_xlabel(xlabel if xlabel is not None else _default_xlabel(series, normalize))
    _title_and_note(ax, title, [f"top {n} of {n_features} features"] if n < n_features else [])
    return ax


def _share(mean: np.ndarray) -> float:
    """The factor taking an importance to percentages of its total ``sum(|value|)``."""
    total = np.abs(mean).sum()
    return 100.0 / total if total > 0 else 0.0


def _default_xlabel(series: list[_Series], normalize: bool) -> str:
    if normalize:
        return "share of each importance's total (%)"
    if series[0].spread is not None:
        return "importance (mean over repeats, error bars: std)"
    return "importance (stacked by output)" if series[0].mean.ndim == 2 else "importance"


def _bars(ax: Any, mean: np.ndarray, err: np.ndarray | None, order: np.ndarray, positions: np.ndarray) -> None:
    """One importance: bars with their values written at the ends (or error bars)."""
    xerr = None if err is None else err[order]
    bars = ax.barh(positions, mean, height=0.7, color="#3b75af", xerr=xerr,
                   error_kw=dict(ecolor="0.2", capsize=3, linewidth=1.0))
    if xerr is None:
        ax.bar_label(bars, fmt="%.3g", padding=3, fontsize="small")
        ax.margins(x=0.12)


def _grouped(ax: Any, series: list[_Series], order: np.ndarray, positions: np.ndarray) -> None:
    """Several importances: a group of thin bars per feature, one colour per importance."""
    height = 0.8 / len(series)
    for i, one in enumerate(series):
        offset = (i - (len(series) - 1) / 2) * height
        ax.barh(positions + offset, one.mean[order], height=height, label=one.name, color=f"C{i}",
                xerr=None if one.spread is None else one.spread[order],
                error_kw=dict(ecolor="0.2", capsize=2, linewidth=0.8))
    ax.legend(loc="lower right", fontsize="small", frameon=False)


def _stacked(ax: Any, values: np.ndarray, positions: np.ndarray, class_names: Any, fn_name: str) -> None:
    """``values f[shown features, K]``: bars stacked by output, with a legend of the outputs."""
    k = values.shape[1]
    if (values < 0).any():
        raise ValueError(f"{fn_name}: a multi-output importance [F, K] is drawn as stacked bars and must be "
                         f"non-negative (as mean |SHAP| is); got minimum {values.min():.3g}")
    if class_names is None:
        names = [f"output {j}" for j in range(k)]
    else:
        names = [str(c) for c in class_names]
        if len(names) != k:
            raise ValueError(f"{fn_name}: class_names must have one name per output ({k}); got {len(names)}")
    left = np.zeros(len(positions))
    for j in range(k):
        ax.barh(positions, values[:, j], left=left, height=0.7, label=names[j], color=f"C{j % 10}")
        left += values[:, j]
    ax.legend(loc="lower right", fontsize="small", frameon=False, title="output" if class_names is None else None)


# --------------------------------------------------------------------------------------------
# Interaction heatmap


def interaction_heatmap(matrix: Any, feature_names: Sequence[str] | None, *, ax: Any = None, top: int | None = 20,
                        diagonal: bool = False, title: str | None = None, label: str = "interaction",
                        cmap: str = "viridis") -> Any:
    """A heatmap of pairwise feature interactions, the most interacting features first.

    ``matrix`` is [`interaction`][jaximp.interaction] (CatBoost's Interaction) or
    [`shap_interaction_importance`][jaximp.shap_interaction_importance] (mean ``|SHAP interaction value|``),
    ``f[F, F]``.
    Features are ordered by their total interaction with the others (the row sums of ``|matrix|``
    without the diagonal) and the ``top`` first are shown. The diagonal of SHAP interaction values
    holds the main effects, which would swamp the colour scale: it is left blank unless
    ``diagonal`` is set. With at most 12 features shown, each cell is labelled with its value.

    Args:
        matrix: ``f[F, F]`` (NumPy or JAX); for a multi-output ``[F, F, K]`` pass one output
            (``matrix[..., k]``) or the sum over outputs.
        feature_names: the F feature names, or None for ``0..F-1``.
        ax: the matplotlib Axes to draw on; None: a new figure.
        top: show the ``top`` most interacting features; None: all.
        diagonal: also colour the diagonal.
        title: the Axes title; None: none.
        label: the colour bar's label.
        cmap: a matplotlib colour map name.

    Returns:
        matplotlib.axes.Axes: the matplotlib Axes.

    Raises:
        TypeError: a matrix that is not an array of numbers.
        ValueError: a matrix that is not square ``[F, F]`` and finite, ``feature_names`` of a
            wrong length, or a bad ``top``.

    Examples:
        >>> ax = jaximp.plots.interaction_heatmap(jaximp.interaction(ens), ens.feature_names)
        >>> len(ax.get_xticklabels())
        10
    """
    fn_name = "interaction_heatmap"
    _check_top(top, fn_name)
    m = np.asarray(matrix) if not isinstance(matrix, np.ndarray) else matrix
    if m.ndim == 3:
        raise ValueError(f"{fn_name}: matrix must be [F, F]; got shape {m.shape}: pass one output "
                         "(matrix[..., k]) or the sum over outputs (matrix.sum(-1))")
    m = _finite(m, fn_name, "matrix", (2,))
    if m.shape[0] != m.shape[1]:
        raise ValueError(f"{fn_name}: matrix must be square [F, F]; got shape {m.shape}")
    n_features = m.shape[0]
    labels = _labels(feature_names, n_features, fn_name)
    off_diagonal = np.abs(m) * (1.0 - np.eye(n_features))
    order = np.argsort(-off_diagonal.sum(axis=1), kind="stable")[: top or n_features]
    n = len(order)
    shown = m[np.ix_(order, order)]
    if not diagonal:
        shown = np.ma.masked_where(np.eye(n, dtype=bool), shown)
    if ax is None:
        side = max(3.5, 1.6 + 0.42 * n)
        ax = _new_axes(side + 1.4, side)
    image = ax.imshow(shown, cmap=cmap, aspect="equal")
    ax.figure.colorbar(image, ax=ax, label=label, shrink=0.8)
    ticks = np.arange(n)
    ax.set_xticks(ticks, [labels[i] for i in order], rotation=45, ha="right", rotation_mode="anchor")
    ax.set_yticks(ticks, [labels[i] for i in order])
    ax.tick_params(length=0)
    ax.spines[:].set_visible(False)
    if n <= 12:
        _annotate(ax, image, shown)
    _title_and_note(ax, title, [f"top {n} of {n_features} features"] if n < n_features else [])
    return ax


def _annotate(ax: Any, image: Any, shown: np.ndarray) -> None:
    """Each unmasked cell's value in a colour readable on the cell."""
    colours = image.cmap(image.norm(np.ma.getdata(shown)))
    light = colours[..., :3] @ np.array([0.299, 0.587, 0.114]) > 0.5
    mask = np.ma.getmaskarray(shown)
    for (i, j), value in np.ndenumerate(np.ma.getdata(shown)):
        if not mask[i, j]:
            ax.text(j, i, f"{value:.2g}", ha="center", va="center", fontsize="x-small",
                    color="black" if light[i, j] else "white")


# --------------------------------------------------------------------------------------------
# SHAP summary (beeswarm)


def summary(shap_values: Any, X: Any, feature_names: Sequence[str] | None, *, ax: Any = None,
            max_points: int | None = 2000, top: int | None = 20, random_state: int = 0,
            title: str | None = None, cmap: str = "coolwarm", order: Sequence[int] | None = None) -> Any:
    """A SHAP summary (beeswarm): one row per feature, one point per row of ``X`` at its SHAP value.

    Features are sorted by mean ``|SHAP|`` over all rows, the most important on top, or in a
    given ``order`` (that of a bar plot of another importance, so that both list the features
    alike). Points are coloured by the feature's value (between its 5th and 95th percentiles,
    blue low to red high; missing values and the values of categorical, non-numeric, features
    grey, as a legend says) and spread vertically where they are dense, as in
    shap's ``beeswarm`` plot (Lundberg et al., "From local explanations to global understanding
    with explainable AI for trees", 2020). With more than ``max_points`` rows, a fixed random
    sample of ``max_points`` rows (``random_state``) is drawn, the same for every feature and
    every call.

    Args:
        shap_values: ``f[N, F]`` SHAP values ([`shap_values`][jaximp.shap_values]); for a
            multi-output model ``[N, F, K]`` pass one output (``shap_values[..., k]``).
        X: the ``[N, F]`` rows explained (array or DataFrame, for the colours), or None: no
            colours.
        feature_names: the F feature names, or None for ``0..F-1``.
        ax: the matplotlib Axes to draw on; None: a new figure.
        max_points: most rows drawn; None: all.
        top: show the ``top`` features by mean ``|SHAP|``; None: all.
        random_state: the random state of the row sample.
        title: the Axes title; None: none.
        cmap: a matplotlib colour map name for the feature values.
        order: the features' indices (into F) from the top row down, e.g. those of the bars of
            [`importance`][jaximp.plots.importance] (``top`` of them are shown); None: by mean
            ``|SHAP|``.

    Returns:
        matplotlib.axes.Axes: the matplotlib Axes.

    Raises:
        TypeError: ``shap_values`` or ``X`` that are not arrays of numbers.
        ValueError: ``shap_values`` not ``[N, F]`` and finite, ``X`` of another shape,
            ``feature_names`` of a wrong length, a bad ``top`` or ``max_points``, or an
            ``order`` that is not distinct feature indices.

    Examples:
        >>> ax = jaximp.plots.summary(jaximp.shap_values(ens, X), X, ens.feature_names)
        >>> len(ax.get_yticklabels())
        10
    """
    fn_name = "summary"
    _check_top(top, fn_name)
    if max_points is not None and (isinstance(max_points, bool) or not isinstance(max_points, int | np.integer)
                                   or max_points < 1):
        raise ValueError(f"{fn_name}: max_points must be a positive int or None; got {max_points!r}")
    phi = np.asarray(shap_values) if not isinstance(shap_values, np.ndarray) else shap_values
    if phi.ndim == 3:
        raise ValueError(f"{fn_name}: shap_values must be [N, F]; got shape {phi.shape}: pass one output "
                         "(shap_values[..., k])")
    phi = _finite(phi, fn_name, "shap_values", (2,))
    n_rows, n_features = phi.shape
    labels = _labels(feature_names, n_features, fn_name)
    colours, categorical = _feature_colours(X, phi.shape, fn_name)
    order = _order(order, n_features, fn_name) if order is not None else np.argsort(-np.abs(phi).mean(axis=0),
                                                                                    kind="stable")
    order = order[: top or n_features]
    if max_points is not None and n_rows > max_points:
        rows = np.sort(np.random.default_rng(random_state).choice(n_rows, max_points, replace=False))
        phi, colours = phi[rows], colours[rows]
    n = len(order)
    if ax is None:
        ax = _new_axes(7.5, max(2.6, 1.1 + 0.4 * n))
    xs = phi[:, order].T.ravel()  # [shown features * rows], feature by feature
    ys = np.concatenate([position + _swarm(phi[:, j]) for position, j in enumerate(order)])
    cs = colours[:, order].T.ravel()
    known = ~np.isnan(cs)
    grey = ax.scatter(xs[~known], ys[~known], s=9, color="0.65", linewidths=0, rasterized=True)
    points = ax.scatter(xs[known], ys[known], c=cs[known], s=9, cmap=cmap, vmin=0.0, vmax=1.0, linewidths=0,
                        rasterized=True)
    if X is not None:
        bar = ax.figure.colorbar(points, ax=ax, ticks=[0.0, 1.0], aspect=40, pad=0.02)
        bar.set_ticklabels(["low", "high"])
        bar.set_label("feature value")
        bar.outline.set_visible(False)
    ax.set_yticks(np.arange(n), [labels[j] for j in order])
    ax.set_ylim(n - 0.5, -0.5)
    ax.axvline(0.0, color="0.3", linewidth=0.8)
    ax.grid(axis="y", alpha=0.25)
    ax.set_axisbelow(True)
    ax.spines[["top", "right", "left"]].set_visible(False)
    ax.tick_params(axis="y", length=0)
    ax.set_xlabel("SHAP value (impact on the model's raw output)")
    greys = X is not None and not known.all()
    if greys:  # above the top left corner, clear of the points
        kinds = (["categorical"] if categorical[order].any() else []) + (
            ["missing"] if (~known & ~np.repeat(categorical[order], len(phi))).any() else [])
        ax.legend([grey], [f"{' or '.join(kinds)} value (no colour scale)"], loc="lower left", fontsize="small",
                  bbox_to_anchor=(0.0, 1.0), borderaxespad=0.1, frameon=False, markerscale=1.5, handletextpad=0.2)
    _title_and_note(ax, title, ([f"top {n} of {n_features} features"] if n < n_features else []) + (
        [f"a sample of {len(phi)} of {n_rows} rows"] if len(phi) < n_rows else []), raised=greys)
    return ax


def _order(order: Any, n_features: int, fn_name: str) -> np.ndarray:
    """``i64[shown]`` the distinct feature indices of ``order``, checked."""
    try:
        a = np.asarray(order)
    except (TypeError, ValueError):
        a = np.asarray([None])
    if (a.ndim != 1 or not a.size or not np.issubdtype(a.dtype, np.integer) or a.min() < 0 or a.max() >= n_features
            or len(np.unique(a)) != len(a)):
        raise ValueError(f"{fn_name}: order must be distinct feature indices in [0, {n_features}); got {order!r}")
    return a.astype(np.int64)


def _feature_colours(X: Any, shape: tuple[int, int], fn_name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(f64[N, F], bool[F])``: each feature's values scaled to [0, 1] between its 5th and 95th
    percentiles, NaN where missing or not numeric (everywhere when ``X`` is None); and which
    features are categorical (not numbers)."""
    if X is None:
        return np.full(shape, np.nan), np.zeros(shape[1], bool)
    if hasattr(X, "columns"):  # pandas / polars, column by column (types may differ)
        columns, got = [np.asarray(X[c]) for c in X.columns], (len(X), len(X.columns))
    else:
        a = np.asarray(X)
        columns, got = list(a.T), a.shape
    if tuple(got) != shape:
        raise ValueError(f"{fn_name}: X must have the shape of shap_values {shape}; got {tuple(got)}")
    scaled, categorical = [], []
    for column in columns:  # one step per feature, vectorised over rows
        try:
            v = column.astype(np.float64)
            categorical.append(False)
        except (TypeError, ValueError):
            v = np.full(column.shape, np.nan)  # categorical values: no colour scale
            categorical.append(True)
        finite = v[np.isfinite(v)]
        lo, hi = np.percentile(finite, [5, 95]) if finite.size else (0.0, 0.0)
        if hi <= lo:
            lo, hi = (finite.min(), finite.max()) if finite.size else (0.0, 0.0)
        scaled.append(np.clip((v - lo) / (hi - lo), 0.0, 1.0) if hi > lo else np.where(np.isfinite(v), 0.5, np.nan))
    return np.stack(scaled, axis=1), np.asarray(categorical)


def _swarm(values: np.ndarray, n_bins: int = 80, width: float = 0.4) -> np.ndarray:
    """Vertical offsets spreading ``values f[points]`` where they are dense: the values are binned
    along x and the points of a bin alternate above and below the line, the densest bin
    reaching ``width``."""
    lo, span = values.min(), np.ptp(values)
    bins = np.zeros(len(values), np.int64) if span == 0 else ((values - lo) / span * (n_bins - 1)).astype(np.int64)
    order = np.argsort(bins, kind="stable")
    ranked = bins[order]
    rank = np.arange(len(values)) - np.searchsorted(ranked, ranked, side="left")  # place within its bin
    step = (rank + 1) // 2 * np.where(rank % 2 == 0, 1.0, -1.0)  # 0, -1, +1, -2, +2, ...
    offsets = np.empty(len(values))
    offsets[order] = step * width / max(np.bincount(bins).max() / 2.0, 1.0)
    return offsets
