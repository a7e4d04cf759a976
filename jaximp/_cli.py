"""Command line: ``jaximp demo`` runs the main job on a built-in example.

The demo trains a CatBoost model on scikit-learn's bundled diabetes data (no download), imports
it, and prints what jaximp computes next to CatBoost's own numbers.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def demo(iterations: int = 300, depth: int = 6) -> None:
    """Train, import and explain a CatBoost model on the diabetes data; print a report."""
    import catboost
    from sklearn.datasets import load_diabetes

    import jaximp

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


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``jaximp`` command."""
    parser = argparse.ArgumentParser(prog="jaximp", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run_demo = commands.add_parser("demo", help="train, import and explain a model on bundled data")
    run_demo.add_argument("--iterations", type=int, default=300)
    run_demo.add_argument("--depth", type=int, default=6)
    args = parser.parse_args(argv)
    if args.command == "demo":
        demo(iterations=args.iterations, depth=args.depth)


if __name__ == "__main__":  # pragma: no cover
    main(sys.argv[1:])
