"""Command line: ``jaximp explain MODEL DATA`` explains a model file on a CSV or Parquet file
(:mod:`jaximp._frontends.explain`); ``jaximp demo`` runs the main job on a built-in example
(:mod:`jaximp._frontends.demo`). The library is imported once the arguments parse, so that
``jaximp --help`` answers at once.

MODEL is a CatBoost, XGBoost or LightGBM model file, or a scikit-learn tree model saved with
skops (``skops.io.dump(model, "model.skops")``; pickles are never read). A skops file is loaded
with skops' trusted-types check: types other than those skops trusts and those that
scikit-learn's tree, forest and boosting models hold are refused unless named with
``--trust-skops-type TYPE`` (once per type).
"""

from __future__ import annotations

import argparse
import os
import sys


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


METHODS = ("path_dependent", "exact", "approximate", "interventional")


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
                          help="where to save the model, the data and the report (default: a new private "
                               "folder jaximp-demo-XXXXXXXX in the system's temporary directory)")
    run_demo.add_argument("--no-progress", action="store_true", help="no progress bars")

    run_explain = commands.add_parser(
        "explain", help="importances, SHAP values, plots and a report of a model on a CSV or Parquet file",
        description="Explain every row of DATA with MODEL: SHAP values streamed to DIR/shap.parquet batch by "
                    "batch (memory bounded whatever the rows), importances in DIR/importances.csv (mean |SHAP| and "
                    "the model's library's own, under its names: CatBoost's PredictionValuesChange, XGBoost's "
                    "weight, gain, cover, total_gain and total_cover, LightGBM's split and gain, scikit-learn's "
                    "feature_importances_; with --target also permutation importance, and CatBoost's "
                    "LossFunctionChange), PNG plots and DIR/report.md. scikit-learn models are read from skops "
                    "files, never pickles.")
    run_explain.add_argument("model", metavar="MODEL",
                             help="model file: CatBoost (.cbm or .json), XGBoost (.json or .ubj), LightGBM (.txt), "
                                  "or a scikit-learn tree, forest or boosting model saved with skops (.skops, "
                                  "skops.io.dump(model, 'model.skops'); see --trust-skops-type)")
    run_explain.add_argument("data", metavar="DATA",
                             help="rows to explain: a CSV file (.csv, .csv.gz), a Parquet file, a directory of "
                                  "Parquet files or a quoted glob pattern (a path that exists is taken as it is, "
                                  "before it is tried as a pattern); columns named as the model's features (in the "
                                  "model's order when it has no feature names); several files must all have them")
    run_explain.add_argument("--method", choices=METHODS, default=None, metavar="M",
                             help="SHAP method: path_dependent, exact, approximate or interventional (default "
                                  "path_dependent, or interventional with --background); "
                                  "path_dependent is CatBoost's Regular and shap's tree_path_dependent, exact is "
                                  "CatBoost's Exact (for CatBoost's symmetric trees only), approximate is Saabas "
                                  "(CatBoost's Approximate), interventional averages over the --background rows")
    run_explain.add_argument("--background", metavar="FILE",
                             help="CSV or Parquet rows for interventional SHAP values (read into memory; the cost "
                                  "grows with its rows: a few hundred to a few thousand is typical)")
    run_explain.add_argument("--target", metavar="COL",
                             help="target column of DATA: also computes permutation importance (scored with the "
                                  "model's loss; scikit-learn models with their score method, R² or accuracy) "
                                  "and, for CatBoost models, LossFunctionChange, on the first --target-rows rows "
                                  "held in memory")
    run_explain.add_argument("--target-rows", type=_positive, default=100_000, metavar="N",
                             help="rows (the first of DATA) used with --target (default 100000)")
    run_explain.add_argument("--repeats", type=_positive, default=5, metavar="R",
                             help="shuffles per feature for permutation importance (default 5)")
    run_explain.add_argument("--seed", type=int, default=0, help="random seed of the shuffles (default 0)")
    run_explain.add_argument("--batch-rows", type=_positive, default=None, metavar="N",
                             help="rows per record batch read from DATA (default 65536)")
    run_explain.add_argument("--out", default="jaximp-explain", metavar="DIR",
                             help="output directory, created if needed (not a symbolic link); the outputs of an "
                                  "earlier run in it are replaced once this run is complete, and kept if it fails "
                                  "(default ./jaximp-explain)")
    run_explain.add_argument("--device", choices=("cpu", "gpu"), default=None,
                             help="where to compute (default: JAX's default device, a GPU when JAX sees one)")
    run_explain.add_argument("--no-progress", action="store_true", help="no progress bars")
    run_explain.add_argument("--trust-skops-type", action="append", default=[], metavar="TYPE",
                             help="a type that a skops MODEL may hold besides those skops trusts and those of "
                                  "scikit-learn's tree, forest and boosting models, which are trusted (named as "
                                  "skops.io.get_untrusted_types names it, e.g. mypackage.MyEstimator); repeat it "
                                  "for each type. A skops file holding another type is refused, since loading it "
                                  "could run that type's code")
    root.commands = {"demo": run_demo, "explain": run_explain}
    return root


def explain_command(args: argparse.Namespace) -> str:
    """Run ``jaximp explain`` on parsed arguments; the report's path."""
    for module in ("pyarrow", "matplotlib"):
        try:
            __import__(module)
        except ImportError:
            raise ImportError(f"jaximp explain needs {module}: pip install 'jaximp[cli]'") from None
    if args.device == "cpu" and "jax" not in sys.modules:
        os.environ["JAX_PLATFORMS"] = "cpu"  # no GPU initialisation at all
    from jaximp._frontends.explain import Options, explain  # after parsing, so that --help stays fast

    return explain(Options(
        model=args.model, data=args.data, out=args.out, method=args.method, background=args.background,
        target=args.target, target_rows=args.target_rows, repeats=args.repeats, seed=args.seed,
        batch_rows=args.batch_rows, device=args.device, progress=not args.no_progress,
        trusted_types=tuple(args.trust_skops_type)))


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``jaximp`` command; the exit status (0: done, 1: a bad input, 2: bad
    arguments, 130: interrupted). A bad input (file, column, model, option; a model file nested too
    deeply or too large to read) prints one line on stderr, no traceback."""
    root = parser()
    args, unknown = root.parse_known_args(argv)
    if unknown:  # reported by the command's parser, which names the command
        root.commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        if args.command == "demo":
            from jaximp._frontends.demo import demo  # the library is imported once the arguments parse

            report = demo(iterations=args.iterations, depth=args.depth, out=args.out, progress=not args.no_progress)
        else:
            report = explain_command(args)
        print(f"report: {report}")
    except (ValueError, TypeError, OSError, ImportError, RecursionError, MemoryError) as e:
        message = " ".join(str(e).split()) or type(e).__name__
        if isinstance(e, OSError) and e.filename is not None and e.strerror:
            message = f"{e.filename}: {e.strerror}"
        elif isinstance(e, RecursionError):  # a parser of a damaged or hostile file, past Python's stack
            message = f"an input is nested too deeply to be read ({message})"
        elif isinstance(e, MemoryError):
            message = f"out of memory ({message}): an input is larger than this machine can hold"
        print(f"jaximp {args.command}: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"jaximp {args.command}: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
