"""The model cache: what is built from a model (SHAP tables, host structure, plans) is kept in one
cache keyed by the model, within a byte budget, least recently used first out.

Oracles: the cache's own counts (a call that finds its value kept builds nothing), the identity
of the kept arrays, and the values of a call that built everything again (exactly equal: a kept
value is the one a build gives). The byte counts are the arrays' ``nbytes``.
"""

from __future__ import annotations

import gc

import jax
import jax.numpy as jnp
import lightgbm as lgb
import numpy as np
import pytest
from models import lightgbm_deep, lightgbm_params, lightgbm_rows

import jaximp
from jaximp._models.cache import (
    DEFAULT_BUDGET,
    ModelCache,
    clear_cache,
    model_cache,
    set_cache_budget,
    value_bytes,
)

slow = pytest.mark.slow
OLD_BOUND = 1 << 27  # the largest value a model kept before the one cache (128 MiB)


class _Model:
    """A stand-in for a model: any object that takes weak references."""


def _plans(ens) -> dict:
    """``{how: plan}`` kept for ``ens``: the kernels' plans, not its host structure."""
    return {how: v for how, v in model_cache().entries(ens).items() if isinstance(how, tuple) and how[0][0] == "plan"}


@pytest.fixture
def budget():
    """Set the model cache's budget within a test; the default comes back after it."""
    previous = model_cache().info().budget
    yield set_cache_budget
    set_cache_budget(previous)


def _deep(rounds: int):
    """A fresh import of LightGBM trees of 255 leaves and no depth limit (deeper than 20): no other
    test has explained this model object."""
    fitted = lightgbm_deep()
    if rounds == 3:
        return jaximp.from_lightgbm(fitted.model), lightgbm_rows(fitted.model, fitted.X, 8)[:8]
    booster = lgb.train(lightgbm_params("regression", num_leaves=255, max_depth=-1, min_data_in_leaf=1,
                                        min_sum_hessian_in_leaf=0.0), lgb.Dataset(fitted.X, fitted.y),
                        num_boost_round=rounds)
    return jaximp.from_lightgbm(booster), fitted.X[:8]


def _second_call_builds_nothing(ens, x) -> dict:
    """Explain ``x`` twice: the second call finds the interaction plan and builds nothing; its
    values are the first call's, bit for bit. Returns the plans kept."""
    first = jaximp.shap_interaction_values(ens, x)
    plans = _plans(ens)
    assert len(plans) == 1
    before = model_cache().info()
    again = jaximp.shap_interaction_values(ens, x)
    after = model_cache().info()
    assert after.builds == before.builds and after.hits > before.hits
    assert all(_plans(ens)[how] is plan for how, plan in plans.items())
    np.testing.assert_array_equal(again, first)
    return plans


def test_the_interaction_plan_of_deep_trees_is_kept():
    """The plan of the interaction kernel on trees deeper than 20 is built once per model."""
    ens, x = _deep(3)
    assert ens.depth > 20
    _second_call_builds_nothing(ens, x)


@slow
def test_an_interaction_plan_over_128_mib_is_kept():
    """A plan larger than the bound a model's value once had (141 MiB for 10 such trees) is kept by
    the default budget, and a call that rebuilds it (after clearing) gives the same values."""
    ens, x = _deep(10)
    plans = _second_call_builds_nothing(ens, x)
    assert OLD_BOUND < value_bytes(next(iter(plans.values()))) <= DEFAULT_BUDGET
    kept = jaximp.shap_interaction_values(ens, x)
    clear_cache()
    np.testing.assert_array_equal(jaximp.shap_interaction_values(ens, x), kept)


def test_a_model_keeps_a_value_per_how():
    """The plans of SHAP values and of interactions are both kept, not only the last one built."""
    ens, x = _deep(3)
    jaximp.shap_values(ens, x)
    jaximp.shap_interaction_values(ens, x)
    plans = _plans(ens)
    assert sorted(how[0][1] for how in plans) == ["pairs", "path"]
    before = model_cache().info().builds
    jaximp.shap_values(ens, x)
    assert model_cache().info().builds == before and _plans(ens) == plans


