"""Rows in fixed-size blocks inside a kernel: padding to whole blocks, a function mapped over
blocks (rows first, or feature-major), and results written block after block row-last.

Every block runs the same compiled program: fewer rows than a block are zero-padded to one, so a
row's result never depends on how many rows came with it (``jaximp._rows.batching`` cuts the
rows of a call into steps of whole blocks).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._models.ensemble import namespace


def power_of_two_rows(a: Any) -> Array:
    """``a [N, ...]`` with its rows zero-padded to a power of two, on the device: a table of every
    row that a kernel gathers from, whose compiled shape then serves every N up to that power.
    Host rows are padded on the host and put on the device (no program to trace)."""
    size = 1 << max(0, a.shape[0] - 1).bit_length()
    if isinstance(a, np.ndarray):
        return jax.device_put(np.pad(a, ((0, size - a.shape[0]),) + ((0, 0),) * (a.ndim - 1)))
    return _padded_rows(a, size=size)


@functools.partial(jax.jit, static_argnames="size")
def _padded_rows(a: Array, *, size: int) -> Array:
    return jnp.pad(a, ((0, size - a.shape[0]),) + ((0, 0),) * (a.ndim - 1))


def whole_blocks(a: Array, block: int, axis: int = 0) -> Array:
    """``a`` with its rows (along ``axis``) zero-padded to a whole number of blocks, at least one
    (a NumPy array stays one)."""
    n = a.shape[axis]
    pad = [(0, 0)] * a.ndim
    pad[axis] = (0, max(1, -(-n // block)) * block - n)
    return namespace(a).pad(a, pad)


def row_blocks(a: Array, block: int) -> Array:
    """``[n, ...] -> [ceil(n / block), block, ...]``, the last block zero-padded (at least one)."""
    a = whole_blocks(a, block)
    return a.reshape(-1, block, *a.shape[1:])


def map_blocks(row_fn: Callable, rows: Any, block: int) -> Any:
    """``row_fn`` over the leading axis of ``rows`` in blocks of ``block`` rows (``lax.map``).

    ``row_fn`` takes and returns arrays with a leading block axis. Every block runs the same
    program: fewer rows than a block are zero-padded to one (so a row's result never depends on
    how many rows came with it), and a row count that is not a multiple of ``block`` (never
    under ``jaximp._rows.batching.map_rows``, whose steps hold whole blocks or, below one block, at least
    ``block``-padded ones) ends in a smaller block.
    """
    n = jax.tree_util.tree_leaves(rows)[0].shape[0]
    if n < block:
        padded = jax.tree_util.tree_map(lambda a: jnp.pad(a, [(0, block - n)] + [(0, 0)] * (a.ndim - 1)), rows)
        return jax.tree_util.tree_map(lambda a: a[:n], row_fn(padded))
    n_blocks, rest = divmod(n, block)
    head = jax.tree_util.tree_map(lambda a: a[: n_blocks * block].reshape(n_blocks, block, *a.shape[1:]), rows)
    out = jax.lax.map(row_fn, head)
    out = jax.tree_util.tree_map(lambda a: a.reshape(n_blocks * block, *a.shape[2:]), out)
    if rest:
        tail = row_fn(jax.tree_util.tree_map(lambda a: a[n_blocks * block :], rows))
        out = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b]), out, tail)
    return out


def map_feature_blocks(fn: Callable, x: Array, block: int, features_first: bool = False) -> Any:
    """``fn`` over blocks of ``block`` rows of ``x``, each handed to it feature-major.

    Args:
        fn: ``fn(xt [E, block])`` -> a pytree with leading axis ``block``.
        x: ``[n, E]`` rows (each block transposed), or ``[E, n]`` with ``features_first``
            (each block a slice: no transpose; see ``jaximp._rows.batching.features_first``).
        block: rows per block; rows are zero-padded to whole blocks (as by :func:`map_blocks`).

    Returns:
        ``fn``'s results for the ``n`` rows, leading axis ``n``.
    """
    if not features_first:
        return map_blocks(lambda xb: fn(xb.T), x, block)
    n = x.shape[1]
    xt = whole_blocks(x, block, axis=1)
    n_blocks = xt.shape[1] // block
    out = jax.lax.map(lambda b: fn(jax.lax.dynamic_slice_in_dim(xt, b * block, block, axis=1)),
                      jnp.arange(n_blocks, dtype=jnp.int32))
    return jax.tree_util.tree_map(lambda a: a.reshape(n_blocks * block, *a.shape[2:])[:n], out)


def fill_blocks(block_fn: Callable, n: int, block: int) -> Array:
    """``[..., n]``: ``block_fn(start) -> [..., block]``, the result of rows ``start`` to
    ``start + block`` with rows on its last axis, written block after block into one array.

    A loop of in-place updates, for results that are wanted row-last (tree-major leaf tables):
    XLA's CPU transposes run far below memory speed, and stacking blocks then moving the block
    axis is one. The inputs ``block_fn`` reads must hold whole blocks (:func:`row_blocks`).
    """
    n_blocks = max(1, -(-n // block))
    shape = jax.eval_shape(block_fn, jax.ShapeDtypeStruct((), jnp.int32))
    first = jnp.zeros((*shape.shape[:-1], n_blocks * block), shape.dtype)

    def write(b, out):
        start = b * block
        return jax.lax.dynamic_update_slice_in_dim(out, block_fn(start), start, axis=out.ndim - 1)

    return jax.lax.fori_loop(0, n_blocks, write, first)[..., :n]
