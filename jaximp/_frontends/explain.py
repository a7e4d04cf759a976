"""``jaximp explain``: a model file and a CSV or Parquet file in; importances, SHAP values, plots
and a report out.

The model file is CatBoost's, XGBoost's, LightGBM's or a scikit-learn model saved with skops
(read with skops' trusted-types check, never a pickle: :mod:`jaximp._frontends.model_files`).
The importances are those of every library (mean |SHAP|; with a target, permutation importance)
and the model's library's own, under its own names: CatBoost's PredictionValuesChange,
Interaction and LossFunctionChange, XGBoost's ``get_score`` types, LightGBM's
``feature_importance`` types, scikit-learn's ``feature_importances_``.

The SHAP values stream through :func:`jaximp.explain_files` (record batch by record batch, memory
bounded whatever the rows); the importances that need targets (permutation importance,
LossFunctionChange) take the first ``target_rows`` rows in memory; the beeswarm plot a fixed
random sample of rows, read back in one more streamed pass. Every step is timed for the report.

Nothing is lost, nothing half-written looks whole: every output is written in a hidden folder
inside ``--out`` (``.jaximp-explain-<random>``) and moved into ``--out`` only once the run is
complete (``report.md`` last, an earlier run's report removed first); a failed or interrupted
run removes its folder and leaves an earlier run's outputs as they were. ``--out`` and the files
it would replace are never symbolic links.
"""

from __future__ import annotations

import csv
import dataclasses
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from jaximp._frontends.files import (
    check_file_columns,
    check_not_source,
    dataset_of,
    explain_files,
    file_columns,
    interrupts,
    output_folder,
    output_labels,
    output_names,
    publish_outputs,
)
from jaximp._frontends.model_files import (
    LIBRARY_IMPORTANCES,
    Model,
    lightgbm_objective,
    load_skops,
    model_library,
    sklearn_objective,
    xgboost_document,
    xgboost_objective,
)
from jaximp._frontends.report import MAX_SUMMARIES, Summary, describe_model, output_word, write_plots, write_report
from jaximp._importances.interaction import interaction
from jaximp._importances.loss_change import loss_function_change
from jaximp._importances.permutation import permutation_importance
from jaximp._importances.pvc import prediction_values_change
from jaximp._importances.scoring import MODEL_LOSSES
from jaximp._importances.splits import split_importance
from jaximp._importers.catboost import from_catboost
from jaximp._importers.lightgbm import from_lightgbm
from jaximp._importers.paths import existing_file
from jaximp._importers.sklearn import from_sklearn
from jaximp._importers.xgboost import from_xgboost
from jaximp._models.ensemble import has_real_names
from jaximp._rows.inputs import as_features
from jaximp._shap.trees import NOT_FOR_TREES
from jaximp._shap.values import KERNELS, general

SUMMARY_POINTS = 2000  # rows drawn in the beeswarm plot
MODEL_FILE = ("an existing model file: CatBoost (.cbm or .json), XGBoost (.json or .ubj), LightGBM (.txt) or "
              "scikit-learn saved with skops (.skops)")
REPORT = "report.md"


@dataclasses.dataclass(frozen=True)
class Options:
    """What ``jaximp explain`` was asked to do (the command line's arguments)."""

    model: str
    data: str
    out: str
    method: str | None = None
    background: str | None = None
    target: str | None = None
    target_rows: int = 100_000
    repeats: int = 5
    seed: int = 0
    batch_rows: int | None = None
    device: str | None = None
    progress: bool = True
    trusted_types: tuple[str, ...] = ()  # types a skops MODEL may hold besides those trusted (model_files)


class Run:
    """Timings and notes gathered along a run, for the report."""

    def __init__(self):
        self.timings: list[tuple[str, float]] = []
        self.notes: list[str] = []

    def timed(self, step: str, fn, *args, **kwargs):
        start = time.perf_counter()
        result = fn(*args, **kwargs)
        self.timings.append((step, time.perf_counter() - start))
        return result

    def say(self, line: str) -> None:
        print(line, flush=True)


# --------------------------------------------------------------------------------------------
# Inputs


