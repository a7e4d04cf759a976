"""The ensemble constructors (``ObliviousEnsemble``, ``TreeEnsemble``) on inconsistent fields:
a clear ``TypeError``/``ValueError`` at construction, never a crash or a wrong number later;
and every form JAX gives the pytree (traced, vmapped with ``in_axes`` trees, stacked, its
gradient) still constructs.

Oracles: the refusal and its message (the class name first, then the field); SHAP additivity
(``sum(shap) + expected_value == predict``) and a NumPy evaluation of oblivious trees for models
that pass; the same numbers before and after a pytree round trip. Tolerances: float32 sums,
``rtol=1e-5, atol=1e-4``.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hostile import EXAMPLES, assert_clear_refusal, outcome
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from models import catboost_categorical, library_categorical, random_ensemble, sklearn_model

import jaximp
from jaximp._models.trees import from_oblivious

slow = pytest.mark.slow
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])

# the trailing axes of each array field (the legend of jaximp._models): sizes named by a letter
# that several fields share must agree
AXES = {
    "split_features": "TD", "split_borders": "TD", "split_bins": "TD", "split_mask": "TD", "borders": "EB",
    "leaf_values": "TLK", "leaf_weights": "TL", "scale": "", "bias": "K",
    "roots": "T", "node_features": "TM", "node_borders": "TM", "node_nan_right": "TM", "node_children": "TM2",
    "node_gains": "TM", "node_weights": "TM", "leaf_ids": "TL", "node_categorical": "TM", "node_categories": "TMW",
}
SHARED = set("TDLKM")


@functools.cache
def base(name):
    """The valid ensembles the corruptions start from."""
    if name == "oblivious":
        return random_ensemble(0, (2, 3, 1), n_features=4, n_outputs=2)
    if name == "from_oblivious":
        return from_oblivious(random_ensemble(1, (3, 2, 3), n_features=3))
    if name == "sklearn":  # padded nodes and leaves, gains, node weights, leaf ids
        return sklearn_model("rf_clf").ens
    return library_categorical("sklearn-reg").ens  # set-membership splits


BASES = ("oblivious", "from_oblivious", "sklearn", "categorical")


def arrays(ens):
    return [f.name for f in dataclasses.fields(ens) if hasattr(getattr(ens, f.name), "shape")]


def refused(ens, changes, error_type=(TypeError, ValueError)):
    """The refusal that ``dataclasses.replace(ens, **changes)`` raises: clear, of ``error_type``,
    the class name first."""
    kind, error = outcome(lambda: dataclasses.replace(ens, **changes))
    assert kind == "refused", f"{kind}: {changes.keys()} accepted" if kind == "value" else repr(error)
    assert isinstance(error, error_type), repr(error)
    assert_clear_refusal(error)
    assert str(error).startswith(f"{type(ens).__name__}: "), str(error)
    return error


def reached(ens, starts=None):
    """``(nodes, leaves)``: per tree, the internal nodes and leaves its root (or ``starts[t]``, a
    child id) reaches (a walk)."""
    roots, children = np.asarray(ens.roots), np.asarray(ens.node_children)
    nodes, leaves = [], []
    for t in range(ens.n_trees):
        stack, inner, outer = [int(roots[t] if starts is None else starts[t])], [], []
        while stack:
            c = stack.pop()
            if c >= 0:
                inner.append(c)
                stack += [int(children[t, c, 0]), int(children[t, c, 1])]
            else:
                outer.append(~c)
        nodes.append(inner)
        leaves.append(outer)
    return nodes, leaves


# Corruptions that must be refused at construction -----------------------------------------------


def _as_given(draw, array):
    return jnp.asarray(array) if draw(st.booleans()) else np.asarray(array)


@st.composite
def corruptions(draw):
    """``(ens, changes, error type)``: one field of a valid ensemble made inconsistent."""
    ens = base(draw(st.sampled_from(BASES)))
    trees = ens.layout == "trees"
    kinds = ["dtype", "axis", "rank", "index", "nonfinite", "static"] + (["structure"] if trees else [])
    kind = draw(st.sampled_from(kinds))
    event(f"{ens.layout}: {kind}")
    names = arrays(ens)
    if kind == "dtype":
        name = draw(st.sampled_from(names))
        a = np.asarray(getattr(ens, name))
        wrong = {"i": np.float32, "u": np.int32, "f": np.int32, "b": np.int8}[a.dtype.kind]
        return ens, {name: _as_given(draw, a.astype(wrong))}, TypeError
    if kind == "axis":  # one shared size changed in one field
        name = draw(st.sampled_from([n for n in names if set(AXES[n]) & SHARED or (n == "borders")]))
        a = np.asarray(getattr(ens, name))
        letters = AXES[name]
        axis = draw(st.sampled_from([i for i, c in enumerate(letters) if c in SHARED or (c == "E")]))
        size = a.shape[axis]
        if size and draw(st.booleans()):
            a = np.take(a, np.arange(size - 1), axis=axis)
        else:
            extra = np.take(a, [0], axis=axis) if size else np.zeros((*a.shape[:axis], 1, *a.shape[axis + 1:]), a.dtype)
            a = np.concatenate([a, extra], axis=axis)
        return ens, {name: _as_given(draw, a)}, ValueError
    if kind == "rank":
        name = draw(st.sampled_from([n for n in names if AXES[n]]))
        return ens, {name: _as_given(draw, np.asarray(getattr(ens, name))[..., 0])}, ValueError
    if kind == "index":
        return (ens, *_bad_index(draw, ens))
    if kind == "nonfinite":
        finite = ["leaf_values", "leaf_weights", "scale", "bias"]
        borders = ["split_borders", "borders"] if not trees else ["node_borders", "node_gains", "node_weights"]
        name = draw(st.sampled_from(finite + [n for n in borders if n in names]))
        a = np.array(getattr(ens, name))
        flat = a.reshape(-1)
        flat[draw(st.integers(0, flat.size - 1))] = draw(st.sampled_from(
            [np.nan] if name in borders else [np.nan, np.inf, -np.inf]))
        return ens, {name: _as_given(draw, a)}, ValueError
    if kind == "static":
        return (ens, *draw(st.sampled_from(_bad_statics(ens))))
    return (ens, *_bad_structure(draw, ens))


def _bad_index(draw, ens):
    k = draw(st.integers(0, 3))
    if ens.layout == "oblivious":
        name = draw(st.sampled_from(["split_features", "split_bins"]))
        a = np.array(getattr(ens, name))
        t, d = draw(st.integers(0, a.shape[0] - 1)), draw(st.integers(0, a.shape[1] - 1))
        if name == "split_features":
            a[t, d] = draw(st.sampled_from([ens.n_evaluated + k, -1 - k]))
        elif np.asarray(ens.split_mask)[t, d]:
            a[t, d] = draw(st.sampled_from([ens.borders.shape[1] + k, -1 - k]))
        else:
            a[t, d] = ens.borders.shape[1] - 1 - k
        return {name: _as_given(draw, a)}, ValueError
    name = draw(st.sampled_from(["node_features", "node_children", "roots"]))
    a = np.array(getattr(ens, name))
    flat = a.reshape(-1)
    i = draw(st.integers(0, flat.size - 1))
    m, n_leaves = ens.n_nodes, ens.n_leaves
    flat[i] = draw(st.sampled_from({"node_features": [ens.n_evaluated + k, -1 - k],
                                    "node_children": [m + k, -n_leaves - 2 - k],
                                    "roots": [1 + k, -2 - k]}[name]))
    return {name: _as_given(draw, a)}, ValueError


def _bad_statics(ens):
    f, modes, names = ens.n_features, ens.nan_modes, ens.feature_names
    bad = [
        ({"nan_modes": modes[:-1]}, ValueError), ({"nan_modes": modes + ("Min",)}, ValueError),
        ({"nan_modes": ("Foo",) + modes[1:]}, ValueError), ({"nan_modes": list(modes)}, ValueError),
        ({"feature_names": names[:-1]}, ValueError), ({"feature_names": list(names)}, ValueError),
        ({"feature_names": (1,) + names[1:]}, ValueError),
        ({"n_features": f + 1}, ValueError), ({"n_features": -1}, TypeError), ({"n_features": 2.0}, TypeError),
        ({"loss_function": 3}, TypeError), ({"class_names": ["a"]}, TypeError),
        ({"class_names": (["a"], ["b"])}, TypeError),
        ({"leaf_weights_known": "yes"}, TypeError), ({"n_searched": len(modes) + 1}, ValueError),
        ({"players": ((0,),)}, ValueError), ({"player_of": (0,) * len(modes)}, ValueError),
        ({"featurizer": "CatBoost"}, TypeError),
    ]
    if ens.layout == "trees":
        bad += [({"depth": ens.n_nodes + 1}, ValueError), ({"depth": -1}, TypeError),
                ({"impurity_scheme": "bagging"}, ValueError), ({"category_codes": "codes"}, ValueError)]
        longest = max(len(path) for path in _paths(ens))
        if longest:
            bad.append(({"depth": longest - 1}, ValueError))
    return bad


def _paths(ens):
    """Every root-to-leaf path of every tree (the internal nodes on it)."""
    roots, children = np.asarray(ens.roots), np.asarray(ens.node_children)
    out = []
    for t in range(ens.n_trees):
        stack = [(int(roots[t]), ())]
        while stack:
            c, path = stack.pop()
            if c < 0:
                out.append(path)
            else:
                stack += [(int(children[t, c, s]), path + (c,)) for s in (0, 1)]
    return out


def _bad_structure(draw, ens):
    """A reached node's child made a self loop, the root, the padding leaf, or another reached leaf
    (one outside the replaced child's subtree, so that it is still reached: then twice)."""
    nodes, leaves = reached(ens)
    trees = [t for t in range(ens.n_trees) if nodes[t]]
    t = draw(st.sampled_from(trees))
    n, side = draw(st.sampled_from(nodes[t])), draw(st.integers(0, 1))
    children = np.array(ens.node_children)
    below = set(reached(ens, starts=[children[t, n, side]] * ens.n_trees)[1][t])  # the replaced subtree's leaves
    other = [~j for j in leaves[t] if j not in below]
    choices = [n, 0, ~ens.n_leaves] + ([draw(st.sampled_from(other))] if other else [])
    children[t, n, side] = draw(st.sampled_from(choices))
    return {"node_children": _as_given(draw, children)}, ValueError


@settings(max_examples=4 * EXAMPLES, **SETTINGS)
@given(corruptions())
def test_inconsistent_fields_are_refused_at_construction(corruption):
    ens, changes, error_type = corruption
    refused(ens, changes, error_type)


@slow
@settings(max_examples=40 * EXAMPLES, **SETTINGS)
@given(corruptions())
def test_many_inconsistent_fields(corruption):
    ens, changes, error_type = corruption
    refused(ens, changes, error_type)


# Valid changes: accepted, and the numbers hold together ----------------------------------------------------


@st.composite
def valid_changes(draw):
    """``(ens, changes)``: a valid ensemble rewired into another valid one (features, borders,
    leaf values and weights, children swapped, internal nodes renumbered, a depth dropped).
    Every leaf a row can reach has a positive weight (path-dependent SHAP is additive then)."""
    ens = base(draw(st.sampled_from(BASES[:3])))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    changes = {"leaf_values": jnp.asarray(rng.normal(size=ens.leaf_values.shape).astype(np.float32))}
    weights = rng.uniform(1.0, 10.0, ens.leaf_weights.shape).astype(np.float32)
    if ens.layout == "oblivious":
        mask, table = np.array(ens.split_mask), np.asarray(ens.borders)
        features = np.where(mask, rng.integers(0, ens.n_evaluated, mask.shape), 0)
        real = (table < np.inf).sum(axis=1)[features]
        bins = np.where(mask, (rng.random(mask.shape) * real).astype(np.int64), table.shape[1])
        if draw(st.booleans()):  # drop the deepest real depth of tree 0
            d = int(mask[0].sum()) - 1
            if d >= 0:
                mask[0, d], bins[0, d], features[0, d] = False, table.shape[1], 0
        padded_bits = np.sum(np.where(mask, 0, 1 << np.arange(mask.shape[1])), axis=1)
        weights[(np.arange(weights.shape[1])[None] & padded_bits[:, None]) != 0] = 0.0
        borders = np.where(mask, table[features, np.minimum(bins, table.shape[1] - 1)], np.inf)
        changes.update(split_features=jnp.asarray(features.astype(np.int32)), split_mask=jnp.asarray(mask),
                       split_bins=jnp.asarray(bins.astype(np.int32)), split_borders=jnp.asarray(borders),
                       leaf_weights=jnp.asarray(weights))
        return ens, changes
    children = np.array(ens.node_children)
    features = np.array(ens.node_features)
    nodes, leaves = reached(ens)
    for t in range(ens.n_trees):
        weights[t, np.setdiff1d(np.arange(ens.n_leaves), leaves[t])] = 0.0
        for n in nodes[t]:
            features[t, n] = rng.integers(0, ens.n_evaluated)
            if rng.random() < 0.3:
                children[t, n] = children[t, n, ::-1]
    changes.update(node_children=children, node_features=features, leaf_weights=jnp.asarray(weights),
                   node_weights=None)
    if draw(st.booleans()):  # renumber the internal nodes of every tree but the roots
        m = ens.n_nodes
        perm = np.stack([np.concatenate([[0], 1 + rng.permutation(m - 1)]) for _ in range(ens.n_trees)])
        inv = np.argsort(perm, axis=1)
        moved = np.take_along_axis(children, inv[:, :, None], 1)
        changes["node_children"] = np.where(
            moved >= 0, np.take_along_axis(perm, np.maximum(moved, 0).reshape(ens.n_trees, -1), 1).reshape(moved.shape),
            moved)
        per_node = ("node_borders", "node_nan_right", "node_gains", "node_categorical")
        changes["node_features"] = np.take_along_axis(features, inv, 1)
        for name in per_node:
            if getattr(ens, name) is not None:
                changes[name] = jnp.asarray(np.take_along_axis(np.asarray(getattr(ens, name)), inv, 1))
    changes["node_children"] = jnp.asarray(changes["node_children"].astype(np.int32))
    changes["node_features"] = jnp.asarray(changes["node_features"].astype(np.int32))
    return ens, changes


def rows_for(ens, n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, ens.n_features)).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan
    return X


