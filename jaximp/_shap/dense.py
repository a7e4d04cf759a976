"""Index values over a model's subsets as dense arrays over its players, where the values are:
NumPy on the host, jitted on a device (static subsets, so nothing is sent from the host)."""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array


def per_player(values: Any, players: tuple[int, ...], width: int, axis: int) -> Any:
    """Values of single players along ``axis`` (one per entry of ``players``) spread onto
    ``width`` players, 0 for the others, where the values are (on a device: jitted, so nothing
    is sent from the host)."""
    if isinstance(values, np.ndarray):
        shape = values.shape[:axis] + (width,) + values.shape[axis + 1:]
        out = np.zeros(shape, values.dtype)
        out[(slice(None),) * axis + (np.asarray(players, np.int32),)] = values
        return out
    return _spread(values, players=players, width=width, axis=axis)


@functools.partial(jax.jit, static_argnames=("players", "width", "axis"))
def _spread(values: Array, *, players: tuple[int, ...], width: int, axis: int) -> Array:
    shape = values.shape[:axis] + (width,) + values.shape[axis + 1:]
    return jnp.zeros(shape, values.dtype).at[(slice(None),) * axis + (np.asarray(players, np.int32),)].set(values)


def shap_pairs(inter: Any) -> Any:
    """shap's layout of SII of order 2 over rows (``inter``, a ``jaximp.Interactions``):
    ``f32[N, F, F(, K)]`` with half of each pair's SII at ``[i, j]`` and ``[j, i]`` and on the
    diagonal the main effect, the Shapley value less the row's other entries (Lundberg et al.
    2020, eq. 11-12)."""
    f = len(inter.feature_names)
    if isinstance(inter.values, np.ndarray):
        return _pairs(inter.values, inter.subsets, f, np)
    return _device_pairs(inter.values, subsets=inter.subsets, f=f)


def _pairs(values: Any, subsets: tuple, f: int, xp: Any) -> Any:
    singles = [(m, s[0]) for m, s in enumerate(subsets) if len(s) == 1]
    pairs = [(m, s) for m, s in enumerate(subsets) if len(s) == 2]
    out = xp.zeros((values.shape[0], f, f) + values.shape[2:], values.dtype)
    rows_i = np.array([s[0] for _, s in pairs] + [s[1] for _, s in pairs], np.int32)
    rows_j = np.array([s[1] for _, s in pairs] + [s[0] for _, s in pairs], np.int32)
    half = 0.5 * values[:, np.array([m for m, _ in pairs] * 2, np.int32)] if pairs else None
    diagonal = np.array([i for _, i in singles], np.int32)
    phi = values[:, np.array([m for m, _ in singles], np.int32)]
    if xp is np:
        if pairs:
            out[:, rows_i, rows_j] = half
        out[:, diagonal, diagonal] = phi - out[:, diagonal].sum(axis=2)
        return out
    if pairs:
        out = out.at[:, rows_i, rows_j].set(half)
    return out.at[:, diagonal, diagonal].set(phi - out[:, diagonal].sum(axis=2))


@functools.partial(jax.jit, static_argnames=("subsets", "f"))
def _device_pairs(values: Array, *, subsets: tuple, f: int) -> Array:
    return _pairs(values, subsets, f, jnp)