def load_model(path: str, trusted_types: Sequence[str] = ()) -> Model:
    """The model in a CatBoost (.cbm, .json), XGBoost (.json, .ubj), LightGBM (.txt) or skops
    (.skops, scikit-learn) file (:mod:`jaximp._frontends.model_files`).

    Args:
        path: the model file.
        trusted_types: types a skops file may hold besides those trusted
            (:data:`jaximp._frontends.model_files.EXPECTED_SKOPS_TYPES`), named ``"module.Class"``
            as ``skops.io.get_untrusted_types`` names them.

    Returns:
        The :class:`Model`: the ensemble, its library and its loss as the library names it.

    Raises:
        ValueError: no such file; not a model file jaximp reads (a pickle among them), a damaged
            one, one nested too deeply to read (a damaged or hostile file; Python's parsers recurse
            per level), or a skops file holding a type not trusted.
        TypeError: a skops file holding an estimator jaximp does not import.
    """
    existing_file(path, "MODEL", MODEL_FILE)
    try:
        library, document = model_library(path)
        if library == "CatBoost":
            ens = from_catboost(path)
            return Model(ens, library, f"loss {ens.loss_function}" if ens.loss_function else "")
        if library == "XGBoost":
            document = xgboost_document(path) if document is None else document
            try:
                ens = from_xgboost(document)  # parsed once, here: its errors name the file here
            except ValueError as e:
                raise ValueError(f"MODEL {path!r}: {e}") from None
            return Model(ens, library, xgboost_objective(document))
        if library == "LightGBM":
            return Model(from_lightgbm(path), library, lightgbm_objective(path))
        estimator = load_skops(path, tuple(trusted_types))
        return Model(from_sklearn(estimator), library, sklearn_objective(estimator))
    except RecursionError:
        raise ValueError(f"MODEL {path!r} is nested too deeply to be read as a model file (a damaged or "
                         "hostile file)") from None


def data_columns(dataset: Any, ens: Any, target: str | None, what: str, path: str) -> list[str]:
    """The columns of ``dataset`` holding the model's features, in the model's order: its
    feature names when it has them, else every column but ``target``, in the file's order."""
    names = list(dataset.schema.names)
    if has_real_names(ens):
        missing = [name for name in ens.feature_names if name not in names]
        if missing:
            raise ValueError(f"{what} {path!r} lacks {len(missing)} of the model's feature columns: "
                             f"{_listed(missing)} (it has {_listed(names)})")
        return list(ens.feature_names)
    columns = [name for name in names if name != target]
    if len(columns) != ens.n_features:
        raise ValueError(f"{what} {path!r} has {len(columns)} feature columns"
                         f"{' besides the target' if target in names else ''}; the model takes {ens.n_features} "
                         "(its features have no names, so columns are matched by position)")
    return columns


def _listed(names: list[str], most: int = 8) -> str:
    shown = ", ".join(repr(n) for n in names[:most])
    return f"[{shown}{', ...' if len(names) > most else ''}]"


def first_rows(dataset: Any, columns: list[str], limit: int):
    """The first ``limit`` rows of ``dataset``'s ``columns`` as a pandas DataFrame (streamed)."""
    return dataset.head(limit, columns=columns).to_pandas()


def sample_rows(batches: Any, rows: np.ndarray):
    """The rows at the sorted indices ``rows`` of a stream of record batches, as a DataFrame: one
    pass, holding only the rows taken."""
    import pyarrow as pa

    taken, offset = [], 0
    for batch in batches:
        lo, hi = np.searchsorted(rows, [offset, offset + batch.num_rows])
        if hi > lo:
            taken.append(pa.Table.from_batches([batch.take(pa.array(rows[lo:hi] - offset))]))
        offset += batch.num_rows
    return pa.concat_tables(taken).to_pandas()


# --------------------------------------------------------------------------------------------
# The run


@dataclasses.dataclass(frozen=True)
class Inputs:
    """The model and the data of a run, read and checked."""

    model: Model
    dataset: Any  # pyarrow.dataset.Dataset of DATA
    columns: list[str]  # DATA's columns holding the model's features, in the model's order
    background: Any  # pandas DataFrame or None


