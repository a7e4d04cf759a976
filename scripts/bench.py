"""Time jaximp against the reference libraries, in one run, on the same data and model.

Usage::

    python scripts/bench.py            # full run, writes scripts/BENCHMARKS.md
    python scripts/bench.py --quick    # small model and sizes, for a smoke test
    python scripts/bench.py --only core shap
    python scripts/bench.py --only libraries   # XGBoost, LightGBM, scikit-learn (opt-in, printed only)
    python scripts/bench.py --only differentiable   # vmap over perturbed models, gradients (opt-in)
    python scripts/bench.py --only treeexplainer    # jaximp.TreeExplainer against shap's (opt-in)

The reference model is ``CatBoostRegressor(iterations=1000, depth=6, learning_rate=0.1)`` trained
on 100k rows of scikit-learn's ``make_regression(n_features=50, n_informative=20, noise=5)``; it
is trained once and cached under ``~/.cache/jaximp-bench``. Every workload times the reference
and jaximp on the same inputs: jaximp warm (after one call that compiles), best of ``--repeats``.
The reference is timed once per repeat as well. Ratios are what to compare across machines.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
README = HERE.parent / "README.md"
HEADLINE = ("predict (raw)", "leaf indices", "SHAP path-dependent", "SHAP interventional, 100 background",
            "SHAP interaction values", "permutation importance, 5 repeats", "LossFunctionChange")
CACHE = Path(os.environ.get("JAXIMP_BENCH_CACHE", Path.home() / ".cache" / "jaximp-bench"))


@dataclasses.dataclass
class Workload:
    """One row of the table: the same job done by a reference library and by jaximp."""

    name: str
    rows: int
    reference: str
    run_reference: Callable[[], object]
    run_jaximp: Callable[[], object]
    check: Callable[[object, object], str] | None = None
    reference_repeats: int | None = None  # for references that take minutes: 1


def best_time(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    """Best wall time of ``repeats`` calls (results blocked on), and the last result."""
    import jax

    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - start)
    return best, out


def reference_model(quick: bool):
    """The cached reference CatBoost model and its ensemble."""
    import catboost
    from sklearn.datasets import make_regression

    import jaximp

    iterations = 100 if quick else 1000
    path = CACHE / f"reference-{iterations}.cbm"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        X, y = make_regression(n_samples=100_000, n_features=50, n_informative=20, noise=5, random_state=0)
        model = catboost.CatBoostRegressor(
            iterations=iterations, depth=6, learning_rate=0.1, verbose=0, random_seed=0,
            allow_writing_files=False,
        ).fit(X.astype(np.float32), y)
        model.save_model(str(path))
    model = catboost.CatBoostRegressor()
    model.load_model(str(path))
    return model, jaximp.from_catboost(model)


def explained_rows(n: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows from the reference distribution, and their targets."""
    from sklearn.datasets import make_regression

    X, y = make_regression(n_samples=n, n_features=50, n_informative=20, noise=5, random_state=seed)
    return X.astype(np.float32), y


def max_abs_diff(a, b) -> str:
    return f"max abs diff {np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max():.1e}"


def core_workloads(model, ens, quick: bool) -> list[Workload]:
    """Predictions and leaf indices."""
    import jaximp

    n = 10_000 if quick else 100_000
    X, _ = explained_rows(n)
    return [
        Workload("predict (raw)", n, "CatBoost predict",
                 lambda: model.predict(X, prediction_type="RawFormulaVal"),
                 lambda: ens.predict(X), max_abs_diff),
        Workload("leaf indices", n, "CatBoost calc_leaf_indexes",
                 lambda: model.calc_leaf_indexes(X),
                 lambda: jaximp.leaf_indices(ens, X),
                 lambda a, b: "equal" if np.array_equal(a, b) else "DIFFERENT"),
        Workload("leaf indices, dtype=np.uint8", n, "CatBoost calc_leaf_indexes",
                 lambda: model.calc_leaf_indexes(X),
                 lambda: jaximp.leaf_indices(ens, X, dtype=np.uint8),
                 lambda a, b: "equal" if np.array_equal(a, b) else "DIFFERENT"),
    ]


def interaction_matrix(rows, n_features: int) -> np.ndarray:
    """CatBoost's Interaction rows ``[f, g, score]`` as a symmetric ``[F, F]`` matrix."""
    matrix = np.zeros((n_features, n_features))
    for f, g, score in rows:
        matrix[int(f), int(g)] = matrix[int(g), int(f)] = score
    return matrix


def model_workloads(model, ens, quick: bool) -> list[Workload]:
    """Importances from the model alone."""
    import jaximp

    return [
        Workload("PredictionValuesChange", 0, "CatBoost get_feature_importance",
                 lambda: model.get_feature_importance(type="PredictionValuesChange"),
                 lambda: jaximp.prediction_values_change(ens), max_abs_diff),
        Workload("Interaction", 0, "CatBoost get_feature_importance",
                 lambda: interaction_matrix(model.get_feature_importance(type="Interaction"), ens.n_features),
                 lambda: jaximp.interaction(ens), max_abs_diff),
    ]


def shap_workloads(model, ens, quick: bool) -> list[Workload]:
    """SHAP values, every method, against CatBoost, shap and WOODELF."""
    import catboost

    import jaximp

    small = 0.1 if quick else 1.0
    X10k, _ = explained_rows(int(10_000 * small))
    X100k, _ = explained_rows(int(100_000 * small), seed=2)
    X1k, _ = explained_rows(int(1_000 * small), seed=3)
    bg100, _ = explained_rows(100, seed=4)
    bg100k, _ = explained_rows(int(100_000 * small), seed=5)
    X200 = X1k[:200]

    def catboost_shap(X, calc="Regular", reference=None):
        # CatBoost asks for labels with reference_data (it does not use them): zeros.
        pool = catboost.Pool(X, label=np.zeros(len(X)) if reference is not None else None)
        return model.get_feature_importance(
            pool, type="ShapValues", shap_calc_type=calc, reference_data=reference
        )[:, :-1]

    def shap_diff(ref, ours):
        worst = np.abs(np.asarray(ref, np.float64) - np.asarray(ours, np.float64)).reshape(len(ours), -1).max(1)
        agree = int((worst <= 1e-2).sum())
        return f"{max_abs_diff(ref, ours)}; rows within 1e-2: {agree:,}/{len(worst):,}"

    rows = [
        Workload("SHAP path-dependent", len(X10k), "CatBoost ShapValues Regular",
                 lambda: catboost_shap(X10k), lambda: jaximp.shap_values(ens, X10k), shap_diff),
        Workload("SHAP path-dependent", len(X100k), "CatBoost ShapValues Regular",
                 lambda: catboost_shap(X100k), lambda: jaximp.shap_values(ens, X100k), shap_diff, 1),
        Workload("SHAP exact", len(X10k), "CatBoost ShapValues Exact",
                 lambda: catboost_shap(X10k, "Exact"),
                 lambda: jaximp.shap_values(ens, X10k, method="exact"), shap_diff),
        Workload("SHAP approximate (Saabas)", len(X10k), "CatBoost ShapValues Approximate",
                 lambda: catboost_shap(X10k, "Approximate"),
                 lambda: jaximp.shap_values(ens, X10k, method="approximate"), shap_diff),
        Workload("SHAP interventional, 100 background", len(X1k), "CatBoost reference_data",
                 lambda: catboost_shap(X1k, reference=catboost.Pool(bg100, label=np.zeros(len(bg100)))),
                 lambda: jaximp.shap_values(ens, X1k, method="interventional", background=bg100),
                 shap_diff, 1),
    ]
    try:
        import pandas as pd
        from woodelf import WoodelfExplainer
    except ImportError:
        print("woodelf-explainer not installed (pip install -e '.[bench]'): skipping the WOODELF rows")
    else:
        def woodelf(X, background):
            explainer = WoodelfExplainer(model, pd.DataFrame(background), feature_perturbation="interventional")
            return np.asarray(explainer.shap_values(pd.DataFrame(X), verbose=False))

        rows.append(Workload(
            "SHAP interventional, 100 background", len(X1k), "WOODELF WoodelfExplainer",
            lambda: woodelf(X1k, bg100),
            lambda: jaximp.shap_values(ens, X1k, method="interventional", background=bg100), shap_diff, 1))
        rows.append(Workload(
            f"SHAP interventional, {len(bg100k):,} background", len(X100k), "WOODELF WoodelfExplainer",
            lambda: woodelf(X100k, bg100k),
            lambda: jaximp.shap_values(ens, X100k, method="interventional", background=bg100k), shap_diff, 1))
    rows.append(Workload(
        "SHAP interaction values", len(X200), "CatBoost ShapInteractionValues",
        lambda: model.get_feature_importance(catboost.Pool(X200), type="ShapInteractionValues")[:, :-1, :-1],
        lambda: jaximp.shap_interaction_values(ens, X200), shap_diff, 1))
    return rows


