"""What the permuted-prediction kernels of permutation importance take and return, for both
layouts: step functions of each column's bin for oblivious trees
(``jaximp._importances.permutation_oblivious``), mixed rows predicted whole for general trees
(``jaximp._importances.permutation_trees``). ``jaximp._importances.permutation`` picks one by
``ens.layout`` and runs it on rows in steps (``jaximp._rows.batching``).

A kernel ``kernel(params, rows, *, block, score=None, **static)`` takes:

* ``params``: what every row shares (the model, all rows put on the device once, padded to a
  power of two, and the layout's tables), replicated on every device;
* ``rows``: ``(own i32[n], source i32[n, n_sources])``, each scored row's index among the rows
  in ``params`` and, per repeat, the index of the row whose group values it receives
  (``n_sources`` is R, or 1 when each repeat scores its own rows); with ``score`` also
  ``(y [n] or [n, K], weight f32[n, R])``, the targets and each row's weight in each repeat's
  score (0 for rows a repeat does not score, and for padding);
* ``block``: rows per fused block; ``score``: None, or a ``jaximp._importances.scoring.RowScore``
  (static), a score that is a sum over rows, computed block by block.

It returns, without ``score``, ``(raw f32[n, K], permuted f32[n, n_sources, G, K])``: each
row's raw prediction and its predictions with each group permuted; with ``score``, the
per-block sums ``f32[n_blocks, R, G + 1, 1 + n_terms]`` of the rows' weights (term 0) and of the
score's weighted row terms (group 0: the baseline; ``jaximp._importances.scoring.block_sums``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class KernelSetup:
    """A layout's permuted-prediction kernel, ready to run on rows.

    Attributes:
        kernel: the kernel (see the module docstring).
        params: its shared arguments.
        batch_size: rows per device step (None: the batching's choice for the device).
        static: its static keyword arguments besides ``block`` and ``score``.
    """

    kernel: Callable
    params: Any
    batch_size: int | None
    static: Mapping[str, Any] = dataclasses.field(default_factory=dict)