def explain(options: Options) -> str:
    """Run ``jaximp explain`` with ``options``; the path of the report written.

    Every output is written in a hidden folder inside ``options.out`` and moved into it once
    complete (:func:`publish_outputs`); on any error or interruption that folder is removed, and
    ``options.out`` keeps what it held before.
    """
    run, started = Run(), time.perf_counter()
    method = _method(options)
    device = _device(options.device)
    devices = None if options.device is None else [device]
    with jax.default_device(device):
        inputs = _read_inputs(run, options, method)
        out = output_folder(options.out)
        staging = tempfile.mkdtemp(prefix=".jaximp-explain-", suffix=".partial", dir=out)
        try:
            with interrupts() as interrupted:
                written = _outputs(run, inputs, options, method, device, devices, staging, started)
                if interrupted():  # an interrupt that Python ignored (raised in a garbage collector callback)
                    raise KeyboardInterrupt
                return publish_outputs(staging, out, written)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _outputs(run: Run, inputs: Inputs, options: Options, method: str, device: Any, devices: Any, staging: str,
             started: float) -> list[str]:
    """Write every output of the run in the folder ``staging``; their file names, the report last."""
    importances, target_rows = _importances(run, inputs, options, devices)
    ens, library = inputs.model.ens, inputs.model.library
    shap_path = os.path.join(staging, "shap.parquet")
    run.say(f"SHAP values ({method}): {options.data} -> {os.path.join(options.out, 'shap.parquet')}")
    mean_abs, n_rows = run.timed(f"SHAP values ({method}), streamed to shap.parquet", _stream_shap, inputs,
                                 options, method, shap_path, devices)
    interactions = _model_only(run, "Interaction", interaction, ens) if library == "CatBoost" else None

    labels = output_labels(ens)
    table = importance_table(inputs.columns, mean_abs, labels, importances)
    write_csv(os.path.join(staging, "importances.csv"), table)
    if len(labels) > MAX_SUMMARIES:
        run.notes.append(f"SHAP summary plots of the first {MAX_SUMMARIES} of the {len(labels)} outputs only.")
    sample = run.timed("read a sample of rows for the beeswarm plot", _summary_sample, inputs.dataset,
                       inputs.columns, shap_path, n_rows)
    plots = run.timed("plots", write_plots, staging, inputs.columns, table, labels, _shap_columns(ens),
                      interactions, sample, n_rows, output_word(ens), library, _permutation_meaning(inputs.model))
    run.timings.append(("total", time.perf_counter() - started))
    summary = Summary(options=options, library=library, ens=ens, n_rows=n_rows, method=method,
                      labels=labels, background_rows=None if inputs.background is None else len(inputs.background),
                      target_rows=target_rows, device=_device_name(device), plots=plots,
                      objective=inputs.model.objective, permutation=_permutation_meaning(inputs.model))
    write_report(os.path.join(staging, REPORT), table, run, summary)
    return ["shap.parquet", "importances.csv"] + [name for _, name in plots] + [REPORT]


def _method(options: Options) -> str:
    """The SHAP method: ``--method``, else interventional with ``--background``, else path_dependent."""
    method = options.method or ("interventional" if options.background else "path_dependent")
    if method == "interventional" and options.background is None:
        raise ValueError("--method interventional needs --background FILE (the rows to average over)")
    if options.background is not None and method != "interventional":
        raise ValueError(f"--background is used only by --method interventional; got --method {method}")
    return method


def _check_method(model: Model, method: str) -> None:
    """Refuse, before any row is read, a ``--method`` that the model does not compute (exact SHAP
    values of trees that are not symmetric, or of symmetric trees too deep for their tables),
    naming the methods it has."""
    methods = KERNELS[general(model.ens, method, f"--method {method}").layout].methods
    if method not in methods:
        why = NOT_FOR_TREES.get(method, "this model's trees do not define it")
        raise ValueError(f"--method {method} is not available for this {model.library} model: {why}; this model "
                         f"has --method {', '.join(methods[:-1])} or {methods[-1]}")


def _read_inputs(run: Run, options: Options, method: str) -> Inputs:
    """The model (checked to compute ``method``), DATA's columns (its first rows checked against
    the model) and the background, every mismatch a ``ValueError`` before any long computation."""
    model = run.timed("load the model", load_model, options.model, options.trusted_types)
    ens = model.ens
    _check_method(model, method)
    run.say(f"model: {options.model} ({model.library}, {describe_model(ens, model.objective)})")
    dataset = dataset_of(options.data, "DATA", arg=None)
    check_not_source(dataset, os.path.join(os.path.expanduser(options.out), "shap.parquet"), "DATA", "--out")
    _check_each_file(dataset, ens, options.target, "DATA")
    if options.target is not None and options.target not in dataset.schema.names:
        raise ValueError(f"--target {options.target!r} is not a column of DATA {options.data!r} "
                         f"(it has {_listed(list(dataset.schema.names))})")
    columns = data_columns(dataset, ens, options.target, "DATA", options.data)
    check_file_columns(dataset, columns + ([options.target] if options.target else []), "DATA")
    _check_rows(ens, first_rows(dataset, columns, 256), options.data)
    background = None
    if options.background is not None:
        source = dataset_of(options.background, "--background", arg=None)
        _check_each_file(source, ens, None, "--background")
        chosen = data_columns(source, ens, options.target, "--background", options.background)
        check_file_columns(source, chosen, "--background")
        background = run.timed("read the background", lambda: source.to_table(columns=chosen).to_pandas())
    return Inputs(model, dataset, columns, background)


