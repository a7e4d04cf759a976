"""The bounded pipeline behind ``jaximp.explain_files``: a fixed number of batches alive whatever
the number of batches in the source, rows in the source's order, exceptions of every stage raised
in the caller with no thread left running.

Oracles: counts kept by the test itself (batches produced minus batches consumed, rows read from
pyarrow minus rows written), not the pipeline's own; jaximp's in-memory functions on the same
rows; the list of live threads. Nothing is timed: a slow writer only lets the reader run ahead.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.ensemble import GradientBoostingRegressor
from sklearn.tree import DecisionTreeRegressor
from test_frontends_files import write_parquet

import jaximp
from jaximp._frontends import files, streaming
from jaximp._frontends.streaming import MAX_BATCHES_ALIVE, Tally, rechunked, run_pipeline
from jaximp._shap.explainer import Explainer


def pipeline_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name in ("jaximp-read", "jaximp-write")]


class Counts:
    """Batches produced and consumed, counted by the test; the most alive at once."""

    def __init__(self) -> None:
        self.produced, self.consumed, self.peak = 0, 0, 0

    def source(self, n: int):
        for i in range(n):
            self.produced += 1
            self.peak = max(self.peak, self.produced - self.consumed)
            yield i

    def consume(self, got: list):
        def consume(item):
            time.sleep(0.001)  # a slow writer: the reader and the computing run ahead until held back
            got.append(item)
            self.consumed += 1
        return consume


@pytest.mark.parametrize("n_batches", [1, 10, 300])
def test_batches_alive_are_bounded_whatever_the_source(n_batches):
    counts, tally, got = Counts(), Tally(), []
    run_pipeline(counts.source(n_batches), lambda i: i * 10, lambda x: x + 1, counts.consume(got), tally=tally)
    assert got == [i * 10 + 1 for i in range(n_batches)]  # every batch, in order
    assert counts.peak <= MAX_BATCHES_ALIVE and tally.peak <= MAX_BATCHES_ALIVE
    assert tally.batches == n_batches and tally.alive == 0
    if n_batches == 300:
        assert counts.peak > 2  # the stages overlap: the reader ran ahead of the writer
    assert pipeline_threads() == []


def test_rows_alive_in_explain_files_are_bounded(monkeypatch, tmp_path):
    """Through ``explain_files``: many small batches from several files of several row groups; the
    rows read from pyarrow but not yet written never exceed the bound's batches (and one batch's
    pieces being joined); the output is every row in the files' order, as in memory."""
    model_rows, n, batch_rows = 400, 3000, 16
    rng = np.random.default_rng(0)
    X = rng.normal(size=(model_rows, 5)).astype(np.float32)
    model = GradientBoostingRegressor(n_estimators=5, max_depth=3, random_state=0)
    ens = jaximp.from_sklearn(model.fit(X, X[:, 0] + X[:, 1] * X[:, 2]))
    rows = pd.DataFrame(rng.normal(size=(n, 5)).astype(np.float32), columns=[f"x{i}" for i in range(5)])
    source = write_parquet(rows, tmp_path, parts=3, row_group_size=50)  # 60 row groups, 188 batches
    read, written, peak = [0], [0], [0]
    scan, write = files.scan, files._ParquetOutput.write

    def counted_scan(*args, **kwargs):
        for batch in scan(*args, **kwargs):
            read[0] += batch.num_rows
            peak[0] = max(peak[0], read[0] - written[0])
            yield batch

    def slow_write(self, phi, raw):
        time.sleep(0.001)
        write(self, phi, raw)
        written[0] += len(phi)

    monkeypatch.setattr(files, "scan", counted_scan)
    monkeypatch.setattr(files._ParquetOutput, "write", slow_write)
    out = tmp_path / "shap.parquet"
    mean_abs = jaximp.explain_files(ens, source, out=out, batch_rows=batch_rows, progress=False)
    assert read[0] == written[0] == n
    assert peak[0] <= (MAX_BATCHES_ALIVE + 1) * batch_rows
    written_table = pq.read_table(out).to_pandas()
    np.testing.assert_array_equal(written_table.filter(like="shap_").to_numpy(), jaximp.shap_values(ens, rows))
    np.testing.assert_array_equal(written_table["prediction"].to_numpy(), jaximp.predict(ens, rows))
    np.testing.assert_allclose(mean_abs, jaximp.shap_importance(ens, rows), rtol=1e-5, atol=1e-7)


