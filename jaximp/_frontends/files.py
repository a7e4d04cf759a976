"""Explain files larger than memory: record batches in, SHAP values out, batch by batch.

:func:`explain_files` reads a Parquet or CSV source with ``pyarrow.dataset`` one record batch at a
time, explains each batch with per-tree tables computed once (``jaximp.Explainer``), appends the
batch's SHAP values and predictions to a Parquet file and adds the batch's ``|SHAP|`` to float64
running sums. Reading, computing and writing overlap in a bounded pipeline
(``jaximp._frontends.streaming``): peak memory is that of a fixed number of batches, whatever
the size of the source.

Nothing is lost and nothing half-written looks whole: the Parquet file is written under a
hidden temporary name in its folder (``.<name>.<random>.partial``) and renamed to ``out`` only
once complete, so a failed or interrupted run leaves ``out`` as it was (an earlier result
intact, or no file); ``out`` is never written through a symbolic link. Every file of a
multi-file source must have every column read (a dataset would read a missing column as
missing values). ``jaximp explain`` publishes its output folder the same way
(:func:`output_folder`, :func:`publish_outputs`, :func:`interrupts`).
"""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import signal
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from jaximp._frontends.streaming import rechunked, run_pipeline, scan
from jaximp._importers.paths import not_existing
from jaximp._leaves.predict import predict_rows
from jaximp._models.ensemble import has_real_names
from jaximp._rows.inputs import as_features
from jaximp._shap.explainer import Explainer

_DEFAULT_BATCH_ROWS = 1 << 16
_SOURCE = "an existing CSV or Parquet file, a directory of Parquet files, or a glob pattern that matches files"


def dataset_of(source: Any, fn_name: str, arg: str | None = "source"):
    """A ``pyarrow.dataset.Dataset`` of ``source``: a path, a glob, a directory or a list of paths;
    CSV when every path ends in ``.csv`` (or ``.csv.gz``), Parquet otherwise. A path that exists
    is taken literally (``data[1].csv``) before it is tried as a glob pattern. A path that names
    nothing, or a pattern that matches nothing, is a ``ValueError`` naming ``fn_name`` and the
    argument ``arg`` (None: ``fn_name`` names the argument, as ``DATA`` on the command line)."""
    try:
        import pyarrow.dataset as ds
    except ImportError as e:  # pragma: no cover - pyarrow is an optional dependency
        raise ImportError(f"{fn_name}: reading files needs pyarrow (pip install 'jaximp[io]')") from e
    if isinstance(source, (str, os.PathLike)):
        text = os.path.expanduser(os.fspath(source))
        literal = os.path.exists(text) or not glob.has_magic(text)
        paths = [text] if literal else sorted(glob.glob(text, recursive=True))
    elif isinstance(source, Sequence) and source and all(isinstance(p, (str, os.PathLike)) for p in source):
        paths = [os.fspath(p) for p in source]
    else:
        raise TypeError(f"{fn_name}: source must be a path, a glob pattern or a list of paths; got {source!r}")
    who = fn_name if arg is None else f"{fn_name}: {arg}"
    if not paths:
        raise ValueError(f"{who} must be {_SOURCE}; got {os.fspath(source)!r}, a pattern that matches no file")
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise not_existing(who, _SOURCE, missing[0], "file or directory")
    csv = all(p.endswith((".csv", ".csv.gz")) for p in paths)
    try:
        return ds.dataset(paths[0] if len(paths) == 1 else paths, format="csv" if csv else "parquet")
    except Exception as e:  # pyarrow's errors for unreadable files vary by format
        raise ValueError(f"{fn_name}: cannot read {source!r} as {'CSV' if csv else 'Parquet'} ({e})") from e


def _columns(dataset, ens: Any, columns: Sequence[str] | None, fn_name: str) -> list[str]:
    """The columns to read: ``columns``, else the model's feature names when the files have them
    all, else every column (which must then number the model's features); every file checked to
    have them (:func:`check_file_columns`)."""
    names = list(dict.fromkeys(name for schema in file_columns(dataset, fn_name).values() for name in schema))
    if columns is not None:
        missing = [c for c in columns if c not in names]
        if missing:
            raise ValueError(f"{fn_name}: columns {missing[:10]} are not in the files (they have {names[:20]})")
        selected = list(columns)
    elif has_real_names(ens) and set(ens.feature_names) <= set(names):
        selected = list(ens.feature_names)
    else:
        selected = names
    check_file_columns(dataset, selected, fn_name)
    return selected


