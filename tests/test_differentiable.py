"""Gradients, jit and vmap through jaximp's functions of the ensemble; the soft model.

Oracles: central finite differences in float64 (``jax_enable_x64`` for this module, restored
after it) along random directions; ``jax.grad`` without jit for ``jit(grad)``; a Python loop of
concrete calls for ``vmap`` over a batch of ensembles; brute-force Shapley values of the soft
model's path-dependent game, each tree read from the ensemble with sigmoid splits
(tests/oracles.py).

Tolerances: every function is computed in float64 here (models cast to float64), so a central
difference with step ``h = 1e-5`` agrees with the gradient to about ``h^2`` (curvature) plus
``1e-16 / h`` (rounding): ``rtol=1e-6``. Concrete calls of functions of rows return float32 by
contract, so ``vmap`` is compared with the loop at float32's ``rtol=1e-5``.
"""

from __future__ import annotations

import dataclasses
import functools

import catboost
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xgboost
from models import make_data, train
from oracles import soft_trees, tree_shap
from sklearn.ensemble import GradientBoostingRegressor

import jaximp

H, RTOL = 1e-5, 1e-6


@pytest.fixture(autouse=True, scope="module")
def float64():
    """Float64 throughout this module, the flag restored afterwards."""
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", previous)


def to64(ens):
    """``ens`` with every float array in float64 (structure and sizes unchanged)."""
    return jax.tree_util.tree_map(
        lambda a: jnp.asarray(a, jnp.float64) if jnp.issubdtype(jnp.asarray(a).dtype, jnp.floating) else a, ens)


@functools.cache
def model(name):
    """``(ens float64, data dict(X, y, background, sample_weight))`` of a small model."""
    if name == "oblivious":  # CatBoost, 10 trees of depth 3
        cb, X, y, _ = train("regression", depth=3, iterations=10)
        ens = jaximp.from_catboost(cb)
    elif name == "oblivious-multiclass":
        cb, X, y, _ = train("multiclass", depth=3, iterations=6)
        ens = jaximp.from_catboost(cb)
    elif name == "trees":  # scikit-learn gradient boosting, 10 trees of depth 3
        X, y = make_data("regression", n=400)
        ens = jaximp.from_sklearn(GradientBoostingRegressor(n_estimators=10, max_depth=3, random_state=0).fit(X, y))
    elif name == "trees-binary":  # XGBoost, Logloss, 8 trees of depth 3 (NaN included)
        X, y = make_data("binary", n=400, nan_fraction=0.05)
        ens = jaximp.from_xgboost(xgboost.XGBClassifier(n_estimators=8, max_depth=3, n_jobs=1).fit(X, y))
    else:
        raise ValueError(name)
    rng = np.random.default_rng(1)
    data = dict(X=X[:32], y=np.asarray(y[:32]), background=X[200:224],
                sample_weight=rng.uniform(0.5, 2.0, 32))
    return to64(ens), data


BG = "background"
CASES = {  # name: (function of (ens, data) -> array, what it is differentiable in beyond leaf_values)
    "predict": (lambda e, d: jaximp.predict(e, d["X"]), ("scale", "bias")),
    "prediction_values_change": (lambda e, d: jaximp.prediction_values_change(e), ("leaf_weights",)),
    "prediction_values_change_X": (lambda e, d: jaximp.prediction_values_change(
        e, d["X"], sample_weight=d["sample_weight"]), ("sample_weight",)),
    "interaction": (lambda e, d: jaximp.interaction(e), ()),
    "shap_path_dependent": (lambda e, d: jaximp.shap_values(e, d["X"]), ("leaf_weights", "scale")),
    "shap_exact": (lambda e, d: jaximp.shap_values(e, d["X"], method="exact"), ("leaf_weights",)),
    "shap_approximate": (lambda e, d: jaximp.shap_values(e, d["X"], method="approximate"), ("leaf_weights",)),
    "shap_interventional": (lambda e, d: jaximp.shap_values(e, d["X"], method="interventional", background=d[BG]),
                            ("scale",)),
    "expected_value": (lambda e, d: jaximp.expected_value(e), ("leaf_weights", "bias")),
    "expected_value_interventional": (lambda e, d: jaximp.expected_value(
        e, method="interventional", background=d[BG]), ("bias",)),
    "shap_interaction_values": (lambda e, d: jaximp.shap_interaction_values(e, d["X"]), ("leaf_weights",)),
    "shap_importance": (lambda e, d: jaximp.shap_importance(e, d["X"]), ("leaf_weights",)),
    "shap_importance_interventional": (lambda e, d: jaximp.shap_importance(
        e, d["X"], method="interventional", background=d[BG]), ()),
    "shap_interaction_importance": (lambda e, d: jaximp.shap_interaction_importance(e, d["X"]), ("leaf_weights",)),
    "loss_function_change": (lambda e, d: jaximp.loss_function_change(
        e, d["X"], d["y"], sample_weight=d["sample_weight"]), ("leaf_weights", "sample_weight", "y")),
}
ENSEMBLE_FIELDS = ("leaf_values", "leaf_weights", "scale", "bias")
slow = pytest.mark.slow
FAST = {  # the default run: each kind of kernel once per ensemble type; the rest run with -m slow
    "oblivious": ("predict", "prediction_values_change", "interaction", "shap_path_dependent", "shap_exact",
                  "shap_interventional", "shap_importance", "loss_function_change"),
    "trees": ("interaction", "shap_path_dependent", "shap_interventional", "expected_value_interventional",
              "loss_function_change"),
}


