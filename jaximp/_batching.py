"""Rows through a kernel in fixed-size, padded batches, optionally sharded over devices.

Every function of jaximp that takes rows runs its per-row kernel through :func:`map_rows`:

* rows go in steps of ``batch_size`` rows per device, leftover rows in steps of a power of two
  of blocks (the last block zero-padded), so device memory is bounded for any N and only a few
  step shapes are ever compiled (once per step shape and model shape): a second call of the
  same N, or of any N the compiled shapes cover, does not recompile;
* with several devices, each step is sharded along rows (``NamedSharding(mesh, P("rows"))``)
  and the kernel's other arguments (model, tables) are replicated;
* results of each step are copied to host memory while the next step runs, and returned as
  NumPy arrays;
* when the kernel's non-row arguments are traced (``jax.grad`` / ``jax.jit`` over the model),
  all rows go through one traced call instead, so the result is differentiable.

Per-row kernels must be row-independent: row ``i`` of the output depends only on row ``i`` of
the inputs, so results do not depend on batch size or device count.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.sharding import Mesh, NamedSharding, PartitionSpec

_ROW_AXIS = "rows"
# Rows per fused block: every row of an untraced call goes through the same compiled block
# program, so a row's result (down to the order of float sums) never depends on batch size,
# N or device count. Small on CPU so that a block's tables stay in cache.
_BLOCK = {"cpu": 1024}
_ACCELERATOR_BLOCK = 1 << 14
_DEFAULT_BATCH = {"cpu": 1 << 15}  # steps of 32 blocks; leftover rows go in smaller steps
_ACCELERATOR_BATCH = 1 << 18


def resolve_devices(devices: Any, fn_name: str) -> tuple[jax.Device, ...]:
    """Normalise ``devices=`` (None, an int or a sequence of ``jax.Device``) to a tuple."""
    if devices is None:
        return (jax.devices()[0],)
    available = jax.devices()
    if isinstance(devices, (int, np.integer)) and not isinstance(devices, bool):
        if not 1 <= devices <= len(available):
            raise ValueError(
                f"{fn_name}: devices must be between 1 and {len(available)} (the devices JAX "
                f"sees); got {devices}"
            )
        return tuple(available[: int(devices)])
    if isinstance(devices, Sequence) and devices and all(
        isinstance(d, jax.Device) for d in devices
    ):
        return tuple(devices)
    raise TypeError(
        f"{fn_name}: devices must be None, an int or a list of jax.Device; got {devices!r}"
    )


def resolve_batch_size(batch_size: Any, device: jax.Device, fn_name: str) -> int:
    """Rows per device step: ``batch_size`` checked, or the device's default."""
    if batch_size is None:
        return _DEFAULT_BATCH.get(device.platform, _ACCELERATOR_BATCH)
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"{fn_name}: batch_size must be a positive int or None; got {batch_size!r}")
    return int(batch_size)


def block_size(device: jax.Device) -> int:
    """Rows per fused block on ``device`` (see ``_BLOCK``)."""
    return _BLOCK.get(device.platform, _ACCELERATOR_BLOCK)


def row_blocks(a: Array, block: int) -> Array:
    """``[n, ...] -> [ceil(n / block), block, ...]``, the last block zero-padded (at least one)."""
    n_blocks = max(1, -(-a.shape[0] // block))
    a = jnp.pad(a, ((0, n_blocks * block - a.shape[0]),) + ((0, 0),) * (a.ndim - 1))
    return a.reshape(n_blocks, block, *a.shape[1:])


def map_blocks(row_fn: Callable, rows: Any, block: int) -> Any:
    """``row_fn`` over the leading axis of ``rows`` in blocks of ``block`` rows (``lax.map``).

    ``row_fn`` takes and returns arrays with a leading block axis. When the row count is a
    multiple of ``block`` (always, under :func:`map_rows`), every block runs the same program.
    """
    n = jax.tree_util.tree_leaves(rows)[0].shape[0]
    if n < block:
        return row_fn(rows)
    n_blocks, rest = divmod(n, block)
    head = jax.tree_util.tree_map(lambda a: a[: n_blocks * block].reshape(n_blocks, block, *a.shape[1:]), rows)
    out = jax.lax.map(row_fn, head)
    out = jax.tree_util.tree_map(lambda a: a.reshape(n_blocks * block, *a.shape[2:]), out)
    if rest:
        tail = row_fn(jax.tree_util.tree_map(lambda a: a[n_blocks * block :], rows))
        out = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b]), out, tail)
    return out