def data_workloads(model, ens, quick: bool) -> list[Workload]:
    """Permutation importance and LossFunctionChange."""
    import catboost
    from sklearn.inspection import permutation_importance

    import jaximp

    X, y = explained_rows(1_000 if quick else 10_000, seed=6)

    def sklearn_permutation():
        return permutation_importance(model, X, y, scoring="neg_root_mean_squared_error",
                                      n_repeats=5, random_state=0, n_jobs=2).importances_mean

    def ours_permutation():
        return jaximp.permutation_importance(ens, X, y, scoring="neg_root_mean_squared_error",
                                             n_repeats=5, random_state=0).importances_mean

    def rank_agreement(ref, ours):
        top = lambda v: set(np.argsort(-np.asarray(v))[:10])  # noqa: E731
        return f"same top-10 features: {len(top(ref) & top(ours))}/10 (different random permutations)"

    return [
        Workload("permutation importance, 5 repeats", len(X), "sklearn permutation_importance n_jobs=2",
                 sklearn_permutation, ours_permutation, rank_agreement, 1),
        Workload("LossFunctionChange", len(X), "CatBoost get_feature_importance",
                 lambda: model.get_feature_importance(catboost.Pool(X, y), type="LossFunctionChange"),
                 lambda: jaximp.loss_function_change(ens, X, y), max_abs_diff),
    ]


CARDINALITIES = (3, 5, 10, 30, 100, 300, 1_000, 3_000, 10_000, 10_000)