def test_the_byte_bound_evicts_the_least_recently_used():
    """Keeping a value over the budget evicts the least recently used entries (a hit makes an
    entry the most recent); a value alone over the budget, or not to keep, is built and not kept;
    a lower budget evicts at once."""
    cache = ModelCache(budget=100)
    a, b = _Model(), _Model()

    def build(n):
        return lambda: {"table": np.zeros(n, np.float32)}

    first = cache.get(a, "x", build(10))  # 40 bytes
    cache.get(a, "y", build(10))
    cache.get(b, "x", build(5))  # 20 bytes: 100 in all
    assert cache.info().nbytes == 100 and cache.info().entries == 3
    assert cache.get(a, "x", build(10)) is first  # a's "x" now the most recently used
    cache.get(b, "y", build(10))  # 140 > 100: a's "y", the least recently used, goes
    assert set(cache.entries(a)) == {"x"} and set(cache.entries(b)) == {"x", "y"}
    assert cache.info().nbytes == 100
    cache.get(b, "z", build(26))  # 104 bytes alone: built, never kept
    assert "z" not in cache.entries(b) and cache.info().nbytes == 100
    assert cache.set_budget(60) == 100  # evicted down to it now
    assert cache.info().nbytes <= 60 and set(cache.entries(b)) == {"y"} and cache.entries(a) == {}
    cache.get(a, "x", build(1), keep=False)
    assert cache.entries(a) == {}
    assert cache.info().builds == 6 and cache.info().hits == 1


def test_the_budget_bounds_the_models_values(budget):
    """With a budget below a model's plan, its host structure is kept and its plan is not: the
    total stays within the budget, and the values are those of the default budget."""
    ens, x = _deep(3)
    expected = jaximp.shap_interaction_values(ens, x)
    plan = value_bytes(next(iter(_plans(ens).values())))
    budget(plan - 1)
    assert _plans(ens) == {} and model_cache().info().nbytes <= plan - 1
    other, _ = _deep(3)
    np.testing.assert_array_equal(jaximp.shap_interaction_values(other, x), expected)
    assert _plans(other) == {} and model_cache().entries(other) != {}
    assert model_cache().info().nbytes <= plan - 1
    with pytest.raises(ValueError, match="budget must be an int >= 0"):
        set_cache_budget(-1)


def test_a_collected_model_frees_its_entries():
    """A model that is garbage-collected takes its entries and their bytes with it."""
    ens, x = _deep(3)
    jaximp.shap_interaction_values(ens, x)
    kept = model_cache().entries(ens)
    before = model_cache().info()
    assert kept
    freed = sum(value_bytes(v) for v in kept.values())
    n_kept = len(kept)  # its structure and its plan
    del ens, kept
    gc.collect()
    after = model_cache().info()
    assert after.entries == before.entries - n_kept and after.nbytes == before.nbytes - freed

    cache, model = ModelCache(), _Model()
    cache.get(model, "x", lambda: np.zeros(4))
    del model
    gc.collect()
    assert cache.info().entries == 0 and cache.info().nbytes == 0


def test_values_built_under_jit_are_not_kept():
    """A value holding a tracer (built inside a caller's jax.jit) dies with the trace: never kept.
    The rows traced, the model's plan is built into the caller's program and not kept either."""
    cache, model = ModelCache(), _Model()
    jax.jit(lambda v: cache.get(model, "x", lambda: {"table": v}))(jnp.zeros(4))
    assert cache.entries(model) == {} and cache.info().builds == 1

    ens, x = _deep(3)
    traced = jax.jit(lambda rows: jaximp.shap_values(ens, rows))(jnp.asarray(x))
    assert _plans(ens) == {}
    # the traced plan is built by its JAX program, the eager one in NumPy: float32 sums may round apart
    np.testing.assert_allclose(np.asarray(traced), jaximp.shap_values(ens, x), rtol=1e-5, atol=1e-5)
    assert len(_plans(ens)) == 1


def test_clearing_empties_the_cache():
    """After clearing nothing is kept; the next call builds again and gives the same values."""
    ens, x = _deep(3)
    first = jaximp.shap_interaction_values(ens, x)
    assert model_cache().entries(ens)
    clear_cache()
    assert model_cache().entries(ens) == {} and model_cache().info().entries == 0
    assert model_cache().info().nbytes == 0
    before = model_cache().info().builds
    np.testing.assert_array_equal(jaximp.shap_interaction_values(ens, x), first)
    assert model_cache().info().builds > before  # built again
