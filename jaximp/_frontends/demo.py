"""``jaximp demo``: the main job on a built-in example.

It trains a CatBoost model on scikit-learn's bundled diabetes data (no download), imports it, and
prints what jaximp computes next to CatBoost's own numbers; then the same data with two
categorical columns, through the ``get_feature_importance`` drop-in; then it saves the model and
the data and runs ``jaximp explain`` on them.
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np

from jaximp._frontends.dropin import get_feature_importance
from jaximp._frontends.explain import Options, explain
from jaximp._frontends.files import output_folder, partial_path, refuse_link
from jaximp._importances.loss_change import loss_function_change
from jaximp._importances.permutation import permutation_importance
from jaximp._importances.pvc import prediction_values_change
from jaximp._importers.catboost import from_catboost
from jaximp._leaves.predict import leaf_indices
from jaximp._shap.values import expected_value, shap_values


def demo(iterations: int = 300, depth: int = 6, out: str | None = None, progress: bool = True) -> str:
    """Train, import and explain a CatBoost model on the diabetes data; print the comparisons with
    CatBoost, save the model and data in ``out`` (default: a new private folder
    ``jaximp-demo-XXXXXXXX`` in the system's temporary directory, made by ``tempfile.mkdtemp``,
    so that a clone stays clean and no other user's files are touched) and explain them there;
    the report's path."""
    import catboost

    model, X, y = demo_model(iterations, depth)
    print(f"data: sklearn diabetes, {X.shape[0]} rows x {X.shape[1]} features")
    ens = from_catboost(model)
    print(f"model: {ens.n_trees} trees, depth {ens.depth}, {ens.n_features} features, "
          f"{ens.n_outputs} output(s), loss {ens.loss_function}")

    start = time.perf_counter()
    raw = ens.predict(X)
    elapsed = time.perf_counter() - start
    reference = model.predict(X, prediction_type="RawFormulaVal")
    print(f"predict: {len(raw)} rows in {elapsed * 1e3:.1f} ms (first call includes compilation); "
          f"max |jaximp - CatBoost| = {np.abs(raw - reference).max():.2e}")
    leaves = leaf_indices(ens, X)
    same = np.array_equal(leaves, model.calc_leaf_indexes(X))
    print(f"leaf_indices: shape {leaves.shape}, equal to CatBoost calc_leaf_indexes: {same}")
    print("first rows (raw prediction):", np.round(raw[:5], 3))

    pvc = np.asarray(prediction_values_change(ens))
    reference = model.get_feature_importance(type="PredictionValuesChange")
    print(f"\nPredictionValuesChange (max |jaximp - CatBoost| = {np.abs(pvc - reference).max():.1e}):")
    for name, value in sorted(zip(ens.feature_names, pvc), key=lambda item: -item[1])[:5]:
        print(f"  {name:>6s} {value:6.2f}")

    pool = catboost.Pool(X, y)
    for method, calc in (("path_dependent", "Regular"), ("exact", "Exact"), ("approximate", "Approximate")):
        start = time.perf_counter()
        values = shap_values(ens, X, method=method)
        elapsed = time.perf_counter() - start
        reference = model.get_feature_importance(pool, type="ShapValues", shap_calc_type=calc)[:, :-1]
        print(f"SHAP {method:>15s}: {values.shape} in {elapsed * 1e3:6.1f} ms (with compilation); "
              f"max |jaximp - CatBoost {calc}| = {np.abs(values - reference).max():.1e}")
    background = X.iloc[:100]
    values = shap_values(ens, X, method="interventional", background=background)
    additivity = np.abs(values.sum(1) + expected_value(ens, method="interventional",
                                                              background=background) - raw).max()
    print(f"SHAP  interventional: 100 background rows; max |sum + expected - predict| = {additivity:.1e}")

    lfc = np.asarray(loss_function_change(ens, X, y))
    reference = model.get_feature_importance(pool, type="LossFunctionChange")
    print(f"LossFunctionChange: max |jaximp - CatBoost| = {np.abs(lfc - reference).max():.1e}")
    result = permutation_importance(ens, X, y, n_repeats=10, random_state=0)
    print("permutation importance (RMSE, 10 repeats), top features:")
    for i in np.argsort(-result.importances_mean)[:5]:
        print(f"  {ens.feature_names[i]:>6s} {result.importances_mean[i]:7.3f} "
              f"+/- {result.importances_std[i]:.3f}")
    categorical_demo(X, y, iterations=iterations // 3)
    return explain_demo(model, X, y, demo_folder(out), progress)


def demo_model(iterations: int = 300, depth: int = 6):
    """The demo's model and data: ``(CatBoostRegressor, X f32[442, 10] DataFrame, y f64[442])``,
    ``iterations`` trees of depth ``depth`` trained (seeded) on scikit-learn's bundled diabetes
    data (no download). scripts/figures.py draws the README's pictures from it."""
    import catboost
    from sklearn.datasets import load_diabetes

    data = load_diabetes(as_frame=True)
    X, y = data.data.astype(np.float32), data.target.to_numpy()
    model = catboost.CatBoostRegressor(
        iterations=iterations, depth=depth, learning_rate=0.05, verbose=0, random_seed=0,
        allow_writing_files=False,
    ).fit(X, y)
    return model, X, y


def demo_folder(out: str | None) -> str:
    """``out``, or a new private folder ``jaximp-demo-XXXXXXXX`` in the system's temporary
    directory (``tempfile.mkdtemp``: created for this run only, readable by its user only)."""
    return out if out is not None else tempfile.mkdtemp(prefix="jaximp-demo-")


def explain_demo(model, X, y, out: str, progress: bool) -> str:
    """Save the model (``out/model.cbm``) and the data with its target (``out/diabetes.csv``) and
    run ``jaximp explain`` on them, the report in ``out/report``; the report's path. Each file is
    written under a temporary name and renamed when complete, never through a symbolic link."""
    out = output_folder(out)
    model_path, data_path, report_dir = (os.path.join(out, name) for name in ("model.cbm", "diabetes.csv", "report"))
    for path, write in ((model_path, model.save_model),
                        (data_path, lambda p: X.assign(target=y).to_csv(p, index=False))):
        refuse_link(path)
        partial = partial_path(path)
        try:
            write(partial)
            refuse_link(path)
            os.replace(partial, path)
        finally:
            if os.path.exists(partial):
                os.remove(partial)
    print(f"\nsaved {model_path} and {data_path}; the same as\n"
          f"  jaximp explain {model_path} {data_path} --target target --out {report_dir}")
    return explain(Options(model=model_path, data=data_path, out=report_dir, target="target", progress=progress))


def categorical_demo(X, y, iterations: int) -> None:
    """The same data with two categorical columns (sex, and an age band), CTRs over combinations
    included: jaximp's drop-in get_feature_importance against CatBoost's, type by type."""
    import catboost
    import pandas as pd

    frame = X.copy()
    frame["sex"] = np.where(X["sex"] > 0, "male", "female")
    frame["age"] = pd.cut(X["age"], 6, labels=[f"band{i}" for i in range(6)]).astype(str)
    model = catboost.CatBoostRegressor(
        iterations=iterations, depth=4, learning_rate=0.1, verbose=0, random_seed=0,
        allow_writing_files=False, cat_features=["sex", "age"], one_hot_max_size=2, max_ctr_complexity=2,
    ).fit(frame, y)
    pool = catboost.Pool(frame, y, cat_features=["sex", "age"])
    ens = from_catboost(model)
    print(f"\ncategorical: sex and age as categories, {ens.n_evaluated - len(ens.featurizer.float_columns)} "
          "one-hot values and CTRs; jaximp.get_feature_importance(model, ...) against "
          "model.get_feature_importance(...):")
    for kind, kwargs in (("PredictionValuesChange", {}), ("LossFunctionChange", dict(data=pool)),
                         ("ShapValues", dict(data=pool)), ("ShapInteractionValues", dict(data=pool))):
        start = time.perf_counter()
        ours = get_feature_importance(model, type=kind, **kwargs)
        elapsed = time.perf_counter() - start
        reference = model.get_feature_importance(type=kind, **kwargs)
        print(f"  {kind:>22s}: shape {ours.shape}, max |jaximp - CatBoost| = "
              f"{np.abs(ours - reference).max():.1e} ({elapsed * 1e3:.0f} ms with compilation)")
