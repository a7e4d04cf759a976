"""``jaximp.explain_files``: Parquet and CSV files streamed batch by batch, SHAP values written to
Parquet, global importances returned, for both layouts.

Oracles: the same functions on the rows in memory (per-row values written exactly; global
importances, float32 sums of batches, to ``rtol=1e-5`` of the largest entry), the error
messages.
"""

from __future__ import annotations

import re

import catboost
import numpy as np
import pytest
from command_line import run
from models import make_data, train
from oracles import assert_close, mean_abs

import jaximp


def assert_mean_close(got, expected):
    assert_close(got, expected, floor=0.0)


def write_parquet(frame, directory, parts=3, row_group_size=50):
    """``frame`` split over ``parts`` Parquet files of several row groups each: their glob."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for i, chunk in enumerate(np.array_split(np.arange(len(frame)), parts)):
        pq.write_table(pa.Table.from_pandas(frame.iloc[chunk], preserve_index=False),
                       directory / f"part-{i}.parquet", row_group_size=row_group_size)
    return str(directory / "part-*.parquet")


def test_explain_files_streams_parquet_like_memory(ensemble, tmp_path, capfd):
    import pandas as pd
    import pyarrow.parquet as pq

    ens, X = ensemble
    frame = pd.DataFrame(X, columns=list(ens.feature_names))
    source = write_parquet(frame, tmp_path)
    out = tmp_path / "shap.parquet"
    got = jaximp.explain_files(ens, source, out=out, batch_rows=64, columns=list(ens.feature_names))
    written = pq.read_table(out).to_pandas()
    k = ens.n_outputs
    assert len(written) == len(X) and list(written.columns[:k]) == [f"shap_{ens.feature_names[0]}_{c}"
                                                                   for c in jaximp._frontends.files.output_labels(ens)]
    shap = written.filter(like="shap_").to_numpy().reshape(len(X), ens.n_features, k)
    np.testing.assert_array_equal(shap, jaximp.shap_values(ens, X))
    np.testing.assert_array_equal(written.filter(like="prediction_").to_numpy(), jaximp.predict(ens, X))
    assert_mean_close(got, mean_abs(jaximp.shap_values(ens, X)))
    assert "explain_files" in capfd.readouterr().err  # the progress bar
    jaximp.explain_files(ens, source, columns=list(ens.feature_names), progress=False)
    assert capfd.readouterr().err == ""


def test_explain_files_reads_csv_by_column_name(tmp_path):
    """A model trained on a DataFrame reads its columns by name (extra columns ignored), from CSV."""
    import pandas as pd

    X, y = make_data("regression", n=300)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    model = catboost.CatBoostRegressor(iterations=10, depth=3, random_seed=0, verbose=0, thread_count=1,
                                       allow_writing_files=False).fit(frame, y)
    ens = jaximp.from_catboost(model)
    frame.insert(0, "id", np.arange(len(frame)))
    frame[list(reversed(frame.columns))].to_csv(tmp_path / "rows.csv", index=False)
    got = jaximp.explain_files(ens, tmp_path / "rows.csv", progress=False, method="interventional",
                               background=frame[list(ens.feature_names)][:30])
    expected = mean_abs(jaximp.shap_values(ens, X, method="interventional", background=X[:30]))
    assert_mean_close(got, expected)


def test_explain_files_with_categorical_columns(tmp_path):
    import pandas as pd
    import pyarrow.parquet as pq

    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"a": rng.choice(list("pqrstu"), 400), "num": rng.normal(size=400).astype(np.float32),
                          "b": rng.choice(list("xyz"), 400)})
    y = frame.a.isin(["p", "q"]).astype(float) + frame.num
    model = catboost.CatBoostRegressor(iterations=15, depth=3, cat_features=["a", "b"], random_seed=0, verbose=0,
                                       thread_count=1, allow_writing_files=False).fit(frame, y)
    ens = jaximp.from_catboost(model)
    out = tmp_path / "shap.parquet"
    jaximp.explain_files(ens, write_parquet(frame, tmp_path), out=out, progress=False, batch_rows=100)
    written = pq.read_table(out).to_pandas()
    np.testing.assert_array_equal(written[[f"shap_{c}" for c in ens.feature_names]].to_numpy(),
                                  jaximp.shap_values(ens, frame))
    np.testing.assert_array_equal(written["prediction"].to_numpy(), jaximp.predict(ens, frame))


def test_explain_files_bad_input(tmp_path):
    import pandas as pd

    model, X, _, _ = train("regression")
    ens = jaximp.from_catboost(model)
    pattern = str(tmp_path / "*.parquet")
    with pytest.raises(ValueError) as error:  # a bad input, not an OSError
        jaximp.explain_files(ens, pattern)
    assert not isinstance(error.value, OSError)
    assert str(error.value).startswith("explain_files: source must be an existing CSV or Parquet file")
    assert str(error.value).endswith(f"; got {pattern!r}, a pattern that matches no file")
    source = write_parquet(pd.DataFrame(X, columns=[f"c{i}" for i in range(X.shape[1])]), tmp_path, parts=1)
    with pytest.raises(ValueError, match=r"columns \['nope'\]"):
        jaximp.explain_files(ens, source, columns=["nope"], progress=False)
    with pytest.raises(ValueError, match="batch_rows"):
        jaximp.explain_files(ens, source, batch_rows=0, progress=False)
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(ValueError, match="cannot read"):
        jaximp.explain_files(ens, tmp_path / "junk.parquet", progress=False)


# entry point -> (how it is given the missing path d / name, the function and argument its message names, name)
MISSING_PATH = {
    "from_catboost .cbm": (lambda d, ens: jaximp.from_catboost(d / "missing.cbm"), "from_catboost: model_or_path",
                           "missing.cbm"),
    "from_catboost .json": (lambda d, ens: jaximp.from_catboost(str(d / "missing.json")),
                            "from_catboost: model_or_path", "missing.json"),
    "from_xgboost .json": (lambda d, ens: jaximp.from_xgboost(d / "missing.json"), "from_xgboost: model",
                           "missing.json"),
    "from_xgboost .ubj": (lambda d, ens: jaximp.from_xgboost(str(d / "missing.ubj")), "from_xgboost: model",
                          "missing.ubj"),
    "from_lightgbm": (lambda d, ens: jaximp.from_lightgbm(d / "missing.txt"), "from_lightgbm: model", "missing.txt"),
    "get_feature_importance": (lambda d, ens: jaximp.get_feature_importance(str(d / "missing.cbm")),
                               "from_catboost: model_or_path", "missing.cbm"),
    "TreeExplainer": (lambda d, ens: jaximp.TreeExplainer(str(d / "missing.json")), "MODEL", "missing.json"),
    "explain_files": (lambda d, ens: jaximp.explain_files(ens, d / "missing.parquet", progress=False),
                      "explain_files: source", "missing.parquet"),
    "explain_files list": (lambda d, ens: jaximp.explain_files(ens, [d / "rows.csv", d / "missing.csv"],
                                                               progress=False), "explain_files: source", "missing.csv"),
    "jaximp explain MODEL": (["explain", "{d}/missing.json", "{d}/rows.csv"], "MODEL", "missing.json"),
    "jaximp explain DATA": (["explain", "{d}/model.cbm", "{d}/missing.parquet"], "DATA", "missing.parquet"),
    "jaximp explain --background": (["explain", "{d}/model.cbm", "{d}/rows.csv", "--background", "{d}/missing.csv"],
                                    "--background", "missing.csv"),
}
DATA_ARGUMENTS = ("explain_files: source", "DATA", "--background")  # a directory of Parquet files is read too


@pytest.mark.parametrize("entry", list(MISSING_PATH))
def test_a_missing_path_is_one_value_error_with_one_message(entry, tmp_path, capfd):
    """Every entry point given a path that names no file: a ValueError (a bad input, not an
    OSError) saying ``"{function}: {argument} must be ...; got 'path', which is not an existing
    file"`` (``file or directory`` for data); on the command line, that message as its one line,
    with nothing written."""
    import pandas as pd

    model, X, _, _ = train("regression", depth=2, iterations=2)
    model.save_model(str(tmp_path / "model.cbm"))
    pd.DataFrame(X, columns=model.feature_names_).to_csv(tmp_path / "rows.csv", index=False)
    call, who, name = MISSING_PATH[entry]
    if isinstance(call, list):
        argv = [a.format(d=tmp_path) for a in call] + ["--out", str(tmp_path / "out"), "--no-progress"]
        status, _, stderr = run(argv, capfd)
        assert status == 1
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("jaximp explain: error: "), stderr
        message = lines[0].removeprefix("jaximp explain: error: ")
        assert not (tmp_path / "out").exists()
    else:
        with pytest.raises(ValueError) as error:
            call(tmp_path, jaximp.from_catboost(model))
        assert not isinstance(error.value, OSError)
        message = str(error.value)
    kind = "file or directory" if who in DATA_ARGUMENTS else "file"
    assert re.fullmatch(rf"{re.escape(who)} must be [^;]+; got {re.escape(repr(str(tmp_path / name)))}, which is "
                        rf"not an existing {kind}", message), message
