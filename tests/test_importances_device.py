"""Permutation importance on the device: its draws, and targets and weights that stay there.

Oracles: the definition of a permutation and of a subset without replacement (every index once),
a chi-squared bound on where each index lands over many keys (a uniform permutation puts it in
each place equally often), the same call with targets and weights in host memory, and the
errors of the host checks.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from models import train, xgboost_model
from scipy import stats

import jaximp
from jaximp._importances.draws import as_key, permutation, row_draws


@pytest.mark.parametrize("n", [1, 2, 3, 17, 64, 1000, 4097])
def test_a_draw_is_a_permutation(n):
    p = np.asarray(jax.jit(permutation, static_argnums=1)(jax.random.key(n), n))
    np.testing.assert_array_equal(np.sort(p), np.arange(n))


def test_every_index_lands_in_every_place_equally_often():
    n, keys = 12, 24000
    draws = np.asarray(jax.vmap(lambda k: permutation(k, n))(jax.random.split(jax.random.key(3), keys)))
    counts = np.stack([np.bincount(draws[:, place], minlength=n) for place in range(n)])  # [place, index]
    chi2 = ((counts - keys / n) ** 2 / (keys / n)).sum()
    assert stats.chi2.sf(chi2, (n - 1) ** 2) > 1e-6, chi2
    pairs = np.bincount(draws[:, 0] * n + draws[:, 1], minlength=n * n).reshape(n, n)  # two places together
    off = ~np.eye(n, dtype=bool)
    expected = keys / (n * (n - 1))
    chi2 = ((pairs[off] - expected) ** 2 / expected).sum()
    assert np.all(pairs[~off] == 0) and stats.chi2.sf(chi2, n * (n - 1) - 1) > 1e-6, chi2


def test_row_draws_score_a_sorted_subset_and_permute_it():
    take, source = (np.asarray(a) for a in row_draws(as_key(5, "t"), 4, 1000, 300))
    assert take.shape == source.shape == (4, 300)
    for rows, src in zip(take, source):
        assert np.all(np.diff(rows) > 0) and rows.min() >= 0 and rows.max() < 1000
        np.testing.assert_array_equal(np.sort(src), rows)
    assert len({tuple(rows) for rows in take}) == 4  # each repeat its own rows
    whole_take, whole_source = (np.asarray(a) for a in row_draws(as_key(5, "t"), 2, 50, 50))
    np.testing.assert_array_equal(whole_take, np.tile(np.arange(50), (2, 1)))
    assert not np.array_equal(whole_source[0], whole_source[1])


@pytest.fixture(scope="module")
def regression():
    f = xgboost_model("squarederror")
    X = np.asarray(f.X, np.float32)
    return f.ens, X, np.asarray(f.y, np.float32)


@pytest.mark.parametrize("scoring", [None, "r2", "neg_mean_absolute_error"])
def test_device_targets_and_weights_give_the_host_numbers(regression, scoring):
    ens, X, y = regression
    w = np.linspace(0.5, 2.0, len(y), dtype=np.float32)
    kw = dict(scoring=scoring, n_repeats=3, random_state=1, max_samples=0.7)
    host = jaximp.permutation_importance(ens, X, y, sample_weight=w, **kw)
    mixed = jaximp.permutation_importance(ens, X, jax.device_put(y), sample_weight=jax.device_put(w), **kw)
    device = jaximp.permutation_importance(ens, jax.device_put(X), jax.device_put(y),
                                           sample_weight=jax.device_put(w), **kw)
    np.testing.assert_array_equal(mixed.importances, host.importances)  # host rows: float64 scores
    assert isinstance(device.importances, jax.Array)
    scale = np.abs(host.importances).max()
    np.testing.assert_allclose(np.asarray(device.importances), host.importances, rtol=0, atol=1e-6 * scale)
    lfc = jaximp.loss_function_change(ens, jax.device_put(X), jax.device_put(y), sample_weight=jax.device_put(w))
    np.testing.assert_allclose(np.asarray(lfc), jaximp.loss_function_change(ens, X, y, sample_weight=w),
                               rtol=1e-6, atol=1e-7)


def test_device_class_labels_are_mapped_and_checked():
    model, X, y, _ = train("multiclass", depth=3, iterations=5)
    ens = jaximp.from_catboost(model)
    assert ens.class_names == (0, 1, 2)
    kw = dict(n_repeats=2, random_state=0)
    host = jaximp.permutation_importance(ens, X, y, **kw)
    on_device = jaximp.permutation_importance(ens, X, jax.device_put(np.asarray(y, np.float32)), **kw)
    np.testing.assert_array_equal(on_device.importances, host.importances)
    with pytest.raises(ValueError, match=r"y must hold the model's class labels \[0, 1, 2\]"):
        jaximp.permutation_importance(ens, X, jnp.full(len(y), 7.5, jnp.float32), **kw)
    renamed = dataclasses.replace(ens, class_names=("cat", "dog", "owl"))
    with pytest.raises(ValueError, match="are not numbers: pass y as a NumPy array"):
        jaximp.permutation_importance(renamed, X, jax.device_put(np.asarray(y, np.float32)), **kw)


@pytest.mark.parametrize("y_fn, w_fn, error, match", [
    (lambda y: y.at[3].set(jnp.nan), None, ValueError, "y must be finite; got 1 NaN/inf"),
    (lambda y: y[:-1], None, ValueError, r"y must have shape \(\d+,\)"),
    (lambda y: y > 0, lambda w: w.at[0].set(-1.0), ValueError, "sample_weight must be finite and non-negative"),
    (None, lambda w: jnp.zeros_like(w), ValueError, "not all 0"),
    (None, lambda w: w[:-2], ValueError, r"sample_weight must have shape"),
])
def test_bad_device_targets_and_weights_raise_the_host_errors(regression, y_fn, w_fn, error, match):
    ens, X, y = regression
    y_dev, w_dev = jax.device_put(y), jax.device_put(np.ones(len(y), np.float32))
    y_dev = y_fn(y_dev) if y_fn else y_dev
    w_dev = w_fn(w_dev) if w_fn else w_dev
    for call in (lambda: jaximp.permutation_importance(ens, X, y_dev, sample_weight=w_dev, n_repeats=2),
                 lambda: jaximp.loss_function_change(ens, X, y_dev, sample_weight=w_dev)):
        with pytest.raises(error, match=match):
            call()