def categorical_rows(n: int, seed: int):
    """``(frame, y)``: 40 float columns and 10 categorical ones of CARDINALITIES (strings)."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 40)).astype(np.float32)
    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(40)])
    signal = X[:, 0] * 2 + X[:, 1] * X[:, 2] + np.sin(X[:, 3])
    for j, k in enumerate(CARDINALITIES):
        codes = rng.integers(0, k, n)
        effect = np.random.default_rng(100 + j).normal(size=k)  # the same per category in every draw
        signal += effect[codes] * (1.0 if j % 2 else 0.5)
        frame[f"c{j}"] = np.char.add(f"c{j}_", codes.astype(str))
    return frame, signal + 0.1 * rng.normal(size=n)


def categorical_model(quick: bool):
    """A cached 1000 x depth-6 CatBoost regressor on 40 float and 10 categorical columns (one-hot
    up to 10 values, CTRs above), trained on 100k rows."""
    import catboost

    import jaximp

    iterations = 100 if quick else 1000
    path = CACHE / f"categorical-{iterations}.cbm"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        frame, y = categorical_rows(100_000, seed=0)
        model = catboost.CatBoostRegressor(
            iterations=iterations, depth=6, learning_rate=0.1, one_hot_max_size=10, verbose=0,
            random_seed=0, allow_writing_files=False, cat_features=[f"c{j}" for j in range(10)],
        ).fit(frame, y)
        model.save_model(str(path))
    model = catboost.CatBoostRegressor()
    model.load_model(str(path))
    return model, jaximp.from_catboost(model)


def categorical_workloads(_model, _ens, quick: bool) -> list[Workload]:
    """A model with categorical features (featurization included in every jaximp time)."""
    import catboost

    import jaximp
    from jaximp._rows.inputs import as_features

    model, ens = categorical_model(quick)
    frame, _ = categorical_rows(10_000 if quick else 100_000, seed=1)
    cats = [f"c{j}" for j in range(10)]
    small = frame.iloc[: len(frame) // 10]

    def shap_diff(ref, ours):
        return max_abs_diff(ref, ours)

    return [
        Workload("categorical: predict (raw)", len(frame), "CatBoost predict",
                 lambda: model.predict(frame, prediction_type="RawFormulaVal"),
                 lambda: ens.predict(frame), max_abs_diff),
        Workload("categorical: featurization only (hash, one-hot, CTRs)", len(frame),
                 "CatBoost Pool construction", lambda: catboost.Pool(frame, cat_features=cats),
                 lambda: as_features(frame, ens, "bench"), lambda a, b: ""),
        Workload("categorical: SHAP path-dependent", len(small), "CatBoost ShapValues Regular",
                 lambda: model.get_feature_importance(catboost.Pool(small, cat_features=cats),
                                                      type="ShapValues")[:, :-1],
                 lambda: jaximp.shap_values(ens, small), shap_diff),
        Workload("categorical: SHAP path-dependent", len(frame), "CatBoost ShapValues Regular",
                 lambda: model.get_feature_importance(catboost.Pool(frame, cat_features=cats),
                                                      type="ShapValues")[:, :-1],
                 lambda: jaximp.shap_values(ens, frame), shap_diff, 1),
    ]


def depthwise_model(quick: bool, policy: str = "Depthwise"):
    """A cached Depthwise (or Lossguide) CatBoost regressor (depth 8, 200 trees; 50 trees with
    --quick) on 20k rows of the reference distribution, reloaded from its JSON export (CatBoost's
    reference for non-symmetric trees: its SHAP of a freshly trained one is not additive,
    catboost issue 2136 on GitHub)."""
    import catboost

    import jaximp

    iterations = 50 if quick else 200
    path = CACHE / f"{policy.lower()}-{iterations}.json"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        X, y = explained_rows(20_000, seed=0)
        catboost.CatBoostRegressor(
            iterations=iterations, depth=8, grow_policy=policy, learning_rate=0.1, verbose=0,
            random_seed=0, allow_writing_files=False,
        ).fit(X, y).save_model(str(path), format="json")
    model = catboost.CatBoost()
    model.load_model(str(path), format="json")
    return model, jaximp.from_catboost(path)


def lightgbm_default_model(quick: bool):
    """A cached LightGBM regressor of its default 31 leaves (200 trees; 50 with --quick) on 20k
    rows of the reference distribution: leaf-wise trees deeper than a heap holds."""
    import lightgbm as lgb

    import jaximp

    rounds = 50 if quick else 200
    path = CACHE / f"lightgbm-31-{rounds}.txt"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        X, y = explained_rows(20_000, seed=0)
        lgb.train(dict(objective="regression", num_leaves=31, verbose=-1, seed=0), lgb.Dataset(X, y),
                  num_boost_round=rounds).save_model(str(path))
    booster = lgb.Booster(model_file=str(path))
    return booster, jaximp.from_lightgbm(booster)


def depthwise_workloads(_model, _ens, quick: bool) -> list[Workload]:
    """Non-symmetric trees (TreeEnsemble); SHAP with the per-leaf tables built in the
    call, and with them kept by an Explainer; LightGBM's default trees' predictions."""
    import catboost

    import jaximp

    model, ens = depthwise_model(quick)
    X, _ = explained_rows(10_000 if quick else 100_000, seed=1)
    X_shap = X[: 256 if quick else 2048]
    explainer = jaximp.Explainer(ens)

    def catboost_shap():
        return model.get_feature_importance(catboost.Pool(X_shap), type="ShapValues")[:, :-1]

    lossguide, lossguide_ens = depthwise_model(quick, "Lossguide")
    booster, lightgbm_ens = lightgbm_default_model(quick)
    return [
        Workload(f"LightGBM 31 leaves, {lightgbm_ens.depth} deep: predict (raw)", len(X),
                 "LightGBM predict num_threads=2", lambda: booster.predict(X, raw_score=True, num_threads=2),
                 lambda: jaximp.predict(lightgbm_ens, X), max_abs_diff),
        Workload("Depthwise depth 8: predict (raw)", len(X), "CatBoost predict",
                 lambda: model.predict(X, prediction_type="RawFormulaVal"), lambda: ens.predict(X), max_abs_diff),
        Workload("Lossguide depth 8: predict (raw)", len(X), "CatBoost predict",
                 lambda: lossguide.predict(X, prediction_type="RawFormulaVal"), lambda: lossguide_ens.predict(X),
                 max_abs_diff),
        Workload("Depthwise depth 8: SHAP path-dependent", len(X_shap), "CatBoost ShapValues Regular",
                 catboost_shap, lambda: jaximp.shap_values(ens, X_shap), max_abs_diff, 1),
        Workload("Depthwise depth 8: SHAP path-dependent, Explainer", len(X_shap), "CatBoost ShapValues Regular",
                 catboost_shap, lambda: explainer.shap_values(X_shap), max_abs_diff, 1),
    ]


def library_models(quick: bool) -> dict:
    """Cached models of the other libraries on the reference distribution (100k rows x 50):
    XGBoost 500 trees of depth 8, LightGBM 500 trees of 127 leaves, a scikit-learn
    RandomForest of 300 trees of depth 8 (fewer with --quick)."""
    import pickle

    import lightgbm
    import xgboost
    from sklearn.ensemble import RandomForestRegressor

    n_trees, rows = (50, 20_000) if quick else (500, 100_000)
    X, y = explained_rows(rows, seed=0)
    threads = os.cpu_count()
    CACHE.mkdir(parents=True, exist_ok=True)
    paths = {name: CACHE / f"{name}-{n_trees}.{ext}" for name, ext in
             (("xgboost", "json"), ("lightgbm", "txt"), ("forest", "pkl"))}
    if not paths["xgboost"].exists():
        xgboost.XGBRegressor(n_estimators=n_trees, max_depth=8, learning_rate=0.1, tree_method="hist",
                             n_jobs=threads, random_state=0).fit(X, y).get_booster().save_model(paths["xgboost"])
    if not paths["lightgbm"].exists():
        lightgbm.LGBMRegressor(n_estimators=n_trees, num_leaves=127, learning_rate=0.1, n_jobs=threads,
                               verbose=-1, random_state=0).fit(X, y).booster_.save_model(paths["lightgbm"])
    if not paths["forest"].exists():
        forest = RandomForestRegressor(n_estimators=300 if not quick else 30, max_depth=8, n_jobs=threads,
                                       random_state=0).fit(X[:20_000], y[:20_000])
        paths["forest"].write_bytes(pickle.dumps(forest))
    booster = xgboost.Booster(model_file=str(paths["xgboost"]))
    booster.set_param({"nthread": threads})
    lgb = lightgbm.Booster(model_file=str(paths["lightgbm"]))
    prefix = lightgbm.Booster(model_str=lgb.model_to_string(num_iteration=min(100, n_trees)))
    forest = pickle.loads(paths["forest"].read_bytes())
    return dict(xgboost=booster, lightgbm=lgb, lightgbm_prefix=prefix, forest=forest)


def library_workloads(_model, _ens, quick: bool) -> list[Workload]:
    """XGBoost, LightGBM and scikit-learn models imported as TreeEnsemble, against each
    library's own multi-threaded C++ SHAP (all cores), shap's TreeExplainer and WOODELF."""
    import shap
    import xgboost

    import jaximp

    models = library_models(quick)
    threads = os.cpu_count()
    ours = dict(xgboost=jaximp.from_xgboost(models["xgboost"]), lightgbm=jaximp.from_lightgbm(models["lightgbm"]),
                lightgbm_prefix=jaximp.from_lightgbm(models["lightgbm_prefix"]),
                forest=jaximp.from_sklearn(models["forest"]))
    n_prefix = ours["lightgbm_prefix"].n_trees
    X, _ = explained_rows(1_000 if quick else 10_000, seed=7)
    X_lgb = X[: 500 if quick else 2_000]  # LightGBM's pred_contrib takes minutes on 10k rows of 127-leaf trees
    X1k, bg1k = X[:1_000], explained_rows(1_000, seed=8)[0]
    X_forest = X[:1_000]
    lightgbm_explainer = jaximp.Explainer(ours["lightgbm"])  # tables laid out for batch after batch

    def contribs(ref, ours_phi):
        return max_abs_diff(np.asarray(ref)[:, :-1], ours_phi)

    def whole(background):
        # shap's TreeExplainer(model, data=bg) keeps a 100-row sample of a larger background
        # (shap.maskers.Independent's max_samples=100): give it every row, as jaximp uses them.
        return shap.maskers.Independent(background, max_samples=len(background))

    rows = [
        Workload("XGBoost depth 8: SHAP path-dependent", len(X), f"XGBoost pred_contribs nthread={threads}",
                 lambda: models["xgboost"].predict(xgboost.DMatrix(X), pred_contribs=True),
                 lambda: jaximp.shap_values(ours["xgboost"], X), contribs, 1),
        Workload("LightGBM 127 leaves: SHAP path-dependent", len(X_lgb), f"LightGBM pred_contrib num_threads={threads}",
                 lambda: models["lightgbm"].predict(X_lgb, pred_contrib=True, num_threads=threads),
                 lambda: jaximp.shap_values(ours["lightgbm"], X_lgb), contribs, 1),
        Workload("LightGBM 127 leaves: SHAP path-dependent, Explainer", len(X_lgb),
                 f"LightGBM pred_contrib num_threads={threads}",
                 lambda: models["lightgbm"].predict(X_lgb, pred_contrib=True, num_threads=threads),
                 lambda: lightgbm_explainer.shap_values(X_lgb), contribs, 1),
        Workload("RandomForest 300 trees: SHAP path-dependent", len(X_forest), "shap TreeExplainer",
                 lambda: shap.TreeExplainer(models["forest"]).shap_values(X_forest, check_additivity=False),
                 lambda: jaximp.shap_values(ours["forest"], X_forest), max_abs_diff, 1),
        Workload("XGBoost depth 8: SHAP interventional, 1,000 background", len(X1k), "shap TreeExplainer",
                 lambda: shap.TreeExplainer(models["xgboost"], data=whole(bg1k), feature_perturbation="interventional")
                 .shap_values(X1k, check_additivity=False),
                 lambda: jaximp.shap_values(ours["xgboost"], X1k, method="interventional", background=bg1k),
                 max_abs_diff, 1),
        Workload(f"LightGBM first {n_prefix} trees: SHAP interventional, 1,000 background", len(X1k),
                 "shap TreeExplainer",
                 lambda: shap.TreeExplainer(models["lightgbm_prefix"], data=whole(bg1k),
                                            feature_perturbation="interventional")
                 .shap_values(X1k, check_additivity=False),
                 lambda: jaximp.shap_values(ours["lightgbm_prefix"], X1k, method="interventional", background=bg1k),
                 max_abs_diff, 1),
    ]
    try:
        import pandas as pd
        from woodelf import WoodelfExplainer
    except ImportError:
        print("woodelf-explainer not installed (pip install -e '.[bench]'): skipping the WOODELF rows")
        return rows
    for name in ("xgboost", "lightgbm_prefix"):
        label = "XGBoost depth 8" if name == "xgboost" else f"LightGBM first {n_prefix} trees"
        rows.append(Workload(
            f"{label}: SHAP interventional, 1,000 background", len(X1k), "WOODELF WoodelfExplainer",
            lambda m=models[name]: np.asarray(WoodelfExplainer(m, pd.DataFrame(bg1k),
                                                               feature_perturbation="interventional")
                                              .shap_values(pd.DataFrame(X1k), verbose=False)),
            lambda e=ours[name]: jaximp.shap_values(e, X1k, method="interventional", background=bg1k),
            max_abs_diff, 1))
    return rows


def index_workloads(_model, _ens, quick: bool) -> list[Workload]:
    """Interaction indices of any order: shapiq's TreeExplainer (TreeSHAP-IQ) on a random
    forest of 100 trees of depth 8 (path-dependent), and WOODELF's interventional interaction
    values over 1,000 background rows."""
    import pickle

    import shapiq
    import xgboost
    from sklearn.ensemble import RandomForestRegressor

    import jaximp

    X, y = explained_rows(20_000, seed=0)
    X = X[:, :12]  # 12 features: the enumeration's 2**F coalitions do not enter, shapiq's cost does
    path = CACHE / f"forest-indices-{10 if quick else 100}.pkl"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        forest = RandomForestRegressor(n_estimators=10 if quick else 100, max_depth=8, n_jobs=os.cpu_count(),
                                       random_state=0).fit(X, y)
        path.write_bytes(pickle.dumps(forest))
    forest = pickle.loads(path.read_bytes())
    ens = jaximp.from_sklearn(forest)
    rows = explained_rows(100, seed=5)[0][:, :12]
    few = {2: rows[:10], 3: rows[:10]}  # shapiq takes about 5 s (order 2) and 16 s (order 3) a row

    def shapiq_values(order):
        explainer = shapiq.TreeExplainer(model=forest, index="k-SII", max_order=order, min_order=1)
        return [explainer.explain(x) for x in few[order]]

    def against(order):
        def check(ref, ours):
            got = np.asarray(ours.values)
            want = np.array([[values[s] for s in ours.subsets] for values in ref])
            return max_abs_diff(want, got)
        return check

    out = [Workload(f"k-SII order {order}, path-dependent, RandomForest 100 trees depth 8", len(few[order]),
                    "shapiq TreeExplainer", lambda order=order: shapiq_values(order),
                    lambda order=order: jaximp.interaction_values(ens, few[order], index="k-SII", order=order),
                    against(order), 1)
           for order in (2, 3)]
    try:
        import pandas as pd
        from woodelf import WoodelfExplainer
    except ImportError:
        print("woodelf-explainer not installed (pip install -e '.[bench]'): skipping the WOODELF rows")
        return out
    X_all, y_all = explained_rows(20_000, seed=0)
    booster = xgboost.XGBRegressor(n_estimators=20 if quick else 100, max_depth=6, random_state=0,
                                   n_jobs=os.cpu_count()).fit(X_all[:, :12], y_all)
    boosted = jaximp.from_xgboost(booster)
    X1k, bg1k = explained_rows(1_000, seed=9)[0][:, :12], explained_rows(1_000, seed=10)[0][:, :12]

    def woodelf():
        explainer = WoodelfExplainer(booster, pd.DataFrame(bg1k), feature_perturbation="interventional")
        return explainer.shap_interaction_values(pd.DataFrame(X1k))

    def pairs(ref, ours):
        ref = np.asarray(ref, np.float64)
        off = ~np.eye(ours.shape[1], dtype=bool)
        return f"off-diagonal max abs diff {np.abs(ref[:, off] - np.asarray(ours)[:, off]).max():.1e}" \
            if ref.shape == ours.shape else f"layout {ref.shape}"
    out.append(Workload("SHAP interaction values, interventional, 1,000 background, XGBoost depth 6", len(X1k),
                        "WOODELF WoodelfExplainer", woodelf,
                        lambda: jaximp.shap_interaction_values(boosted, X1k, method="interventional", background=bg1k),
                        pairs, 1))

    def interventional(bg):
        return lambda: jaximp.shap_interaction_values(boosted, X1k, method="interventional", background=bg)

    for b in (100, 10_000, 100_000):  # the same call over other backgrounds: flat in B
        bg = explained_rows(b // 10 if quick else b, seed=11)[0][:, :12]
        out.append(Workload(f"SHAP interaction values, interventional, {len(bg):,} background, XGBoost depth 6",
                            len(X1k), "jaximp, 1,000 background", interventional(bg1k), interventional(bg),
                            None, 3))
    out += output_workloads(quick)
    return out


def output_workloads(quick: bool) -> list[Workload]:
    """SHAP values of the probability and of the log loss (interventional, 100 background rows)
    of an XGBClassifier(100 trees, max_depth=6), against shap's TreeExplainer."""
    import shap
    import xgboost

    import jaximp

    X, y = explained_rows(20_000, seed=0)
    X, labels = X[:, :12], (y > np.median(y)).astype(np.float32)
    model = xgboost.XGBClassifier(n_estimators=20 if quick else 100, max_depth=6, random_state=0,
                                  n_jobs=os.cpu_count()).fit(X, labels)
    ens = jaximp.from_xgboost(model)
    rows, targets = explained_rows(1_000, seed=12)
    rows, targets = rows[:, :12], (targets > np.median(y)).astype(np.float32)
    bg = explained_rows(100, seed=13)[0][:, :12]
    out = []
    for model_output in ("probability", "log_loss"):
        y_arg = targets if model_output == "log_loss" else None

        def reference(model_output=model_output, y_arg=y_arg):
            explainer = shap.TreeExplainer(model, data=shap.maskers.Independent(bg, max_samples=len(bg)),
                                           feature_perturbation="interventional", model_output=model_output)
            return explainer.shap_values(rows, y_arg) if y_arg is not None else explainer.shap_values(rows)

        out.append(Workload(f"SHAP values of the {model_output.replace('_', ' ')}, interventional, 100 background, "
                            "XGBClassifier depth 6", len(rows), "shap TreeExplainer", reference,
                            lambda model_output=model_output, y_arg=y_arg: jaximp.shap_values(
                                ens, rows, method="interventional", background=bg, model_output=model_output,
                                y=y_arg), max_abs_diff, 1))
    return out