def _check_each_file(dataset: Any, ens: Any, target: str | None, what: str) -> None:
    """A column that one file of several has and another lacks (the model's, or the target),
    named with the file that lacks it; before the checks against the first file's schema."""
    present = {name for names in file_columns(dataset, what).values() for name in names}
    wanted = (list(ens.feature_names) if has_real_names(ens) else []) + ([target] if target else [])
    check_file_columns(dataset, [name for name in wanted if name in present], what)


def _importances(run: Run, inputs: Inputs, options: Options, devices: Any) -> tuple[dict[str, np.ndarray], int]:
    """``({importances.csv column: f[F]}, rows used for the target's importances)``: the
    model's library's own importances of the model alone (CatBoost's PredictionValuesChange,
    XGBoost's ``get_score`` types, LightGBM's ``feature_importance`` types, scikit-learn's
    ``feature_importances_``), and with ``--target`` permutation importance (and CatBoost's
    LossFunctionChange)."""
    ens, library = inputs.model.ens, inputs.model.library
    importances = {}
    if library == "CatBoost":
        pvc = _model_only(run, "PredictionValuesChange", prediction_values_change, ens)
        if pvc is not None:
            importances["prediction_values_change"] = pvc
    for one in LIBRARY_IMPORTANCES[library]:
        values = _model_only(run, f"{library}'s {one.column}", lambda e, t=one.type: split_importance(e, t), ens)
        if values is not None:
            importances[one.column] = values
    target_rows = 0
    if options.target is not None:
        target_rows = _with_target(run, inputs, options, devices, importances)
    return importances, target_rows


def _stream_shap(inputs: Inputs, options: Options, method: str, shap_path: str, devices: Any):
    """``(mean |SHAP| f32[F] or f32[F, K], rows)`` with every row's SHAP values written to
    ``shap_path`` batch by batch (:func:`jaximp.explain_files`)."""
    import pyarrow.parquet as pq

    mean_abs = explain_files(inputs.model.ens, options.data, out=shap_path, method=method,
                             background=inputs.background, columns=inputs.columns,
                             batch_rows=options.batch_rows, progress=options.progress, devices=devices)
    return mean_abs, pq.ParquetFile(shap_path).metadata.num_rows


def _shap_columns(ens: Any) -> list[list[str]]:
    """For each output, the F columns of ``shap.parquet`` holding its SHAP values."""
    names, k = output_names(ens)[0], ens.n_outputs  # [F, K] in order
    return [names[j::k] for j in range(k)]


def _device(kind: str | None):
    """The JAX device for ``--device``: ``None`` (JAX's default), ``"cpu"`` or ``"gpu"``."""
    if kind is None:
        return jax.devices()[0]
    try:
        return jax.devices(kind)[0]
    except RuntimeError:
        raise ValueError(f"--device {kind}: JAX sees no {kind.upper()} on this machine (install JAX with GPU "
                         "support, e.g. pip install 'jax[cuda12]', or use --device cpu)") from None


def _device_name(device: Any) -> str:
    """``"cpu"``, ``"gpu (NVIDIA H100 80GB HBM3)"``."""
    kind = str(getattr(device, "device_kind", ""))
    return device.platform if kind.lower() in ("", device.platform) else f"{device.platform} ({kind})"


def _check_rows(ens: Any, head: Any, path: str) -> None:
    """A clear error before the long run when DATA's first rows do not fit the model."""
    if not len(head):
        raise ValueError(f"DATA {path!r} holds no rows")
    as_features(head, ens, "DATA")


def _model_only(run: Run, name: str, function: Callable, ens: Any) -> np.ndarray | None:
    """``function(ens)`` as float64, an importance of the model alone (``name`` in the timings),
    or None (with a note) where the model does not define it."""
    try:
        return np.asarray(run.timed(name, function, ens), np.float64)
    except (ValueError, TypeError) as e:
        run.notes.append(f"{name} not computed: {e}")
        return None


def _permutation_scoring(model: Model) -> tuple[str | None, str] | None:
    """``(scoring, what it measures)`` of permutation importance for the model, or None where
    it has no score to use: the model's own loss (scoring None), or for a scikit-learn model
    its ``score`` method's metric (R² or accuracy), as ``sklearn.inspection.permutation_importance``."""
    ens = model.ens
    if model.library == "scikit-learn":
        if ens.class_names:
            return "accuracy", "the decrease of the accuracy (the classifier's score)"
        return "r2", "the decrease of R² (the regressor's score)"
    if ens.loss_function not in MODEL_LOSSES:
        return None
    native = f", as its {model.objective}" if model.library != "CatBoost" and model.objective else ""
    return None, f"the increase of the model's loss ({ens.loss_function}{native})"