def grid(names_cases):
    return [pytest.param(n, c, id=f"{n}-{c}", marks=() if c in FAST.get(n, ()) else slow) for n, c in names_cases]


GRID = grid([("oblivious", case) for case in CASES]
            + [("trees", case) for case in CASES if case != "shap_exact"]
            + [("oblivious-multiclass", case) for case in ("interaction", "shap_path_dependent",
                                                           "loss_function_change")]
            + [("trees-binary", case) for case in ("shap_path_dependent", "shap_interventional",
                                                   "loss_function_change")])


def inputs(name, case):
    """``(f(params) -> f64[], params)``: a random projection of the case's result as a function
    of the inputs it is differentiable in (a dict: ensemble fields and data)."""
    ens, data = model(name)
    fn, extra = CASES[case]
    names = ("leaf_values",) + extra
    if name != "oblivious" and name != "trees":  # a classifier's targets are labels
        names = tuple(n for n in names if n != "y")
    params = {n: jnp.asarray(getattr(ens, n) if n in ENSEMBLE_FIELDS else data[n], jnp.float64) for n in names}
    shape = jax.eval_shape(fn, ens, data).shape
    r = jnp.asarray(np.random.default_rng(7).normal(size=shape))

    def f(p):
        e = dataclasses.replace(ens, **{n: v for n, v in p.items() if n in ENSEMBLE_FIELDS})
        d = {**data, **{n: v for n, v in p.items() if n not in ENSEMBLE_FIELDS}}
        return jnp.sum(r * fn(e, d))

    return f, params


def direction(params, seed):
    """A random direction; leaf weights move only where they are positive (covers of 0 are a kink)."""
    rng = np.random.default_rng(seed)
    u = {n: rng.normal(size=np.shape(v)) for n, v in params.items()}
    if "leaf_weights" in u:
        u["leaf_weights"] = u["leaf_weights"] * (np.asarray(params["leaf_weights"]) > 0)
    return u


@pytest.mark.parametrize("name,case", GRID)
def test_gradient_matches_finite_differences(name, case):
    """``<grad f, u> == (f(p + h u) - f(p - h u)) / 2h`` along random directions ``u``."""
    f, params = inputs(name, case)
    value_and_grad = jax.jit(jax.value_and_grad(f))  # one program: the differences reuse it
    _, grad = value_and_grad(params)
    assert all(g.dtype == jnp.float64 for g in grad.values())
    assert float(sum(jnp.sum(jnp.abs(g)) for g in grad.values())) > 0  # not a constant
    for seed in (0, 1):
        u = direction(params, seed)
        step = lambda s: {n: v + s * H * u[n] for n, v in params.items()}  # noqa: E731
        fd = (float(value_and_grad(step(1.0))[0]) - float(value_and_grad(step(-1.0))[0])) / (2 * H)
        dot = sum(float(jnp.sum(grad[n] * u[n])) for n in params)
        scale = sum(float(jnp.sum(jnp.abs(grad[n] * u[n]))) for n in params)
        np.testing.assert_allclose(dot, fd, rtol=RTOL, atol=RTOL * scale)


JIT_GRID = [pytest.param("trees", "interaction", id="trees-interaction")] + [
    pytest.param(n, c, id=f"{n}-{c}", marks=slow) for n, c in (
        ("oblivious", "shap_importance"), ("oblivious", "loss_function_change"), ("trees", "shap_path_dependent"),
        ("trees", "loss_function_change"))]