def treeexplainer_workloads(_model, _ens, quick: bool) -> list[Workload]:
    """``jaximp.TreeExplainer`` against shap's ``TreeExplainer``: the same calls on the same
    model and rows, each timed from the explainer's construction (what a shap user runs),
    additivity checked by both: an XGBRegressor and an LGBMClassifier of 100 trees (depth 6,
    63 leaves) on 20k rows x 50 of the reference distribution."""
    import lightgbm
    import shap
    import xgboost

    import jaximp

    X, y = explained_rows(20_000, seed=0)
    n_trees, threads = 20 if quick else 100, os.cpu_count()
    booster = xgboost.XGBRegressor(n_estimators=n_trees, max_depth=6, random_state=0, n_jobs=threads).fit(X, y)
    classifier = lightgbm.LGBMClassifier(n_estimators=n_trees, num_leaves=63, random_state=0, n_jobs=threads,
                                         verbose=-1).fit(X, y > np.median(y))
    rows = explained_rows(1_000 if quick else 10_000, seed=14)[0]
    few, bg = rows[:1_000], explained_rows(1_000, seed=15)[0]
    whole = shap.maskers.Independent(bg, max_samples=len(bg))  # shap's plain data=bg keeps 100 of them

    def both(name, n, call, *args):
        return Workload(name, n, "shap TreeExplainer", lambda: call(shap.TreeExplainer(*args)),
                        lambda: call(jaximp.TreeExplainer(*args)), max_abs_diff, 1)

    return [
        both("XGBoost depth 6: shap_values, tree_path_dependent", len(rows), lambda e: e.shap_values(rows), booster),
        both("LightGBM 63 leaves, binary: shap_values, tree_path_dependent", len(rows),
             lambda e: e.shap_values(rows), classifier),
        both("XGBoost depth 6: shap_values, interventional, 1,000 background", len(few),
             lambda e: e.shap_values(few), booster, whole),
        both("LightGBM 63 leaves, binary: shap_values, interventional, 1,000 background", len(few),
             lambda e: e.shap_values(few), classifier, whole),
        both("XGBoost depth 6: shap_interaction_values, tree_path_dependent", 200,
             lambda e: e.shap_interaction_values(rows[:200]), booster),
        both("XGBoost depth 6: explainer(X), a shap.Explanation", len(rows), lambda e: e(rows).values, booster),
    ]


def perturbed_copies(ens, n_copies: int, noise: float = 0.01, seed: int = 0):
    """``n_copies`` copies of ``ens`` with Gaussian noise on the leaf values (``noise`` times
    their standard deviation), stacked along a leading axis (one pytree)."""
    import dataclasses

    import jax
    import jax.numpy as jnp

    scale = noise * jnp.std(ens.leaf_values)

    def one(key):
        noise_values = scale * jax.random.normal(key, ens.leaf_values.shape)
        return dataclasses.replace(ens, leaf_values=ens.leaf_values + noise_values)

    return jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(seed), n_copies))


def compiled_memory(fn, *args) -> str:
    """The memory XLA plans for ``jax.jit(fn)(*args)``: arguments, outputs and temporaries (and the
    device's peak where it reports one, GPUs)."""
    import jax

    analysis = jax.jit(fn).lower(*args).compile().memory_analysis()
    parts = []
    if analysis is not None:
        parts.append(f"compiled: args {analysis.argument_size_in_bytes / 2**20:,.0f} MiB, "
                     f"temp {analysis.temp_size_in_bytes / 2**20:,.0f} MiB, "
                     f"out {analysis.output_size_in_bytes / 2**20:,.1f} MiB")
    stats = jax.devices()[0].memory_stats() or {}
    if "peak_bytes_in_use" in stats:
        parts.append(f"device peak {stats['peak_bytes_in_use'] / 2**20:,.0f} MiB")
    return "; ".join(parts)


def differentiable_workloads(_model, ens, quick: bool, *, copies: int | None = None,
                             rows: int | None = None) -> list[Workload]:
    """Importances of many perturbed models in one vmap, against a Python loop over
    them; the gradient of mean |SHAP| with respect to the leaf values over many rows, against the
    forward pass alone (time), with the memory XLA plans for it. ``copies`` and ``rows`` shrink
    the workloads (smoke tests)."""
    import dataclasses

    import jax
    import jax.numpy as jnp

    import jaximp

    copies = copies or (10 if quick else 100)
    X_vmap = jnp.asarray(explained_rows(rows or (200 if quick else 1_000), seed=11)[0])
    X_grad = jnp.asarray(explained_rows(rows or (10_000 if quick else 100_000), seed=12)[0])
    batch = perturbed_copies(ens, copies)
    singles = [jax.tree_util.tree_map(lambda a, i=i: a[i], batch) for i in range(copies)]
    vmapped = jax.jit(jax.vmap(lambda e, x: jaximp.shap_importance(e, x), in_axes=(0, None)))

    def reliance(values, x):
        return jnp.sum(jaximp.shap_importance(dataclasses.replace(ens, leaf_values=values), x))

    grad = jax.jit(jax.grad(reliance))
    memory = compiled_memory(jax.grad(reliance), ens.leaf_values, X_grad)
    jaximp.shap_importance(singles[0], X_vmap), jaximp.shap_importance(ens, X_grad)  # the references warm
    return [
        Workload(f"SHAP importance of {copies} perturbed models (vmap)", len(X_vmap),
                 f"Python loop over {copies} models", lambda: np.stack([jaximp.shap_importance(e, X_vmap)
                                                                        for e in singles]),
                 lambda: vmapped(batch, X_vmap), max_abs_diff, 1),
        Workload("grad of mean |SHAP| w.r.t. leaf values", len(X_grad), "the forward pass (mean |SHAP|)",
                 lambda: jaximp.shap_importance(ens, X_grad), lambda: grad(ens.leaf_values, X_grad),
                 lambda ref, ours: memory, 1),
    ]


WORKLOADS = {"core": core_workloads, "model": model_workloads, "shap": shap_workloads,
             "data": data_workloads, "categorical": categorical_workloads, "depthwise": depthwise_workloads,
             "libraries": library_workloads, "differentiable": differentiable_workloads, "indices": index_workloads,
             "treeexplainer": treeexplainer_workloads}


