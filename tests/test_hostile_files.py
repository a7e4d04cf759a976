"""Files and the command line: nothing lost, nothing overwritten by surprise, nothing half
written that looks whole.

A run of ``jaximp.explain_files`` or ``jaximp explain`` that fails or is interrupted part way (a
kernel raising, a ``KeyboardInterrupt``, a real SIGINT to the process) leaves its outputs as they
were before it: an earlier run's files byte for byte, or no file, and no partial file under a
name that looks whole. Symbolic links are never written through; ``DATA`` is taken literally
before it is taken as a pattern; the demo writes in a private new folder; a file of several that
lacks a column, or a source that includes the output, is refused naming it; a model file nested
too deeply is one line and a non-zero exit.

Oracles: the bytes of the files before the run; jaximp's in-memory functions on the same rows
(``shap_importance``); the exit status and stderr of the command.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
import signal
import subprocess
import sys
import time
import zipfile

import catboost
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from command_line import run
from hostile import EXAMPLES, assert_clear_refusal, outcome
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jaximp
from jaximp._frontends import demo as demo_module
from jaximp._frontends import explain as explain_module
from jaximp._frontends.cli import main
from jaximp._shap.explainer import Explainer

NAMES = ["income", "age", "rooms", "floor"]
N_ROWS, BATCH_ROWS = 240, 60  # four record batches


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A small CatBoost model (.cbm) and its rows as CSV and as two Parquet files."""
    d = tmp_path_factory.mktemp("files")
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(N_ROWS, len(NAMES))).astype(np.float32), columns=NAMES)
    y = (X.income * 2 + np.sin(3 * X.age) + X.rooms * X.floor).astype(np.float32)
    model = catboost.CatBoost(dict(loss_function="RMSE", iterations=10, depth=3, random_seed=0, verbose=0,
                                   thread_count=1, allow_writing_files=False)).fit(X, y)
    model.save_model(str(d / "model.cbm"))
    X.assign(target=y).to_csv(d / "data.csv", index=False)
    (d / "parts").mkdir()
    X.iloc[:120].to_parquet(d / "parts" / "a.parquet")
    X.iloc[120:].to_parquet(d / "parts" / "b.parquet")
    return d, jaximp.from_catboost(model), X, y


def snapshot(folder) -> dict:
    """``{relative path: sha256}`` of every file under ``folder`` (hidden ones included)."""
    found = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
    return found


class Failure(Exception):
    """A kernel failing part way."""


def failing_at(monkeypatch, batch: int, error: BaseException):
    """Make the explainer's kernel raise ``error`` on its ``batch``-th call (1-based)."""
    original, calls = Explainer.shap_values, []

    def shap_values(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == batch:
            raise error
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Explainer, "shap_values", shap_values)
    return calls


# explain_files ----------------------------------------------------------------------------------------------------


