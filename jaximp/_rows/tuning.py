"""The tuning of the kernels on a platform: every size, budget and cost constant chosen for speed,
in one frozen dataclass per platform, picked once per call from the rows' device.

A kernel never reads a platform name or a module's budget: :func:`jaximp._rows.batching.map_rows`
hands it the :class:`Tuning` of the call's devices as its static ``tuning`` keyword (hashable, so
it is compiled into the kernel), and the planning of tables and layouts reads the same object.
As XGBoost keeps its CPU predictor's tricks in that predictor, the tricks that pay on CPUs only
(host copies in two threads, feature-major host blocks) are fields of the CPU tuning, off in the
accelerator one.

None of these choices changes a row's arithmetic with the number of rows, with the other rows or
with a global flag: step and block sizes only cut the rows into more or fewer steps, and the
choices that do round a row's sums differently (a general tree's layout, the chunks of trees of
the tables) are the model's and the platform's, fixed for every call.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaximp._rows.devices import resolve_devices, rows_devices


@dataclasses.dataclass(frozen=True)
class Tuning:
    """How the kernels run on one platform (hashable: a static argument of compiled kernels).

    Sizes are in rows, budgets in 4-byte values (``floats``, ``ints``) or bytes, as named.
    """

    name: str
    """The platform family: ``"cpu"`` or ``"accelerator"`` (GPU, TPU)."""

    block_rows: int
    """Rows per fused block: every row of an untraced call goes through the same compiled block
    program, so a row's result never depends on batch size, N or device count. Small on CPU, so
    that a block's tables stay in cache."""

    step_rows: int
    """Rows per device step of a call without ``batch_size`` (a whole number of blocks)."""

    step_memory_fraction: int
    """A default step's output takes at most ``1 / step_memory_fraction`` of the device's memory."""

    step_output_bytes: int
    """The most bytes of a default step's output and of a block's, whatever the device's memory:
    rows of wide outputs (interaction values, ``F * F * K`` values a row) go in steps and blocks
    of at most that many bytes. A step then holds a few times this: its output, its kernel's
    intermediates (about as many bytes again for interaction values) and, on the host, the
    previous step's output while it is copied. 64 MiB on CPU: interaction values of 200
    features go in 256-row steps of 39 MiB and 17 to 54 MiB of intermediates, where 1/16 of a
    24 GB host alone allows 8192-row steps of 1.2 GiB and as much again (and runs slower). 1 GiB
    on accelerators, where a general tree's interaction kernel computes up to
    ``tree_step_rows`` rows at once."""

    min_step_rows: int
    """Rows of the smallest step (calls of fewer rows than a block)."""

    split_copy_bytes: int
    """Bytes of a step's result from which its copy to the host is split between two threads
    (``jaximp._rows.threads.copy_in_halves``): on a CPU the copy writes fresh pages, which the
    kernel zeroes on first write; 0: one thread always."""

    features_first: bool
    """Whether a feature-major host array (Fortran order) goes to the kernels feature-major,
    ``[E, n]`` steps of ``rows.T`` that reach the device by contiguous copies and are read
    without a transpose (``jaximp._rows.batching.features_first``). On a 2-core CPU it makes
    CatBoost's categorical predict on 100k raw rows 14% faster (0.48 s against 0.56 s; the
    featurized rows come feature-major) and leaves numeric Fortran-order rows, leaf indices and
    SHAP values as fast as without it."""

    bin_skew_rows: int
    """Rows quantized past the last block: with steps of a power of two of rows, the bins of
    consecutive features would start 4 KiB apart or a multiple of it, on the same sets of a CPU's
    cache, which leaf masks reading every node's feature at once thrash (twice as slow)."""

    bin_fences: int
    """Borders every value is compared with at once first (``jaximp._leaves.bins.search``), which
    narrows it to one of ``bin_fences + 1`` runs."""

    bin_run: int
    """Borders of a run fetched and counted at once (longer runs: XLA's count is far slower)."""

    gather_floats: int
    """Per-block budget of the table entries an oblivious model's SHAP kernels gather: on CPU
    8 MiB, so that they stay in cache; elsewhere a memory bound only, since splitting a block's
    gathers costs about 26% on an H100."""

    table_floats: int
    """Per-chunk budget of the largest per-tree intermediate of the oblivious SHAP tables."""

    quick_table_entries: int
    """The most table entries ``T 4**D`` whose SHAP tables, built at every call (a background's),
    are compiled without LLVM's optimizations (half the compile time, 8-12 times slower to run)."""

    tree_step_rows: int
    """Rows per step of a general tree's SHAP kernels, halved while the step's row patterns at
    every leaf exceed ``tree_pattern_ints`` (down to ``tree_min_step_rows``)."""

    tree_min_step_rows: int
    """The fewest rows per step of a general tree's SHAP kernels."""

    tree_pattern_ints: int
    """The most row patterns of a step at every leaf of a general tree model."""

    tree_chunk_floats: int
    """Per-step budget of a general tree's SHAP intermediates ``[leaves, D, rows]``: a CPU
    cache's share on CPUs, a memory bound elsewhere."""

    saabas_rows: int
    """Rows per inner block of a general tree's Saabas (``approximate``) values."""

    histogram_ints: int
    """Row patterns per step of an interventional plan's background histograms (128 MiB)."""

    host_plan_entries: int
    """The most path entries ``T L D`` of a general tree model whose SHAP plan is built in NumPy
    (a few hundredths of a second) instead of a compiled JAX program (0.4 s to a first call)."""

    layout_rows: int
    """The rows a general tree model's SHAP layout is planned for (its compile time spread over
    them): never the call's N, so that a row's values do not depend on the others."""

    bucket_compile_ns: float
    """Compile time a bucket of leaves adds to a first call (about 0.2 s, measured on CPU)."""

    node_compile_ns: float
    """Compile time each unrolled quadrature node of SHAP values adds (0.1 s; 9 nodes 1.8 s,
    looped 0.9 s)."""

    table_bytes: int
    """All of a general tree model's SHAP tables together; the deepest table buckets turn to
    quadrature beyond."""

    soft_rows: int
    """Rows per inner block of the soft trees' kernels."""

    soft_chunk_floats: int
    """Per-step budget of the soft trees' ``[trees, L, D, rows]`` intermediates."""

    permutation_block_rows: int
    """Rows per block of the oblivious trees' permutation-importance kernel, whose running sums
    then stay in a CPU's last-level cache (0: the call's block)."""

    index_table_entries: int
    """Floats per leaf of an interaction index kernel's value tables (``2**d`` patterns times the
    leaf's subsets up to the order): a leaf with more computes its values per row instead."""

    index_table_bytes: int
    """Bytes of all of a model's value tables of one index kernel (shallow buckets first)."""

    permutation_step_rows: int
    """Rows per step of that kernel without ``batch_size``: little padding and few compiled
    shapes (0: as many as :attr:`permutation_step_bytes` of per-row intermediates allow)."""

    permutation_step_bytes: int
    """Rough bound on a step's per-row intermediates of that kernel when its step is not fixed."""