def test_csv_files_stream_in_order(monkeypatch, tmp_path):
    """Several CSV files, each of several blocks, read block by block: every row in the files'
    order, as in memory."""
    import pyarrow.csv as pc

    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 3)).astype(np.float32)
    ens = jaximp.from_sklearn(DecisionTreeRegressor(max_depth=4, random_state=0).fit(X, X[:, 0] * X[:, 2]))
    frames = [pd.DataFrame(rng.normal(size=(n, 3)), columns=["a", "b", "c"]) for n in (700, 1, 450)]
    for i, frame in enumerate(frames):
        frame.to_csv(tmp_path / f"part-{i}.csv", index=False)
    out = tmp_path / "shap.parquet"
    blocks = []

    def small_blocks(dataset, columns, batch_rows):  # blocks of about 100 rows: several per file
        for path in dataset.files:
            options = dict(read_options=pc.ReadOptions(block_size=4096),
                           convert_options=pc.ConvertOptions(include_columns=columns))
            with pc.open_csv(path, **options) as reader:
                for batch in reader:
                    blocks.append(batch.num_rows)
                    yield batch

    with monkeypatch.context() as patch:
        patch.setattr(files, "scan", small_blocks)
        jaximp.explain_files(ens, str(tmp_path / "part-*.csv"), out=out, batch_rows=64, progress=False)
    assert len(blocks) > 6
    rows = pd.concat([pd.read_csv(tmp_path / f"part-{i}.csv") for i in range(3)], ignore_index=True)
    written = pq.read_table(out).to_pandas()
    np.testing.assert_array_equal(written.filter(like="shap_").to_numpy(), jaximp.shap_values(ens, rows))
    np.testing.assert_array_equal(written["prediction"].to_numpy(), jaximp.predict(ens, rows))
    out.unlink()
    jaximp.explain_files(ens, str(tmp_path / "part-*.csv"), out=out, batch_rows=64, progress=False)  # pyarrow's blocks
    np.testing.assert_array_equal(pq.read_table(out).to_pandas().filter(like="shap_").to_numpy(),
                                  jaximp.shap_values(ens, rows))


def test_every_batch_has_one_shape(monkeypatch, tmp_path):
    """Row groups cut and joined to ``batch_rows``, the short last batch padded: the kernels see one
    shape (compiled once), and the output still holds exactly the rows of the files."""
    model_rows = 300
    rng = np.random.default_rng(1)
    X = rng.normal(size=(model_rows, 4)).astype(np.float32)
    ens = jaximp.from_sklearn(DecisionTreeRegressor(max_depth=4, random_state=0).fit(X, X[:, 0] - X[:, 3]))
    rows = pd.DataFrame(X, columns=[f"x{i}" for i in range(4)])
    shapes, original = [], Explainer.shap_values

    def shap_values(self, x, **kwargs):
        shapes.append(np.shape(x))
        return original(self, x, **kwargs)

    monkeypatch.setattr(Explainer, "shap_values", shap_values)
    out = tmp_path / "shap.parquet"
    jaximp.explain_files(ens, write_parquet(rows, tmp_path, parts=2, row_group_size=37), out=out, batch_rows=64,
                         progress=False)
    assert set(shapes) == {(64, 4)} and len(shapes) == 5  # 300 rows: four batches of 64 and one of 44, padded
    written = pq.read_table(out).to_pandas()
    np.testing.assert_array_equal(written.filter(like="shap_").to_numpy(), jaximp.shap_values(ens, X))
    np.testing.assert_array_equal(written["prediction"].to_numpy(), jaximp.predict(ens, X))


@pytest.mark.parametrize("sizes, rows", [([3, 10, 1, 0, 7, 25], 4), ([5], 5), ([2, 2], 8), ([0], 3), ([100], 7)])
def test_rechunked_cuts_and_joins_in_order(sizes, rows):
    start, batches = 0, []
    for size in sizes:
        batches.append(pa.record_batch({"a": np.arange(start, start + size)}))
        start += size
    got = list(rechunked(iter(batches), rows))
    lengths = [b.num_rows for b in got]
    assert all(length == rows for length in lengths[:-1]) and (not got or 0 < lengths[-1] <= rows)
    assert np.concatenate([b.column("a").to_numpy() for b in got] or [[]]).tolist() == list(range(start))


