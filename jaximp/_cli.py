"""Command line: ``jaximp explain MODEL DATA`` explains a model file on a CSV or Parquet file
(:mod:`jaximp._cli_explain`); ``jaximp demo`` runs the main job on a built-in example.

The demo trains a CatBoost model on scikit-learn's bundled diabetes data (no download), imports
it, and prints what jaximp computes next to CatBoost's own numbers; then the same data with two
categorical columns, through the ``get_feature_importance`` drop-in; then it saves the model and
the data and runs ``jaximp explain`` on them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np


def demo(iterations: int = 300, depth: int = 6, out: str | None = None, progress: bool = True) -> str:
    """Train, import and explain a CatBoost model on the diabetes data; print the comparisons with
    CatBoost, save the model and data in ``out`` (default: ``jaximp-demo`` in the system's
    temporary directory, so that a clone stays clean) and explain them there; the report's path."""
    import tempfile

    import catboost
    from sklearn.datasets import load_diabetes

    import jaximp

    out = out if out is not None else os.path.join(tempfile.gettempdir(), "jaximp-demo")
    data = load_diabetes(as_frame=True)
    X, y = data.data.astype(np.float32), data.target.to_numpy()
    print(f"data: sklearn diabetes, {X.shape[0]} rows x {X.shape[1]} features")
    model = catboost.CatBoostRegressor(
        iterations=iterations, depth=depth, learning_rate=0.05, verbose=0, random_seed=0,
        allow_writing_files=False,
    ).fit(X, y)
    ens = jaximp.from_catboost(model)
    print(f"model: {ens.n_trees} trees, depth {ens.depth}, {ens.n_features} features, "
          f"{ens.n_outputs} output(s), loss {ens.loss_function}")

    start = time.perf_counter()
    raw = ens.predict(X)
    elapsed = time.perf_counter() - start
    reference = model.predict(X, prediction_type="RawFormulaVal")
    print(f"predict: {len(raw)} rows in {elapsed * 1e3:.1f} ms (first call includes compilation); "
          f"max |jaximp - CatBoost| = {np.abs(raw - reference).max():.2e}")
    leaves = jaximp.leaf_indices(ens, X)
    same = np.array_equal(leaves, model.calc_leaf_indexes(X))
    print(f"leaf_indices: shape {leaves.shape}, equal to CatBoost calc_leaf_indexes: {same}")
    print("first rows (raw prediction):", np.round(raw[:5], 3))

    pvc = np.asarray(jaximp.prediction_values_change(ens))
    reference = model.get_feature_importance(type="PredictionValuesChange")
    print(f"\nPredictionValuesChange (max |jaximp - CatBoost| = {np.abs(pvc - reference).max():.1e}):")
    for name, value in sorted(zip(ens.feature_names, pvc), key=lambda item: -item[1])[:5]:
        print(f"  {name:>6s} {value:6.2f}")

    pool = catboost.Pool(X, y)
    for method, calc in (("path_dependent", "Regular"), ("exact", "Exact"), ("approximate", "Approximate")):
        start = time.perf_counter()
        values = jaximp.shap_values(ens, X, method=method)
        elapsed = time.perf_counter() - start
        reference = model.get_feature_importance(pool, type="ShapValues", shap_calc_type=calc)[:, :-1]
        print(f"SHAP {method:>15s}: {values.shape} in {elapsed * 1e3:6.1f} ms (with compilation); "
              f"max |jaximp - CatBoost {calc}| = {np.abs(values - reference).max():.1e}")
    background = X.iloc[:100]
    values = jaximp.shap_values(ens, X, method="interventional", background=background)
    additivity = np.abs(values.sum(1) + jaximp.expected_value(ens, method="interventional",
                                                              background=background) - raw).max()
    print(f"SHAP  interventional: 100 background rows; max |sum + expected - predict| = {additivity:.1e}")

    lfc = np.asarray(jaximp.loss_function_change(ens, X, y))
    reference = model.get_feature_importance(pool, type="LossFunctionChange")
    print(f"LossFunctionChange: max |jaximp - CatBoost| = {np.abs(lfc - reference).max():.1e}")
    result = jaximp.permutation_importance(ens, X, y, n_repeats=10, random_state=0)
    print("permutation importance (RMSE, 10 repeats), top features:")
    for i in np.argsort(-result.importances_mean)[:5]:
        print(f"  {ens.feature_names[i]:>6s} {result.importances_mean[i]:7.3f} "
              f"+/- {result.importances_std[i]:.3f}")
    categorical_demo(X, y, iterations=iterations // 3)
    return explain_demo(model, X, y, out, progress)


def explain_demo(model, X, y, out: str, progress: bool) -> str:
    """Save the model (``out/model.cbm``) and the data with its target (``out/diabetes.csv``) and
    run ``jaximp explain`` on them, the report in ``out/report``; the report's path."""
    from jaximp._cli_explain import Options, explain

    os.makedirs(out, exist_ok=True)
    model_path, data_path, report_dir = (os.path.join(out, name) for name in ("model.cbm", "diabetes.csv", "report"))
    model.save_model(model_path)
    X.assign(target=y).to_csv(data_path, index=False)
    print(f"\nsaved {model_path} and {data_path}; the same as\n"
          f"  jaximp explain {model_path} {data_path} --target target --out {report_dir}")
    return explain(Options(model=model_path, data=data_path, out=report_dir, target="target", progress=progress))


def categorical_demo(X, y, iterations: int) -> None:
    """The same data with two categorical columns (sex, and an age band), CTRs over combinations
    included: jaximp's drop-in get_feature_importance against CatBoost's, type by type."""
    import catboost
    import pandas as pd

    import jaximp

    frame = X.copy()
    frame["sex"] = np.where(X["sex"] > 0, "male", "female")
    frame["age"] = pd.cut(X["age"], 6, labels=[f"band{i}" for i in range(6)]).astype(str)
    model = catboost.CatBoostRegressor(
        iterations=iterations, depth=4, learning_rate=0.1, verbose=0, random_seed=0,
        allow_writing_files=False, cat_features=["sex", "age"], one_hot_max_size=2, max_ctr_complexity=2,
    ).fit(frame, y)
    pool = catboost.Pool(frame, y, cat_features=["sex", "age"])
    ens = jaximp.from_catboost(model)
    print(f"\ncategorical: sex and age as categories, {ens.n_evaluated - len(ens.featurizer.float_columns)} "
          "one-hot values and CTRs; jaximp.get_feature_importance(model, ...) against "
          "model.get_feature_importance(...):")
    for kind, kwargs in (("PredictionValuesChange", {}), ("LossFunctionChange", dict(data=pool)),
                         ("ShapValues", dict(data=pool)), ("ShapInteractionValues", dict(data=pool))):
        start = time.perf_counter()
        ours = jaximp.get_feature_importance(model, type=kind, **kwargs)
        elapsed = time.perf_counter() - start
        reference = model.get_feature_importance(type=kind, **kwargs)
        print(f"  {kind:>22s}: shape {ours.shape}, max |jaximp - CatBoost| = "
              f"{np.abs(ours - reference).max():.1e} ({elapsed * 1e3:.0f} ms with compilation)")


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors on one line: ``jaximp explain: error: ... (see jaximp explain --help)``."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer; got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer; got {text!r}")
    return value