def background_scaling(model, ens, quick: bool) -> list[dict]:
    """Interventional SHAP per explained row as the background grows (tables cached).

    The background enters only through per-tree leaf histograms, so after the Explainer is
    built the cost per explained row must not depend on B. The build time of the first
    background includes compiling.
    """
    import jax

    import jaximp

    X, _ = explained_rows(1_000 if quick else 10_000, seed=7)
    rows = []
    for b in (100, 10_000, 100_000):
        background, _ = explained_rows(b // 10 if quick else b, seed=8)
        start = time.perf_counter()
        explainer = jaximp.Explainer(ens, background=background, method="interventional")
        jax.block_until_ready(explainer.tables)
        build = time.perf_counter() - start
        explainer.shap_values(X)  # compile
        t, _ = best_time(lambda: explainer.shap_values(X), 3)
        rows.append(dict(background=len(background), build=build, seconds=t, per_row_us=1e6 * t / len(X)))
        print(f"interventional, {len(background):>7,} background: build {build:.3f}s, "
              f"{len(X):,} rows {t:.4f}s ({1e6 * t / len(X):.2f} us/row)", flush=True)
    return rows


# --------------------------------------------------------------------------------------------
# Scale: first-call compile times, streaming a file larger than the explained batches, devices


def child(code: str, *args: str, env: dict | None = None) -> list[dict]:
    """Run ``code`` with ``args`` (its ``sys.argv[1:]``) in a fresh Python process; its stdout
    lines that are JSON objects are returned."""
    import json
    import subprocess
    import sys
    import textwrap

    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                         env={**os.environ, **(env or {})}, check=False)
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


COMPILE_CHILD = """
    import json, sys, time, numpy as np, jax, jaximp
    import sklearn.utils  # permutation_importance's Bunch: importing scikit-learn is not compiling
    if sys.argv[2]:
        jaximp.enable_compilation_cache(sys.argv[2])
    ens = jaximp.from_catboost(sys.argv[1])
    rng = np.random.default_rng(0)
    X = rng.standard_normal((4096, ens.n_features), dtype=np.float32)
    y = X[:, 0]
    calls = {
        "predict": lambda: jaximp.predict(ens, X),
        "leaf_indices": lambda: jaximp.leaf_indices(ens, X),
        "prediction_values_change": lambda: jaximp.prediction_values_change(ens),
        "interaction": lambda: jaximp.interaction(ens),
        "shap_values": lambda: jaximp.shap_values(ens, X),
        "shap_values exact": lambda: jaximp.shap_values(ens, X, method="exact"),
        "shap_values interventional": lambda: jaximp.shap_values(ens, X, method="interventional", background=X[:100]),
        "shap_interaction_values": lambda: jaximp.shap_interaction_values(ens, X[:64]),
        "shap_importance": lambda: jaximp.shap_importance(ens, X),
        "permutation_importance": lambda: jaximp.permutation_importance(ens, X, y, random_state=0).importances,
        "loss_function_change": lambda: jaximp.loss_function_change(ens, X, y),
    }
    for name, fn in calls.items():
        t = time.perf_counter(); jax.block_until_ready(fn()); first = time.perf_counter() - t
        t = time.perf_counter(); jax.block_until_ready(fn()); warm = time.perf_counter() - t
        print(json.dumps(dict(name=name, first=first, warm=warm)), flush=True)
"""


def compile_times(quick: bool) -> list[dict]:
    """First and second call of each function in fresh processes: without the persistent
    compilation cache, then twice with it (empty, then filled by the first)."""
    import tempfile

    model = str(CACHE / f"reference-{100 if quick else 1000}.cbm")
    rows: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as cache:
        for label, directory in (("no cache", ""), ("cache empty", cache), ("cache filled", cache)):
            for r in child(COMPILE_CHILD, model, directory):
                rows.setdefault(r["name"], {})[label] = r["first"] - r["warm"]
                rows[r["name"]]["warm"] = r["warm"]
    for name, v in rows.items():
        print(f"compile {name:28s} no cache {v['no cache']:6.2f}s  cache empty {v['cache empty']:6.2f}s  "
              f"cache filled {v['cache filled']:6.2f}s  warm {v['warm']:.4f}s", flush=True)
    return [dict(name=name, **v) for name, v in rows.items()]


FIRST_CALL_CHILD = """
    import json, pickle, sys, time, numpy as np
    kind, path, cache = sys.argv[1:4]
    import jax, jaximp
    if cache:
        jaximp.enable_compilation_cache(cache)
    if kind == "scikit-learn":
        ens = jaximp.from_sklearn(pickle.loads(open(path, "rb").read()))
    else:
        ens = getattr(jaximp, "from_" + kind.split()[0].lower())(path)
    X = np.random.default_rng(0).standard_normal((1000, ens.n_features), dtype=np.float32)
    for name, fn in (("shap_values", jaximp.shap_values), ("predict", jaximp.predict)):
        t = time.perf_counter(); jax.block_until_ready(fn(ens, X)); first = time.perf_counter() - t
        t = time.perf_counter(); jax.block_until_ready(fn(ens, X)); warm = time.perf_counter() - t
        print(json.dumps(dict(name=name, first=first, warm=warm)), flush=True)
"""


def first_call_models(quick: bool) -> dict[str, Path]:
    """Cached model files of each type, the sizes a notebook user has: XGBoost 100 trees of depth 6,
    LightGBM 100 trees of 63 leaves, CatBoost 100 symmetric trees of depth 6, CatBoost Depthwise
    (200 trees of depth 8), a scikit-learn RandomForest (100 trees of depth 8), all on the
    reference distribution."""
    import pickle

    import lightgbm
    import xgboost
    from sklearn.ensemble import RandomForestRegressor

    X, y = explained_rows(20_000, seed=0)
    threads = os.cpu_count()
    paths = {"XGBoost 100 trees, depth 6": CACHE / "first-xgboost.json",
             "LightGBM 100 trees, 63 leaves": CACHE / "first-lightgbm.txt",
             "CatBoost 100 symmetric trees, depth 6": CACHE / "reference-100.cbm",
             "CatBoost Depthwise 200 trees, depth 8": CACHE / f"depthwise-{50 if quick else 200}.json",
             "scikit-learn RandomForest 100 trees, depth 8": CACHE / "first-forest.pkl"}
    files = list(paths.values())
    if not files[0].exists():
        xgboost.XGBRegressor(n_estimators=100, max_depth=6, n_jobs=threads, random_state=0).fit(X, y) \
            .get_booster().save_model(files[0])
    if not files[1].exists():
        lightgbm.LGBMRegressor(n_estimators=100, num_leaves=63, n_jobs=threads, verbose=-1, random_state=0) \
            .fit(X, y).booster_.save_model(files[1])
    if not files[2].exists():
        reference_model(True)
    if not files[3].exists():
        depthwise_model(quick)
    if not files[4].exists():
        forest = RandomForestRegressor(n_estimators=100, max_depth=8, n_jobs=threads, random_state=0).fit(X, y)
        files[4].write_bytes(pickle.dumps(forest))
    return paths


FIRST_CALL_PROCESSES = 3


def first_calls(quick: bool) -> list[dict]:
    """The first ``shap_values`` and ``predict`` call on 1,000 rows in a fresh process for each model
    type, compilation included: without the persistent cache, and with a cache filled by an
    earlier process; the best of ``FIRST_CALL_PROCESSES`` fresh processes, as every other row is
    the best of its repeats (the machine's speed drifts)."""
    import tempfile

    rows = []
    for label, path in first_call_models(quick).items():
        kind = label.split()[0]
        row = dict(model=label)
        with tempfile.TemporaryDirectory() as cache:
            for setting, directory, processes in (("no cache", "", FIRST_CALL_PROCESSES), ("filling", cache, 1),
                                                  ("cache filled", cache, FIRST_CALL_PROCESSES)):
                for _ in range(processes):
                    for r in child(FIRST_CALL_CHILD, kind, str(path), directory):
                        for key, value in ((f"{r['name']} {setting}", r["first"]), (f"{r['name']} warm", r["warm"])):
                            row[key] = min(row.get(key, value), value)
        rows.append(row)
        print(f"first call {label:45s} shap_values {row['shap_values no cache']:.2f}s "
              f"(cache filled {row['shap_values cache filled']:.2f}s, warm {row['shap_values warm']:.4f}s)  "
              f"predict {row['predict no cache']:.2f}s (cache filled {row['predict cache filled']:.2f}s)", flush=True)
    return rows