@functools.lru_cache(maxsize=None)
def _compiled(kernel: Callable, devices: tuple[jax.Device, ...], static: tuple, reduce: bool) -> Callable:
    """``kernel`` jitted with its rows sharded over ``devices``; its output sharded along rows,
    or replicated when ``reduce`` (a per-step reduction)."""
    fn = functools.partial(kernel, **dict(static))
    mesh = Mesh(np.asarray(devices), (_ROW_AXIS,))
    out = PartitionSpec() if reduce else PartitionSpec(_ROW_AXIS)
    return jax.jit(
        fn,
        in_shardings=(NamedSharding(mesh, PartitionSpec()), NamedSharding(mesh, PartitionSpec(_ROW_AXIS))),
        out_shardings=NamedSharding(mesh, out),
    )


def _is_traced(tree: Any) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(tree))


def _steps(kernel, params, rows, batch_size, devices, fn_name, static, reduce):
    """Yield ``kernel``'s output for each padded step of ``rows``, or once for traced inputs.

    A step is a whole number of blocks per device: the requested rows rounded up. Rows that do
    not fill a step go in steps of a power of two of blocks (10 blocks: 8 + 2), so padding
    stays under one block and at most log2(blocks per step) + 1 shapes are ever compiled.
    """
    devs = resolve_devices(devices, fn_name)
    per_device = resolve_batch_size(batch_size, devs[0], fn_name)
    n = jax.tree_util.tree_leaves(rows)[0].shape[0]
    block = block_size(devs[0])
    if _is_traced(params) or _is_traced(rows):
        yield kernel(params, rows, block=block, **static)
        return
    per_device = -(-per_device // block) * block
    compiled = _compiled(kernel, devs, tuple(sorted(static.items())) + (("block", block),), reduce)
    start = 0
    while start < n:
        blocks_needed = -(-(n - start) // (block * len(devs)))
        step = min(per_device, (1 << (blocks_needed.bit_length() - 1)) * block) * len(devs)
        yield compiled(params, jax.tree_util.tree_map(lambda a: _padded(a[start : start + step], step), rows))
        start += step


def map_rows(
    kernel: Callable,
    params: Any,
    rows: Any,
    *,
    batch_size: int | None,
    devices: Any,
    fn_name: str,
    host_dtype: Any = None,
    **static: Any,
) -> Any:
    """Apply ``kernel(params, rows, *, block, **static)`` to all rows in padded steps.

    Args:
        kernel: a pure function; ``rows`` is a pytree of arrays with a leading row axis
            ``[n, ...]``, and it returns a pytree of arrays with leading axis ``n``. It receives
            ``block`` (rows per fused block, see :func:`map_blocks`) and ``static`` as keywords.
        params: the pytree every row shares (the model, per-tree tables), replicated.
        rows: pytree of arrays with the same leading length N (host or device arrays).
        batch_size: rows per device step, or None for the device default; rounded up to a
            whole number of blocks (1024 rows on CPU), which bounds memory the same way.
        devices: None, an int or a list of ``jax.Device`` (see :func:`resolve_devices`).
        fn_name: the public function's name, for error messages.
        host_dtype: the dtype of the returned arrays, if not the kernel's (cast while copying
            each step to the host: a narrow kernel output costs no wide device transfer).
        **static: hashable arguments compiled into the kernel.

    Returns:
        The kernel's output pytree with leading axis N: NumPy arrays, or traced arrays when
        ``params`` is traced.
    """
    n = jax.tree_util.tree_leaves(rows)[0].shape[0]
    result, start, pending = None, 0, None

    def to_host(step_out):
        nonlocal result, start
        parts = jax.device_get(step_out)
        if result is None:
            result = jax.tree_util.tree_map(
                lambda a: np.empty((n, *a.shape[1:]), host_dtype or a.dtype), parts
            )
        stop = min(n, start + jax.tree_util.tree_leaves(parts)[0].shape[0])
        jax.tree_util.tree_map(lambda r, a: r.__setitem__(slice(start, stop), a[: stop - start]), result, parts)
        start = stop

    for out in _steps(kernel, params, rows, batch_size, devices, fn_name, static, reduce=False):
        if _is_traced(out):  # one traced call over all rows
            return out if host_dtype is None else jax.tree_util.tree_map(lambda a: a.astype(host_dtype), out)
        if pending is not None:  # copy the previous step to the host while this one runs
            to_host(pending)
        pending = out
    to_host(pending)
    return result


def sum_rows(
    kernel: Callable,
    params: Any,
    rows: Any,
    *,
    batch_size: int | None,
    devices: Any,
    fn_name: str,
    **static: Any,
) -> Any:
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


def _padded(a: Any, size: int) -> Any:
    missing = size - a.shape[0]
    if missing == 0:
        return a
    xp = jnp if isinstance(a, jax.Array) else np
    return xp.concatenate([a, xp.zeros((missing, *a.shape[1:]), a.dtype)])
