"""Command line: ``jaximp demo`` runs the main job on a built-in example.

The demo trains a CatBoost model on scikit-learn's bundled diabetes data (no download), imports
it, and prints what jaximp computes next to CatBoost's own numbers; then the same data with two
categorical columns, through the ``get_feature_importance`` drop-in.
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