def parquet_rows(n: int) -> Path:
    """A cached Parquet file of ``n`` rows x 50 float32 columns of the reference distribution,
    written in row groups of up to 1,000,000 rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = CACHE / f"stream-{n}.parquet"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(0)
        names = [str(i) for i in range(50)]
        with pq.ParquetWriter(str(path), pa.schema([(c, pa.float32()) for c in names])) as writer:
            for start in range(0, n, 1_000_000):
                block = rng.standard_normal((min(1_000_000, n - start), 50), dtype=np.float32)
                writer.write_table(pa.table(dict(zip(names, block.T))))
    return path


STREAM_CHILD = """
    import json, sys, tempfile, time, jax, jaximp
    ens = jaximp.from_catboost(sys.argv[1])
    if sys.argv[3] == "file":
        with tempfile.TemporaryDirectory() as d:
            t = time.perf_counter()
            jaximp.explain_files(ens, sys.argv[2], out=d + "/shap.parquet", progress=False)
            seconds = time.perf_counter() - t
    else:  # the same rows in memory (read first, not timed), SHAP values and predictions as explain_files
        import pyarrow.parquet as pq
        X = pq.read_table(sys.argv[2]).to_pandas().to_numpy()
        jaximp.shap_values(ens, X[:65536]); jaximp.predict(ens, X[:65536])  # compiled outside the time
        t = time.perf_counter()
        jax.block_until_ready((jaximp.shap_values(ens, X, progress=False), jaximp.predict(ens, X, progress=False)))
        seconds = time.perf_counter() - t
    # VmHWM: this process's own peak (ru_maxrss also counts the parent's memory at the fork)
    peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
    print(json.dumps(dict(seconds=seconds, peak_rss_mb=peak / 1024)))