class StageFailure(Exception):
    """A stage failing part way."""


@pytest.mark.parametrize("stage", ["read", "prepare", "compute", "consume"])
@pytest.mark.parametrize("error", [StageFailure("failed"), KeyboardInterrupt()])
def test_an_exception_in_any_stage_is_raised_with_no_thread_left(stage, error):
    def fail_at(name, f):
        def g(item):
            if name == stage and item == 5:
                raise error
            return f(item)
        return g

    def source():
        for i in range(50):
            if stage == "read" and i == 5:
                raise error
            yield i

    got = []
    with pytest.raises(type(error)):
        run_pipeline(source(), fail_at("prepare", lambda i: i), fail_at("compute", lambda i: i),
                     fail_at("consume", got.append))
    assert pipeline_threads() == []
    assert got == list(range(len(got))) and len(got) <= 5


def test_a_failing_write_in_explain_files_leaves_no_file(monkeypatch, tmp_path):
    """A write failing in the writer thread (a full disk): raised by ``explain_files``, no partial
    file left, no thread left."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, 3)).astype(np.float32)
    ens = jaximp.from_sklearn(DecisionTreeRegressor(max_depth=3, random_state=0).fit(X, X[:, 0]))
    (tmp_path / "in").mkdir()
    source = write_parquet(pd.DataFrame(X, columns=list("abc")), tmp_path / "in", parts=1)
    calls, write = [], files._ParquetOutput.write

    def failing_write(self, phi, raw):
        calls.append(1)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        write(self, phi, raw)

    monkeypatch.setattr(files._ParquetOutput, "write", failing_write)
    (tmp_path / "out").mkdir()
    with pytest.raises(OSError, match="No space left"):
        jaximp.explain_files(ens, source, out=tmp_path / "out" / "shap.parquet", batch_rows=20, progress=False)
    assert list((tmp_path / "out").iterdir()) == [] and pipeline_threads() == []
    assert streaming.MAX_BATCHES_ALIVE == 2 * streaming.DEPTH + 3


def test_reading_a_large_row_group_holds_a_few_pages(tmp_path):
    """pyarrow's memory while a file of one row group of 4M rows (30 MiB of floats) is read in
    batches of 4096 rows stays a small part of the row group: the batch reader decodes a page or two
    of each column at a time, where a dataset's scan decodes the whole row group at once."""
    import pyarrow.dataset as ds

    n = 4_000_000
    rng = np.random.default_rng(0)
    rows = pa.table({f"x{i}": rng.normal(size=n).astype(np.float32) for i in range(2)})
    pq.write_table(rows, tmp_path / "one_row_group.parquet", row_group_size=n)
    del rows
    before, peak, read = pa.total_allocated_bytes(), 0, 0
    for batch in streaming.scan(ds.dataset(tmp_path / "one_row_group.parquet"), ["x1", "x0"], 4096):
        peak = max(peak, pa.total_allocated_bytes() - before)
        read += batch.num_rows
        assert batch.schema.names == ["x1", "x0"] and batch.num_rows <= 4096
    assert read == n
    assert peak < n * 2 * 4 / 3, f"{peak / 2**20:.0f} MiB held while reading a 30 MiB row group"


def test_files_whose_column_types_differ_are_read_as_the_first_files(tmp_path):
    """A later file's float64 column is read as the first file's float32, as the dataset's schema
    says; a column whose values the type cannot hold is a clear error."""
    import pyarrow.dataset as ds

    pq.write_table(pa.table({"a": np.array([1.5, 2.5], np.float32)}), tmp_path / "0.parquet")
    pq.write_table(pa.table({"a": np.array([3.5], np.float64)}), tmp_path / "1.parquet")
    batches = list(streaming.scan(ds.dataset(tmp_path), ["a"], 10))
    assert [b.schema.field("a").type for b in batches] == [pa.float32(), pa.float32()]
    assert [v for b in batches for v in b.column("a").to_pylist()] == [1.5, 2.5, 3.5]
    pq.write_table(pa.table({"a": ["not a number"]}), tmp_path / "2.parquet")
    with pytest.raises(pa.ArrowException):
        list(streaming.scan(ds.dataset(tmp_path), ["a"], 10))
