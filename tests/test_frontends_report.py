"""``jaximp explain`` speaks the model's library: XGBoost's, LightGBM's and scikit-learn's models
(the latter from skops files) get their library's own importances under their own names, with
the numbers of ``Booster.get_score``, ``Booster.feature_importance`` and ``feature_importances_``
computed from the real trained models; the loss as the library names it; no CatBoost names for
other libraries; a classifier's plots and tables titled by class; beeswarm and bar plots in one
feature order; skops files refused when they hold types not trusted."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from command_line import run
from models import CLI_NAMES, SKLEARN, cli_lightgbm, cli_sklearn, cli_xgboost, sklearn_model

import jaximp

CATBOOST_NAMES = ("PredictionValuesChange", "LossFunctionChange", "Interaction", "prediction_values_change",
                  "loss_function_change")
RTOL = 1e-6  # float32 sums of the same gains in another order; importances.csv keeps 9 digits
XGBOOST_TYPES = ("weight", "gain", "cover", "total_gain", "total_cover")


class Wrapper:
    """An object skops does not trust: a skops file holding it must be refused."""

    def __init__(self, model=None):
        self.model = model




def _explain(capfd, model_path, data_path, out, *extra) -> tuple[pd.DataFrame, str]:
    """Run ``jaximp explain`` (it must succeed); ``(importances.csv by feature, report.md)``."""
    status, _, stderr = run(["explain", model_path, data_path, "--out", out, "--no-progress", *extra], capfd)
    assert status == 0, stderr
    table = pd.read_csv(out / "importances.csv").set_index("feature")
    report = (out / "report.md").read_text()
    for name in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report):
        assert (out / name).stat().st_size > 5000, name
    return table, report


def _data(tmp_path, fitted, name="data.csv", target=True) -> str:
    frame = fitted.X.assign(target=fitted.y) if target else fitted.X
    frame.to_csv(tmp_path / name, index=False)
    return tmp_path / name


def _no_catboost_names(table, report):
    for name in CATBOOST_NAMES:
        assert name not in report and name not in table.columns


def test_xgboost_importances_are_get_score(tmp_path, capfd, monkeypatch):
    from jaximp._frontends import report as report_module

    drawn = {}

    def recording(values, *args, **kwargs):
        drawn[kwargs.get("title")] = values
        return importance(values, *args, **kwargs)

    importance = report_module.plots.importance
    monkeypatch.setattr(report_module.plots, "importance", recording)
    fitted = cli_xgboost("regression")
    fitted.model.save_model(str(tmp_path / "model.json"))
    table, report = _explain(capfd, tmp_path / "model.json", _data(tmp_path, fitted), tmp_path / "out",
                             "--target", "target")
    # the comparison's caption names the importances drawn, and those of the table left out of it
    names = list(drawn["Importances compared (each as a share of its total)"])
    assert names == ["mean |SHAP|", "weight", "total_gain", "total_cover", "permutation importance"]
    caption = next(line for line in report.splitlines() if "side by side" in line)
    assert caption == (f"{', '.join(names[:-1])} and {names[-1]} side by side, each as a percentage of its total, "
                       "sorted by mean |SHAP| (not drawn: gain and cover, XGBoost's importances that are means per "
                       "split and have no total to share; they are in the table):")
    header = next(line for line in report.splitlines() if line.startswith("| rank |"))
    for type in XGBOOST_TYPES:
        score = fitted.model.get_score(importance_type=type)  # features never split on are absent
        np.testing.assert_allclose(table[type].loc[CLI_NAMES], [score.get(n, 0.0) for n in CLI_NAMES], rtol=RTOL)
        assert f" {type} |" in header  # a column of the top features' table
    assert "objective reg:squarederror" in report and "XGBoost's total gain" in report
    _no_catboost_names(table, report)
    X, y = fitted.X, fitted.y
    reference = jaximp.permutation_importance(fitted.ens, X, y, n_repeats=5, random_state=0, progress=False)
    np.testing.assert_allclose(table.permutation_importance.loc[CLI_NAMES], reference.importances_mean,
                               rtol=1e-5, atol=1e-7)
    assert "loss (RMSE, as its objective reg:squarederror)" in report
    shap = pd.read_parquet(tmp_path / "out" / "shap.parquet")
    import xgboost as xgb

    np.testing.assert_allclose(shap.prediction, fitted.model.predict(xgb.DMatrix(X), output_margin=True),
                               rtol=1e-6, atol=1e-6)


def test_xgboost_multiclass_ubj_titles_by_class(tmp_path, capfd):
    fitted = cli_xgboost("multiclass")
    fitted.model.save_model(str(tmp_path / "model.ubj"))
    table, report = _explain(capfd, tmp_path / "model.ubj", _data(tmp_path, fitted, target=False),
                             tmp_path / "out")
    for type in XGBOOST_TYPES:
        score = fitted.model.get_score(importance_type=type)
        np.testing.assert_allclose(table[type].loc[CLI_NAMES], [score.get(n, 0.0) for n in CLI_NAMES], rtol=RTOL)
    assert "objective multi:softprob" in report
    assert "SHAP summary of class 0" in report and "output 0" not in report  # the file keeps no class names
    _no_catboost_names(table, report)


def test_lightgbm_importances_are_feature_importance(tmp_path, capfd):
    fitted = cli_lightgbm("binary")
    fitted.model.save_model(str(tmp_path / "model.txt"))
    table, report = _explain(capfd, tmp_path / "model.txt", _data(tmp_path, fitted), tmp_path / "out",
                             "--target", "target")
    for type in ("split", "gain"):
        np.testing.assert_allclose(table[type].loc[CLI_NAMES], fitted.model.feature_importance(type), rtol=RTOL)
    assert "objective binary" in report and "LightGBM's total gain" in report
    assert "loss (Logloss, as its objective binary" in report
    assert not set(XGBOOST_TYPES) - {"gain"} & set(table.columns)
    _no_catboost_names(table, report)
    shap = pd.read_parquet(tmp_path / "out" / "shap.parquet")
    np.testing.assert_allclose(shap.prediction, fitted.model.predict(fitted.X, raw_score=True), rtol=1e-5, atol=1e-5)


def test_skops_forest_round_trip(tmp_path, capfd):
    import skops.io as sio

    fitted = cli_sklearn("regression")
    sio.dump(fitted.model, tmp_path / "forest.skops")
    table, report = _explain(capfd, tmp_path / "forest.skops", _data(tmp_path, fitted), tmp_path / "out",
                             "--target", "target")
    np.testing.assert_allclose(table.feature_importances_.loc[CLI_NAMES], fitted.model.feature_importances_,
                               rtol=1e-5, atol=1e-8)
    assert "(scikit-learn)" in report and "criterion squared_error" in report
    assert "decrease of R²" in report
    _no_catboost_names(table, report)
    shap = pd.read_parquet(tmp_path / "out" / "shap.parquet")
    np.testing.assert_allclose(shap.prediction, fitted.model.predict(fitted.X), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(shap[[f"shap_{n}" for n in CLI_NAMES]].sum(axis=1) + jaximp.expected_value(fitted.ens),
                               fitted.model.predict(fitted.X), rtol=1e-4, atol=1e-4)
    reference = jaximp.permutation_importance(fitted.ens, fitted.X, fitted.y, scoring="r2", n_repeats=5,
                                              random_state=0, progress=False)
    np.testing.assert_allclose(table.permutation_importance.loc[CLI_NAMES], reference.importances_mean,
                               rtol=1e-5, atol=1e-7)


def test_skops_classifier_is_titled_by_class_and_plots_share_one_order(tmp_path, capfd, monkeypatch):
    import skops.io as sio

    from jaximp._frontends import report as report_module

    ticks = {}

    def recording(function):
        def wrapped(*args, **kwargs):
            ax = function(*args, **kwargs)
            ticks[kwargs.get("title")] = [t.get_text() for t in ax.get_yticklabels()]
            return ax
        return wrapped

    monkeypatch.setattr(report_module.plots, "summary", recording(report_module.plots.summary))
    monkeypatch.setattr(report_module.plots, "importance", recording(report_module.plots.importance))
    fitted = cli_sklearn("multiclass")
    sio.dump(fitted.model, tmp_path / "classes.skops")
    table, report = _explain(capfd, tmp_path / "classes.skops", _data(tmp_path, fitted), tmp_path / "out",
                             "--target", "target")
    labels = [str(c) for c in fitted.model.classes_]
    shap = pd.read_parquet(tmp_path / "out" / "shap.parquet")
    np.testing.assert_allclose(shap[[f"prediction_{label}" for label in labels]], fitted.model.predict_proba(fitted.X),
                               rtol=1e-5, atol=1e-6)
    for label in labels:
        values = shap[[f"shap_{name}_{label}" for name in CLI_NAMES]].to_numpy()
        np.testing.assert_allclose(table[f"mean_abs_shap_{label}"].loc[CLI_NAMES], np.abs(values).mean(axis=0),
                                   rtol=1e-5)
        assert f"SHAP summary of class {label}" in report
        assert f"| mean \\|SHAP\\| of class {label} |" in report  # a column of the top features' table
        assert (tmp_path / "out" / f"summary_{label}.png").exists()
    assert "mean |SHAP| per class" in ticks and "output 0" not in report
    bars = ticks["mean |SHAP| per class"]
    assert bars == list(table.index)  # importances.csv's order
    for label in labels:  # every beeswarm lists the features as the bars do
        assert ticks[f"SHAP values, class {label}"] == bars
    np.testing.assert_allclose(table.feature_importances_.loc[CLI_NAMES], fitted.model.feature_importances_,
                               rtol=1e-5, atol=1e-8)
    assert "decrease of the accuracy" in report
    reference = jaximp.permutation_importance(fitted.ens, fitted.X, fitted.y, scoring="accuracy", n_repeats=5,
                                              random_state=0, progress=False)
    np.testing.assert_allclose(table.permutation_importance.loc[CLI_NAMES], reference.importances_mean, atol=1e-7)
    _no_catboost_names(table, report)


def test_skops_untrusted_type_is_refused_and_can_be_trusted(tmp_path, capfd):
    import skops.io as sio

    fitted = cli_sklearn("regression")
    sio.dump(Wrapper(fitted.model), tmp_path / "wrapped.skops")
    data = _data(tmp_path, fitted, target=False)
    status, stdout, stderr = run(["explain", tmp_path / "wrapped.skops", data, "--out", tmp_path / "out"], capfd)
    assert status == 1 and "Traceback" not in stderr + stdout
    (line,) = stderr.strip().splitlines()
    name = f"{Wrapper.__module__}.Wrapper"
    assert f"--trust-skops-type {name}" in line and "does not trust" in line
    assert not (tmp_path / "out" / "report.md").exists()
    # trusted, it loads, and is refused as an object that is not a tree model
    status, _, stderr = run(["explain", tmp_path / "wrapped.skops", data, "--out", tmp_path / "out",
                             "--trust-skops-type", name], capfd)
    assert status == 1
    (line,) = stderr.strip().splitlines()
    assert "from_sklearn" in line and "Wrapper" in line


@pytest.mark.parametrize("content", [b"not a zip at all", b"PK\x03\x04 a broken zip"])
def test_damaged_skops_file_is_one_line(tmp_path, capfd, content):
    (tmp_path / "bad.skops").write_bytes(content)
    fitted = cli_sklearn("regression")
    status, stdout, stderr = run(["explain", tmp_path / "bad.skops", _data(tmp_path, fitted, target=False),
                                  "--out", tmp_path / "out"], capfd)
    assert status == 1 and "Traceback" not in stderr + stdout
    (line,) = stderr.strip().splitlines()
    assert "not a readable skops file" in line and "skops.io.dump" in line


def test_pickle_is_refused_with_the_skops_route(tmp_path, capfd):
    import pickle

    fitted = cli_sklearn("regression")
    (tmp_path / "forest.pkl").write_bytes(pickle.dumps(fitted.model))
    status, _, stderr = run(["explain", tmp_path / "forest.pkl", _data(tmp_path, fitted, target=False),
                             "--out", tmp_path / "out"], capfd)
    assert status == 1
    (line,) = stderr.strip().splitlines()
    assert "pickles are not read" in line and "skops.io.dump" in line


@pytest.mark.parametrize("name", SKLEARN)
def test_every_sklearn_tree_model_loads_from_skops_without_trusting_more(tmp_path, name):
    import skops.io as sio

    from jaximp._frontends.explain import load_model

    fitted = sklearn_model(name)
    sio.dump(fitted.model, tmp_path / "model.skops")
    model = load_model(str(tmp_path / "model.skops"))
    assert model.library == "scikit-learn" and model.ens.n_trees == fitted.ens.n_trees
    word = "loss" if hasattr(fitted.model, "loss") else "criterion"
    assert model.objective == f"{word} {getattr(fitted.model, word)}"