def check_not_source(dataset: Any, output: str, fn_name: str, arg: str) -> None:
    """A ``ValueError`` when the file ``output`` is one of ``dataset``'s files: a pattern such as
    ``data/*.parquet`` matches an earlier run's output written beside the data."""
    target = os.path.realpath(output)
    if any(os.path.realpath(path) == target for path in getattr(dataset, "files", None) or ()):
        raise ValueError(f"{fn_name}: the files to read include {arg} {output!r} (an earlier run's output?); "
                         f"write {arg} elsewhere or leave it out of the source")


def check_file_columns(dataset: Any, columns: Sequence[str], fn_name: str) -> None:
    """A ``ValueError`` naming the file and the column when a file of a multi-file ``dataset``
    lacks one of ``columns``: a ``pyarrow`` dataset takes its schema from one file and reads a
    column that another file lacks as missing values, which would explain rows that are not in
    the data. Reads each file's schema only (a Parquet footer, a CSV header block)."""
    for path, names in file_columns(dataset, fn_name).items():
        missing = [c for c in columns if c not in names]
        if missing:
            raise ValueError(
                f"{fn_name}: {path!r} lacks the column {missing[0]!r}"
                + (f" (and {len(missing) - 1} more of the columns read)" if len(missing) > 1 else "")
                + "; every file must have every column read (a missing column would be read as missing values)"
            )


def file_columns(dataset: Any, fn_name: str) -> dict[str, list[str]]:
    """``{file: its column names}`` of a dataset of several files; ``{"": the dataset's}`` for one."""
    import pyarrow.dataset as ds

    files = list(getattr(dataset, "files", None) or ())
    if len(files) < 2:
        return {"": list(dataset.schema.names)}
    found = {}
    for path in files:
        try:
            found[path] = list(ds.dataset(path, format=dataset.format).schema.names)
        except Exception as e:  # pyarrow's errors for unreadable files vary by format
            raise ValueError(f"{fn_name}: cannot read the columns of {path!r} ({e})") from e
    return found


def record_batches(source: Any, ens: Any, *, columns: Sequence[str] | None = None, batch_rows: int | None = None,
                   fn_name: str = "explain_files", output: str | None = None) -> tuple[Iterator, int | None]:
    """``(record batches of exactly batch_rows rows, the last one fewer, in the files' order;
    total rows or None when unknown)``, read with a small read-ahead (:func:`scan`); a
    ``ValueError`` when the source's files include the ``output`` file to be written."""
    if batch_rows is not None and (isinstance(batch_rows, bool) or not isinstance(batch_rows, (int, np.integer))
                                   or batch_rows < 1):
        raise ValueError(f"{fn_name}: batch_rows must be a positive int or None; got {batch_rows!r}")
    import pyarrow.dataset as ds

    dataset = dataset_of(source, fn_name)
    if output is not None:
        check_not_source(dataset, output, fn_name, "out")
    selected = _columns(dataset, ens, columns, fn_name)
    total = dataset.count_rows() if isinstance(dataset.format, ds.ParquetFileFormat) else None  # metadata only
    rows = int(batch_rows or _DEFAULT_BATCH_ROWS)
    return rechunked(_checked(scan(dataset, selected, rows), source, fn_name), rows), total


def _checked(batches: Iterator, source: Any, fn_name: str) -> Iterator:
    """``batches``, where a file that cannot be read half way (a value that does not parse, a
    column whose type differs between files) is a ``ValueError`` naming ``fn_name``."""
    import pyarrow as pa

    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except (pa.ArrowException, OSError) as e:  # pyarrow's errors while scanning the files
            raise ValueError(f"{fn_name}: cannot read {source!r} ({' '.join(str(e).split())})") from e
        yield batch


def output_labels(ens: Any) -> list[str]:
    """One label per output: the class names of a multiclass model, else ``"0".."K-1"``."""
    if len(ens.class_names) == ens.n_outputs:
        return [str(c) for c in ens.class_names]
    return [str(k) for k in range(ens.n_outputs)]