"""


def stream_file(quick: bool) -> dict:
    """explain_files on Parquet files of 1M, 4M and 10M rows of the reference distribution (10x
    fewer with --quick), each in a fresh process: rows/s and the process's peak resident memory;
    and the 1M rows' SHAP values and predictions in memory, for the streaming throughput's ratio."""
    model = str(CACHE / f"reference-{100 if quick else 1000}.cbm")
    sizes = [n // 10 if quick else n for n in (1_000_000, 4_000_000, 10_000_000)]
    files = []
    for n in sizes:
        (r,) = child(STREAM_CHILD, model, str(parquet_rows(n)), "file")
        files.append(dict(rows=n, **r))
        print(f"explain_files {n:,} rows: {r['seconds']:.1f}s, peak RSS {r['peak_rss_mb']:.0f} MB", flush=True)
    (memory,) = child(STREAM_CHILD, model, str(parquet_rows(sizes[0])), "memory")
    memory["rows"] = sizes[0]
    print(f"in memory {sizes[0]:,} rows: {memory['seconds']:.1f}s, peak RSS {memory['peak_rss_mb']:.0f} MB", flush=True)
    return dict(files=files, memory=memory)


def device_scaling(quick: bool) -> list[dict]:
    """shap_values of 100k rows sharded over 1, 2 and 4 forced host devices (this machine's cores
    are the limit: forced devices share them)."""
    model = str(CACHE / f"reference-{100 if quick else 1000}.cbm")
    code = f"""
        import json, time, numpy as np, jax, jaximp
        ens = jaximp.from_catboost({model!r})
        X = np.random.default_rng(0).standard_normal((100_000, ens.n_features), dtype=np.float32)
        expected = jaximp.shap_values(ens, X, devices=1)
        for d in (1, 2, 4):
            got = jaximp.shap_values(ens, X, devices=d)  # compiles
            times, cpu = [], []
            for _ in range(3):
                t, c = time.perf_counter(), time.process_time()
                jaximp.shap_values(ens, X, devices=d)
                times.append(time.perf_counter() - t); cpu.append(time.process_time() - c)
            print(json.dumps(dict(devices=d, seconds=min(times), cpu=min(cpu),
                                  identical=bool(np.array_equal(got, expected)))))
    """
    rows = child(code, env={"XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    for r in rows:
        print(f"shap_values 100k rows on {r['devices']} devices: {r['seconds']:.3f}s, CPU {r['cpu']:.3f}s "
              f"identical={r['identical']}")
    return rows


def device_name() -> str:
    import jax

    device = jax.devices()[0]
    if device.platform == "cpu":
        return f"CPU ({os.cpu_count()} cores, {cpu_model()})"
    return f"{device.platform.upper()} {device.device_kind}"


def cpu_model() -> str:
    """The processor's model name and family/model numbers (from /proc/cpuinfo on Linux): the
    ratios move between machines of the same core count."""
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/cpuinfo").read_text().splitlines() if ":" in line)
    except OSError:
        return platform.processor() or platform.machine()
    info = {key.strip(): value.strip() for key, value in info.items()}
    name, family, model = (info.get(key, "?") for key in ("model name", "cpu family", "model"))
    return f"{name}, family {family} model {model}"


OPT_IN = ("libraries",  # not in the default run yet: their deep-tree kernels take tens of minutes
          "differentiable",  # gradients and vmap over models: run with --only differentiable
          "indices",  # interaction indices of any order against shapiq and WOODELF: --only indices
          "treeexplainer")  # jaximp.TreeExplainer against shap's TreeExplainer: --only treeexplainer


def run(args) -> list[dict]:
    model, ens = reference_model(args.quick)
    results = []
    for group, make in WORKLOADS.items():
        if (args.only and group not in args.only) or (not args.only and group in OPT_IN):
            continue
        for work in make(model, ens, args.quick):  # workloads of one group share their data
            first, _ = best_time(work.run_jaximp, 1)  # compile
            t_ours, ours = best_time(work.run_jaximp, 1 if first > 30 else args.repeats)  # minutes: once
            t_ref, ref = best_time(work.run_reference, work.reference_repeats or args.repeats)
            note = work.check(ref, ours) if work.check else ""
            row = dict(group=group, name=work.name, rows=work.rows, reference=work.reference, t_ref=t_ref,
                       t_ours=t_ours, speedup=t_ref / t_ours, note=note)
            print(f"{work.name:40s} {work.reference:40s} ref {t_ref:8.4f}s  jaximp {t_ours:8.4f}s  "
                  f"x{row['speedup']:7.1f}  {note}", flush=True)
            results.append(row)
    return results


def markdown(results: list[dict], scaling: list[dict], args, scale: dict) -> str:
    import jax

    import jaximp

    lines = [
        "# Benchmarks",
        "",
        "Written by `python scripts/bench.py`; every row times the reference and jaximp in the same run,",
        "on the same data and model. jaximp is timed warm (compiled), best of "
        f"{args.repeats}; so is the reference, except those taking seconds (timed once).",
        "",
        f"- device: {device_name()}; jax {jax.__version__}, jaximp {jaximp.__version__}, "
        f"python {platform.python_version()}",
        "- model: CatBoostRegressor(iterations="
        f"{100 if args.quick else 1000}, depth=6, learning_rate=0.1) on make_regression(100k, 50 "
        "features, 20 informative, noise=5); explained rows from the same distribution",
        "- categorical rows: CatBoostRegressor(iterations=1000, depth=6) on 100k rows of 40 float and 10 "
        "categorical columns (cardinalities 3 to 10,000, strings; one-hot up to 10 values, CTRs "
        "above: the model has 1066 CTRs, most over a category and binarized float features); "
        "jaximp's times include featurizing the raw frame (hashing, CTRs), timed alone in its own row",
        "- Depthwise and Lossguide rows: CatBoostRegressor(iterations=200, depth=8, grow_policy='Depthwise' "
        "or 'Lossguide') on 20k rows of the reference distribution, reloaded from its JSON export; "
        "'Explainer' keeps the per-leaf paths and covers that a plain shap_values call builds each time",
        "- LightGBM row: LightGBM's default trees (num_leaves=31, no depth limit), 200 rounds on 20k rows "
        "of the reference distribution",
        "",
        "| workload | rows | reference | reference s | jaximp s | speed-up | rows/s (jaximp) | check |",
        "|---|---:|---|---:|---:|---:|---:|---|",
    ]
    for r in results:
        rate = f"{r['rows'] / r['t_ours']:,.0f}" if r["rows"] else "-"
        lines.append(
            f"| {r['name']} | {r['rows']:,} | {r['reference']} | {r['t_ref']:.4f} | {r['t_ours']:.4f} | "
            f"{r['speedup']:.1f}x | {rate} | {r['note']} |"
        )
    lines += [
        "",
        "## Interventional SHAP: cost per explained row against background size",
        "",
        "The background enters only through per-tree leaf histograms: building the Explainer is",
        "O(B) once, and the cost per explained row does not depend on B.",
        "",
        "| background rows | build Explainer s | explain s | us per explained row |",
        "|---:|---:|---:|---:|",
    ]
    for r in scaling:
        lines.append(f"| {r['background']:,} | {r['build']:.3f} | {r['seconds']:.4f} | {r['per_row_us']:.2f} |")
    lines += scale_markdown(scale)
    lines += [
        "",
        "## Notes",
        "",
        "- check: the largest difference from the reference, and for SHAP how many rows agree within",
        "  1e-2 (values are of magnitude ~300 here). WOODELF disagrees with CatBoost's reference_data",
        "  SHAP on a few rows of the 100k x 100k run; on the worst four of them jaximp equals CatBoost to",
        "  7e-5 (checked by hand with CatBoost on those rows and the full background).",
        "- Leaf indices: the result is 400 MB (100,000 rows x 1000 trees), and writing it is most of both",
        "  libraries' time. jaximp computes the leaves tree-major, as narrow integers, and two threads widen",
        "  them into a fresh int32 NumPy array (Fortran order, each thread its half of the trees), with no",
        "  transpose. NumPy advises transparent huge pages for it, so writing it faults 7,000-12,000 times.",
        "  CatBoost's result (uint32) takes 4 KB pages. When they are fresh, a call faults 100,000 times and",
        "  takes 0.67-1.4 s on this machine; when its allocator hands back the pages of an earlier call's",
        "  freed result, it faults 1,000 times and takes 0.31-0.40 s. The best of five takes whichever came:",
        "  reused pages in this run (0.34 s, 2.3x), fresh ones in other runs of the same code (0.73 s, 4.5x).",
        "  The first call in a process is the fresh case. A step of 32,768 rows takes XLA 9-11 ms to quantize",
        "  and 12-14 ms for the per-tree compares (about 0.1 s of CPU a call), and the write 0.09 s of CPU",
        "  (half of it the kernel zeroing fresh pages), so on two cores the call cannot take under about",
        "  0.09 s; 4x CatBoost on reused pages would need 0.08 s. `leaf_indices(ens, X, dtype=np.uint8)`",
        "  (trees of at most 256 leaves) writes a quarter of the bytes: 0.09-0.11 s in runs on a quiet",
        "  machine, 0.126 s in this one (2.8x).",
        "- Categorical featurization: CatBoost's `Pool` hashes the categorical columns and keeps the floats;",
        "  jaximp also bins the float features (in a second thread, while the first hashes) and evaluates",
        "  every one-hot value and all of the model's CTRs: one gather per CTR (1066 here, 100M table",
        "  reads) from a table of the bins of each projection's categories seen so far (and bit",
        "  patterns), computed once. Both threads take the projections in turn (1.3-1.4x one thread:",
        "  the gathers scale, the NumPy operations that build each projection's table positions less).",
        "  The hashes of the values seen before come from a memo (timed warm, as every row). The",
        "  featurized rows reach the kernels feature-major, with no transpose. What is left is the",
        "  table reads (about 1 ns each with Arrow's take on this machine; a compiled loop, numba or",
        "  XLA, measured no faster) and building the table positions. `Pool` moves between runs: 0.30 s",
        "  in this run (1.1x), 0.18-0.22 s at its fastest in others, where jaximp took 0.22-0.29 s (0.8-0.9x).",
        "- Warm calls on the same model find the SHAP tables of its own leaf weights that the first",
        "  call built (a model keeps them for its next call), so the path-dependent, exact, Saabas and",
        "  interaction rows leave them out: building them takes 0.011 s (SHAP values) and 0.027 s",
        "  (interactions) on the reference model. Interventional tables depend on the background and",
        "  are built at every call (or kept by a `jaximp.Explainer`); first calls are in their section.",
        "- Permutation importance draws its own row permutations, so it agrees with sklearn within",
        "  sampling error (the tests check that), not number for number.",
        "- Timings on a shared 2-core virtual machine move by 20-50% between runs (the\n  machine's speed drifts "
        "over minutes); compare ratios, taken in the same run. Ratios also move between machines",
        "  (the device line names the processor): on an earlier 2-core machine, the same code's raw",
        "  predict ran at 1.1x CatBoost's and path-dependent SHAP at 30x, where another gave 0.6x and",
        "  16x, with CatBoost's own times about the same on both.",
        "- Depthwise and Lossguide predict: trees up to depth 10 descend as heaps (node p's children at",
        "  2p + 1 and 2p + 2) over rows quantized once, as oblivious trees do: a level is two gathers of",
        "  integers (the node's packed feature, missing-value direction and border rank; the row's bin)",
        "  where a descent by child pointers over float values takes four. Deeper trees of at most 32",
        "  leaves (the LightGBM row) read their leaves as masks, every node at once, after QuickScorer",
        "  (Lucchese et al., 2015): the lowest set bit of the AND of the masks clearing the left subtree",
        "  of every node where the row goes right.",
        "- No GPU was lent to the sessions that wrote this: there are no GPU rows yet.",
    ]
    return "\n".join(lines) + "\n"


def scale_markdown(scale: dict) -> list[str]:
    """The scale section: compile times, streaming, devices."""
    if not scale:
        return []
    lines = [
        "",
        "## Compile time: first call minus second call, in a fresh process",
        "",
        "Seconds spent compiling on the first call of each function (4,096 rows; in this order, so",
        "programs shared with an earlier function are already compiled), without JAX's persistent",
        "cache, with `jaximp.enable_compilation_cache` on an empty directory, and in a new process",
        "reading the directory the previous one filled. scikit-learn is imported before the first call",
        "(`permutation_importance` returns its `Bunch`; the import takes about a second).",
        "",
        "| function | no cache s | cache empty s | cache filled s | warm call s |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in scale["compile"]:
        lines.append(f"| {r['name']} | {r['no cache']:.2f} | {r['cache empty']:.2f} | {r['cache filled']:.2f} | "
                     f"{r['warm']:.4f} |")
    st = scale["stream"]
    mem = st["memory"]
    one, four = st["files"][0], st["files"][1]
    lines += [
        "",
        "## Streaming Parquet files: memory flat in rows",
        "",
        "`jaximp.explain_files` (path-dependent SHAP, predictions written too) on Parquet files of",
        "the reference distribution (50 float32 columns, row groups of 1,000,000 rows), each in a fresh",
        "process: the process's peak resident memory (Python, JAX, the model and the pipeline's few",
        "batches in flight) and the rows per second, reading and writing Parquet included.",
        "",
        "| rows | seconds | rows/s | peak resident MB |",
        "|---:|---:|---:|---:|",
    ]
    lines += [f"| {r['rows']:,} | {r['seconds']:.1f} | {r['rows'] / r['seconds']:,.0f} | {r['peak_rss_mb']:,.0f} |"
              for r in st["files"]]
    lines += [
        "",
        f"Peak memory at {four['rows']:,} rows is {four['peak_rss_mb'] / one['peak_rss_mb']:.2f}x the peak at "
        f"{one['rows']:,}. The same {mem['rows']:,} rows in memory (`shap_values` and `predict` of a NumPy",
        f"array read beforehand, not timed) took {mem['seconds']:.1f} s ({mem['rows'] / mem['seconds']:,.0f} rows/s, "
        f"peak {mem['peak_rss_mb']:,.0f} MB): streaming runs at "
        f"{(one['rows'] / one['seconds']) / (mem['rows'] / mem['seconds']):.2f}x the in-memory rate.",
        "",
    ]
    lines += [
        "## First calls, per model type",
        "",
        "The first `shap_values` and then the first `predict` of 1,000 rows in a fresh process, compilation",
        "included (what a notebook user waits for), without JAX's persistent compilation cache and with",
        "a cache an earlier process filled (`jaximp.enable_compilation_cache`, or",
        "`JAXIMP_COMPILATION_CACHE=1`); the warm call for scale. Each time is the best of",
        f"{FIRST_CALL_PROCESSES} fresh processes.",
        "",
        "| model | shap_values first s | with filled cache s | warm s | predict first s | with filled cache s "
        "| warm s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [f"| {r['model']} | {r['shap_values no cache']:.2f} | {r['shap_values cache filled']:.2f} | "
              f"{r['shap_values warm']:.4f} | {r['predict no cache']:.2f} | {r['predict cache filled']:.2f} | "
              f"{r['predict warm']:.4f} |" for r in scale["first"]]
    lines += [
        "",
        "## Several devices",
        "",
        "shap_values of 100,000 rows split over forced host devices",
        "(`XLA_FLAGS=--xla_force_host_platform_device_count=4`), each device running the kernel on its",
        "own slice of every step's rows. They share this machine's cores, so this shows that the work",
        "is shared, not repeated (the process's CPU time stays flat in the device count), and that",
        "results are identical; not a speed-up.",
        "",
        "| devices | seconds | CPU seconds | identical to 1 device |",
        "|---:|---:|---:|---|",
    ]
    lines += [f"| {r['devices']} | {r['seconds']:.3f} | {r['cpu']:.3f} | {r['identical']} |" for r in scale["devices"]]
    return lines


def update_readme(results: list[dict], scale: dict) -> None:
    """Write the headline rows (one per workload in HEADLINE, the largest N) into the README, and
    a line on first calls and streaming memory."""
    chosen = {}
    for r in results:
        if r["name"] in HEADLINE and r["rows"] >= chosen.get(r["name"], {}).get("rows", -1):
            if r["name"] not in chosen or "CatBoost" in r["reference"] or "sklearn" in r["reference"]:
                chosen[r["name"]] = r
    lines = ["| workload | rows | reference | speed-up |", "|---|---:|---|---:|"]
    lines += [f"| {r['name']} | {r['rows']:,} | {r['reference']} | {r['speedup']:.1f}x |"
              for name in HEADLINE if (r := chosen.get(name))]
    if scale:
        import textwrap

        first = "; ".join(f"{r['model']}: {r['shap_values no cache']:.1f} s ({r['shap_values cache filled']:.2f} s)"
                          for r in scale["first"])
        smallest, largest = scale["stream"]["files"][0], scale["stream"]["files"][-1]
        lines += [""] + textwrap.wrap(
            f"First `shap_values` call on 1,000 rows in a fresh process (best of {FIRST_CALL_PROCESSES}), "
            f"compiling included (in brackets: with "
            f"the compilation cache filled by an earlier process): {first}. "
            f"`explain_files` streams {largest['rows']:,} rows with a peak of {largest['peak_rss_mb']:,.0f} MB "
            f"({smallest['peak_rss_mb']:,.0f} MB for {smallest['rows']:,}).", 100)
    text = README.read_text()
    start, end = text.index("<!-- headline -->"), text.index("<!-- /headline -->")
    README.write_text(text[: start + len("<!-- headline -->")] + "\n" + "\n".join(lines) + "\n" + text[end:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small model and sizes")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", nargs="*", help=f"workload groups among {sorted(WORKLOADS)}")
    parser.add_argument("--out", default=str(HERE / "BENCHMARKS.md"))
    args = parser.parse_args()
    results = run(args)
    skip_scaling = args.only and "shap" not in args.only
    scaling = [] if skip_scaling else background_scaling(*reference_model(args.quick), args.quick)
    scale = {}
    if not args.only or "scale" in args.only:
        scale = dict(compile=compile_times(args.quick), first=first_calls(args.quick),
                     stream=stream_file(args.quick), devices=device_scaling(args.quick))
    if not args.only and not args.quick:
        text = markdown(results, scaling, args, scale)
        old = Path(args.out).read_text() if Path(args.out).exists() else ""
        for group in OPT_IN:  # the opt-in groups' sections of their last `--only` runs are kept
            start, end = f"<!-- {group} -->", f"<!-- /{group} -->"
            if start in old:
                text += "\n" + old[old.index(start):old.index(end) + len(end)] + "\n"
        Path(args.out).write_text(text)
        update_readme(results, scale)
        print(f"wrote {args.out}")
    for group in OPT_IN:
        if args.only and group in args.only and not args.quick:
            write_section(Path(args.out), group, [r for r in results if r["group"] == group])
            print(f"wrote the {group} section of {args.out}")


def section_header(group: str) -> list[str]:
    """The title and description of an opt-in group's section of BENCHMARKS.md."""
    if group == "differentiable":
        return [
            "## Differentiable experimentation",
            "",
            f"Written by `python scripts/bench.py --only differentiable`, on {device_name()}, with the",
            "reference model (1000 trees, depth 6): the mean |SHAP| of 100 copies of the model with",
            "perturbed leaf values in one `jax.vmap`, against a Python loop over them; the",
            "gradient of the summed mean |SHAP| with respect to the leaf values over 100k rows, against",
            "the forward pass alone (check: the memory XLA plans for the gradient's program).",
        ]
    if group == "indices":
        return [
            "## Every game: interaction indices, Banzhaf values, transformed outputs",
            "",
            f"Written by `python scripts/bench.py --only indices`, on {device_name()}: k-SII of order 2 and",
            "3 (path-dependent) of a RandomForestRegressor(100 trees, max_depth=8) on 20k rows x 12 of the",
            "reference distribution, against shapiq's TreeExplainer (TreeSHAP-IQ) row by row, on the same 10",
            "rows for both orders (a call of fewer rows costs jaximp about as much: at 3 rows, order 3 takes",
            "0.07-0.1 s, bound by the loop over the leaves' chunks, not by the rows); interventional",
            "SHAP interaction values of an XGBRegressor(100 trees, max_depth=6) over 1,000 background rows,",
            "against WOODELF (shap's TreeExplainer returns zeros for them), then the same call over 100 to",
            "100,000 background rows against itself at 1,000 (a speed-up near 1: the cost per explained row",
            "is flat in B; the leaf tables built from a background, O(B), are kept for the next call with it); SHAP",
            "values of the probability and of the log loss of an XGBClassifier(100 trees, max_depth=6)",
            "over 100 background rows against shap's TreeExplainer (these pair every row with every",
            "background row, as shap does). jaximp timed warm.",
        ]
    if group == "treeexplainer":
        return [
            "## shap's TreeExplainer, one import away",
            "",
            f"Written by `python scripts/bench.py --only treeexplainer`, on {device_name()}:",
            "`jaximp.TreeExplainer` against `shap.TreeExplainer`, the same calls on the same model and rows,",
            "each timed from the explainer's construction, as a shap user runs them (both check additivity).",
            "XGBRegressor(100 trees, max_depth=6) and LGBMClassifier(100 trees, num_leaves=63) on 20k rows x 50",
            "of the reference distribution; the interventional rows give shap the whole background",
            "(`shap.maskers.Independent(bg, max_samples=len(bg))`), as jaximp uses it. jaximp timed warm",
            "(its programs compiled by an earlier call; each explainer builds its tables again).",
            "The LightGBM interventional check's largest difference is shap's: its interventional kernel",
            "holds thresholds in float32, and one explained row equals the float32 rounding of a double",
            "threshold that LightGBM compares in float64 (tests/test_tree_explainer.py checks jaximp's",
            "values of such rows against the Shapley values of LightGBM's own predictions).",
        ]
    threads = os.cpu_count()
    return [
        "## scikit-learn, XGBoost and LightGBM models",
        "",
        "Written by `python scripts/bench.py --only libraries` (opt-in: the references take tens of",
        f"minutes), on {device_name()}. Models trained on 100k rows x 50 of the reference",
        "distribution: XGBRegressor(500 trees, max_depth=8), LGBMRegressor(500 trees, num_leaves=127;",
        "trees up to 31 deep, most leaves 6-13), RandomForestRegressor(300 trees, max_depth=8; on 20k rows); the",
        f"libraries' own SHAP uses all {threads} cores. The LightGBM interventional rows use the model's",
        "first 100 trees (shap and WOODELF take tens of minutes on all 500). jaximp timed warm.",
    ]