def parser() -> argparse.ArgumentParser:
    """The ``jaximp`` command's parser: ``demo`` and ``explain``."""
    root = _Parser(prog="jaximp", description="Exact feature importances and SHAP values of tree ensembles.")
    commands = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run_demo = commands.add_parser(
        "demo", help="train, import and explain a CatBoost model on bundled data; compare with CatBoost",
        description="Train a CatBoost model on scikit-learn's bundled diabetes data (no download), print "
                    "jaximp's importances and SHAP values next to CatBoost's own numbers, then save the model "
                    "and data in DIR and run 'jaximp explain' on them (report in DIR/report/report.md).")
    run_demo.add_argument("--iterations", type=_positive, default=300, metavar="T", help="trees to train (default 300)")
    run_demo.add_argument("--depth", type=_positive, default=6, metavar="D", help="depth of the trees (default 6)")
    run_demo.add_argument("--out", default=None, metavar="DIR",
                          help="where to save the model, the data and the report (default: jaximp-demo in the "
                               "system's temporary directory)")
    run_demo.add_argument("--no-progress", action="store_true", help="no progress bars")

    run_explain = commands.add_parser(
        "explain", help="importances, SHAP values, plots and a report of a model on a CSV or Parquet file",
        description="Explain every row of DATA with MODEL: SHAP values streamed to DIR/shap.parquet batch by "
                    "batch (memory bounded whatever the rows), importances in DIR/importances.csv (mean |SHAP|, "
                    "PredictionValuesChange; with --target also permutation importance and LossFunctionChange), "
                    "PNG plots and DIR/report.md.")
    run_explain.add_argument("model", metavar="MODEL",
                             help="model file: CatBoost (.cbm or .json), XGBoost (.json or .ubj) or LightGBM (.txt)")
    run_explain.add_argument("data", metavar="DATA",
                             help="rows to explain: a CSV file (.csv, .csv.gz), a Parquet file, a directory of "
                                  "Parquet files or a quoted glob pattern; columns named as the model's features "
                                  "(in the model's order when it has no feature names)")
    run_explain.add_argument("--method", choices=METHODS, default=None, metavar="M",
                             help="SHAP method: path_dependent, exact, approximate or interventional (default "
                                  "path_dependent, or interventional with --background); "
                                  "path_dependent is CatBoost's Regular and shap's tree_path_dependent, exact is "
                                  "CatBoost's Exact, approximate is Saabas (CatBoost's Approximate), "
                                  "interventional averages over the --background rows")
    run_explain.add_argument("--background", metavar="FILE",
                             help="CSV or Parquet rows for interventional SHAP values (read into memory; the cost "
                                  "grows with its rows: a few hundred to a few thousand is typical)")
    run_explain.add_argument("--target", metavar="COL",
                             help="target column of DATA: also computes permutation importance and "
                                  "LossFunctionChange, on the first --target-rows rows held in memory")
    run_explain.add_argument("--target-rows", type=_positive, default=100_000, metavar="N",
                             help="rows (the first of DATA) used with --target (default 100000)")
    run_explain.add_argument("--repeats", type=_positive, default=5, metavar="R",
                             help="shuffles per feature for permutation importance (default 5)")
    run_explain.add_argument("--seed", type=int, default=0, help="random seed of the shuffles (default 0)")
    run_explain.add_argument("--batch-rows", type=_positive, default=None, metavar="N",
                             help="rows per record batch read from DATA (default 65536)")
    run_explain.add_argument("--out", default="jaximp-explain", metavar="DIR",
                             help="output directory, created if needed; files in it are overwritten "
                                  "(default ./jaximp-explain)")
    run_explain.add_argument("--device", choices=("cpu", "gpu"), default=None,
                             help="where to compute (default: JAX's default device, a GPU when JAX sees one)")
    run_explain.add_argument("--no-progress", action="store_true", help="no progress bars")
    root.commands = {"demo": run_demo, "explain": run_explain}
    return root