@given(batch=st.integers(1, N_ROWS // BATCH_ROWS), interrupt=st.booleans(), earlier=st.booleans())
@settings(max_examples=min(EXAMPLES, 12), deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_explain_files_failing_part_way_leaves_out_as_it_was(files, tmp_path_factory, monkeypatch, batch, interrupt,
                                                             earlier):
    """A kernel raising, or a KeyboardInterrupt, on any batch: ``out`` keeps an earlier run's bytes
    (or is not created), and no other file is left in its folder."""
    d, ens, _, _ = files
    folder = tmp_path_factory.mktemp("out")
    out = folder / "shap.parquet"
    if earlier:
        jaximp.explain_files(ens, d / "data.csv", out=out, batch_rows=BATCH_ROWS, progress=False)
    before = snapshot(folder)
    with monkeypatch.context() as patch:
        calls = failing_at(patch, batch, KeyboardInterrupt() if interrupt else Failure("kernel failed"))
        with pytest.raises(KeyboardInterrupt if interrupt else Failure):
            jaximp.explain_files(ens, d / "data.csv", out=out, batch_rows=BATCH_ROWS, progress=False)
    assert len(calls) == batch
    assert snapshot(folder) == before


def test_explain_files_writes_a_hidden_partial_file_until_complete(files, tmp_path, monkeypatch):
    """While a run writes, ``out`` is not there (or is the earlier file) and the rows go to a
    hidden ``.shap.parquet.<random>.partial``; at the end ``out`` holds every row."""
    d, ens, X, _ = files
    out = tmp_path / "shap.parquet"
    seen, original = [], Explainer.shap_values

    def shap_values(self, *args, **kwargs):
        seen.append(sorted(os.listdir(tmp_path)))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Explainer, "shap_values", shap_values)
    mean_abs = jaximp.explain_files(ens, d / "data.csv", out=out, batch_rows=BATCH_ROWS, progress=False)
    assert len(seen) == N_ROWS // BATCH_ROWS
    for listing in seen:
        assert len(listing) == 1 and listing[0].startswith(".shap.parquet.") and listing[0].endswith(".partial")
    assert os.listdir(tmp_path) == ["shap.parquet"] and pq.read_table(out).num_rows == N_ROWS
    np.testing.assert_allclose(mean_abs, jaximp.shap_importance(ens, X), rtol=1e-5, atol=1e-6)


def test_explain_files_never_writes_through_a_link(files, tmp_path):
    d, ens, _, _ = files
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "link.parquet").symlink_to(victim)
    (tmp_path / "dangling.parquet").symlink_to(tmp_path / "nowhere")
    for link in ("link.parquet", "dangling.parquet"):
        kind, error = outcome(lambda link=link: jaximp.explain_files(ens, d / "data.csv", out=tmp_path / link,
                                                                     progress=False))
        assert kind == "refused"
        assert_clear_refusal(error, "symbolic link")
    assert victim.read_text() == "keep me" and not (tmp_path / "nowhere").exists()
    with pytest.raises(ValueError, match="explain_files: out .* is a directory"):
        jaximp.explain_files(ens, d / "data.csv", out=tmp_path, progress=False)
    with pytest.raises(ValueError, match=r"explain_files: out must be a file path in an existing folder; got .*, "
                                         r"whose folder .* does not exist"):
        jaximp.explain_files(ens, d / "data.csv", out=tmp_path / "no" / "shap.parquet", progress=False)


def test_a_literal_path_is_taken_before_a_pattern(files, tmp_path):
    """``data[1].csv`` names a file; as a pattern it would match ``data1.csv`` instead."""
    d, ens, X, _ = files
    X.to_csv(tmp_path / "data[1].csv", index=False)
    X.iloc[:7].to_csv(tmp_path / "data1.csv", index=False)
    out = tmp_path / "out.parquet"
    jaximp.explain_files(ens, str(tmp_path / "data[1].csv"), out=out, progress=False)
    assert pq.read_table(out).num_rows == N_ROWS
    jaximp.explain_files(ens, str(tmp_path / "data[0-9].csv"), out=out, progress=False)  # a pattern still works
    assert pq.read_table(out).num_rows == 7


def test_a_file_lacking_a_column_is_named(files, tmp_path):
    """pyarrow would read a column that one of several files lacks as missing values: refused,
    naming the file and the column (Parquet and CSV, whichever file lacks it)."""
    d, ens, X, _ = files
    for suffix, write in ((".parquet", lambda f, p: f.to_parquet(p)), (".csv", lambda f, p: f.to_csv(p, index=False))):
        for lacking in ("a", "b"):
            folder = tmp_path / f"{lacking}{suffix}.d"
            folder.mkdir()
            for name, part in (("a", X.iloc[:100]), ("b", X.iloc[100:])):
                write(part.drop(columns="rooms") if name == lacking else part, folder / f"{name}{suffix}")
            kind, error = outcome(lambda folder=folder, suffix=suffix: jaximp.explain_files(
                ens, str(folder / f"*{suffix}"), progress=False))
            assert kind == "refused", error
            assert_clear_refusal(error, f"{lacking}{suffix}", "'rooms'")


def test_a_source_that_includes_out_is_refused(files, tmp_path):
    """A pattern that matches an earlier run's output written beside the data."""
    d, ens, X, _ = files
    X.to_parquet(tmp_path / "rows.parquet")
    jaximp.explain_files(ens, tmp_path / "rows.parquet", out=tmp_path / "shap.parquet", progress=False)
    before = snapshot(tmp_path)
    with pytest.raises(ValueError, match="explain_files: the files to read include out"):
        jaximp.explain_files(ens, str(tmp_path / "*.parquet"), out=tmp_path / "shap.parquet", progress=False)
    assert snapshot(tmp_path) == before


def test_a_file_that_fails_to_parse_part_way_is_one_clear_error(files, tmp_path):
    d, ens, X, _ = files
    text = X.to_csv(index=False).splitlines()
    text[200] = "1.0,oops,2.0,3.0"  # a value that does not parse, far past the first block pyarrow reads
    (tmp_path / "rows.csv").write_text("\n".join(text) + "\n")
    kind, error = outcome(lambda: jaximp.explain_files(ens, tmp_path / "rows.csv", out=tmp_path / "shap.parquet",
                                                       batch_rows=BATCH_ROWS, progress=False))
    assert kind == "refused"
    assert_clear_refusal(error)
    assert os.listdir(tmp_path) == ["rows.csv"]


# jaximp explain -----------------------------------------------------------------------------------------------------




@pytest.fixture(scope="module")
def earlier_run(files, tmp_path_factory):
    """An output folder holding a complete earlier run (with --target), and its bytes."""
    d, _, _, _ = files
    out = tmp_path_factory.mktemp("explain") / "out"
    assert main(["explain", str(d / "model.cbm"), str(d / "data.csv"), "--target", "target", "--out", str(out),
                 "--batch-rows", str(BATCH_ROWS), "--no-progress"]) == 0
    return out, snapshot(out)


@pytest.mark.parametrize("where, error, status", [
    ("the second batch", Failure("kernel failed"), None),
    ("the second batch", KeyboardInterrupt(), 130),
    ("the plots", ValueError("the plots failed"), 1),
])
def test_explain_failing_part_way_keeps_the_earlier_run(files, earlier_run, monkeypatch, capfd, where, error, status):
    """Every output of the earlier run is kept byte for byte and no staging folder is left, whether
    the new run fails in its SHAP pass or while plotting, by an error or an interruption."""
    d, _, _, _ = files
    out, before = earlier_run
    if where == "the plots":
        def fail(*args, **kwargs):
            raise error
        monkeypatch.setattr(explain_module, "write_plots", fail)
    else:
        failing_at(monkeypatch, 2, error)
    argv = ["explain", d / "model.cbm", d / "data.csv", "--out", out, "--batch-rows", BATCH_ROWS, "--no-progress"]
    if status is None:  # not an input error: it propagates
        with pytest.raises(Failure):
            main([str(a) for a in argv])
        capfd.readouterr()
    else:
        got, _, stderr = run(argv, capfd)
        assert got == status and len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr
    assert snapshot(out) == before


def test_explain_replaces_the_earlier_run_when_complete(files, tmp_path, capfd):
    """A complete run replaces the earlier outputs of the same names and leaves no staging folder;
    its report describes the new run."""
    d, ens, X, _ = files
    out = tmp_path / "out"
    assert run(["explain", d / "model.cbm", d / "data.csv", "--target", "target", "--out", out, "--no-progress"],
               capfd)[0] == 0
    first = snapshot(out)
    assert run(["explain", d / "model.cbm", d / "parts", "--out", out, "--no-progress"], capfd)[0] == 0
    second = snapshot(out)
    assert not [name for name in os.listdir(out) if name.startswith(".")]
    assert second["shap.parquet"] != first["shap.parquet"] or second["report.md"] != first["report.md"]
    assert "parts" in (out / "report.md").read_text()
    np.testing.assert_allclose(pd.read_csv(out / "importances.csv").set_index("feature").loc[NAMES, "mean_abs_shap"],
                               jaximp.shap_importance(ens, X), rtol=1e-5, atol=1e-6)


def test_explain_never_writes_through_a_link(files, tmp_path, capfd):
    d, _, _, _ = files
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "report.md").write_text("keep me")
    (tmp_path / "linked_out").symlink_to(victim)
    status, _, stderr = run(["explain", d / "model.cbm", d / "data.csv", "--out", tmp_path / "linked_out"], capfd)
    assert status == 1 and "symbolic link" in stderr and len(stderr.strip().splitlines()) == 1
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").symlink_to(victim / "report.md")
    status, _, stderr = run(["explain", d / "model.cbm", d / "data.csv", "--out", out], capfd)
    assert status == 1 and "symbolic link" in stderr and "report.md" in stderr
    assert (victim / "report.md").read_text() == "keep me" and os.listdir(victim) == ["report.md"]
    assert os.listdir(out) == ["report.md"]  # the link, nothing written beside it


