"""Explain files larger than memory: record batches in, SHAP values out, batch by batch.

:func:`explain_files` reads a Parquet or CSV source with ``pyarrow.dataset`` one record batch at a
time, explains each batch with per-tree tables computed once (``jaximp.Explainer``), appends the
batch's SHAP values and predictions to a Parquet file and adds the batch's ``|SHAP|`` to float64
running sums. Peak memory is that of a few batches (the batch read, its features and its SHAP
values), whatever the size of the source.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from jaximp._leaves.predict import predict
from jaximp._models.ensemble import has_real_names
from jaximp._rows.inputs import as_features
from jaximp._shap.explainer import Explainer

_DEFAULT_BATCH_ROWS = 1 << 16


def dataset_of(source: Any, fn_name: str):
    """A ``pyarrow.dataset.Dataset`` of ``source``: a path, a glob, a directory or a list of paths;
    CSV when every path ends in ``.csv`` (or ``.csv.gz``), Parquet otherwise."""
    try:
        import pyarrow.dataset as ds
    except ImportError as e:  # pragma: no cover - pyarrow is an optional dependency
        raise ImportError(f"{fn_name}: reading files needs pyarrow (pip install 'jaximp[io]')") from e
    if isinstance(source, (str, os.PathLike)):
        text = os.path.expanduser(os.fspath(source))
        paths = sorted(glob.glob(text, recursive=True)) if glob.has_magic(text) else [text]
    elif isinstance(source, Sequence) and source and all(isinstance(p, (str, os.PathLike)) for p in source):
        paths = [os.fspath(p) for p in source]
    else:
        raise TypeError(f"{fn_name}: source must be a path, a glob pattern or a list of paths; got {source!r}")
    if not paths:
        raise FileNotFoundError(f"{fn_name}: no file matches {source!r}")
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise FileNotFoundError(f"{fn_name}: no such file or directory: {missing[0]!r}")
    csv = all(p.endswith((".csv", ".csv.gz")) for p in paths)
    try:
        return ds.dataset(paths[0] if len(paths) == 1 else paths, format="csv" if csv else "parquet")
    except Exception as e:  # pyarrow's errors for unreadable files vary by format
        raise ValueError(f"{fn_name}: cannot read {source!r} as {'CSV' if csv else 'Parquet'} ({e})") from e


def _columns(dataset, ens: Any, columns: Sequence[str] | None, fn_name: str) -> list[str]:
    """The columns to read: ``columns``, else the model's feature names when the files have them
    all, else every column (which must then number the model's features)."""
    names = list(dataset.schema.names)
    if columns is not None:
        missing = [c for c in columns if c not in names]
        if missing:
            raise ValueError(f"{fn_name}: columns {missing[:10]} are not in the files (they have {names[:20]})")
        return list(columns)
    if has_real_names(ens) and set(ens.feature_names) <= set(names):
        return list(ens.feature_names)
    return names


def record_batches(source: Any, ens: Any, *, columns: Sequence[str] | None = None,
                   batch_rows: int | None = None, fn_name: str = "explain_files") -> tuple[Iterator, int | None]:
    """``(pandas DataFrames of at most batch_rows rows, total rows or None when unknown)``."""
    if batch_rows is not None and (isinstance(batch_rows, bool) or not isinstance(batch_rows, (int, np.integer))
                                   or batch_rows < 1):
        raise ValueError(f"{fn_name}: batch_rows must be a positive int or None; got {batch_rows!r}")
    import pyarrow.dataset as ds

    dataset = dataset_of(source, fn_name)
    selected = _columns(dataset, ens, columns, fn_name)
    total = dataset.count_rows() if isinstance(dataset.format, ds.ParquetFileFormat) else None  # metadata only
    batches = dataset.to_batches(columns=selected, batch_size=int(batch_rows or _DEFAULT_BATCH_ROWS))
    return (batch.to_pandas() for batch in batches if batch.num_rows), total


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

    Record batches are read with ``pyarrow.dataset`` (the model's columns only), explained with
    per-tree tables built once (as ``jaximp.Explainer``), written to ``out`` as they come and
    added to float64 running sums of ``|SHAP|``; nothing holds all rows, so memory stays that of a
    few batches whatever the size of the files.

    Args:
        ens: the model (``jaximp.from_catboost``, ``from_xgboost``, ...).
        source: a Parquet or CSV file, a directory of Parquet files, a glob pattern
            (``"data/*.parquet"``) or a list of paths; CSV when every path ends in ``.csv``.
        out: the Parquet file to write (overwritten), in the source's row order: one column per
            feature ``shap_<feature>`` (``shap_<feature>_<class>`` when K > 1), and with
            ``predictions`` the raw prediction ``prediction`` (``prediction_<class>``). None:
            write nothing, only the importances.
        method, background: as for :func:`jaximp.shap_values`.
        columns: the columns to read, in the model's order; None: the model's feature names when
            the files have them, else every column.
        batch_rows: rows per record batch (default 65536).
        predictions: also write the raw predictions.
        progress: show a progress bar (tqdm, in terminals and notebooks).
        batch_size, devices: as for :func:`jaximp.shap_values`.

    Returns:
        The mean ``|SHAP|`` of every feature over all rows (NumPy ``f32[F]``, ``f32[F, K]`` when
        K > 1), as :func:`jaximp.shap_importance` of all rows.

    Raises:
        FileNotFoundError: no file matches ``source``.
        TypeError, ValueError: a bad source, columns, method, background or unreadable files.

    Example:
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
    batches, total = record_batches(source, ens, columns=columns, batch_rows=batch_rows, fn_name=fn_name)
    writer, sums, n_rows = None, None, 0
    bar = _progress(progress, total, "explain_files")
    try:
        for frame in batches:
            x = as_features(frame, ens, fn_name)  # checked and featurized once for both passes
            phi = np.asarray(explainer.shap_values(x, batch_size=batch_size, devices=devices, fn_name=fn_name))
            part = np.abs(phi.astype(np.float64)).sum(axis=0)
            sums = part if sums is None else sums + part
            n_rows += len(phi)
            if out is not None:
                writer = _write(writer, out, ens, phi, x if predictions else None, batch_size, devices)
            if bar is not None:
                bar.update(len(phi))
    finally:
        if writer is not None:
            writer.close()
        if bar is not None:
            bar.close()
    if not n_rows:
        raise ValueError(f"{fn_name}: {source!r} holds no rows")
    return (sums / n_rows).astype(np.float32)


def _write(writer, out, ens: Any, phi: np.ndarray, x: Any, batch_size: int | None, devices: Any):
    """Append a batch's SHAP values (and predictions of its checked rows ``x``) to the Parquet
    ``writer`` (opened on the first batch)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = len(phi)
    names, prediction_names = output_names(ens)
    arrays = list(phi.reshape(n, -1).T)
    if x is not None:
        raw = np.asarray(predict(ens, x, batch_size=batch_size, devices=devices)).reshape(n, -1)
        arrays += list(raw.T)
        names = names + prediction_names
    table = pa.table(dict(zip(names, arrays)))
    if writer is None:
        writer = pq.ParquetWriter(os.fspath(out), table.schema)
    writer.write_table(table)
    return writer
