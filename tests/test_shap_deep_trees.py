"""SHAP of deep trees: quadrature instead of per-leaf tables, the buckets of paths by their
number of players, and deep models of every library against the library's own numbers.

Oracles: the closed form of the interventional tables (Beta integrals as factorials); the
features on each path of LightGBM's own tree dump; CatBoost (``ShapValues``,
``ShapInteractionValues``, ``LossFunctionChange``) on models reloaded from their JSON export,
LightGBM's ``pred_contrib`` and shap's ``TreeExplainer`` on trees deeper than any table.
(The deep kernels on tiny trees against brute force: tests/test_shap_brute_force.py.)
Tolerances: ``rtol=1e-5, atol=1e-5 * max(1, magnitude)``; LossFunctionChange ``1e-4``.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import catboost
import numpy as np
import pandas as pd
import pytest
import shap
from models import LOSS, catboost_trees, explained_rows, lightgbm_deep, lightgbm_rows, make_data
from oracles import (
    assert_close,
    catboost_interactions,
    catboost_json_trees,
    catboost_shap,
    lightgbm_contributions,
    shap_tree_dict,
)

import jaximp
from jaximp._models.cache import model_cache
from jaximp._rows import tuning
from jaximp._rows.tuning import CPU

slow = pytest.mark.slow


@pytest.mark.parametrize("d", [1, 6, 11])
def test_interventional_tables_against_pairs(d):
    """The interventional tables built by quadrature against their definition: every row pattern
    ``u`` met by every background pattern ``q``; the game is zero unless ``q`` holds the slots
    ``X = ~u`` the row misses, and then ``w+(a, b) = (a-1)! b! / (a+b)!`` and
    ``w-(a, b) = a! (b-1)! / (a+b)!`` with ``a = D - |q|``, ``b = |X|``."""
    from jaximp._shap.games import interventional_table

    rng = np.random.default_rng(d)
    dist = rng.random((2, 1 << d)) * (rng.random((2, 1 << d)) < 0.5)
    dist /= dist.sum(axis=1, keepdims=True)
    got = np.asarray(interventional_table(dist.astype(np.float32), d))  # [2, 2**D, 3] at u

    patterns = np.arange(1 << d)
    size = np.array([bin(p).count("1") for p in patterns])
    fact = np.array([math.factorial(n) for n in range(2 * d + 1)], np.float64)
    x, q = patterns[:, None], patterns[None, :]  # X = ~u, background patterns
    holds = (q & x) == x
    a, b = d - size[None, :], size[:, None]
    plus = np.where(a > 0, fact[np.maximum(a - 1, 0)] * fact[b] / fact[a + b], 0.0)
    minus = np.where(b > 0, fact[a] * fact[np.maximum(b - 1, 0)] / fact[a + b], 0.0)
    shifted = np.where((a > 0) & (b > 0), fact[np.maximum(a - 1, 0)] * fact[np.maximum(b - 1, 0)]
                       / fact[np.maximum(a + b - 1, 0)], 0.0)
    expected = np.stack([(holds * w) @ dist.T for w in (plus, minus, shifted)], axis=-1)  # [2**D (X), 2, 3]
    expected = np.moveaxis(expected, 1, 0)[:, ~patterns & ((1 << d) - 1)]  # at u: X = ~u
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)


# Paths of many players: LightGBM trees deeper than 20 ----------------------------------------------------


def test_path_players_count_the_features_on_each_path():
    """A leaf's slots are the distinct features on its path in LightGBM's own tree dump (paths of
    21 edges read at most 13 features)."""
    from jaximp._shap.paths import path_players

    booster, ens = lightgbm_deep().model, lightgbm_deep().ens
    expected = np.zeros((booster.num_trees(), 255), np.int32)

    def walk(tree, node, features):
        if "leaf_index" in node:
            expected[tree, node["leaf_index"]] = len(features)
            return
        for child in ("left_child", "right_child"):
            walk(tree, node[child], features | {node["split_feature"]})

    for t, info in enumerate(booster.dump_model()["tree_info"]):
        walk(t, info["tree_structure"], frozenset())
    ids = np.asarray(ens.leaf_ids)  # jaximp's leaves numbered depth-first; ids: LightGBM's
    np.testing.assert_array_equal(path_players(ens), np.take_along_axis(expected, ids, axis=1))
    assert path_players(ens).max() == 13 and ens.depth > 20


def test_bucket_leaves_hold_every_leaf_once():
    """The buckets of players per path, in chunks of leaves, hold each leaf with a split exactly
    once, whatever the chunk sizes, and their depth covers its players."""
    from jaximp._shap.layouts import bucket_leaves, plan_layout
    from jaximp._shap.paths import path_players

    ens = lightgbm_deep().ens
    lengths = path_players(ens)
    for max_buckets, sizes in [(1, (7,)), (3, (5, 1, 64)), (6, (3, 4, 5, 6, 7, 8))]:
        layout = plan_layout(lengths, ens.n_trees, ens.n_leaves, ens.depth, table_depth=8,
                             table_floats=lambda d: 1 << d, table_bytes=1 << 20, max_buckets=max_buckets)
        assert 1 <= len(layout) <= max_buckets
        chunks = bucket_leaves(lengths, layout, ens.n_trees + 1, ens.n_leaves, sizes[:len(layout)])
        null = (ens.n_trees + 1) * ens.n_leaves
        held = np.concatenate([c.reshape(-1) for c in chunks])
        held = held[held != null]
        np.testing.assert_array_equal(np.sort(held), np.flatnonzero(lengths.reshape(-1) > 0))
        for b, c in zip(layout, chunks):
            inside = lengths.reshape(-1)[c[c != null]]
            assert inside.min() > b.shallowest and inside.max() <= b.depth


def test_few_rows_loop_the_quadrature_nodes_in_the_cost_model():
    """The cost model weighs compiling a bucket's code against its rows' work: spread over few
    rows, SHAP values loop the quadrature nodes of each bucket (one node's code); over many, they
    take them unrolled (faster passes)."""
    from jaximp._shap.layouts import path_costs, plan_layout

    players = np.random.default_rng(0).integers(1, 16, size=(500, 127))  # 500 trees: loops cost many rows more
    for rows, looped in [(64, True), (1 << 16, False)]:
        layout = plan_layout(players, 500, 127, 20, table_depth=0, table_floats=lambda d: 0, table_bytes=0,
                             costs=lambda d: path_costs(d, rows), compile_cost=CPU.bucket_compile_ns / rows,
                             node_compile_cost=CPU.node_compile_ns / rows)
        assert [b.looped for b in layout] == [looped and b.depth > 2 for b in layout]


def test_a_layout_is_the_models_whatever_the_rows_or_the_cache(tmp_path):
    """jaximp plans every layout for the same number of rows (its compile time spread over them),
    so that the layout, and with it a row's bits, is the model's: the same with JAX's persistent
    cache on (tests/test_row_independence.py explains the rows); interactions unrolled."""
    import jax

    import jaximp._shap.tree_plans as tree_shap

    ens = lightgbm_deep().ens
    layout = tree_shap._layout(ens, "path", CPU)[0]
    assert not any(b.looped for b in tree_shap._layout(ens, "pairs", CPU)[0])
    saved = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", str(tmp_path))  # nothing compiled while it is on
    try:
        assert tree_shap._layout(ens, "path", CPU)[0] == layout
    finally:
        jax.config.update("jax_compilation_cache_dir", saved)


def test_few_rows_loop_more_than_ten_nodes_only_over_few_leaves():
    """Looping a bucket's quadrature nodes costs its rows about 3x from 11 nodes (22 slots) on: a
    first call on few rows of many deep trees (the paths of 500 LightGBM trees of 127 leaves)
    loops so deep a bucket only over a few of its leaves, where pricing the loop as a shallow
    one's merged a seventh of them into a looped bucket of 22 slots (4.3 s a call, against 2.4 s)."""
    from jaximp._shap.layouts import path_costs, plan_layout

    counts = [257, 438, 1168, 2332, 4122, 5979, 7661, 8160, 7937, 6739, 5526, 4480, 3387, 2120, 1432, 839,
              489, 243, 124, 48, 17, 2]  # leaves per number of players, 1 to 22
    players = np.repeat(np.arange(1, 23), counts).reshape(500, 127)
    rows = 2000
    layout = plan_layout(players, 500, 127, 31, table_depth=0, table_floats=lambda d: 0, table_bytes=0,
                         costs=lambda d: path_costs(d, rows), compile_cost=CPU.bucket_compile_ns / rows,
                         node_compile_cost=CPU.node_compile_ns / rows)
    assert sum(b.count for b in layout) == players.size and layout[-1].depth == 22
    assert any(b.looped for b in layout)  # few rows: compiling every node would cost more
    assert all(b.count <= players.size // 50 for b in layout if b.looped and b.depth > 20)


def test_an_explainer_lays_its_plan_out_as_shap_values_does():
    """An Explainer's plan is the one a shap_values call makes: the same layout and the same
    bits, LightGBM's values."""
    import jaximp._shap.tree_plans as tree_shap

    fitted = lightgbm_deep()
    ens, x = fitted.ens, lightgbm_rows(fitted.model, fitted.X, 64)
    explainer = jaximp.Explainer(ens)
    assert explainer.tables.kind.layout == tree_shap._layout(ens, "path", CPU)[0]
    np.testing.assert_array_equal(explainer.shap_values(x), jaximp.shap_values(ens, x))
    assert_close(explainer.shap_values(x), lightgbm_contributions(fitted.model, x)[0][:, :, 0])


@pytest.mark.parametrize("max_buckets, looped", [(1, True), (6, False)])
def test_deep_lightgbm_trees_in_any_buckets_equal_pred_contrib(monkeypatch, max_buckets, looped):
    """Deep trees (quadrature) give LightGBM's values in one bucket of the deepest path for every
    leaf, its quadrature nodes in a loop, and in as many buckets of their own depths, nodes
    unrolled (no cost weighed per bucket: neither compile time nor each bucket's own steps)."""
    import jaximp._shap.layouts as layouts
    import jaximp._shap.tree_plans as tree_shap

    fitted = lightgbm_deep()
    layout = functools.partial(tree_shap.plan_layout, max_buckets=max_buckets, overhead=0.0)
    monkeypatch.setattr(tree_shap, "plan_layout", layout)
    tuned = dataclasses.replace(CPU, bucket_compile_ns=0.0, node_compile_ns=1.0 if looped else 0.0)
    monkeypatch.setattr(tuning, "CPU", tuned)  # the layout of the call below too
    monkeypatch.setattr(layouts, "loop_slowdown", lambda nodes: 1.0)  # a loop wherever compiling nodes costs anything
    ens = jaximp.from_lightgbm(fitted.model)
    layout = tree_shap._layout(ens, "path", tuned)[0]
    assert len(layout) == max_buckets and not layout[-1].tables  # the deepest by quadrature
    assert [b.looped for b in layout] == [looped and b.depth > 2 for b in layout]  # 2 slots: one node
    x = lightgbm_rows(fitted.model, fitted.X, 30)
    assert_close(jaximp.shap_values(ens, x), lightgbm_contributions(fitted.model, x)[0][:, :, 0])


@slow  # deep trees against pred_contrib by default: test_deep_lightgbm_trees_in_any_buckets_equal_pred_contrib
def test_deep_lightgbm_trees_against_pred_contrib():
    """Trees deeper than 20 (the quadrature kernel on paths of 13 players; ~15 s on 2 cores)."""
    fitted = lightgbm_deep()
    booster, ens = fitted.model, fitted.ens
    assert ens.depth >= 20 and ens.n_leaves == 255
    x = lightgbm_rows(booster, fitted.X, 90)
    assert_close(jaximp.predict(ens, x), booster.predict(x, raw_score=True))
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, x), booster.predict(x, pred_leaf=True))
    values, expected = lightgbm_contributions(booster, x)
    assert_close(jaximp.shap_values(ens, x), values[:, :, 0])
    assert_close(jaximp.expected_value(ens), expected[0])