@pytest.mark.parametrize("name,case", JIT_GRID)
def test_jit_of_grad_equals_grad(name, case):
    f, params = inputs(name, case)
    eager, jitted = jax.grad(f)(params), jax.jit(jax.grad(f))(params)
    for n in params:
        np.testing.assert_allclose(jitted[n], eager[n], rtol=1e-10, atol=1e-12 * float(jnp.abs(eager[n]).max()))


def perturbed(ens, n_copies, seed=0):
    """``n_copies`` ensembles with noisy leaf values and weights, and their stack (leading axis)."""
    rng = np.random.default_rng(seed)
    copies = [dataclasses.replace(ens, leaf_values=ens.leaf_values * (1 + 0.1 * rng.normal(size=ens.leaf_values.shape)),
                                  leaf_weights=ens.leaf_weights * rng.uniform(0.5, 1.5, ens.leaf_weights.shape))
              for _ in range(n_copies)]
    return copies, jax.tree_util.tree_map(lambda *a: jnp.stack(a), *copies)


VMAP_FAST = {"oblivious": ("shap_importance",), "trees": ("interaction",)}
VMAP_GRID = [pytest.param(n, c, id=f"{n}-{c}", marks=() if c in VMAP_FAST[n] else slow)
             for n in ("oblivious", "trees") for c in CASES if (n, c) != ("trees", "shap_exact")]


@pytest.mark.parametrize("name,case", VMAP_GRID)
def test_vmap_over_ensembles_equals_loop(name, case):
    ens, data = model(name)
    fn, _ = CASES[case]
    copies, batch = perturbed(ens, 3)
    batched = jax.jit(jax.vmap(lambda e: fn(e, data)))(batch)  # the whole pytree batched, structure included
    looped = np.stack([np.asarray(fn(e, data), np.float64) for e in copies])
    magnitude = float(np.abs(looped).max())
    np.testing.assert_allclose(np.asarray(batched), looped, rtol=1e-5, atol=1e-5 * magnitude)


@pytest.mark.parametrize("name", [pytest.param("oblivious", marks=slow), pytest.param("trees", marks=slow)])
def test_jacrev_of_shap_values(name):
    ens, data = model(name)
    values = lambda v: jaximp.shap_values(dataclasses.replace(ens, leaf_values=v), data["X"])  # noqa: E731
    jac = jax.jacrev(values)(ens.leaf_values)  # [N, F, T, L, K]
    u = np.random.default_rng(3).normal(size=ens.leaf_values.shape)
    jv = jax.jit(values)
    fd = (jv(ens.leaf_values + H * u) - jv(ens.leaf_values - H * u)) / (2 * H)
    np.testing.assert_allclose(np.tensordot(jac, u, axes=3), fd, rtol=RTOL, atol=RTOL * float(np.abs(fd).max()))