def assert_additive(ens, X):
    """Path-dependent SHAP values add up to the prediction."""
    predicted = np.asarray(jaximp.predict(ens, X))
    shap = np.asarray(jaximp.shap_values(ens, X))
    np.testing.assert_allclose(shap.sum(axis=1) + np.asarray(jaximp.expected_value(ens)), predicted,
                               rtol=1e-5, atol=1e-4)


def accepted_and_additive(ens, changes):
    kind, changed = outcome(lambda: dataclasses.replace(ens, **changes))
    assert kind == "value", repr(changed)
    assert_additive(changed, rows_for(ens))


@settings(max_examples=max(1, EXAMPLES // 3), **SETTINGS)  # SHAP plans compile per tree structure
@given(valid_changes())
def test_valid_changes_are_accepted_and_consistent(change):
    accepted_and_additive(*change)


@slow
@settings(max_examples=10 * EXAMPLES, **SETTINGS)
@given(valid_changes())
def test_many_valid_changes(change):
    accepted_and_additive(*change)


# Valid models still construct and give their numbers ----------------------------------------------------


def oblivious_numbers(ens, X):
    """``f64[N, K]`` the raw prediction of an oblivious ensemble in NumPy (NaN per "Min"/"AsIs")."""
    x = np.where(np.isnan(X), -np.inf, X).astype(np.float64)
    features, borders = np.asarray(ens.split_features), np.asarray(ens.split_borders, np.float64)
    mask = np.asarray(ens.split_mask)
    bits = (x[:, features] > borders) & mask  # [N, T, D]
    leaf = (bits * (1 << np.arange(ens.depth))).sum(-1)  # [N, T]
    values = np.asarray(ens.leaf_values, np.float64)[np.arange(ens.n_trees), leaf]  # [N, T, K]
    return float(ens.scale) * values.sum(1) + np.asarray(ens.bias, np.float64)


@pytest.mark.parametrize("seed, depths, outputs", [(0, (2, 3, 1), 1), (1, (4, 4), 3), (2, (0, 1), 1), (3, (5,), 2)])
def test_random_ensembles_construct_and_give_their_numbers(seed, depths, outputs):
    ens = random_ensemble(seed, depths, n_outputs=outputs)
    X = rows_for(ens, seed=seed)
    expected = oblivious_numbers(ens, X)
    np.testing.assert_allclose(np.asarray(jaximp.predict(ens, X)).reshape(expected.shape), expected,
                               rtol=1e-5, atol=1e-5)
    general = from_oblivious(ens)
    np.testing.assert_allclose(np.asarray(jaximp.predict(general, X)).reshape(expected.shape), expected,
                               rtol=1e-5, atol=1e-5)
    rebuilt = jax.tree_util.tree_unflatten(*reversed(jax.tree_util.tree_flatten(general)))
    np.testing.assert_array_equal(np.asarray(jaximp.predict(rebuilt, X)), np.asarray(jaximp.predict(general, X)))


def test_imported_models_construct_again(ensemble):
    """The conftest's models (oblivious, Depthwise: NaN routes) and a categorical CatBoost model
    (featurizer, players) pass their own checks when rebuilt from their fields."""
    ens, X = ensemble
    for model in (ens, catboost_categorical("ctr").ens):
        again = type(model)(**{f.name: getattr(model, f.name) for f in dataclasses.fields(model)})
        assert repr(again) == repr(model)
    np.testing.assert_array_equal(np.asarray(jaximp.predict(dataclasses.replace(ens), X)),
                                  np.asarray(jaximp.predict(ens, X)))


# Regression tests: each check named ----------------------------------------------------------------------


def test_messages_name_the_field_and_the_fix():
    ens = base("oblivious")
    error = refused(ens, {"split_features": np.asarray(ens.split_features, np.float32)}, TypeError)
    assert_clear_refusal(error, "split_features", "i32[T, D]", "np.int32")
    error = refused(ens, {"leaf_values": ens.leaf_values[:, :, 0]}, ValueError)
    assert_clear_refusal(error, "leaf_values", "f32[T, L, K]", "(3, 8)")
    error = refused(ens, {"leaf_values": ens.leaf_values[:2]}, ValueError)
    assert_clear_refusal(error, "leaf_values", "T = 3")
    error = refused(ens, {"split_features": ens.split_features.at[1, 0].set(9)}, ValueError)
    assert_clear_refusal(error, "split_features", "[0, E = 4)", "9 at (1, 0)")
    error = refused(ens, {"leaf_values": ens.leaf_values.at[0, 1, 0].set(np.float32(3e38) * 10)}, ValueError)
    assert_clear_refusal(error, "leaf_values", "inf", "float32")
    error = refused(ens, {"nan_modes": ("Min",) * 3}, ValueError)
    assert_clear_refusal(error, "nan_modes", "E = 4")
    trees = base("sklearn")
    error = refused(trees, {"node_children": trees.node_children.at[0, 0, 0].set(0)}, ValueError)
    assert_clear_refusal(error, "twice", "cycle")
    error = refused(trees, {"roots": trees.roots.at[2].set(1)}, ValueError)
    assert_clear_refusal(error, "roots", "1 at 2")
    error = refused(trees, {"depth": 2}, ValueError)
    assert_clear_refusal(error, "depth = 2", "longest")
    error = refused(trees, {"node_categorical": trees.node_nan_right}, ValueError)
    assert_clear_refusal(error, "node_categories")
    cat = catboost_categorical("ctr").ens
    refused(cat, {"player_of": cat.player_of[:-1]}, ValueError)
    refused(cat, {"reads": cat.reads[:-1] + ((),)}, ValueError)
    refused(cat, {"featurizer": None}, ValueError)
    refused(cat, {"players": None}, ValueError)


def test_pytree_forms_construct():
    """What JAX builds from the pytree passes the checks: tracers under jit, vmap and grad, an
    ``in_axes`` tree of ints and None, a stacked batch, float0 tangents, ShapeDtypeStructs,
    ``dataclasses.replace`` inside traced code; a stacked batch is checked per member."""
    for name in ("oblivious", "sklearn"):
        ens = base(name)
        X = rows_for(ens, n=8)
        negated = dataclasses.replace(ens, leaf_values=-ens.leaf_values)
        stacked = jax.tree_util.tree_map(lambda *a: jnp.stack(a), ens, negated)
        out = jax.jit(jax.vmap(lambda e: jaximp.predict(e, X)))(stacked)
        np.testing.assert_allclose(np.asarray(out[0]), np.asarray(jaximp.predict(ens, X)), rtol=1e-6)
        in_axes = dataclasses.replace(jax.tree_util.tree_map(lambda _: None, ens), leaf_values=0)
        sums = jax.vmap(lambda e: jnp.sum(e.leaf_values), in_axes=(in_axes,))(
            dataclasses.replace(ens, leaf_values=jnp.stack([ens.leaf_values, ens.leaf_values])))
        assert sums.shape == (2,)
        tangent = jax.grad(lambda e: jnp.sum(e.leaf_values * e.scale), allow_int=True)(ens)
        assert tangent.leaf_values.shape == ens.leaf_values.shape and tangent.leaf_values.dtype == jnp.float32
        assert jax.eval_shape(lambda e: e, ens).leaf_values.shape == ens.leaf_values.shape
        scaled = jax.jit(lambda v: jaximp.predict(dataclasses.replace(ens, leaf_values=v), X))(2 * ens.leaf_values)
        assert np.isfinite(np.asarray(scaled)).all()
        index = "split_features" if name == "oblivious" else "node_features"
        kind, error = outcome(lambda e=ens, s=stacked, i=index: dataclasses.replace(
            s, **{i: getattr(s, i).at[1, 0, 0].set(e.n_evaluated + 5)}))
        assert kind == "refused" and "at (1, 0, 0)" in str(error), repr(error)
        kind, error = outcome(lambda e=ens, s=stacked: dataclasses.replace(s, leaf_values=s.leaf_values[:, :, :1]))
        assert kind == "refused", repr(error)