CPU = Tuning(
    name="cpu",
    block_rows=1024,
    step_rows=1 << 15,  # steps of 32 blocks; leftover rows go in smaller steps
    step_memory_fraction=16,
    step_output_bytes=1 << 26,  # 64 MiB
    min_step_rows=64,
    split_copy_bytes=1 << 23,
    features_first=True,
    bin_skew_rows=64,
    bin_fences=31,
    bin_run=32,
    gather_floats=1 << 21,
    table_floats=1 << 19,  # 2 MiB: stays in cache
    quick_table_entries=1 << 19,
    tree_step_rows=256,
    tree_min_step_rows=16,
    tree_pattern_ints=1 << 25,  # 128 MiB
    tree_chunk_floats=1 << 21,
    saabas_rows=256,
    histogram_ints=1 << 25,
    host_plan_entries=1 << 23,
    layout_rows=1 << 16,
    bucket_compile_ns=2e8,
    node_compile_ns=1e8,
    table_bytes=1 << 30,
    soft_rows=64,
    soft_chunk_floats=1 << 21,
    permutation_block_rows=256,
    index_table_entries=4096,
    index_table_bytes=1 << 29,
    permutation_step_rows=4096,
    permutation_step_bytes=1 << 31,
)
"""The tuning of CPUs: blocks and budgets sized for caches, and the host-side tricks on."""

# Steps elsewhere are bounded by memory, not caches: wider blocks, steps and budgets (bounds chosen
# without a GPU to measure on; GPU timings belong in scripts/BENCHMARKS.md). The choices that round
# a row's sums (layout, tables, soft chunks) are the CPU's, so a model gives the same numbers.
ACCELERATOR = dataclasses.replace(
    CPU,
    name="accelerator",
    block_rows=1 << 14,
    step_rows=1 << 18,
    step_output_bytes=1 << 30,  # 1 GiB
    split_copy_bytes=0,
    features_first=False,
    gather_floats=1 << 28,  # 1 GiB
    tree_step_rows=4096,
    tree_pattern_ints=1 << 26,
    tree_chunk_floats=1 << 26,
    permutation_block_rows=0,
    permutation_step_rows=0,
)
"""The tuning of GPUs and TPUs: memory-bound budgets, no CPU tricks."""


def tuning_for(device: Any) -> Tuning:
    """The :class:`Tuning` of ``device`` (a ``jax.Device``, or anything with a ``platform``):
    :data:`CPU` for ``"cpu"``, else :data:`ACCELERATOR`."""
    return CPU if device.platform == "cpu" else ACCELERATOR


def rows_tuning(devices: Any, x: Any, fn_name: str) -> Tuning:
    """The :class:`Tuning` of the devices the rows ``x`` will be explained on, as
    ``jaximp._rows.batching.map_rows`` picks them: ``devices=``, else those of rows given as
    ``jax.Array``s, else JAX's default."""
    return tuning_for(resolve_devices(rows_devices(x) if devices is None else devices, fn_name)[0])
