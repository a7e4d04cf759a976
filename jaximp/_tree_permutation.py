"""Permuted predictions of :class:`TreeEnsemble` models, for ``jaximp.permutation_importance``.

sklearn's definition (``sklearn.inspection.permutation_importance``): the score of the rows with
a group of columns taken from other rows. Here the rows stay on the device as one table; a step
receives, per row, its own index and the indices of the rows its group values come from in
each repeat, gathers both, mixes them per group (a ``where`` over the group's columns) and
predicts the mixed rows with the trees' descent (``jaximp._tree_leaves``): ``G R`` predictions
per row, ``O(G R T D)``. The baseline is predicted by the same program (an all-False group), so
a group that no tree reads changes no bit of the prediction and scores exactly 0.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._batching import map_blocks, map_rows
from jaximp._tree_leaves import leaf_outputs, leaves_of
from jaximp._tree_model import TreeEnsemble


def _inner_block(block: int, repeats: int) -> int:
    """Rows per fused block: ``block`` halved until its ``block * repeats`` mixed rows fit in
    ``block`` (a divisor of ``block``, so that every row runs the same program)."""
    rows = block
    while rows > 1 and rows % 2 == 0 and rows * repeats > block:
        rows //= 2
    return rows


def _permuted_kernel(params: tuple[TreeEnsemble, Array, Array], rows: tuple[Array, Array], *,
                     block: int) -> tuple[Array, Array]:
    """Raw and permuted predictions of a step of rows.

    Args:
        params: ``(ens, x f32[N', E] every row (padded), masks bool[G + 1, E])``; ``masks[0]``
            is all False (the baseline), ``masks[1 + g]`` marks group ``g``'s columns.
        rows: ``(own i32[n], source i32[n, R])``: each row's index in ``x`` and, per repeat, the
            index of the row whose group values it receives.
        block: rows per fused block.

    Returns:
        ``(raw f32[n, K], permuted f32[n, R, G, K])``.
    """
    ens, x, masks = params
    own, source = rows
    repeats = source.shape[1]

    def block_fn(args):
        o, s = args
        mine, theirs = x[o], x[s]  # [b, E], [b, R, E]: gathers on the device

        def one_group(mask):  # bool[E] -> f32[b, R, K]
            mixed = jnp.where(mask, theirs, mine[:, None, :]).reshape(-1, x.shape[1])
            return leaf_outputs(ens, leaves_of(ens, mixed)).reshape(o.shape[0], repeats, -1)

        out = jax.lax.map(one_group, masks)  # [G + 1, b, R, K]
        return out[0, :, 0], jnp.transpose(out[1:], (1, 2, 0, 3))

    return map_blocks(block_fn, (own, source), _inner_block(block, repeats))


def _padded_rows(x: Any) -> Array:
    """``x f32[N, E]`` on the device, its rows zero-padded to a power of two (a new N reuses the
    compiled step for the next power of two)."""
    n = x.shape[0]
    size = 1 << max(0, n - 1).bit_length()
    return jnp.pad(jnp.asarray(x, jnp.float32), ((0, size - n), (0, 0)))


def tree_permuted_predictions(ens: TreeEnsemble, x: Any, groups: list[np.ndarray], own: np.ndarray,
                              source: np.ndarray, *, batch_size: int | None, devices: Any,
                              fn_name: str) -> tuple[np.ndarray, np.ndarray]:
    """Predictions of rows with each group's columns taken from other rows.

    Args:
        ens: the model.
        x: ``f32[N, E]`` checked rows (``u8`` bins of the evaluated features with a featurizer).
        groups: G arrays of evaluated feature indices, permuted together (with a featurizer, the
            evaluated features that read only the group's columns:
            ``jaximp._permutation_groups.evaluated_groups``).
        own: ``i[M]`` the rows scored.
        source: ``i[M, R]`` per scored row and repeat, the row its group values come from.
        batch_size: rows per device step; None picks one.
        devices: None, an int or a list of ``jax.Device``.
        fn_name: the public function, for messages.

    Returns:
        ``(raw f32[M, K], permuted f32[M, R, G, K])`` as NumPy arrays, the layout of
        ``jaximp._permutation._score_runner``.
    """
    masks = np.zeros((len(groups) + 1, ens.n_evaluated), bool)
    for g, columns in enumerate(groups):
        masks[g + 1, np.asarray(columns, np.int64)] = True
    params = (ens, _padded_rows(x), jnp.asarray(masks))
    rows = (np.asarray(own, np.int32), np.asarray(source, np.int32))
    return map_rows(_permuted_kernel, params, rows, batch_size=batch_size, devices=devices, fn_name=fn_name)