# Deep models of CatBoost and scikit-learn ------------------------------------------------------------------


@slow  # ~25 s; by default: test_shap_brute_force.py::test_deep_kernels, test_deep_oblivious_models_against_catboost
@pytest.mark.parametrize("case", [("regression", "Lossguide", 16, 64, "Min"),
                                  ("multiclass", "Lossguide", 16, 40, "Max")])
def test_deep_catboost_trees_against_catboost(case):
    """Lossguide trees of depth up to 16 (CatBoost's limit): path-dependent SHAP and interaction
    values equal CatBoost's, interventional SHAP equals shap's, LossFunctionChange CatBoost's."""
    fitted = catboost_trees(*case, iterations=6, n_features=8)
    model, ens, X = fitted.model, fitted.ens, fitted.X
    assert ens.depth > 12  # deeper than any per-leaf table
    x = explained_rows(X, 30)
    values, expected = catboost_shap(model, x)
    assert_close(np.reshape(jaximp.shap_values(ens, x), values.shape), values)
    pairs = catboost_interactions(model, x[:8])
    assert_close(np.reshape(jaximp.shap_interaction_values(ens, x[:8]), pairs.shape), pairs)
    background = X[100:130]
    explainer = shap.TreeExplainer(shap_tree_dict(catboost_json_trees(fitted.json), fitted.json["scale_and_bias"][1]),
                                   data=background, feature_perturbation="interventional")
    want = np.asarray(explainer.shap_values(x))
    got = jaximp.shap_values(ens, x, method="interventional", background=background)
    assert_close(np.reshape(got, want.shape), want)
    if case[0] == "regression":
        y = model.predict(x) + np.random.default_rng(0).normal(size=len(x))
        lfc = model.get_feature_importance(catboost.Pool(x, y), type="LossFunctionChange")
        assert_close(jaximp.loss_function_change(ens, x, y), lfc, rtol=1e-4)