def test_explain_refuses_a_data_file_lacking_a_column(files, tmp_path, capfd):
    d, _, X, y = files
    (tmp_path / "data").mkdir()
    X.assign(target=y).iloc[:100].to_csv(tmp_path / "data" / "a.csv", index=False)
    X.assign(target=y).iloc[100:].drop(columns="target").to_csv(tmp_path / "data" / "b.csv", index=False)
    status, _, stderr = run(["explain", d / "model.cbm", str(tmp_path / "data" / "*.csv"), "--target", "target",
                             "--out", tmp_path / "out"], capfd)
    assert status == 1 and len(stderr.strip().splitlines()) == 1
    assert "b.csv" in stderr and "'target'" in stderr
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")


def test_explain_a_literal_data_path_with_brackets(files, tmp_path, capfd):
    d, _, X, y = files
    X.assign(target=y).to_csv(tmp_path / "data[1].csv", index=False)
    status, _, stderr = run(["explain", d / "model.cbm", tmp_path / "data[1].csv", "--out", tmp_path / "out",
                             "--no-progress"], capfd)
    assert status == 0, stderr
    assert pq.read_table(tmp_path / "out" / "shap.parquet").num_rows == N_ROWS


def test_explain_deeply_nested_json_is_one_line(files, tmp_path, capfd, monkeypatch):
    d, _, _, _ = files
    deep = tmp_path / "deep.json"
    deep.write_text('{"learner": ' * 100_000 + "1" + "}" * 100_000)
    status, stdout, stderr = run(["explain", deep, d / "data.csv", "--out", tmp_path / "out"], capfd)
    assert status == 1 and "Traceback" not in stderr + stdout
    assert stderr.strip().splitlines() == [f"jaximp explain: error: MODEL {str(deep)!r} is nested too deeply to be "
                                           "read as a model file (a damaged or hostile file)"]

    def recursing(path):  # a parser recursing past the stack inside an importer
        raise RecursionError("maximum recursion depth exceeded")
    monkeypatch.setattr(explain_module, "from_catboost", recursing)
    status, _, stderr = run(["explain", d / "model.cbm", d / "data.csv", "--out", tmp_path / "out"], capfd)
    assert status == 1 and len(stderr.strip().splitlines()) == 1 and "nested too deeply" in stderr