def section_notes(group: str) -> list[str]:
    if group != "libraries":
        return []
    return [
        "- shap's interventional rows give it the whole background, `shap.maskers.Independent(bg,",
        "  max_samples=len(bg))`: a plain `TreeExplainer(model, data=bg)` keeps a 100-row sample of it",
        "  (the masker's default `max_samples=100`), does a tenth of the work and gives other numbers (off",
        "  by ~11 on values of magnitude ~300 here). Given every row, shap equals jaximp (the check",
        "  column); WOODELF uses every row too (off by up to 1.8 on a few XGBoost rows).",
        "- Deep trees: a path's slots are its players (distinct features), not its edges: the LightGBM",
        "  paths of up to 31 edges read at most 22 features, 90% of them at most 13, and the per-leaf",
        "  tables of interventional values cost 2**players. Path-dependent values use quadrature of each",
        "  leaf's path polynomial at every depth (faster on CPU than a table lookup). The leaves of all",
        "  trees are grouped by players into at most 6 buckets,",
        "  each padded only to its own most. Interventional values of the buckets with more players than",
        "  tables pay for (LightGBM's first 100 trees: 59 leaves of 16 to 18) pair every row with every",
        "  background row, O(N B L D).",
        "- Layouts: a `shap_values` call weighs the code it compiles against its rows' work, so 2,000",
        "  rows of the 127-leaf model take three buckets of looped quadrature nodes (the warm row above;",
        "  looping a bucket of more than 20 players costs it about 3x, so the deepest holds few leaves);",
        "  a `jaximp.Explainer` lays its tables out for batch after batch, in more buckets with their",
        "  nodes unrolled (the Explainer row), as does a call with JAX's persistent cache on.",
        "- Interventional SHAP builds per-leaf tables from the background once per call (its",
        "  histogram and superset sums); explaining more rows with one `jaximp.Explainer` reuses them.",
    ]


def write_section(path: Path, group: str, results: list[dict]) -> None:
    """Replace (or append) the section of an opt-in group, written by ``--only GROUP``."""
    start, end = f"<!-- {group} -->", f"<!-- /{group} -->"
    lines = [start, ""] + section_header(group) + [
        "",
        "| workload | rows | reference | reference s | jaximp s | speed-up | rows/s (jaximp) | check |",
        "|---|---:|---|---:|---:|---:|---:|---|",
    ]
    for r in results:
        cells = [str(r[k]).replace("|", "\\|") for k in ("name", "reference", "note")]  # "mean |SHAP|"
        lines.append(f"| {cells[0]} | {r['rows']:,} | {cells[1]} | {r['t_ref']:.3f} | {r['t_ours']:.3f} | "
                     f"{r['speedup']:.1f}x | {r['rows'] / r['t_ours']:,.0f} | {cells[2]} |")
    lines += [""] + section_notes(group) + ["", end, ""]
    old = path.read_text() if path.exists() else ""
    if start in old:
        old = old[: old.index(start)] + old[old.index(end) + len(end):].lstrip("\n")
    path.write_text(old.rstrip("\n") + "\n\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