def output_names(ens: Any) -> tuple[list[str], list[str]]:
    """Parquet column names: ``(shap_<feature>[_<output>] in [F, K] order, prediction[_<output>])``."""
    if ens.n_outputs == 1:
        return [f"shap_{name}" for name in ens.feature_names], ["prediction"]
    labels = output_labels(ens)
    return ([f"shap_{name}_{c}" for name in ens.feature_names for c in labels],
            [f"prediction_{c}" for c in labels])


def _progress(enabled: bool, total: int | None, desc: str):
    if enabled:
        try:
            from tqdm.auto import tqdm
        except ImportError:  # pragma: no cover - tqdm is an optional dependency
            return None
        return tqdm(total=total, unit="rows", desc=desc)
    return None


def explain_files(ens: Any, source: Any, out: str | os.PathLike | None = None, *, method: str = "path_dependent",
                  background: Any = None, columns: Sequence[str] | None = None, batch_rows: int | None = None,
                  predictions: bool = True, progress: bool = True, batch_size: int | None = None,
                  devices: Any = None) -> np.ndarray:
    """Explain every row of Parquet or CSV files, streaming: SHAP values to Parquet, global
    importances returned.

    The files are read batch by batch with pyarrow (the model's columns only; a Parquet file's batch
    reader holds a page or two of each column, whatever its row groups' size); each batch's SHAP
    values (as [`jaximp.shap_values`][jaximp.shap_values] computes them) are written to ``out`` as
    they come and added to running float64 sums of ``|SHAP|``. Reading, computing and writing run at
    once, in three threads joined by bounded queues: at most seven batches of ``batch_rows`` rows
    are alive at any time, so memory stays flat whatever the number of rows in the files.

    Args:
        ens: the model (``jaximp.from_catboost``, ``from_xgboost``, ...).
        source: a Parquet or CSV file, a directory of Parquet files, a glob pattern
            (``"data/*.parquet"``) or a list of paths; CSV when every path ends in ``.csv``.
        out: the Parquet file to write, in the source's row order: one column per feature
            ``shap_<feature>`` (``shap_<feature>_<class>`` when K > 1), and with ``predictions``
            the raw prediction ``prediction`` (``prediction_<class>``). Written under a
            temporary name in the same folder and renamed to ``out`` when complete, replacing
            an earlier file: a failed or interrupted call leaves ``out`` as it was. Never a
            symbolic link. None: write nothing, only the importances.
        method: ``"path_dependent"``, ``"exact"``, ``"approximate"`` or ``"interventional"``,
            as for [`jaximp.shap_values`][jaximp.shap_values].
        background: ``[B, F]`` background rows for ``method="interventional"``, as for
            [`jaximp.shap_values`][jaximp.shap_values].
        columns: the columns to read, in the model's order; None: the model's feature names when
            the files have them, else every column.
        batch_rows: rows per record batch (row groups are cut or joined to it; a short last batch
            is computed padded to it, so that one compiled program serves every batch); None: 65536.
        predictions: also write the raw predictions.
        progress: show a progress bar (tqdm, in terminals and notebooks); False silences it.
        batch_size: rows per device step within a batch; None picks one for the device.
        devices: None (default device), an int or a list of ``jax.Device`` to shard rows over.

    Returns:
        np.ndarray: the mean ``|SHAP|`` of every feature over all rows (NumPy ``f32[F]``,
            ``f32[F, K]`` when K > 1; float64 for a float64 model under ``jax_enable_x64``), as
            [`jaximp.shap_importance`][jaximp.shap_importance] of all rows.

    Raises:
        TypeError: an argument of the wrong type (``ens``, ``source``, ``columns``, ...).
        ValueError: a path of ``source`` that is not an existing file or directory, a pattern that
            matches no file; bad columns, method or background; unreadable files; a file of
            several that lacks a column read; ``out`` a directory, a symbolic link or in a folder
            that does not exist.

    Examples:
        >>> import os, tempfile
        >>> folder = tempfile.TemporaryDirectory()
        >>> X.to_parquet(os.path.join(folder.name, "rows.parquet"))
        >>> out = os.path.join(folder.name, "shap.parquet")
        >>> mean_abs = jaximp.explain_files(ens, os.path.join(folder.name, "*.parquet"), out=out,
        ...                                 progress=False)
        >>> np.allclose(mean_abs, jaximp.shap_importance(ens, X), rtol=1e-5, atol=1e-5)
        True
        >>> import pyarrow.parquet as pq
        >>> pq.read_table(out).column_names[:2], pq.read_table(out).num_rows
        (['shap_age', 'shap_sex'], 442)
        >>> folder.cleanup()
    """
    fn_name = "explain_files"
    explainer = Explainer(ens, background=background, method=method)
    target = None if out is None else output_path(out, fn_name, "out")
    batches, total = record_batches(source, ens, columns=columns, batch_rows=batch_rows, fn_name=fn_name,
                                    output=target)
    totals = _Totals()
    bar = _progress(progress, total, "explain_files")
    with contextlib.ExitStack() as stack:
        writer = None if target is None else stack.enter_context(_ParquetOutput(target, ens))
        if bar is not None:
            stack.callback(bar.close)

        def compute(batch):  # the calling thread: SHAP values
            x, n = batch
            phi = np.asarray(explainer.shap_values(x, batch_size=batch_size, devices=devices, progress=False,
                                                   fn_name=fn_name))[:n]
            if bar is not None:
                bar.update(n)
            return x, phi

        def consume(result):  # the writer thread: the sums, the predictions (beside the SHAP values), the file
            x, phi = result
            totals.add(phi)
            if writer is not None:
                raw = None
                if predictions:
                    raw = np.asarray(predict_rows(ens, x, batch_size=batch_size, devices=devices, progress=False,
                                                  fn_name=fn_name))[:len(phi)]
                writer.write(phi, raw)

        run_pipeline(batches, _Features(ens, fn_name), compute, consume)
        if not totals.rows:
            raise ValueError(f"{fn_name}: {source!r} holds no rows")
    return totals.mean()


