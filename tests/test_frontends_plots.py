"""jaximp.plots: each plot renders to PNG under Agg with the feature names as labels, bars sorted,
error bars and legends where they belong; bad input is a clear ValueError/TypeError."""

from __future__ import annotations

import subprocess
import sys

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.container import BarContainer  # noqa: E402
from models import train  # noqa: E402
from sklearn.inspection import permutation_importance as sklearn_permutation_importance  # noqa: E402
from sklearn.utils import Bunch  # noqa: E402

import jaximp  # noqa: E402
from jaximp import plots  # noqa: E402

NAMES = ("income", "age_in_years", "distance_to_city_centre_km", "rooms", "floor", "year_built")


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def regression():
    model, X, y, _ = train("regression")
    return jaximp.from_catboost(model), X, y


@pytest.fixture(scope="module")
def permutation(regression):
    ens, X, y = regression
    return jaximp.permutation_importance(ens, X, y, n_repeats=4, random_state=0, progress=False)


def _png(ax, tmp_path, name: str) -> int:
    """Save the Axes' figure as PNG; its size in bytes."""
    path = tmp_path / f"{name}.png"
    ax.figure.savefig(path, dpi=80)
    return path.stat().st_size


def _ticks(ax, axis: str = "y") -> list[str]:
    return [t.get_text() for t in (ax.get_yticklabels() if axis == "y" else ax.get_xticklabels())]


def _bar_groups(ax) -> list:
    """The Axes' bar containers, one per barh call (error bars have containers of their own)."""
    return [c for c in ax.containers if isinstance(c, BarContainer)]


def _bars_top_down(ax, container: int = 0) -> np.ndarray:
    """Widths of a bar container's bars from the top of the plot down (the y axis is inverted)."""
    bars = _bar_groups(ax)[container]
    y = np.array([b.get_y() for b in bars])
    return np.array([b.get_width() for b in bars])[np.argsort(y)]


def test_importance_one_series_sorted_with_names(regression, tmp_path):
    ens, _, _ = regression
    pvc = np.asarray(jaximp.prediction_values_change(ens))
    ax = plots.importance(pvc, NAMES, title="PredictionValuesChange")
    assert _png(ax, tmp_path, "pvc") > 5000
    order = np.argsort(-pvc, kind="stable")
    assert _ticks(ax) == [NAMES[i] for i in order]
    widths = _bars_top_down(ax)
    np.testing.assert_allclose(widths, pvc[order], rtol=1e-6)
    assert np.all(np.diff(widths) <= 0)  # sorted, the largest on top
    assert ax.get_ylim()[0] > ax.get_ylim()[1]  # inverted: the first tick is on top
    assert [t.get_text() for t in ax.texts][: len(NAMES)] == [f"{v:.3g}" for v in pvc[order]]  # values written


def test_importance_permutation_error_bars(permutation, tmp_path):
    result = permutation
    ax = plots.importance(result, NAMES)
    assert _png(ax, tmp_path, "perm") > 5000
    bars = _bar_groups(ax)[0]
    assert bars.errorbar is not None
    order = np.argsort(-result.importances_mean, kind="stable")
    assert _ticks(ax) == [NAMES[i] for i in order]
    segments = bars.errorbar.lines[2][0].get_segments()  # one horizontal segment per bar, in bar order
    half_widths = np.array([(s[1][0] - s[0][0]) / 2 for s in segments])
    np.testing.assert_allclose(half_widths, result.importances_std[order], rtol=1e-6, atol=1e-12)
    assert "std" in ax.get_xlabel()


def test_importance_takes_sklearn_permutation_result(regression):
    from sklearn.linear_model import LinearRegression

    _, X, y = regression
    result = sklearn_permutation_importance(LinearRegression().fit(X, y), X, y, n_repeats=3, random_state=0)
    ax = plots.importance(result, NAMES)
    assert _bar_groups(ax)[0].errorbar is not None
    assert _ticks(ax) == [NAMES[i] for i in np.argsort(-result.importances_mean, kind="stable")]