def test_explain_with_a_target_on_a_model_without_a_loss(files, tmp_path, capfd):
    """An XGBoost count:poisson model: permutation importance and LossFunctionChange score with
    the model's loss, which jaximp does not compute for it: a note, not a failed run."""
    import xgboost as xgb

    d, _, X, y = files
    booster = xgb.train(dict(objective="count:poisson", max_depth=3, nthread=1, seed=0),
                        xgb.DMatrix(X, np.round(np.abs(y))), num_boost_round=5)
    booster.save_model(str(tmp_path / "poisson.json"))
    status, _, stderr = run(["explain", tmp_path / "poisson.json", d / "data.csv", "--target", "target", "--out",
                             tmp_path / "out", "--no-progress"], capfd)
    assert status == 0, stderr
    report = (tmp_path / "out" / "report.md").read_text()
    assert "not computed" in report and "scoring=" in report
    assert "permutation_importance" not in pd.read_csv(tmp_path / "out" / "importances.csv")


def test_the_demo_writes_in_a_private_new_folder(tmp_path):
    first, second = demo_module.demo_folder(None), demo_module.demo_folder(None)
    try:
        assert first != second and os.path.basename(first).startswith("jaximp-demo-")
        assert os.listdir(first) == [] and (os.stat(first).st_mode & 0o777) == 0o700
    finally:
        os.rmdir(first)
        os.rmdir(second)
    assert demo_module.demo_folder(str(tmp_path)) == str(tmp_path)


def test_the_demo_never_writes_through_a_link(tmp_path):
    from sklearn.datasets import load_diabetes

    victim = tmp_path / "victim.cbm"
    victim.write_text("keep me")
    out = tmp_path / "demo"
    out.mkdir()
    (out / "model.cbm").symlink_to(victim)
    data = load_diabetes(as_frame=True)
    model = catboost.CatBoostRegressor(iterations=2, depth=2, verbose=0, allow_writing_files=False)
    model.fit(data.data, data.target)
    with pytest.raises(ValueError, match="symbolic link"):
        demo_module.explain_demo(model, data.data, data.target.to_numpy(), str(out), progress=False)
    assert victim.read_text() == "keep me"


