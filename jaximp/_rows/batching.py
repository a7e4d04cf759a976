"""Rows through a kernel in fixed-size, padded batches, optionally sharded over devices.

Every function of jaximp that takes rows runs its per-row kernel through :func:`map_rows`:

* rows go in steps of ``batch_size`` rows per device, leftover rows in steps of a power of two
  of blocks (the last block zero-padded), so device memory is bounded for any N and only a few
  step shapes are ever compiled (once per step shape and model shape): a second call of the
  same N, or of any N the compiled shapes cover, does not recompile;
* with several devices, each device runs the kernel on its own slice of every step's rows and
  the kernel's other arguments (model, tables) are placed on each once per call
  (``jaximp._rows.devices``);
* results live where the rows are: rows in host memory give NumPy arrays, each step copied to
  the host while the next one runs; rows given as ``jax.Array`` give ``jax.Array`` results left
  on the devices that hold the rows, split over them the same way (no host copy);
* a reduction over rows (:func:`sum_rows`, :func:`sum_blocks`, :func:`mean_abs_rows`) adds each
  step's result on the device (block sums in double-float precision, ``jaximp._rows.sums``) and
  never holds a per-row result for all rows;
* the default step size comes from the kernel's per-row output footprint (``row_floats``), the
  device's memory and a fixed budget (the tuning's ``step_output_bytes``), so a default call
  fits the device whatever the output's width, and a step of wide outputs (interaction values)
  holds a bounded number of bytes whatever the device's size;
* when the kernel's non-row arguments are traced (``jax.grad`` / ``jax.jit`` over the model),
  all rows go through one traced call instead, so the result is differentiable.

Per-row kernels must be row-independent: row ``i`` of the output depends only on row ``i`` of
the inputs, so results do not depend on batch size or device count.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import os
import threading
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.sharding import NamedSharding, PartitionSpec

from jaximp._rows import sums
from jaximp._rows.devices import (
    device_step,
    joined,
    on_mesh,
    resolve_devices,
    row_mesh,
    rows_devices,
    sharded_step,
)
from jaximp._rows.threads import copy_in_halves
from jaximp._rows.tuning import Tuning, rows_tuning, tuning_for

_PROGRESS_DELAY = 2.0  # seconds before a call's progress bar appears


_GC = {"pauses": 0, "was_on": False}
_GC_LOCK = threading.Lock()


@contextlib.contextmanager
def gc_paused():
    """Python's cyclic garbage collector held off while the block runs, then back as it was.

    Tracing and lowering a program makes tens of thousands of Python objects, and the
    collections they set off walk every object of the process (JAX's own included): about
    15% of a first call with a filled compilation cache. The garbage they would find is
    collected after the block instead. Nested and concurrent pauses count: the collector comes
    back when the last one ends, and only if it was on when the first began.
    """
    with _GC_LOCK:
        if not _GC["pauses"]:
            _GC["was_on"] = gc.isenabled()
            gc.disable()
        _GC["pauses"] += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _GC["pauses"] -= 1
            if not _GC["pauses"] and _GC["was_on"]:
                gc.enable()


def device_memory(device: jax.Device) -> int:
    """Bytes of memory ``device`` has: its allocator's limit, or the host's RAM for a CPU."""
    try:
        stats = device.memory_stats() or {}
    except Exception:  # backends without memory statistics
        stats = {}
    if stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def output_budget(device: jax.Device) -> int:
    """Bytes a default step's output (and a block's) may take on ``device``: ``1 /
    step_memory_fraction`` of its memory, at most the tuning's ``step_output_bytes``
    (``jaximp._rows.tuning``)."""
    tuning = tuning_for(device)
    return min(device_memory(device) // tuning.step_memory_fraction, tuning.step_output_bytes)


def resolve_batch_size(batch_size: Any, device: jax.Device, fn_name: str, row_floats: int = 0) -> int:
    """Rows per device step: ``batch_size`` checked, or the device's default.

    The default is the step of the device's tuning (``jaximp._rows.tuning.Tuning.step_rows``),
    lowered so that a step's output (``row_floats`` 4-byte values per row, e.g. ``F * F * K`` for
    interaction values) takes at most :func:`output_budget` bytes.
    """
    if batch_size is None:
        rows = tuning_for(device).step_rows
        if row_floats:
            rows = max(1, min(rows, output_budget(device) // (4 * row_floats)))
        return rows
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"{fn_name}: batch_size must be a positive int or None; got {batch_size!r}")
    return int(batch_size)


def block_size(device: jax.Device, row_floats: int = 0) -> int:
    """Rows per fused block on ``device`` (``jaximp._rows.tuning.Tuning.block_rows``), halved
    while a block's output (``row_floats`` values per row) would take more than a default step's
    (:func:`output_budget`)."""
    block = tuning_for(device).block_rows
    budget = output_budget(device) if row_floats else 0
    while block > 1 and budget and 4 * row_floats * block > budget:
        block //= 2
    return block


def step_shape(batch_size: Any, device: jax.Device, fn_name: str, row_floats: int = 0) -> tuple[int, int]:
    """``(rows per device step, rows per block)``: a step is a whole number of blocks, ``batch_size``
    rounded up, or the default (:func:`resolve_batch_size`) rounded down to at least one block."""
    rows = resolve_batch_size(batch_size, device, fn_name, row_floats)
    block = block_size(device, row_floats)
    if batch_size is None:
        return max(block, rows // block * block), block
    return -(-rows // block) * block, block


def default_step_rows(devices: Any, rows: Any, fn_name: str, row_floats: int = 0) -> int:
    """Rows per device step of a call on ``rows`` without ``batch_size`` (:func:`step_shape`), on
    the devices that :func:`map_rows` picks: ``devices=``, else those of rows given as
    ``jax.Array``s, else JAX's default. Never the call's N: a kernel may size its own blocks by it."""
    devs = resolve_devices(rows_devices(rows) if devices is None else devices, fn_name)
    return step_shape(None, devs[0], fn_name, row_floats)[0]


def features_first(kernel: Callable, rows: Any, tuning: Tuning) -> bool:
    """Whether to hand ``kernel`` its rows feature-major, ``[E, n]`` steps of ``rows.T``: the
    ``tuning`` says so (CPUs), the rows are one host array laid out so (Fortran order, as a
    categorical model's featurized rows and many DataFrames' ``to_numpy()`` are) and the kernel
    takes a ``features_first`` keyword. The step then reaches the device by contiguous copies, and
    the kernel reads it without a transpose."""
    return (tuning.features_first and isinstance(rows, np.ndarray) and rows.ndim == 2 and rows.flags.f_contiguous
            and not rows.flags.c_contiguous and "features_first" in inspect.signature(kernel).parameters)


def is_traced(tree: Any) -> bool:
    """Whether a leaf of ``tree`` is a JAX tracer (``jax.grad``, ``jit`` or ``vmap`` is running):
    the call must then stay in JAX, with no host conversion."""
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(tree))


def tuning_static(kernel: Callable, tuning: Tuning) -> dict:
    """``{"tuning": tuning}`` for kernels that take a ``tuning`` keyword (their budgets, e.g. the
    sub-blocking of gathers, are the platform's: ``jaximp._rows.tuning``), else ``{}``."""
    return {"tuning": tuning} if "tuning" in inspect.signature(kernel).parameters else {}


def progress_bar(enabled: bool, total: int | None, desc: str, delay: float = 0.0):
    """A tqdm progress bar over rows (terminals and notebooks), or None when disabled or when
    tqdm is missing. With ``delay`` it appears only once the work has lasted that long."""
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is an optional dependency: no bar without it
        return None
    return tqdm(total=total, unit="rows", unit_scale=True, desc=desc, delay=delay, leave=False)


def _steps(kernel, params, rows, batch_size, devices, fn_name, static, reduce, row_floats=0, progress=True,
           per_block=False, rows_last=False, small_step_rows=None):
    """Yield ``kernel``'s output for each padded step of ``rows``, or once for traced inputs.

    A step is a whole number of blocks per device: the requested rows rounded up. Rows that do
    not fill a step go in steps of a power of two of blocks (10 blocks: 8 + 2), so padding
    stays under one block and at most log2(blocks per step) + 1 shapes are ever compiled. A call
    of fewer rows than one block takes a power of two of rows (at least ``small_step_rows``, by
    default the tuning's ``min_step_rows``; not for kernels that reduce, or output one value per
    block: ``per_block``), so that explaining a handful of rows does not pay for a block of
    padding in kernels whose inner steps are smaller than a block. Sizes are the tuning's of the
    first device (``jaximp._rows.tuning``).
    With ``progress``, a call of several steps that lasts over ``_PROGRESS_DELAY`` seconds shows
    a progress bar.
    """
    devs = resolve_devices(rows_devices(rows) if devices is None else devices, fn_name)
    per_device, block = step_shape(batch_size, devs[0], fn_name, row_floats)
    tuning = tuning_for(devs[0])
    static = {**static, **tuning_static(kernel, tuning)}
    n = jax.tree_util.tree_leaves(rows)[0].shape[0]
    if is_traced(params) or is_traced(rows):
        yield kernel(params, rows, block=block, **static)
        return
    rows_at = "reduce" if reduce else "last" if rows_last else "first"
    transposed = features_first(kernel, rows, tuning)
    if transposed:  # steps of the [E, N] array: ``_padded`` pads the last axis
        static, rows = {**static, "features_first": True}, rows.T
    compiled = sharded_step(kernel, devs, tuple(sorted(static.items())) + (("block", block),), rows_at,
                         "last" if transposed else "first")
    mesh = row_mesh(devs)
    params_sharding = NamedSharding(mesh, PartitionSpec())  # whole on every device
    params = jax.device_put(params, params_sharding)  # once per call
    axis = 1 if transposed else 0
    if on_device(rows):  # cut on the device, each step placed split over the devices
        rows = jax.tree_util.tree_map(lambda a: on_mesh(a, mesh, axis), rows)

        def cut(start, step):
            return device_step(mesh, axis, step)(rows, jax.device_put(np.int32(start), params_sharding))
    else:
        def cut(start, step):
            index = (slice(None),) * axis + (slice(start, start + step),)
            return jax.tree_util.tree_map(lambda a: _padded(a[index], step, axis=axis), rows)
    bar = progress_bar(progress and n > per_device * len(devs), n, fn_name, delay=_PROGRESS_DELAY)
    start = 0
    try:
        while start < n:
            blocks_needed = -(-(n - start) // (block * len(devs)))
            step = min(per_device, (1 << (blocks_needed.bit_length() - 1)) * block) * len(devs)
            if n < block * len(devs) and not (reduce or per_block):  # a small call: a power of two of rows
                fewest = tuning.min_step_rows if small_step_rows is None else small_step_rows
                step = min(step, max(fewest, 1 << (-(-n // len(devs)) - 1).bit_length()) * len(devs))
            with gc_paused():  # a first call traces and lowers here
                out = compiled(params, cut(start, step))
            yield out
            if bar is not None:
                bar.update(min(step, n - start))
            start += step
    finally:
        if bar is not None:
            bar.close()


def map_rows(kernel: Callable, params: Any, rows: Any, *, batch_size: int | None, devices: Any, fn_name: str,
             host_dtype: Any = None, row_floats: int = 0, progress: bool = True, rows_last: bool = False,
             small_step_rows: int | None = None, **static: Any) -> Any:
    """Apply ``kernel(params, rows, *, block, **static)`` to all rows in padded steps.

    Args:
        kernel: a pure function; ``rows`` is a pytree of arrays with a leading row axis
            ``[n, ...]``, and it returns a pytree of arrays with leading axis ``n``. It receives
            ``block`` (rows per fused block, see ``jaximp._rows.blocks.map_blocks``) and
            ``static`` as keywords. A kernel with a ``features_first`` keyword may get its rows
            feature-major instead, ``[E, n]`` with ``features_first=True`` (see
            :func:`features_first`), and one with a ``tuning`` keyword the devices'
            ``jaximp._rows.tuning.Tuning``.
        params: the pytree every row shares (the model, per-tree tables), replicated.
        rows: pytree of arrays with the same leading length N (host or device arrays).
        batch_size: rows per device step, or None for the device default; rounded up to a
            whole number of blocks (the tuning's ``block_rows``: 1024 rows on CPU), which
            bounds memory the same way.
        devices: None, an int or a list of ``jax.Device`` (see :func:`resolve_devices`).
        fn_name: the public function's name, for error messages.
        host_dtype: the dtype of the returned arrays, if not the kernel's (cast while copying
            each step to the host: a narrow kernel output costs no wide device transfer).
        row_floats: values the kernel outputs per row, for the default step size (0: the
            platform's default).
        progress: show a progress bar when the call lasts (see :func:`_steps`).
        rows_last: the kernel returns two-dimensional arrays ``[m, n]`` with its rows last
            (tree-major leaf tables, see ``jaximp._rows.blocks.fill_blocks``). The result still
            has rows first: on the host, the transposed view of one ``[m, N]`` array (Fortran
            order, each of the ``m`` columns contiguous), so no transpose is ever computed; on
            a device, transposed there.
        small_step_rows: the fewest rows of the step of a call of fewer rows than a block (a
            power of two; None: the tuning's ``min_step_rows``), for kernels whose rows cost so
            much that padding a handful of rows to that many would dominate.
        **static: hashable arguments compiled into the kernel.

    Returns:
        The kernel's output pytree with leading axis N: NumPy arrays when every row array is in
        host memory, ``jax.Array``s left on the device when one is a ``jax.Array``, traced arrays
        when ``params`` or ``rows`` are traced.
    """
    n = jax.tree_util.tree_leaves(rows)[0].shape[0]
    steps = _steps(kernel, params, rows, batch_size, devices, fn_name, static, reduce=False,
                   row_floats=row_floats, progress=progress, rows_last=rows_last, small_step_rows=small_step_rows)
    rows_first = (lambda a: a.T) if rows_last else (lambda a: a)  # noqa: E731
    split_bytes = rows_tuning(devices, rows, fn_name).split_copy_bytes
    if on_device(rows):
        home = rows_devices(rows)
        return jax.tree_util.tree_map(rows_first, _on_device(steps, n, host_dtype, axis=-1 if rows_last else 0,
                                                             home=home[0] if home else None))
    result, start, pending = None, 0, None

    def empty(a):  # [N, ...] in the kernel's memory order
        shape, dtype = (n, *a.shape[1:]), host_dtype or a.dtype
        return np.empty(shape[::-1], dtype).T if rows_last else np.empty(shape, dtype)

    def to_host(step_out):
        nonlocal result, start
        parts = jax.tree_util.tree_map(rows_first, jax.device_get(step_out))
        if result is None:
            result = jax.tree_util.tree_map(empty, parts)
        stop = min(n, start + jax.tree_util.tree_leaves(parts)[0].shape[0])
        jax.tree_util.tree_map(lambda r, a: copy_in_halves(r[start:stop], a[: stop - start], split_bytes),
                               result, parts)
        start = stop

    for out in steps:
        if is_traced(out):  # one traced call over all rows
            out = out if host_dtype is None else jax.tree_util.tree_map(lambda a: a.astype(host_dtype), out)
            return jax.tree_util.tree_map(rows_first, out)
        if pending is not None:  # copy the previous step to the host while this one runs
            to_host(pending)
        pending = out
    to_host(pending)
    return result


def on_device(rows: Any) -> bool:
    """Whether ``rows`` (a pytree) holds a ``jax.Array``: results then stay on the device."""
    return any(isinstance(a, jax.Array) for a in jax.tree_util.tree_leaves(rows))


def _on_device(steps: Any, n: int, dtype: Any, axis: int = 0, home: jax.Device | None = None) -> Any:
    """The steps' outputs joined on the device along their rows' ``axis`` (0, or -1 for
    two-dimensional row-last outputs), padding dropped (see :func:`map_rows`; ``home``: the rows'
    device, for results the devices cannot split evenly)."""
    return joined(tuple(steps), n=n, axis=axis, dtype=None if dtype is None else np.dtype(dtype), home=home)


def sum_rows(kernel: Callable, params: Any, rows: Any, *, batch_size: int | None, devices: Any, fn_name: str,
             **static: Any) -> Any:
    """Sum over padded steps of ``kernel(params, rows, *, block, **static)``, a per-step reduction.

    The reduction counterpart of :func:`map_rows` (same steps, padding and sharding): the kernel
    reduces its rows to one pytree (a histogram, a sum) and the steps' results are added on the
    device. Padding rows are zeros, so ``rows`` should carry a per-row weight that the kernel
    multiplies by (padding then counts 0).

    Returns:
        The summed pytree as device arrays (traced when ``params`` or ``rows`` are traced).
    """
    total = None
    for out in _steps(kernel, params, rows, batch_size, devices, fn_name, static, reduce=True):
        total = out if total is None else jax.tree_util.tree_map(jnp.add, total, out)
    return total


def _block_sum_kernel(params: Any, rows: tuple[Any, Array], *, block: int, inner: Callable,
                      inner_static: tuple, absolute: bool, tuning: Tuning) -> Any:
    """Per block of ``block`` rows, ``sum_i w_i inner(params, x)_i`` (``|inner|`` when
    ``absolute``) over the rows ``(x, w)`` (padding has ``w = 0``): ``[n / block, ...]``."""
    x, weight = rows
    inner_static = dict(inner_static)
    if "tuning" in inspect.signature(inner).parameters:
        inner_static["tuning"] = tuning
    out = inner(params, x, block=block, **inner_static)

    def per_block(a):
        size = block if a.shape[0] % block == 0 else a.shape[0]  # traced calls: rows unpadded
        a = jnp.abs(a) if absolute else a
        terms = weight.reshape((-1, size) + (1,) * (a.ndim - 1)) * a.reshape((-1, size) + a.shape[1:])
        return jnp.sum(terms, axis=1)

    return jax.tree_util.tree_map(per_block, out)


def weighted_sums(kernel: Callable, params: Any, rows: Any, weight: Any, *, batch_size: int | None,
                  devices: Any, fn_name: str, absolute: bool = False, row_floats: int = 0,
                  progress: bool = True, to_host: bool | None = None, **static: Any) -> Any:
    """``sum_i weight_i kernel(params, rows)_i`` (of ``|kernel|`` when ``absolute``) over all rows,
    each output of the per-row ``kernel`` summed per block on the device and the blocks added
    there in double-float precision (:func:`sum_blocks`): never the per-row result of all rows.

    Returns:
        The kernel's output pytree without its row axis: ``f64`` NumPy, or ``jax.Array``s on the
        rows' devices (``to_host`` as for :func:`sum_blocks`); traced ``f32`` when ``params`` or
        ``rows`` are traced.
    """
    return sum_blocks(_block_sum_kernel, params, (rows, weight), batch_size=batch_size, devices=devices,
                      fn_name=fn_name, row_floats=row_floats, progress=progress, to_host=to_host, inner=kernel,
                      inner_static=tuple(sorted(static.items())), absolute=absolute)


def sum_blocks(kernel: Callable, params: Any, rows: Any, *, batch_size: int | None, devices: Any,
               fn_name: str, row_floats: int = 0, progress: bool = True, to_host: bool | None = None,
               **static: Any) -> Any:
    """The sum of per-block sums: ``kernel`` returns, per step, arrays ``[n_blocks, ...]`` (one sum
    per block of rows), added one after another in row order on the device, in double-float
    precision (:func:`jaximp._rows.sums.add_blocks`): only the total leaves the device.

    Blocks hold the same rows whatever the batch size or device count, and they are added in the
    same order, so the result is identical for any of them (not only close). Padding rows must
    add nothing (give them zero weight).

    Args:
        to_host: return ``f64`` NumPy (the compensated sum in float64) or ``jax.Array``s in the
            kernel's dtype on the rows' device; None: NumPy unless a row array is a ``jax.Array``.

    Returns:
        The summed pytree (traced, in the kernel's dtype, when ``params`` or ``rows`` are traced:
        one call, summed on the device).
    """
    total, _ = _summed_blocks(kernel, params, rows, batch_size=batch_size, devices=devices, fn_name=fn_name,
                              row_floats=row_floats, progress=progress, **static)
    if is_traced(total):
        return total
    return sums.on_host(total) if (not on_device(rows) if to_host is None else to_host) else sums.on_device(total)


def _summed_blocks(kernel: Callable, params: Any, rows: Any, *, batch_size: int | None, devices: Any,
                   fn_name: str, row_floats: int = 0, progress: bool = True, **static: Any) -> tuple[Any, Any]:
    """``(the double-float sum of :func:`sum_blocks` on the device, the dtypes of the kernel's
    outputs)``: a reduction's result then takes the kernel's dtype (float64 for a float64 model
    under ``jax_enable_x64``). A traced call gives its plain traced sum."""
    total, dtypes = None, None
    for out in _steps(kernel, params, rows, batch_size, devices, fn_name, static, reduce=False,
                      row_floats=row_floats, progress=progress, per_block=True):
        dtypes = jax.tree_util.tree_map(lambda a: a.dtype, out)
        if is_traced(out):
            return jax.tree_util.tree_map(lambda a: jnp.sum(a, axis=0), out), dtypes
        total = sums.add_blocks(total, out)
    return total, dtypes


def mean_abs_rows(kernel: Callable, params: Any, rows: Any, *, batch_size: int | None, devices: Any,
                  fn_name: str, row_floats: int = 0, progress: bool = True, **static: Any) -> Any:
    """The mean over rows of ``|kernel(params, rows)|``, without the per-row result for all rows.

    Each step sums its rows' ``|kernel|`` per block on the device; the blocks' sums are added on
    the device in double-float precision (:func:`sum_blocks`), so the result is identical whatever
    the batch size or device count, and equals the mean of the per-row values to float32
    rounding of each block's sum. Memory: one step's per-row output.

    Returns:
        The mean in the kernel's dtype (float32; float64 for a float64 model under
        ``jax_enable_x64``): NumPy when ``rows`` are in host memory, ``jax.Array`` on the rows'
        devices when they are one (or traced).
    """
    n = jax.tree_util.tree_leaves(rows)[0].shape[0]
    weight = unit_weights(rows)
    total, dtypes = _summed_blocks(_block_sum_kernel, params, (rows, weight), batch_size=batch_size,
                                   devices=devices, fn_name=fn_name, row_floats=row_floats, progress=progress,
                                   inner=kernel, inner_static=tuple(sorted(static.items())), absolute=True)
    if is_traced(total):
        return jax.tree_util.tree_map(lambda a: a / n, total)
    if on_device(rows):
        return sums.mean_on_device(total, n)
    return jax.tree_util.tree_map(lambda a, dtype: (a / n).astype(dtype), sums.on_host(total), dtypes)


def unit_weights(rows: Any) -> Any:
    """``f32[N]`` ones, a weight per row of ``rows`` (padding rows then weigh 0), where the rows
    are: NumPy for rows in host memory, put on the rows' device for ``jax.Array`` rows (a transfer
    asked for, never an implicit one), traced under a trace."""
    n = jax.tree_util.tree_leaves(rows)[0].shape[0]
    return jnp.ones(n, np.float32) if is_traced(rows) else like_rows(np.ones(n, np.float32), rows)


def like_rows(result: Any, rows: Any) -> Any:
    """``result`` (host arrays) where the rows are: as is for host rows, on the rows' device
    (or the default one) when they are ``jax.Array``s."""
    if not on_device(rows):
        return result
    device = rows_devices(rows)
    return jax.device_put(result, device[0] if device else None)


def where_rows(result: Any, rows: Any) -> Any:
    """``result`` (a ``jax.Array`` computed from ``rows``) as NumPy when the rows are in host
    memory; as is for rows given as ``jax.Array``s, and for tracers (under ``jax.jit`` or
    ``jax.grad``)."""
    if on_device(rows) or is_traced(result):
        return result
    return np.asarray(result)


def _padded(a: np.ndarray, size: int, axis: int = 0) -> np.ndarray:
    """Host rows ``a`` zero-padded to ``size`` rows along ``axis`` (device rows are cut and padded
    on the device: ``jaximp._rows.devices.device_step``)."""
    missing = size - a.shape[axis]
    if missing == 0:
        return a
    shape = list(a.shape)
    shape[axis] = missing
    return np.concatenate([a, np.zeros(shape, a.dtype)], axis=axis)