def test_importance_side_by_side_normalised(regression, permutation, tmp_path):
    ens, X, _ = regression
    pvc = np.asarray(jaximp.prediction_values_change(ens))
    mean_abs = jaximp.shap_importance(ens, X)
    result = permutation
    ax = plots.importance({"PVC": pvc, "mean |SHAP|": mean_abs, "permutation": result}, NAMES)
    assert _png(ax, tmp_path, "side") > 5000
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["PVC", "mean |SHAP|", "permutation"]
    assert _ticks(ax) == [NAMES[i] for i in np.argsort(-pvc, kind="stable")]  # sorted by the first
    order = np.argsort(-pvc, kind="stable")
    for k, values in enumerate((pvc, mean_abs, result.importances_mean)):
        widths = np.array([b.get_width() for b in _bar_groups(ax)[k]])  # in the order of the ticks
        np.testing.assert_allclose(widths, values[order] * 100 / np.abs(values).sum(), rtol=1e-6)
        np.testing.assert_allclose(np.abs(widths).sum(), 100.0, rtol=1e-6)  # a share of each total
    assert _bar_groups(ax)[2].errorbar is not None
    assert "%" in ax.get_xlabel()


def test_importance_multiclass_stacked_with_class_legend(tmp_path):
    model, X, _, _ = train("multiclass")
    ens = jaximp.from_catboost(model)
    values = jaximp.shap_importance(ens, X)  # [F, K]
    assert values.shape == (6, 3)
    ax = plots.importance(values, NAMES, class_names=["low", "mid", "high"])
    assert _png(ax, tmp_path, "multiclass") > 5000
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["low", "mid", "high"]
    order = np.argsort(-values.sum(1), kind="stable")
    assert _ticks(ax) == [NAMES[i] for i in order]
    ends = np.array([[b.get_x() + b.get_width() for b in c] for c in _bar_groups(ax)])  # [K, F] right ends
    np.testing.assert_allclose(ends[-1], values.sum(1)[order], rtol=1e-5)  # stacked to the total
    assert np.all(np.diff(ends, axis=0) >= 0)


def test_importance_top_and_given_axes(regression):
    ens, _, _ = regression
    pvc = np.asarray(jaximp.prediction_values_change(ens))
    fig, axes = plt.subplots(1, 2)
    ax = plots.importance(pvc, NAMES, ax=axes[1], top=3)
    assert ax is axes[1] and ax.figure is fig
    assert _ticks(ax) == [NAMES[i] for i in np.argsort(-pvc, kind="stable")[:3]]
    assert any("top 3 of 6" in t.get_text() for t in ax.texts)


def test_interaction_heatmap(regression, tmp_path):
    ens, X, _ = regression
    matrix = np.asarray(jaximp.interaction(ens))
    ax = plots.interaction_heatmap(matrix, NAMES)
    assert _png(ax, tmp_path, "interaction") > 5000
    order = np.argsort(-np.abs(matrix).sum(1), kind="stable")  # zero diagonal
    assert _ticks(ax, "y") == [NAMES[i] for i in order] == _ticks(ax, "x")
    shown = ax.images[0].get_array()
    assert np.ma.getmaskarray(shown).diagonal().all()  # diagonal left blank
    np.testing.assert_allclose(shown[0, 1], matrix[order[0], order[1]], rtol=1e-6)
    assert len(ax.texts) == 6 * 5  # every off-diagonal cell labelled

    mean_abs = jaximp.shap_interaction_importance(ens, X)
    ax = plots.interaction_heatmap(mean_abs, NAMES, top=4, diagonal=True, label="mean |SHAP interaction|")
    assert _png(ax, tmp_path, "shap_interaction") > 5000
    assert len(_ticks(ax)) == 4 and not np.ma.getmaskarray(ax.images[0].get_array()).any()


def test_summary_beeswarm(regression, tmp_path):
    ens, X, _ = regression
    phi = jaximp.shap_values(ens, X)
    ax = plots.summary(phi, X, NAMES, max_points=150)
    assert _png(ax, tmp_path, "summary") > 10000
    order = np.argsort(-np.abs(phi).mean(0), kind="stable")
    assert _ticks(ax) == [NAMES[i] for i in order]
    points = np.concatenate([c.get_offsets() for c in ax.collections])
    assert len(points) == 150 * 6  # subsampled
    assert set(np.round(points[:, 1]).astype(int)) == set(range(6))  # one row of points per feature
    top = points[np.abs(points[:, 1]) < 0.5, 0]  # the top row holds the top feature's SHAP values
    assert set(top) <= set(phi[:, order[0]].tolist())
    again = plots.summary(phi, X, NAMES, max_points=150)  # the sample is deterministic
    np.testing.assert_array_equal(np.concatenate([c.get_offsets() for c in again.collections]), points)