METHODS = ("path_dependent", "exact", "approximate", "interventional")


def explain_command(args: argparse.Namespace) -> str:
    """Run ``jaximp explain`` on parsed arguments; the report's path."""
    for module in ("pyarrow", "matplotlib"):
        try:
            __import__(module)
        except ImportError:
            raise ImportError(f"jaximp explain needs {module}: pip install 'jaximp[cli]'") from None
    if args.device == "cpu" and "jax" not in sys.modules:
        os.environ["JAX_PLATFORMS"] = "cpu"  # no GPU initialisation at all
    from jaximp._cli_explain import Options, explain

    return explain(Options(
        model=args.model, data=args.data, out=args.out, method=args.method, background=args.background,
        target=args.target, target_rows=args.target_rows, repeats=args.repeats, seed=args.seed,
        batch_rows=args.batch_rows, device=args.device, progress=not args.no_progress))


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``jaximp`` command; the exit status (0: done, 1: a bad input, 2: bad
    arguments). A bad input (file, column, model, option) prints one line on stderr, no traceback."""
    root = parser()
    args, unknown = root.parse_known_args(argv)
    if unknown:  # reported by the command's parser, which names the command
        root.commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        if args.command == "demo":
            report = demo(iterations=args.iterations, depth=args.depth, out=args.out, progress=not args.no_progress)
        else:
            report = explain_command(args)
        print(f"report: {report}")
    except (ValueError, TypeError, OSError, ImportError) as e:
        message = " ".join(str(e).split()) or type(e).__name__
        if isinstance(e, OSError) and e.filename is not None and e.strerror:
            message = f"{e.filename}: {e.strerror}"
        print(f"jaximp {args.command}: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"jaximp {args.command}: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