@pytest.mark.parametrize("kind, categorical", [("regression", False), pytest.param("binary", True, marks=slow)])
def test_deep_oblivious_models_against_catboost(kind, categorical):
    """A symmetric model deeper than the oblivious SHAP tables (depth 13; CatBoost allows 16) is
    explained as the equivalent general trees: CatBoost's ShapValues, expected value,
    ShapInteractionValues and LossFunctionChange, categorical columns included."""
    from jaximp._models.trees import from_oblivious

    X, y = make_data(kind, n=400, n_features=5, nan_fraction=0.05)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(5)])
    if categorical:
        frame["c"] = np.random.default_rng(0).choice(["a", "b", "c", "d"], size=len(frame))
    model = catboost.CatBoost(dict(loss_function=LOSS[kind], depth=13, iterations=3, random_seed=0, verbose=0,
                                   thread_count=1, allow_writing_files=False, one_hot_max_size=2))
    model.fit(frame, y, cat_features=["c"] if categorical else None)
    ens = jaximp.from_catboost(model)
    assert isinstance(ens, jaximp.ObliviousEnsemble) and ens.depth == 13
    x = frame.iloc[:12]
    np.testing.assert_array_equal(jaximp.leaf_indices(from_oblivious(ens), x), model.calc_leaf_indexes(x))
    want = model.get_feature_importance(catboost.Pool(x, cat_features=["c"] if categorical else None),
                                        type="ShapValues")
    assert_close(jaximp.shap_values(ens, x), want[:, :-1])
    before = model_cache().info()
    jaximp.shap_values(ens, x)  # the general trees and their plan are kept with the model
    assert model_cache().info().builds == before.builds
    assert_close(np.reshape(jaximp.expected_value(ens), -1), want[:1, -1])
    pairs = model.get_feature_importance(catboost.Pool(x[:4], cat_features=["c"] if categorical else None),
                                         type="ShapInteractionValues")
    assert_close(jaximp.shap_interaction_values(ens, x[:4]), pairs[:, :-1, :-1])
    target = y[:12] if kind == "regression" else y[:12].astype(float)
    lfc = model.get_feature_importance(catboost.Pool(x, target, cat_features=["c"] if categorical else None),
                                       type="LossFunctionChange")
    assert_close(jaximp.loss_function_change(ens, x, target), lfc, rtol=1e-4)
    with pytest.raises(ValueError, match="method='exact' needs ens.depth <= 12"):
        jaximp.shap_values(ens, x, method="exact")


