"""Sums of per-block sums on the device, in double-float precision.

A reduction over rows (``jaximp._rows.batching.sum_blocks``) gets from each step one sum per block
of rows, in the kernel's dtype (float32 unless ``jax_enable_x64``). The blocks are added one
after another in row order, each addition compensated (Knuth's TwoSum, TAOCP vol. 2, 4.2.2;
Ogita, Rump and Oishi, "Accurate sum and dot product", SIAM J. Sci. Comput. 2005): the running
total is an unevaluated pair ``hi + lo`` of the kernel's dtype whose error stays near that of a
sum in twice the precision. The pair stays on the device; only a caller that asks for NumPy
reads it back, as float64 (``hi`` and ``lo`` of float32 add exactly in float64).

A mean divides the pair by N on the device rounded once (the quotient, then its remainder
divided again, with Dekker's exact product), which gives the numbers the float64 sum divided by N
rounds to: a mean of rows on a device equals that of the same rows in host memory.

The additions run in the same order whatever the batch size or device count (blocks hold the
same rows), so the total is identical for any of them. XLA does not reassociate floating-point
additions (no fast-math by default), which the compensation relies on.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

Pair = tuple[Any, Any]  # (hi, lo): two pytrees shaped as one block's sums


def _two_sum(total: Pair, blocks: Any) -> tuple[Pair, None]:
    hi, lo = total
    leaves, tree = jax.tree_util.tree_flatten(blocks)
    out_hi, out_lo = [], []
    for h, low, block in zip(tree.flatten_up_to(hi), tree.flatten_up_to(lo), leaves):  # the outputs, not rows
        s = h + block
        back = s - h
        out_hi.append(s)
        out_lo.append(low + ((h - (s - back)) + (block - back)))  # low + exactly (h + block - s)
    return (tree.unflatten(out_hi), tree.unflatten(out_lo)), None


@jax.jit
def add_blocks(total: Pair | None, blocks: Any) -> Pair:
    """The pair ``total`` (None: zeros) plus each block of ``blocks`` (a pytree of
    ``[n_blocks, ...]`` arrays) in row order, as a compensated sum."""
    if total is None:
        zeros = jax.tree_util.tree_map(lambda b: jnp.zeros_like(b[0]), blocks)
        total = (zeros, zeros)
    return jax.lax.scan(_two_sum, total, blocks)[0]


def on_host(total: Pair) -> Any:
    """The sums, ``f64`` NumPy: ``hi + lo`` added in float64 (exact for float32 pairs), read back
    with one explicit transfer."""
    hi, lo = jax.device_get(total)
    return jax.tree_util.tree_map(lambda h, l: np.asarray(h, np.float64) + np.asarray(l, np.float64), hi, lo)


@jax.jit
def on_device(total: Pair) -> Any:
    """The sums on their device in the pairs' dtype: ``hi + lo`` rounded once."""
    return jax.tree_util.tree_map(jnp.add, *total)


def _two_product(a: Array, b: Array) -> tuple[Array, Array]:
    """``(p, e)`` with ``p = fl(a b)`` and ``p + e = a b`` exactly (Dekker's product, no FMA)."""
    split = np.asarray(2 ** ((jnp.finfo(a.dtype).nmant + 2) // 2) + 1, a.dtype)  # 4097 for float32

    def halves(x):
        c = split * x
        high = c - (c - x)
        return high, x - high

    p = a * b
    (a1, a2), (b1, b2) = halves(a), halves(b)
    return p, ((a1 * b1 - p) + a1 * b2 + a2 * b1) + a2 * b2


def _quotient(hi: Array, lo: Array, n: int) -> Array:
    """``(hi + lo) / n`` rounded once (to the pairs' dtype), as the host's float64 division of
    the float64 sum gives it: the quotient, then its remainder divided again."""
    n_hi = np.asarray(n, hi.dtype)
    n_lo = np.asarray(n - float(n_hi), hi.dtype)  # n past the dtype's integers: its rounding error
    q = hi / n_hi
    p, e = _two_product(q, jnp.broadcast_to(n_hi, q.shape))
    remainder = ((hi - p) - e + lo) - q * n_lo
    return q + remainder / n_hi


@jax.jit(static_argnames="n")
def mean_on_device(total: Pair, n: int) -> Any:
    """The sums divided by ``n`` on their device, in the pairs' dtype, rounded once: the numbers
    that the float64 sums of :func:`on_host` divided by ``n`` round to."""
    return jax.tree_util.tree_map(lambda h, low: _quotient(h, low, n), *total)