def _permutation_meaning(model: Model) -> str:
    scoring = _permutation_scoring(model)
    return "" if scoring is None else scoring[1]


def _with_target(run: Run, inputs: Inputs, options: Options, devices: Any, importances: dict) -> int:
    """Permutation importance (and for CatBoost models LossFunctionChange) on the first
    ``target_rows`` rows, read into memory, added to ``importances``; the number of rows used
    (0: not computed, with a note, for a model whose loss jaximp does not compute)."""
    ens, dataset, columns = inputs.model.ens, inputs.dataset, inputs.columns
    catboost = inputs.model.library == "CatBoost"
    names = "Permutation importance and LossFunctionChange" if catboost else "Permutation importance"
    scoring = _permutation_scoring(inputs.model)
    if scoring is None:
        loss = f"its {inputs.model.objective}, not one of them" if inputs.model.objective else "no training loss"
        run.notes.append(f"{names} not computed: {'they score' if catboost else 'it scores'} with the model's "
                         f"loss ({', '.join(MODEL_LOSSES)}), and the model records {loss}; in Python, "
                         "jaximp.permutation_importance(ens, X, y, scoring=...) scores with a metric of your choice.")
        return 0
    frame = run.timed("read the target rows", first_rows, dataset, columns + [options.target], options.target_rows)
    X, y = frame[columns], frame[options.target].to_numpy()
    if len(frame) == options.target_rows and dataset.count_rows() > options.target_rows:
        run.notes.append(f"{names} use the first {len(frame):,} rows of DATA "
                         "(held in memory; --target-rows sets how many).")
    run.say(f"{names[0].lower()}{names[1:]} ({options.repeats} repeats) on {len(frame)} rows")
    permutation = run.timed("permutation importance", permutation_importance, ens, X, y, scoring=scoring[0],
                            n_repeats=options.repeats, random_state=options.seed, devices=devices,
                            progress=options.progress)
    importances["permutation_importance"] = np.asarray(permutation.importances_mean, np.float64)
    importances["permutation_importance_std"] = np.asarray(permutation.importances_std, np.float64)
    if not catboost:
        return len(frame)
    try:
        importances["loss_function_change"] = np.asarray(run.timed(
            "LossFunctionChange", loss_function_change, ens, X, y, devices=devices,
            progress=options.progress), np.float64)
    except ValueError as e:  # defined for the losses CatBoost defines it for
        run.notes.append(f"LossFunctionChange not computed: {e}")
    return len(frame)


def _summary_sample(dataset: Any, columns: list[str], shap_path: str, n_rows: int):
    """``(feature rows, SHAP rows)`` DataFrames of the same fixed random sample of rows."""
    import pyarrow.parquet as pq

    rows = np.arange(n_rows)
    if n_rows > SUMMARY_POINTS:
        rows = np.sort(np.random.default_rng(0).choice(n_rows, SUMMARY_POINTS, replace=False))
    features = sample_rows(dataset.to_batches(columns=columns), rows)
    shap = sample_rows(pq.ParquetFile(shap_path).iter_batches(), rows)
    return features, shap


# --------------------------------------------------------------------------------------------
# importances.csv


def importance_table(columns: list[str], mean_abs: np.ndarray, labels: list[str],
                     importances: dict) -> dict[str, Any]:
    """``{column name: values [F]}`` sorted by mean |SHAP|, the most important first. A
    multi-output model's mean |SHAP| is summed over outputs (per output in
    ``mean_abs_shap_<output>``)."""
    mean_abs = np.asarray(mean_abs, np.float64)
    table: dict[str, Any] = {"mean_abs_shap": mean_abs if mean_abs.ndim == 1 else mean_abs.sum(axis=1)}
    if mean_abs.ndim == 2:
        table.update({f"mean_abs_shap_{label}": mean_abs[:, k] for k, label in enumerate(labels)})
    table.update(importances)
    order = np.argsort(-table["mean_abs_shap"], kind="stable")
    return {"feature": [columns[i] for i in order], **{name: values[order] for name, values in table.items()}}


def write_csv(path: str, table: dict[str, Any]) -> None:
    """The table as CSV, floats with 9 significant digits (float32 values read back exactly)."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(list(table))
        for i, name in enumerate(table["feature"]):
            writer.writerow([name] + [f"{table[c][i]:.9g}" for c in list(table)[1:]])

