"""Index values over a model's subsets as dense arrays over its players: values of single players
where the values are (NumPy on the host, jitted on a device: static subsets, so nothing is sent
from the host), and shap's layout of pairs, in the kernel of each step of rows."""

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


def pair_layout(subsets: tuple) -> tuple[np.ndarray, ...]:
    """Where :func:`shap_layout` puts the values of ``subsets`` (M tuples of one or two players):
    ``i32`` arrays ``(rows_i, rows_j, pair_at, diagonal, single_at)``, each pair ``(i, j)`` at
    ``[i, j]`` and ``[j, i]`` from its value ``pair_at``, each single player ``diagonal`` from
    ``single_at``."""
    singles = [(m, s[0]) for m, s in enumerate(subsets) if len(s) == 1]
    pairs = [(m, s) for m, s in enumerate(subsets) if len(s) == 2]
    rows_i = [s[0] for _, s in pairs] + [s[1] for _, s in pairs]
    rows_j = [s[1] for _, s in pairs] + [s[0] for _, s in pairs]
    layout = (rows_i, rows_j, [m for m, _ in pairs] * 2, [i for _, i in singles], [m for m, _ in singles])
    return tuple(np.array(a, np.int32) for a in layout)


def shap_layout(values: Array, layout: tuple[Array, ...], f: int) -> Array:
    """shap's layout of SII of order 2 ``values f32[n, M(, K)]`` over the subsets of ``layout``
    (:func:`pair_layout`): ``f32[n, F, F(, K)]`` with half of each pair's SII at ``[i, j]`` and
    ``[j, i]`` and on the diagonal the main effect, the Shapley value less the row's other
    entries (Lundberg et al. 2020, eq. 11-12). Traced in the kernel of each step of rows, so that
    no call holds more than a step's values over the subsets."""
    rows_i, rows_j, pair_at, diagonal, single_at = layout
    out = jnp.zeros((values.shape[0], f, f) + values.shape[2:], values.dtype)
    if pair_at.shape[0]:
        out = out.at[:, rows_i, rows_j].set(0.5 * values[:, pair_at])
    main = values[:, single_at] - jnp.sum(out, axis=2)[:, diagonal]  # the diagonal is still 0
    return out.at[:, diagonal, diagonal].set(main)