@pytest.mark.parametrize("name", ["oblivious", pytest.param("trees", marks=slow)])
def test_traced_rows_and_background(name):
    """Rows, background, targets and weights passed as jit arguments stay in JAX."""
    ens, d = model(name)
    X, bg = jnp.asarray(d["X"]), jnp.asarray(d["background"])
    run = jax.jit(lambda x, b: jaximp.shap_values(ens, x, method="interventional", background=b))
    np.testing.assert_allclose(run(X, bg), jaximp.shap_values(ens, d["X"], method="interventional",
                                                              background=d["background"]), rtol=1e-5, atol=1e-6)
    lfc = jax.jit(lambda x, y, w: jaximp.loss_function_change(ens, x, y, sample_weight=w))
    np.testing.assert_allclose(lfc(X, jnp.asarray(d["y"]), jnp.asarray(d["sample_weight"])),
                               jaximp.loss_function_change(ens, d["X"], d["y"], sample_weight=d["sample_weight"]),
                               rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", ["oblivious", "trees"])
def test_a_traced_call_leaves_nothing_traced_behind(name):
    """SHAP values of rows traced by jax.jit, then of the same rows in memory, then traced again:
    the plan or tables a model keeps for its next call are never the jit's tracers."""
    ens, d = model(name)
    run = jax.jit(lambda x: jaximp.shap_values(ens, x))
    traced = run(jnp.asarray(d["X"]))
    plain = jaximp.shap_values(ens, d["X"])
    np.testing.assert_allclose(traced, plain, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run(jnp.asarray(d["X"]) + 0.0), plain, rtol=1e-5, atol=1e-6)


def test_interaction_of_traced_structure_equals_concrete():
    """A TreeEnsemble's Interaction read from a traced structure (jit over the whole ensemble)
    equals the host-side reading, for both output reductions."""
    ens, _ = model("trees")
    for reduction in ("sum", "abs"):
        traced = jax.jit(lambda e: jaximp.interaction(e, output_reduction=reduction))(ens)
        np.testing.assert_allclose(traced, jaximp.interaction(ens, output_reduction=reduction), rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------------------------
# The soft model


def fresh_rows(ens, n=24, seed=5, nan=False):
    X = np.random.default_rng(seed).normal(size=(n, ens.n_features))
    if nan:
        X[:: 5, 1] = np.nan
    return X


def border_gap(ens, X):
    """The smallest distance between a row's value and a border of a split on that feature."""
    if isinstance(ens, jaximp.ObliviousEnsemble):
        features, borders = np.asarray(ens.split_features), np.asarray(ens.split_borders)
    else:
        features, borders = np.asarray(ens.node_features), np.asarray(ens.node_borders)
    finite = np.isfinite(borders)
    gaps = np.abs(X[:, features[finite]] - borders[finite][None, :])
    return float(np.nanmin(gaps))


@pytest.mark.parametrize("name", ["oblivious", "trees", pytest.param("trees-binary", marks=slow)])
def test_soft_predict_converges_to_predict(name):
    ens, _ = model(name)
    X = fresh_rows(ens, nan=True)
    hard = np.asarray(jaximp.predict(ens, X), np.float64)
    errors = [float(np.abs(np.asarray(jaximp.soft_predict(ens, X, t)) - hard).max()) for t in (1.0, 0.1, 0.01)]
    assert errors[0] > errors[2] and errors[0] > 1e-3  # a real relaxation, tighter as t falls
    limit = border_gap(ens, X) / 60  # sigmoid(60) = 1 - 9e-27: every split is hard
    np.testing.assert_allclose(jaximp.soft_predict(ens, X, limit), hard, rtol=1e-6, atol=1e-6)
    probs = np.asarray(jaximp.soft_leaf_probabilities(ens, X, limit))
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-12)
    if name == "oblivious":  # CatBoost's leaf numbering
        np.testing.assert_array_equal(probs.argmax(-1), jaximp.leaf_indices(ens, X))
    np.testing.assert_allclose(jaximp.soft_shap_values(ens, X, limit), jaximp.shap_values(ens, X),
                               rtol=1e-5, atol=1e-6)


SOFT_FUNCTIONS = {
    "soft_predict": lambda e, x, t: jaximp.soft_predict(e, x, t),
    "soft_leaf_probabilities": lambda e, x, t: jaximp.soft_leaf_probabilities(e, x, t)[:, :, 0],
    "soft_shap_values": lambda e, x, t: jaximp.soft_shap_values(e, x, t),
}
SOFT_FAST = (("oblivious", "soft_predict"), ("trees", "soft_shap_values"))


@pytest.mark.parametrize("name,function", [
    pytest.param(n, fn, id=f"{n}-{fn}", marks=() if (n, fn) in SOFT_FAST else slow)
    for n in ("oblivious", "trees") for fn in SOFT_FUNCTIONS])
def test_soft_gradients_match_finite_differences(name, function):
    """In the rows, the borders, the temperature and the leaf values, at a moderate temperature."""
    ens, _ = model(name)
    border = "split_borders" if name == "oblivious" else "node_borders"
    params = dict(X=jnp.asarray(fresh_rows(ens, nan=True)), temperature=jnp.asarray(0.5),
                  leaf_values=ens.leaf_values, borders=getattr(ens, border))
    fn = SOFT_FUNCTIONS[function]

    def f(p):
        e = dataclasses.replace(ens, leaf_values=p["leaf_values"], **{border: p["borders"]})
        out = fn(e, p["X"], p["temperature"])
        return jnp.sum(jnp.asarray(np.random.default_rng(2).normal(size=out.shape)) * out)

    value_and_grad = jax.jit(jax.value_and_grad(f))
    _, grad = value_and_grad(params)
    assert np.isfinite(np.asarray(grad["X"])).all() and float(jnp.abs(grad["X"]).sum()) > 0
    finite = {n: np.isfinite(np.asarray(v)) for n, v in params.items()}
    safe = {n: jnp.where(finite[n], v, 0.0) for n, v in params.items()}  # NaN rows, +inf padding: fixed
    g = {n: jnp.where(finite[n], grad[n], 0.0) for n in params}
    for seed in (0, 1):
        u = {n: np.random.default_rng(seed).normal(size=np.shape(v)) * finite[n] for n, v in params.items()}
        plus = {n: jnp.where(finite[n], safe[n] + H * u[n], params[n]) for n in params}
        minus = {n: jnp.where(finite[n], safe[n] - H * u[n], params[n]) for n in params}
        fd = (float(value_and_grad(plus)[0]) - float(value_and_grad(minus)[0])) / (2 * H)
        dot = sum(float(jnp.sum(g[n] * u[n])) for n in params)
        np.testing.assert_allclose(dot, fd, rtol=RTOL, atol=RTOL * sum(float(jnp.sum(jnp.abs(g[n] * u[n])))
                                                                       for n in params))


@pytest.mark.parametrize("name", ["oblivious", "trees", pytest.param("trees-binary", marks=slow)])
def test_soft_shap_equals_brute_force(name):
    ens, _ = model(name)
    X = jnp.asarray(fresh_rows(ens, n=3, nan=True))  # float64 rows stay float64 as JAX arrays
    n_trees = ens.n_trees  # the first 4 trees: enough, and the enumeration stays short
    ens = jax.tree_util.tree_map(lambda a: a[:4] if np.ndim(a) and np.shape(a)[0] == n_trees else a, ens)
    for temperature in (0.3, 2.0):
        got = np.asarray(jaximp.soft_shap_values(ens, X, temperature))
        if got.ndim == 2:
            got = got[..., None]
        expected = tree_shap(soft_trees(ens, temperature), np.asarray(X), ens.n_features)  # [N, F, K]
        for i in range(len(X)):
            np.testing.assert_allclose(got[i], expected[i], rtol=1e-9, atol=1e-12)
        additive = got.sum(1)[:, 0] + float(np.asarray(jaximp.expected_value(ens)).reshape(-1)[0])
        soft = np.asarray(jaximp.soft_predict(ens, X, temperature)).reshape(len(X), -1)[:, 0]
        np.testing.assert_allclose(additive, soft, rtol=1e-9, atol=1e-12)


@slow  # by default: vmap over ensembles (test_vmap_over_ensembles_equals_loop), jit of soft gradients (above)
def test_soft_vmap_jit():
    ens, _ = model("trees")
    X = jnp.asarray(fresh_rows(ens))
    copies, batch = perturbed(ens, 3)
    batched = jax.jit(jax.vmap(lambda e: jaximp.soft_shap_values(e, X, 0.2)))(batch)
    for got, e in zip(batched, copies):
        np.testing.assert_allclose(got, jaximp.soft_shap_values(e, X, 0.2), rtol=1e-10, atol=1e-12)
    grad_x = lambda x: jax.grad(lambda x: jaximp.soft_predict(ens, x, 0.2).sum())(x)  # noqa: E731
    np.testing.assert_allclose(jax.jit(grad_x)(X), grad_x(X), rtol=1e-10, atol=1e-12)


def test_soft_errors():
    ens, data = model("oblivious")
    for bad in (0.0, -1.0, np.inf, np.ones(ens.n_features + 1), np.ones((2, 2))):
        with pytest.raises(ValueError, match="soft_predict: temperature must be"):
            jaximp.soft_predict(ens, data["X"], bad)
    with pytest.raises(TypeError, match="soft_predict: ens must be"):
        jaximp.soft_predict("model", data["X"], 1.0)
    with pytest.raises(ValueError, match="soft_shap_values: X must have"):
        jaximp.soft_shap_values(ens, data["X"][:, :2], 1.0)
    X = np.array([["a", 1.0], ["b", 2.0], ["a", 3.0], ["c", 0.5]] * 10, dtype=object)
    cat = catboost.CatBoostRegressor(iterations=3, depth=2, verbose=0, cat_features=[0], thread_count=1)
    cat_ens = jaximp.from_catboost(cat.fit(X, np.arange(len(X), dtype=float)))
    with pytest.raises(ValueError, match="soft_leaf_probabilities: ens must have numeric features only"):
        jaximp.soft_leaf_probabilities(cat_ens, X, 1.0)