class _Features:
    """A record batch to ``(the model's features f32[n', F], its rows n)``: a short last batch is
    padded (its last row repeated) to the rows of the full batches before it, so that it reuses
    their compiled kernels (each row's values are its own: the padding's are dropped)."""

    def __init__(self, ens: Any, fn_name: str):
        self.ens, self.fn_name, self.full = ens, fn_name, 0

    def __call__(self, batch: Any) -> tuple[np.ndarray, int]:
        x, n = as_features(batch.to_pandas(), self.ens, self.fn_name), batch.num_rows
        if n < self.full:
            x = np.concatenate([x, np.repeat(x[-1:], self.full - n, axis=0)])
        self.full = max(self.full, n)
        return x, n


class _Totals:
    """Running float64 sums of ``|SHAP|`` over the batches, and their rows."""

    def __init__(self) -> None:
        self.sums, self.rows, self.dtype = None, 0, np.float32

    def add(self, phi: np.ndarray) -> None:
        """Add a batch's SHAP values ``phi [n, F(, K)]``."""
        part = np.abs(phi).sum(axis=0, dtype=np.float64)
        self.sums = part if self.sums is None else self.sums + part
        self.rows, self.dtype = self.rows + len(phi), phi.dtype

    def mean(self) -> np.ndarray:
        """The mean ``|SHAP|`` ``[F(, K)]`` in the SHAP values' dtype."""
        return (self.sums / self.rows).astype(self.dtype)


def output_path(out: str | os.PathLike, fn_name: str, arg: str) -> str:
    """``out`` checked as a file to write: not a symbolic link (never written through), not a
    directory, in a folder that exists.

    Raises:
        ValueError: ``out`` is a symbolic link or a directory, or its folder does not exist.
    """
    path = os.path.expanduser(os.fspath(out))
    if os.path.islink(path):
        raise ValueError(f"{fn_name}: {arg} {os.fspath(out)!r} is a symbolic link; jaximp does not write through "
                         "links (remove the link or choose another path)")
    if os.path.isdir(path):
        raise ValueError(f"{fn_name}: {arg} {os.fspath(out)!r} is a directory; it must be a file path")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"{fn_name}: {arg} must be a file path in an existing folder; got {os.fspath(out)!r}, whose "
                         f"folder {folder!r} does not exist")
    return path


def partial_path(path: str) -> str:
    """A new hidden name next to ``path`` for writing it: ``.<name>.<random>.partial``."""
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(folder, f".{name}.{secrets.token_hex(6)}.partial")