def test_summary_colours_and_dataframe(regression):
    import pandas as pd

    ens, X, _ = regression
    phi = jaximp.shap_values(ens, X)
    frame = pd.DataFrame(X, columns=NAMES).assign(rooms=lambda f: np.where(f.rooms > 0, "many", "few"))
    ax = plots.summary(phi, frame, NAMES, max_points=None, top=None)
    grey, coloured = ax.collections
    assert len(grey.get_offsets()) == len(X)  # the non-numeric column, grey
    assert len(coloured.get_offsets()) == 5 * len(X)
    assert len(ax.figure.axes) == 2  # with its colour bar
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["categorical value (no colour scale)"]


def test_summary_legend_names_what_grey_points_are(regression):
    ens, X, _ = regression
    phi = np.asarray(jaximp.shap_values(ens, X))
    assert plots.summary(phi, X, NAMES).get_legend() is None  # every point coloured: no legend
    missing = X.copy()
    missing[::7, 2] = np.nan
    ax = plots.summary(phi, missing, NAMES, top=None)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["missing value (no colour scale)"]


def test_summary_in_a_given_order(regression):
    ens, X, _ = regression
    phi = np.asarray(jaximp.shap_values(ens, X))
    pvc = np.asarray(jaximp.prediction_values_change(ens))
    order = np.argsort(-pvc, kind="stable")  # another importance's order: the bars' of plots.importance
    bars = plots.importance(pvc, NAMES)
    ax = plots.summary(phi, X, NAMES, order=order)
    assert _ticks(ax) == _ticks(bars) == [NAMES[i] for i in order]
    assert _ticks(plots.summary(phi, X, NAMES, order=list(order), top=2)) == [NAMES[i] for i in order[:2]]
    for bad in ([0, 0, 1], [0, 6], [-1], [], [0.5]):
        with pytest.raises(ValueError, match=r"summary: order must be distinct feature indices in \[0, 6\)"):
            plots.summary(phi, X, NAMES, order=bad)


def test_jaximp_plots_is_lazy():
    code = ("import sys, jaximp; assert 'matplotlib' not in sys.modules; "
            "jaximp.plots.importance; print('ok')")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "ok"


def _bunch(mean, std):
    return Bunch(importances_mean=np.asarray(mean), importances_std=np.asarray(std), importances=None)


@pytest.mark.parametrize("call, message", [
    (lambda: plots.importance(np.ones(6), NAMES[:5]), "importance: feature_names must have one name per feature"),
    (lambda: plots.importance(np.ones((6, 2, 2)), NAMES), r"importance: values must have shape \[F\] or \[F, K\]"),
    (lambda: plots.importance(np.array([1.0, np.nan, 0, 0, 0, 0]), NAMES), "importance: values must be finite"),
    (lambda: plots.importance({"a": np.ones(6), "b": np.ones(5)}, NAMES), "one value per feature"),
    (lambda: plots.importance({}, NAMES), "at least one importance"),
    (lambda: plots.importance(_bunch(np.ones(6), np.ones(5)), NAMES), "importances_std must have the shape"),
    (lambda: plots.importance(-np.ones((6, 2)), NAMES), "must be non-negative"),
    (lambda: plots.importance(np.ones((6, 2)), NAMES, class_names=["a"]), "class_names must have one name per output"),
    (lambda: plots.importance(np.ones(6), NAMES, top=0), "top must be a positive int"),
    (lambda: plots.interaction_heatmap(np.ones((6, 5)), NAMES), r"matrix must be square \[F, F\]"),
    (lambda: plots.interaction_heatmap(np.ones((6, 6, 2)), NAMES), r"matrix\.sum\(-1\)"),
    (lambda: plots.interaction_heatmap(np.ones((5, 5)), NAMES), "feature_names must have one name per feature"),
    (lambda: plots.summary(np.ones((10, 6, 2)), None, NAMES), r"shap_values\[\.\.\., k\]"),
    (lambda: plots.summary(np.ones((10, 6)), np.ones((9, 6)), NAMES), "X must have the shape of shap_values"),
    (lambda: plots.summary(np.ones((10, 6)), np.ones((10, 5)), NAMES), "X must have the shape of shap_values"),
    (lambda: plots.summary(np.ones((10, 6)), None, NAMES[:2]), "feature_names must have one name per feature"),
    (lambda: plots.summary(np.ones((10, 6)), None, NAMES, max_points=0), "max_points must be a positive int"),
])
def test_bad_input_is_a_clear_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_bad_types_are_type_errors():
    with pytest.raises(TypeError, match="importance: feature_names must be a sequence of names"):
        plots.importance(np.ones(6), "income")
    with pytest.raises(TypeError, match="importance: values must be an array of numbers"):
        plots.importance(["a"] * 6, NAMES)