@slow
def test_deep_forest_uses_the_deep_kernel_and_matches_shap():
    """Unlimited depth (> 12 levels): jaximp's quadrature kernel, against shap."""
    from sklearn import ensemble

    X, y = make_data("regression", n=400, n_features=5, seed=2)
    model = ensemble.RandomForestRegressor(3, random_state=0).fit(X, y)
    ens = jaximp.from_sklearn(model)
    assert ens.depth > 12
    x = explained_rows(X, 20)
    expected = shap.TreeExplainer(model).shap_values(x)
    assert_close(jaximp.shap_values(ens, x), expected)


def test_few_rows_take_fewer_buckets():
    """Each bucket is code of its own, compiled on the first call: the cost model for a few rows
    weighs that time and keeps fewer buckets than for many rows, which spreads it thin."""
    from jaximp._shap.layouts import path_costs, plan_layout
    from jaximp._shap.paths import path_players

    ens = lightgbm_deep().ens
    few, many = (plan_layout(path_players(ens), ens.n_trees, ens.n_leaves, ens.depth, table_depth=0,
                             table_floats=lambda d: 0, table_bytes=0, costs=lambda d, n=n: path_costs(d, n),
                             compile_cost=CPU.bucket_compile_ns / n,
                             node_compile_cost=CPU.node_compile_ns / n) for n in (64, 1 << 16))
    assert 1 <= len(few) < len(many)
    assert few[-1].depth == many[-1].depth  # every leaf is still in a bucket as deep as its path