def publish(partial: str, path: str, fn_name: str, arg: str) -> None:
    """Rename the complete file ``partial`` to ``path`` (atomic, in one folder), refusing a
    ``path`` that became a symbolic link meanwhile."""
    if os.path.islink(path):
        raise ValueError(f"{fn_name}: {arg} {path!r} is a symbolic link; jaximp does not write through links "
                         "(remove the link or choose another path)")
    os.replace(partial, path)


class _ParquetOutput:
    """The Parquet file of :func:`explain_files`, written under a partial name and renamed to
    its path on a clean exit; removed on any error or interruption (a context manager)."""

    def __init__(self, path: str, ens: Any):
        self.path, self.ens, self.partial = path, ens, partial_path(path)
        self.file, self.writer = None, None

    def __enter__(self) -> _ParquetOutput:
        fd = os.open(self.partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # a new file, never a link
        self.file = os.fdopen(fd, "wb")
        return self

    def write(self, phi: np.ndarray, raw: Any) -> None:
        """Append a batch's SHAP values ``phi [n, F(, K)]`` and raw predictions ``raw [n(, K)]``
        (or None)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        n = len(phi)
        names, prediction_names = output_names(self.ens)
        arrays = list(np.ascontiguousarray(phi.reshape(n, -1).T))  # columns: contiguous ones write 7x faster
        if raw is not None:
            arrays += list(np.asarray(raw).reshape(n, -1).T)
            names = names + prediction_names
        table = pa.table(dict(zip(names, arrays)))
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.file, table.schema, use_dictionary=False)  # floats: all distinct
        self.writer.write_table(table)

    def __exit__(self, kind, error, traceback) -> None:
        try:
            if self.writer is not None:
                self.writer.close()
            self.file.close()
            if kind is None:
                publish(self.partial, self.path, "explain_files", "out")
        finally:
            if os.path.exists(self.partial):
                os.remove(self.partial)


# ``jaximp explain``'s output folder: every output written aside, published when complete ------------------

FIXED_OUTPUTS = ("importances.csv", "shap.parquet", "report.md")  # besides the PNG plots


def output_folder(out: str) -> str:
    """``--out`` checked and created: a directory (or a new one), never a symbolic link, holding no
    symbolic link in place of an output (jaximp never writes through links).

    Raises:
        ValueError: ``--out`` is a file or a symbolic link, or an output in it is a symbolic link.
    """
    path = os.path.expanduser(out)
    if os.path.islink(path):
        raise ValueError(f"--out {out!r} is a symbolic link; jaximp does not write through links (give the "
                         "directory itself, or another --out)")
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"--out {out!r} is a file; it must be a directory (created if missing)")
    os.makedirs(path, exist_ok=True)
    for name in FIXED_OUTPUTS:
        refuse_link(os.path.join(path, name))
    return path


def refuse_link(path: str) -> None:
    """A ``ValueError`` when the output ``path`` is a symbolic link (never written through)."""
    if os.path.islink(path):
        raise ValueError(f"--out: {path!r} is a symbolic link; jaximp does not write through links (remove "
                         "the link or choose another --out)")


def publish_outputs(staging: str, out: str, names: list[str]) -> str:
    """Move the complete outputs ``names`` (the report last) from ``staging`` into ``out``, each by
    an atomic rename; an earlier run's report is removed first, so that a report in ``out``
    always describes the files beside it. The report's path."""
    targets = [os.path.join(out, name) for name in names]
    for target in targets:  # before anything moves: a link put there during the run
        refuse_link(target)
    report = os.path.join(out, "report.md")
    if os.path.exists(report):
        os.remove(report)
    for name, target in zip(names, targets):
        os.replace(os.path.join(staging, name), target)
    return report


@contextlib.contextmanager
def interrupts():
    """Remember every SIGINT in the body (``yield``: a function telling whether one came), while
    the previous handler still runs (raising ``KeyboardInterrupt``). Python ignores an exception
    raised in a garbage collector callback or a finalizer, so a Ctrl-C may not stop the run: the
    run then checks before it publishes anything. Outside the main thread, where no handler can
    be set, it tells nothing."""
    seen = []
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum, frame):
        seen.append(signum)
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    try:
        yield lambda: bool(seen)
    finally:
        signal.signal(signal.SIGINT, previous)