@pytest.mark.slow
def test_explain_interrupted_by_a_signal(files, earlier_run, tmp_path):
    """``jaximp explain`` in a real process, sent SIGINT while it writes its SHAP values: exit 130,
    the earlier run's outputs byte for byte, no staging folder left."""
    d, _, X, y = files
    big = tmp_path / "big.csv"
    pd.concat([X.assign(target=y)] * 400, ignore_index=True).to_csv(big, index=False)  # 96,000 rows
    out, before = earlier_run
    root = os.path.dirname(os.path.dirname(os.path.abspath(jaximp.__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    process = subprocess.Popen([sys.executable, "-m", "jaximp", "explain", str(d / "model.cbm"), str(big),
                                "--out", str(out), "--batch-rows", "500", "--no-progress"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        staging = [n for n in os.listdir(out) if n.startswith(".jaximp-explain-")]
        if staging and os.listdir(out / staging[0]):  # writing its first output
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == "jaximp explain: interrupted"
    assert snapshot(out) == before


# Damaged skops files --------------------------------------------------------------------------------------------------


@functools.cache
def _skops_forest() -> tuple[bytes, pd.DataFrame]:
    """A small random forest regressor saved with skops, and rows to predict."""
    import skops.io as sio
    from models import cli_sklearn

    fitted = cli_sklearn("regression")
    return sio.dumps(fitted.model), fitted.X.iloc[:20]


def _rezipped(data: bytes, edit) -> bytes:
    """``data`` (a zip file) with its ``schema.json`` replaced by ``edit(text)``."""
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            content = source.read(info.filename)
            if info.filename == "schema.json":
                content = edit(content.decode()).encode()
            target.writestr(info.filename, content)
    return out.getvalue()


@st.composite
def skops_mutants(draw):
    """A skops file of a random forest, truncated, with a byte flipped, or with a character of
    its schema (types, keys, numbers, shapes) changed."""
    data, _ = _skops_forest()
    kind = draw(st.sampled_from(["truncate", "flip", "schema"]))
    if kind == "truncate":
        return data[:draw(st.integers(0, len(data) - 1))]
    if kind == "flip":
        at = draw(st.integers(0, len(data) - 1))
        return data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1:]
    text = zipfile.ZipFile(io.BytesIO(data)).read("schema.json").decode()
    at = draw(st.integers(0, len(text) - 1))
    new = draw(st.sampled_from(list('0123456789-"{}[],:.abcxyz ')))
    return _rezipped(data, lambda t: t[:at] + new + t[at + 1:])


@settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(mutant=skops_mutants())
def test_damaged_skops_files_give_the_models_numbers_or_one_clear_line(mutant, tmp_path):
    """``jaximp explain``'s reading of a skops file (the trusted-types check, then the import):
    the model skops loads from the same bytes, with its predictions, or a ValueError/TypeError
    naming MODEL and skops; never another error, a hang or a huge allocation."""
    import skops.io as sio

    path = tmp_path / "model.skops"
    path.write_bytes(mutant)
    kind, result = outcome(lambda: explain_module.load_model(str(path)))
    assert kind != "failed", f"{type(result).__name__}: {result}"
    if kind == "refused":
        message = str(result)
        assert message.startswith("MODEL ") or message.startswith("from_sklearn: "), message
        return
    _, rows = _skops_forest()
    estimator = sio.load(io.BytesIO(mutant), trusted=sio.get_untrusted_types(data=mutant))
    np.testing.assert_allclose(jaximp.predict(result.ens, rows), estimator.predict(rows), rtol=1e-5, atol=1e-4)


def test_a_skops_model_missing_an_attribute_is_refused_clearly(tmp_path):
    """A schema edited so that skops builds the forest without one of its parameters (scikit-learn's
    fitted check then fails inside scikit-learn with an AttributeError): one clear ValueError."""
    import skops.io as sio

    data, _ = _skops_forest()
    mutant = _rezipped(data, lambda text: text.replace('"estimator"', '"estimatoR"', 1))
    assert '"estimatoR"' in zipfile.ZipFile(io.BytesIO(mutant)).read("schema.json").decode()
    estimator = sio.load(io.BytesIO(mutant), trusted=sio.get_untrusted_types(data=mutant))
    assert not hasattr(estimator, "estimator")
    path = tmp_path / "model.skops"
    path.write_bytes(mutant)
    with pytest.raises(ValueError, match=r"^from_sklearn: the fitted RandomForestRegressor is inconsistent"):
        explain_module.load_model(str(path))
