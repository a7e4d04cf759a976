"""Permuted predictions of :class:`TreeEnsemble` models, for ``jaximp.permutation_importance``.

sklearn's definition (``sklearn.inspection.permutation_importance``): the score of the rows with
a group of columns taken from other rows. Here the rows stay on the device as one table; a step
receives, per row, its own index and the indices of the rows its group values come from in
each repeat, gathers both, mixes them per group (a ``where`` over the group's columns) and
predicts the mixed rows with the trees' descent (``jaximp._leaves.trees``): ``G R`` predictions
per row, ``O(G R T D)``. Trees read from quantized rows (leaf masks or heaps, see
``jaximp._leaves.trees.prepare``) mix the rows' bins, each row quantized once: a bin is a
function of its own column's value, so mixing bins is quantizing mixed rows. The baseline is
predicted by the same program (an all-False group), so a group that no tree reads changes no
bit of the prediction and scores exactly 0.

The kernel's arguments and results are those of every permuted-prediction kernel
(``jaximp._importances.permutation_kernel``).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from jaximp._importances.permutation_kernel import KernelSetup
from jaximp._importances.scoring import RowScore, block_sums
from jaximp._leaves import trees
from jaximp._leaves.tables import leaf_prediction
from jaximp._models.trees import TreeEnsemble
from jaximp._rows.blocks import map_blocks, power_of_two_rows, row_blocks
from jaximp._rows.tuning import Tuning


def _inner_block(block: int, repeats: int) -> int:
    """Rows per fused block: ``block`` halved until its ``block * repeats`` mixed rows fit in
    ``block`` (a divisor of ``block``, so that every row runs the same program)."""
    rows = block
    while rows > 1 and rows % 2 == 0 and rows * repeats > block:
        rows //= 2
    return rows


def _permuted_kernel(params: tuple[TreeEnsemble, trees.Layout, Array, Array], rows: tuple[Array, ...], *,
                     block: int, tuning: Tuning, score: RowScore | None = None) -> Any:
    """Raw and permuted predictions of a step of rows (arguments and results as every
    permuted-prediction kernel's: ``jaximp._importances.permutation_kernel``).

    Args:
        params: ``(ens, layout, x f32[n_all, E], masks bool[G + 1, E])``: the model and its
            layout (``jaximp._leaves.trees.prepare``), every row (padded), and the groups:
            ``masks[0]`` is all False (the baseline), ``masks[1 + g]`` marks group ``g``'s columns.
        rows: ``(own, source)`` (and ``(y, weight)`` with ``score``), indices into ``x``.
        block: rows per fused block.
        tuning: the devices' (``jaximp._rows.tuning``): the search's fences and runs.
        score: None, or a score that is a sum over rows, computed block by block.
    """
    ens, layout, x, masks = params
    repeats = rows[1].shape[1]
    quantize, leaves = trees.descent((ens, layout))
    encode, descend = (lambda rows: quantize(rows, tuning=tuning).T), (lambda bins: leaves(bins.T))  # [n, E] both

    def block_fn(args):
        o, s = args[:2]
        mine = encode(x[o])  # [n, E]: gathers on the device
        theirs = encode(x[s].reshape(-1, x.shape[1])).reshape(*s.shape, -1)  # [n, n_sources, E]

        def one_group(mask):  # bool[E] -> f32[n, n_sources, K]
            mixed = jnp.where(mask, theirs, mine[:, None, :]).reshape(-1, x.shape[1])
            return leaf_prediction(ens, descend(mixed)).reshape(o.shape[0], repeats, -1)

        out = jax.lax.map(one_group, masks)  # [G + 1, n, n_sources, K]
        if score is not None:
            return block_sums(score, args[2], args[3], out.transpose(2, 0, 1, 3))
        return out[0, :, 0], jnp.transpose(out[1:], (1, 2, 0, 3))

    inner = _inner_block(block, repeats)
    if score is None:
        return map_blocks(block_fn, rows, inner)
    return jax.lax.map(block_fn, jax.tree_util.tree_map(lambda a: row_blocks(a, inner), rows))


def kernel_setup(ens: TreeEnsemble, x: Any, groups: list[np.ndarray], repeats: int, batch_size: int | None,
                 devices: Any, fn_name: str) -> KernelSetup:
    """The mixed-rows kernel of ``ens``, with its shared arguments ``(ens, heap layout, x, masks)``.

    Args:
        ens: the model.
        x: ``f32[N, E]`` checked rows (``u8`` bins of the evaluated features with a featurizer),
            put on the device once, rows padded to a power of two (a new N reuses the compiled
            step for the next power of two).
        groups: G arrays of evaluated feature indices, permuted together (with a featurizer, the
            evaluated features that read only the group's columns:
            ``jaximp._importances.permutation_groups.evaluated_groups``).
        repeats: R (the kernel's choices do not depend on it).
        batch_size: rows per step as given (None: the batching's choice).
        devices: as for :func:`jaximp.permutation_importance` (the kernel's choices do not depend
            on them).
        fn_name: the public function, for error messages.
    """
    masks = np.zeros((len(groups) + 1, ens.n_evaluated), bool)
    for g, columns in enumerate(groups):
        masks[g + 1, np.asarray(columns, np.int64)] = True
    rows = np.asarray(x, np.float32) if isinstance(x, np.ndarray) else jnp.asarray(x, jnp.float32)
    params = (*trees.prepare(ens), power_of_two_rows(rows), jax.device_put(masks))
    return KernelSetup(_permuted_kernel, params, batch_size)
