"""The ``jaximp`` command: ``explain`` end to end on CatBoost model files and CSV/Parquet data in a
temporary directory (its numbers equal jaximp's functions on the same rows; other libraries'
models: test_frontends_report.py), every bad input as one line on stderr with a non-zero exit and
no traceback, help text for every option."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from types import SimpleNamespace

import catboost
import jax
import numpy as np
import pandas as pd
import pytest
from command_line import run
from models import cli_xgboost

import jaximp
from jaximp._frontends.cli import parser

NAMES = ["income", "age", "rooms", "floor", "year_built"]
PNG_MIN_BYTES = 5000  # an empty 100-dpi figure is about 2 kB


def _train(X, y, **params):
    params = dict(iterations=20, depth=4, learning_rate=0.3, random_seed=0, verbose=0, thread_count=1,
                  allow_writing_files=False) | params
    return catboost.CatBoost(params).fit(X, y)


def _catboost_shap(model, X) -> np.ndarray:
    """CatBoost's own SHAP values without the expected value: [N, F] or [N, F, K]."""
    values = model.get_feature_importance(catboost.Pool(X), type="ShapValues")
    return values[:, :-1] if values.ndim == 2 else values[:, :, :-1].transpose(0, 2, 1)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Tiny CatBoost models (20 trees) saved as .cbm and .json, and their data as CSV and Parquet."""
    d = tmp_path_factory.mktemp("cli")
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(300, 5)).astype(np.float32), columns=NAMES)
    y = (X.income * 2 + np.sin(3 * X.age) + X.rooms * X.floor + 0.1 * rng.normal(size=300)).astype(np.float32)
    model = _train(X, y, loss_function="RMSE")
    model.save_model(str(d / "model.cbm"))
    model.save_model(str(d / "model.json"), format="json")
    X.assign(target=y).to_csv(d / "data.csv", index=False)
    X.assign(target=y).to_parquet(d / "data.parquet")
    X.iloc[:40].assign(target=y[:40]).to_csv(d / "background.csv", index=False)
    classes = np.array(["low", "mid", "high"])[np.digitize(y, [-1.0, 1.0])]
    multiclass = _train(X, classes, loss_function="MultiClass")
    multiclass.save_model(str(d / "multiclass.cbm"))
    X.assign(label=classes).to_csv(d / "classes.csv", index=False)
    frame = pd.read_csv(d / "data.csv")  # the rows as the command reads them
    return SimpleNamespace(dir=d, model=model, ens=jaximp.from_catboost(model), multiclass=multiclass,
                           classes=jaximp.from_catboost(multiclass), X=frame[NAMES], y=frame.target.to_numpy())




def _csv(out_dir, features):
    return pd.read_csv(out_dir / "importances.csv").set_index("feature").loc[features]


def _check_report(out_dir, texts):
    report = (out_dir / "report.md").read_text()
    for text in texts:
        assert text in report
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    assert images
    for name in images:  # every linked plot exists and is not empty
        assert (out_dir / name).stat().st_size > PNG_MIN_BYTES, name
    return report


def test_explain_csv_cbm_with_target(files, capfd):
    out = files.dir / "out_target"
    status, stdout, stderr = run(["explain", files.dir / "model.cbm", files.dir / "data.csv", "--target", "target",
                                  "--target-rows", "200", "--out", out, "--no-progress"], capfd)
    assert status == 0, stderr
    assert stdout.strip().splitlines()[-1] == f"report: {out / 'report.md'}"
    ens, X, y = files.ens, files.X, files.y
    first = slice(0, 200)  # --target-rows: the first rows, for the importances that need targets
    table = _csv(out, NAMES)
    np.testing.assert_allclose(table.mean_abs_shap, jaximp.shap_importance(ens, X), rtol=1e-5)  # f32 sums
    np.testing.assert_array_equal(table.prediction_values_change.astype(np.float32),
                                  np.asarray(jaximp.prediction_values_change(ens)))
    reference = jaximp.permutation_importance(ens, X[first], y[first], n_repeats=5, random_state=0, progress=False)
    np.testing.assert_allclose(table.permutation_importance, reference.importances_mean, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(table.permutation_importance_std, reference.importances_std, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(table.loss_function_change,
                               jaximp.loss_function_change(ens, X[first], y[first], progress=False), rtol=1e-6)
    written = pd.read_csv(out / "importances.csv").mean_abs_shap.to_numpy()
    assert np.all(np.diff(written) <= 0)  # sorted, the most important first

    shap = pd.read_parquet(out / "shap.parquet")
    np.testing.assert_allclose(shap[[f"shap_{n}" for n in NAMES]], _catboost_shap(files.model, X), atol=1e-5)
    np.testing.assert_allclose(shap.prediction, ens.predict(X), rtol=1e-6, atol=1e-6)
    for name in ("importances", "shap_importance", "permutation_importance", "summary", "interaction"):
        assert (out / f"{name}.png").stat().st_size > PNG_MIN_BYTES
    top = pd.read_csv(out / "importances.csv").feature[0]
    _check_report(out, ["20 trees, depth 4, 5 features, 1 output, loss RMSE", "300 rows", "path_dependent",
                        f"| 1 | `{top}` |", "LossFunctionChange", "on 200 rows", "use the first 200 rows",
                        "## Timings"])


def test_explain_parquet_json_without_target(files, capfd):
    out = files.dir / "out_plain"
    status, _, stderr = run(["explain", files.dir / "model.json", files.dir / "data.parquet", "--out", out,
                             "--no-progress", "--device", "cpu"], capfd)
    assert status == 0, stderr
    table = _csv(out, NAMES)
    assert list(table.columns) == ["mean_abs_shap", "prediction_values_change"]
    np.testing.assert_allclose(table.mean_abs_shap, jaximp.shap_importance(files.ens, files.X), rtol=1e-5)
    np.testing.assert_array_equal(table.prediction_values_change.astype(np.float32),
                                  np.asarray(jaximp.prediction_values_change(files.ens)))
    assert not (out / "permutation_importance.png").exists()
    report = _check_report(out, ["model.json` (CatBoost)", "| device | cpu |"])
    assert "target" not in report


def test_explain_background_is_interventional(files, capfd):
    out = files.dir / "out_background"
    status, _, stderr = run(["explain", files.dir / "model.cbm", files.dir / "data.parquet", "--background",
                             files.dir / "background.csv", "--target", "target", "--target-rows", "200",
                             "--out", out, "--no-progress"], capfd)
    assert status == 0, stderr
    background = pd.read_csv(files.dir / "background.csv")[NAMES]
    shap = pd.read_parquet(out / "shap.parquet")[[f"shap_{n}" for n in NAMES]]
    reference = jaximp.shap_values(files.ens, files.X, method="interventional", background=background)
    np.testing.assert_allclose(shap, reference, rtol=1e-5, atol=1e-6)
    table = _csv(out, NAMES)
    np.testing.assert_allclose(table.mean_abs_shap, np.abs(reference).mean(0), rtol=1e-5)
    first = slice(0, 200)
    np.testing.assert_allclose(table.loss_function_change, jaximp.loss_function_change(
        files.ens, files.X[first], files.y[first], progress=False), rtol=1e-6)
    _check_report(out, ["interventional, background", "(40 rows)", "on 200 rows"])


def test_explain_multiclass_with_class_labels(files, capfd):
    out = files.dir / "out_classes"
    status, _, stderr = run(["explain", files.dir / "multiclass.cbm", files.dir / "classes.csv", "--out", out,
                             "--no-progress"], capfd)
    assert status == 0, stderr
    ens, X = files.classes, files.X
    labels = [str(c) for c in ens.class_names]
    table = _csv(out, NAMES)
    per_output = jaximp.shap_importance(ens, X)  # [F, K]
    for k, label in enumerate(labels):
        np.testing.assert_allclose(table[f"mean_abs_shap_{label}"], per_output[:, k], rtol=1e-5)
    np.testing.assert_allclose(table.mean_abs_shap, per_output.sum(1), rtol=1e-5)
    shap = pd.read_parquet(out / "shap.parquet")
    values = _catboost_shap(files.multiclass, X)  # [N, F, K]
    for k, label in enumerate(labels):
        np.testing.assert_allclose(shap[[f"shap_{n}_{label}" for n in NAMES]], values[..., k], atol=1e-5)
        assert (out / f"summary_{label}.png").stat().st_size > PNG_MIN_BYTES
    _check_report(out, ["3 outputs (classes", "loss MultiClass"])


@pytest.mark.slow  # the columns it takes by position: test_columns_by_position_leave_the_target_out
def test_explain_model_without_feature_names_takes_columns_by_position(files, capfd):
    d = files.dir
    X = files.X.to_numpy()
    model = _train(X, files.y, loss_function="RMSE")
    model.save_model(str(d / "unnamed.cbm"))
    pd.DataFrame(X, columns=list("abcde")).to_csv(d / "unnamed.csv", index=False)
    out = d / "out_unnamed"
    status, _, stderr = run(["explain", d / "unnamed.cbm", d / "unnamed.csv", "--out", out, "--no-progress"], capfd)
    assert status == 0, stderr
    ens = jaximp.from_catboost(model)
    shap = pd.read_parquet(out / "shap.parquet")
    assert ens.feature_names == tuple("01234")
    np.testing.assert_allclose(shap[[f"shap_{i}" for i in range(5)]], _catboost_shap(model, X), atol=1e-5)
    np.testing.assert_allclose(_csv(out, list("abcde")).mean_abs_shap, np.abs(shap.iloc[:, :5]).mean(axis=0),
                               rtol=1e-5)


def test_columns_by_position_leave_the_target_out(files):
    import pyarrow as pa
    import pyarrow.dataset as ds

    from jaximp._frontends.explain import data_columns

    unnamed = jaximp.from_catboost(_train(files.X.to_numpy(), files.y, loss_function="RMSE", iterations=2))
    dataset = ds.dataset(pa.table({name: [1.0] for name in ["a", "b", "y", "c", "d", "e"]}))
    assert data_columns(dataset, unnamed, "y", "DATA", "x.csv") == list("abcde")
    with pytest.raises(ValueError, match="has 6 feature columns; the model takes 5"):
        data_columns(dataset, unnamed, None, "DATA", "x.csv")
    named = dataset.schema.names[::-1]  # a named model takes its columns by name, in its order
    rows = np.random.default_rng(0).normal(size=(20, 6))
    ens = jaximp.from_catboost(_train(pd.DataFrame(rows, columns=named), rows[:, 0], loss_function="RMSE",
                                      iterations=2))
    assert data_columns(dataset, ens, None, "DATA", "x.csv") == named


def _write(d, name: str, content) -> str:
    path = d / name
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    return str(path)


def _bad_inputs(d):
    """``{case: argv}`` of bad inputs, each made in the directory ``d``."""
    model, data = str(d / "model.cbm"), str(d / "data.csv")
    X = pd.read_csv(data)
    X.drop(columns="rooms").to_csv(d / "missing_column.csv", index=False)
    X.astype(object).assign(age="n/a").to_csv(d / "strings.csv", index=False)
    X.head(0).to_csv(d / "empty.csv", index=False)
    return {
        "missing model": ["explain", str(d / "nope.cbm"), data],
        "missing data": ["explain", model, str(d / "nope.csv")],
        "malformed cbm": ["explain", _write(d, "bad.cbm", b"CBM1 not a model"), data],
        "malformed json": ["explain", _write(d, "bad.json", '{"oblivious_trees": '), data],
        "unsupported model": ["explain", _write(d, "model.pkl", b"\x80\x04 a pickle"), data],
        "malformed ubj": ["explain", _write(d, "bad.ubj", b"{i\x07learnerL\x7f"), data],
        "xgboost json without trees": ["explain", _write(d, "empty.json", '{"learner": {"objective": 3}}'), data],
        "malformed lightgbm": ["explain", _write(d, "bad.txt", "tree\nversion=v4\nnum_class=x\n"), data],
        "malformed skops": ["explain", _write(d, "bad.skops", b"PK\x03\x04 not a zip"), data],
        "unknown json model": ["explain", _write(d, "other.json", '{"weights": [1, 2]}'), data],
        "malformed parquet": ["explain", model, _write(d, "bad.parquet", "not parquet")],
        "column mismatch": ["explain", model, str(d / "missing_column.csv")],
        "non-numeric column": ["explain", model, str(d / "strings.csv")],
        "no rows": ["explain", model, str(d / "empty.csv")],
        "target absent": ["explain", model, data, "--target", "price"],
        "bad method": ["explain", model, data, "--method", "shapley"],
        "bad target rows": ["explain", model, data, "--target", "target", "--target-rows", "0"],
        "bad repeats": ["explain", model, data, "--repeats", "many"],
        "bad device": ["explain", model, data, "--device", "tpu"],
        "interventional without background": ["explain", model, data, "--method", "interventional"],
        "background with another method": ["explain", model, data, "--background", data, "--method", "exact"],
        "missing background": ["explain", model, data, "--background", str(d / "nope.csv")],
        "background column mismatch": ["explain", model, data, "--background", str(d / "missing_column.csv")],
        "out is a file": ["explain", model, data, "--out", data],
        "missing argument": ["explain", model],
        "unknown option": ["explain", model, data, "--colour"],
    }


BAD_CASES = ["missing model", "missing data", "malformed cbm", "malformed json", "unsupported model",
             "malformed ubj", "xgboost json without trees", "malformed lightgbm", "malformed skops",
             "unknown json model", "malformed parquet", "column mismatch", "non-numeric column", "no rows",
             "target absent", "bad method", "bad target rows", "bad repeats", "bad device",
             "interventional without background", "background with another method", "missing background",
             "background column mismatch", "out is a file", "missing argument", "unknown option"]


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_input_is_one_line_and_a_nonzero_exit(files, capfd, case):
    argv = _bad_inputs(files.dir)[case]
    if case != "out is a file":
        argv += ["--out", str(files.dir / "out_bad")]
    status, stdout, stderr = run(argv, capfd)
    assert status not in (0, None)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("jaximp explain: error: ")
    assert "Traceback" not in stderr + stdout


def test_exact_on_an_xgboost_model_is_refused_before_any_work(tmp_path, capfd):
    """--method exact is CatBoost's, for symmetric trees: refused once the model is read, before
    DATA is read or anything is written, naming the methods the model has."""
    fitted = cli_xgboost("regression")
    fitted.model.save_model(str(tmp_path / "model.json"))
    fitted.X.to_csv(tmp_path / "data.csv", index=False)
    out = tmp_path / "out"
    status, stdout, stderr = run(["explain", tmp_path / "model.json", tmp_path / "data.csv", "--method", "exact",
                                  "--out", out, "--no-progress"], capfd)
    assert status == 1
    assert stderr.strip().splitlines() == [
        "jaximp explain: error: --method exact is not available for this XGBoost model: exact SHAP values "
        "(CatBoost's shap_calc_type='Exact') are defined for CatBoost's symmetric (oblivious) trees only, and this "
        "model's trees are not symmetric; this model has --method path_dependent, approximate or interventional"]
    assert stdout == ""  # no "SHAP values (exact): ... -> shap.parquet", nothing begun
    assert not out.exists()


@pytest.mark.skipif(any(d.platform == "gpu" for d in jax.devices()) or bool(os.environ.get("JAX_PLATFORMS")),
                    reason="a GPU is visible")
def test_device_gpu_without_a_gpu_is_one_line(files, capfd):
    status, _, stderr = run(["explain", files.dir / "model.cbm", files.dir / "data.csv", "--device", "gpu",
                             "--out", files.dir / "out_gpu"], capfd)
    assert status == 1
    assert stderr.strip().splitlines() == [stderr.strip()]
    assert "--device gpu" in stderr and "GPU" in stderr


def test_bad_input_from_a_real_process(files):
    """``python -m jaximp`` in a subprocess: what a user sees, warnings of imported libraries included."""
    result = subprocess.run([sys.executable, "-m", "jaximp", "explain", str(files.dir / "model.cbm"),
                             str(files.dir / "missing.csv"), "--out", str(files.dir / "out_process")],
                            capture_output=True, text=True, env=_env())
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "jaximp explain: error: DATA must be an existing CSV or Parquet file, a directory of Parquet files, or a "
        f"glob pattern that matches files; got {str(files.dir / 'missing.csv')!r}, which is not an existing file or "
        "directory"]


def _env():
    root = os.path.dirname(os.path.dirname(os.path.abspath(jaximp.__file__)))
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}


def test_every_option_has_help_and_no_markup():
    root = parser()
    commands = next(a for a in root._actions if a.choices and "explain" in a.choices).choices
    for name, command in commands.items():
        for action in command._actions:
            assert action.help, f"jaximp {name}: {action.option_strings or action.dest} has no help text"
        text = command.format_help()
        assert "``" not in text and ":func:" not in text and ":mod:" not in text
    assert "``" not in root.format_help()


def test_demo_saves_its_model_and_data_and_explains_them(tmp_path, capfd):
    from sklearn.datasets import load_diabetes

    from jaximp._frontends.demo import explain_demo

    data = load_diabetes(as_frame=True)
    X, y = data.data.astype(np.float32), data.target.to_numpy()
    model = catboost.CatBoostRegressor(iterations=20, depth=4, verbose=0, random_seed=0,
                                       allow_writing_files=False).fit(X, y)
    report = explain_demo(model, X, y, str(tmp_path / "demo"), progress=False)
    assert report == str(tmp_path / "demo" / "report" / "report.md")
    assert (tmp_path / "demo" / "model.cbm").exists() and (tmp_path / "demo" / "diabetes.csv").exists()
    table = pd.read_csv(tmp_path / "demo" / "report" / "importances.csv")
    assert set(table.feature) == set(X.columns) and "permutation_importance" in table
    _check_report(tmp_path / "demo" / "report", ["442 rows", "`target`"])
    assert "jaximp explain" in capfd.readouterr().out


@pytest.mark.slow
def test_demo_command(tmp_path):
    """``python -m jaximp demo``, as the README runs it (trains, compares with CatBoost, explains)."""
    result = subprocess.run([sys.executable, "-m", "jaximp", "demo", "--iterations", "30", "--out",
                             str(tmp_path / "demo"), "--no-progress"], capture_output=True, text=True, env=_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == f"report: {tmp_path / 'demo' / 'report' / 'report.md'}"
    assert "max |jaximp - CatBoost" in result.stdout


def test_sample_rows_takes_the_rows_asked_across_batches():
    import pyarrow as pa

    from jaximp._frontends.explain import sample_rows

    table = pa.table({"a": np.arange(1000), "b": np.arange(1000) * 2.0})
    rows = np.sort(np.random.default_rng(0).choice(1000, 77, replace=False))
    taken = sample_rows(table.to_batches(max_chunksize=64), rows)
    np.testing.assert_array_equal(taken.a, rows)
    np.testing.assert_array_equal(taken.b, rows * 2.0)
