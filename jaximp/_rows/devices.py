"""Devices: the rows of a call split over one or several devices, each running the kernel on
its own slice (``jax.shard_map`` over a one-axis mesh, ``"rows"``), the model placed on each once.

Rows given as a ``jax.Array`` stay where they are: cut into steps on the device (no value read
back or sent by the host), split over the devices that hold them, in their order; results are
split the same way along their rows (whole on every device where the rows do not divide evenly).
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

ROW_AXIS = "rows"


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


_ROW_SPECS = {  # where an array of a step holds its rows
    "reduce": PartitionSpec(),  # nowhere: a per-step reduction, summed over the devices
    "first": PartitionSpec(ROW_AXIS),
    "last": PartitionSpec(None, ROW_AXIS),  # [..., n] two-dimensional outputs
}


def row_mesh(devices: tuple[jax.Device, ...]) -> Mesh:
    """The one-axis mesh (``"rows"``) over which a call's rows are split."""
    return Mesh(np.asarray(devices), (ROW_AXIS,))


@functools.cache
def sharded_step(kernel: Callable, devices: tuple[jax.Device, ...], static: tuple, rows_at: str,
                 rows_in: str = "first") -> Callable:
    """``kernel`` run by every device on its own slice of a step's rows (``jax.shard_map``), the
    slices taken along the rows' first axis (their last for ``rows_in="last"``: feature-major rows)
    and the other arguments (model, tables) whole on every device. Its output stays split the same
    way along its rows (``rows_at``: ``"first"`` or ``"last"``), or is a reduction summed over
    the devices (``"reduce"``).

    Each device runs the kernel over its ``n / D`` rows only (its block loop never sees the
    others'), so D devices share one step's work instead of each doing all of it."""
    fn = functools.partial(kernel, **dict(static))
    mesh = row_mesh(devices)
    if len(devices) > 1:  # one device runs the kernel as it is (and fast under jax.disable_jit)
        if rows_at == "reduce":
            fn = _summed_over_devices(fn)
        fn = jax.shard_map(fn, mesh=mesh, in_specs=(PartitionSpec(), _ROW_SPECS[rows_in]),
                           out_specs=_ROW_SPECS[rows_at], check_vma=False)
    return jax.jit(
        fn,
        in_shardings=(NamedSharding(mesh, PartitionSpec()), NamedSharding(mesh, _ROW_SPECS[rows_in])),
        out_shardings=NamedSharding(mesh, _ROW_SPECS[rows_at]),
    )


def _summed_over_devices(fn: Callable) -> Callable:
    """``fn``'s per-device reduction summed over the devices of the rows' mesh axis."""
    return lambda params, rows: jax.lax.psum(fn(params, rows), ROW_AXIS)


def rows_devices(rows: Any) -> Any:
    """The devices of rows given as ``jax.Array``s (computed there), in the order of their rows:
    the one device of rows on one, each device holding a slice of rows split over several. None
    for host rows and tracers."""
    for a in jax.tree_util.tree_leaves(rows):
        if isinstance(a, jax.Array) and not isinstance(a, jax.core.Tracer):
            starts = {}
            for shard in a.addressable_shards:
                start = (shard.index[0].start or 0) if a.ndim else 0
                starts[shard.device] = min(starts.get(shard.device, start), start)
            return sorted(starts, key=lambda d: (starts[d], d.id))
    return None


def on_mesh(a: Array, mesh: Mesh, axis: int) -> Array:
    """Rows ``a`` of a call whose rows are on a device, as its steps read them, once per call:
    left as they are on the mesh's one device, else split over ``mesh`` along their rows ``axis``
    (as they are when given so: then nothing moves). Host arrays are put there too. A number of
    rows that the devices do not divide is zero-padded first where the rows are, so that each
    device receives its slice, never the whole (padding rows are computed and dropped, as a
    step's)."""
    if not isinstance(a, (jax.Array, np.ndarray)) or (isinstance(a, jax.Array) and mesh.size == 1
                                                        and a.devices() == set(mesh.devices.flat)):
        return a
    missing = -a.shape[axis] % mesh.size
    if missing:
        a = _zero_padded(a, missing=missing, axis=axis) if isinstance(a, jax.Array) else \
            np.concatenate([a, np.zeros((*a.shape[:axis], missing, *a.shape[axis + 1:]), a.dtype)], axis=axis)
    return jax.device_put(a, NamedSharding(mesh, PartitionSpec(*(None,) * axis, ROW_AXIS)))


@functools.partial(jax.jit, static_argnames=("missing", "axis"))
def _zero_padded(a: Array, *, missing: int, axis: int) -> Array:
    pad = [(0, 0)] * a.ndim
    pad[axis] = (0, missing)
    return jnp.pad(a, pad)


@functools.cache
def device_step(mesh: Mesh, axis: int, step: int) -> Callable:
    """``(rows, start) -> step`` rows of each device array of the pytree ``rows`` along
    ``axis`` from ``start`` (a device scalar), zero past their end, split over ``mesh`` along
    those rows: one program for every step of the rows' shapes, and no value read from or sent
    by the host."""
    return functools.partial(_taken, step=step, axis=axis,
                             sharding=NamedSharding(mesh, PartitionSpec(*(None,) * axis, ROW_AXIS)))


@functools.partial(jax.jit, static_argnames=("step", "axis", "sharding"))
def _taken(rows: Any, start: Array, *, step: int, axis: int, sharding: NamedSharding) -> Any:
    index = start + jnp.arange(step, dtype=jnp.int32)
    taken = jax.tree_util.tree_map(lambda a: jnp.take(a, index, axis=axis, mode="fill", fill_value=0), rows)
    return jax.lax.with_sharding_constraint(taken, sharding)


def joined(outs: tuple, *, n: int, axis: int, dtype: Any, home: jax.Device | None = None) -> Any:
    """The steps' outputs ``outs`` joined along their rows' ``axis`` (0, or -1 for row-last
    outputs), cut to the ``n`` rows of the call and cast to ``dtype`` (None: as they are), on the
    devices: no slice bound sent from the host.

    Steps split over several devices stay split where the devices divide ``n``. Where they do not
    (JAX's arrays split only evenly), the joined steps go to ``home`` (the rows' own device)
    before the cut, rather than to every device."""
    leaves = jax.tree_util.tree_leaves(outs)
    devices = leaves[0].devices() if leaves and not isinstance(leaves[0], jax.core.Tracer) else set()
    if len(devices) > 1 and n % len(devices) and home is not None:
        whole = _joined(outs, n=None, axis=axis, dtype=dtype)
        return _joined((jax.device_put(whole, home),), n=n, axis=axis, dtype=None)
    return _joined(outs, n=n, axis=axis, dtype=dtype)


@functools.partial(jax.jit, static_argnames=("n", "axis", "dtype"))
def _joined(outs: tuple, *, n: int | None, axis: int, dtype: Any) -> Any:
    def join(*parts):
        whole = parts[0] if len(parts) == 1 else jnp.concatenate(parts, axis=axis)
        if n is not None:
            whole = jax.lax.slice_in_dim(whole, 0, n, axis=axis % whole.ndim)
        return whole if dtype is None else whole.astype(dtype)

    return jax.tree_util.tree_map(join, *outs)