def test_the_trees_structure_is_read_once_per_model(monkeypatch):
    """A model's structure (paths, parents) is computed on the host once and kept while the model
    lives: a second call computes nothing, another model computes its own, and a model that is
    gone leaves nothing behind."""
    import gc

    from jaximp._models.cache import model_cache

    def kept(ens):
        return model_cache().entries(ens).get("jaximp._shap.paths._structure")

    fitted = lightgbm_deep()
    x = lightgbm_rows(fitted.model, fitted.X, 8)
    ens = jaximp.from_lightgbm(fitted.model)  # a model no other test has explained
    first = jaximp.shap_values(ens, x)
    structure = kept(ens)
    assert structure is not None
    np.testing.assert_array_equal(jaximp.shap_values(ens, x), first)
    assert kept(ens) is structure  # not computed again
    other = jaximp.from_lightgbm(fitted.model)
    np.testing.assert_array_equal(jaximp.shap_values(other, x), first)
    assert kept(other) is not structure and kept(ens) is structure
    n_other, before = len(model_cache().entries(other)), model_cache().info().entries
    del other
    gc.collect()
    assert model_cache().info().entries == before - n_other  # its structure and plan went with it


@pytest.mark.parametrize("table", ["path", ""])
def test_plans_built_in_numpy_equal_the_plans_jax_builds(table):
    """A concrete model's plan is built in NumPy, a traced one's by the same functions in JAX:
    the same arrays (dtypes, shapes, integers exactly, floats to float32 rounding), for the
    path-dependent plan and the interventional plan before its background tables."""
    import jax

    import jaximp._shap.tree_plans as tree_plans
    from jaximp._shap.layouts import bucket_leaves
    from jaximp._shap.paths import host_structure

    ens = lightgbm_deep().ens
    structure = host_structure(ens)
    layout, players = tree_plans._layout(ens, "path", CPU, structure=structure)
    step = tree_plans._step(ens, tree_plans.Kind("path", layout), CPU)
    leaves = bucket_leaves(players, layout, -(-ens.n_trees // step.trees) * step.trees, ens.n_leaves, step.leaves)
    weights = np.asarray(ens.leaf_weights)
    assert tree_plans._on_host(ens, ens.leaf_weights, table, CPU)
    built = dict(trees=step.trees, layout=layout, table=table)
    host = tree_plans._plan(ens, weights, leaves, structure, **built)
    traced = tree_plans._PLAN(ens, ens.leaf_weights, leaves, structure, **built)
    host_leaves, host_tree = jax.tree_util.tree_flatten(host)
    traced_leaves, traced_tree = jax.tree_util.tree_flatten(traced)
    assert host_tree == traced_tree
    assert all(isinstance(a, np.ndarray) for a in host_leaves)
    for a, b in zip(host_leaves, traced_leaves):
        b = np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype
        if a.dtype.kind == "f":
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=0)
        else:
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("model", ["lightgbm", "catboost"])
def test_paths_from_the_host_structure_equal_the_paths_jax_traces(model):
    """The structure computed once on the host (each entry's first entry of the same player by a
    sort, each slot's cover product one entry at a time) gives the paths that the JAX program,
    comparing every pair of entries, traces from the model alone."""
    import jax

    from jaximp._shap.paths import host_structure, tree_paths

    if model == "lightgbm":
        ens = lightgbm_deep().ens
    else:
        ens = catboost_trees("multiclass", "Lossguide", 8, 20, iterations=6, n_features=4).ens
    weights = np.asarray(ens.leaf_weights)
    host = tree_paths(ens, weights, host_structure(ens))
    traced = jax.jit(tree_paths)(ens, ens.leaf_weights)
    for name in ("nodes", "right", "slot", "player", "feature", "mask"):
        np.testing.assert_array_equal(getattr(host, name), np.asarray(getattr(traced, name)), err_msg=name)
    for name in ("z", "ratio"):
        np.testing.assert_allclose(getattr(host, name), np.asarray(getattr(traced, name)), rtol=1e-6, err_msg=name)
    assert (host.player.sum(-1) < host.mask.sum(-1)).any()  # some paths read a feature twice


def test_a_models_plans_are_kept_for_its_next_call():
    """Explaining rows of the same model again reuses the plan built from its own leaf weights
    (the same arrays, the same values); another plan is kept beside it, and weights counted on
    the rows being explained (a model file without them) are never kept."""
    import dataclasses

    from jaximp._models.cache import model_cache

    def plans(ens):
        return {how: v for how, v in model_cache().entries(ens).items() if how[0][0] == "plan"}

    fitted = lightgbm_deep()
    x = lightgbm_rows(fitted.model, fitted.X, 8)[:8]
    ens = jaximp.from_lightgbm(fitted.model)
    first = jaximp.shap_values(ens, x)
    (how, plan), = plans(ens).items()
    np.testing.assert_array_equal(jaximp.shap_values(ens, x), first)
    assert plans(ens)[how] is plan
    jaximp.shap_values(ens, x, method="interventional", background=x)  # the interventional plan
    assert len(plans(ens)) == 2 and plans(ens)[how] is plan
    counted = dataclasses.replace(ens, leaf_weights_known=False)
    jaximp.shap_values(counted, x)
    assert plans(counted) == {}
