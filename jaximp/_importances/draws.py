"""The permutations of permutation importance, drawn on the device.

Repeat ``r`` of a call draws a permutation of the N rows when all are scored, else ``n_sub``
of them without replacement (in row order) and a permutation of those, from the key and the
repeat's own streams. The draws depend only on the key, R, N and ``n_sub``, never on the batch
size, the devices or the platform.

A permutation is a keyed bijection of ``[0, 4**h)`` (the smallest power of four at least N), the
values under N kept in order: the bijective shuffle of Mitchell, Stokes, Frank and Holmes,
"Bandwidth-optimal random shuffling for GPUs" (ACM TOPC 2022), with a balanced Feistel network
(Luby and Rackoff 1988) of :data:`_ROUNDS` rounds as the bijection, whose round function is a
multiply-xorshift mix (the finalizer of MurmurHash3) keyed by round keys mixed from the key's
data and the stream (Black and Rogaway, "Ciphers with arbitrary
finite domains", 2002, for keeping the values of a domain). It costs a few integer operations and
one stream compaction per element: no sort, which takes XLA about ten times as long on a CPU
and is not bandwidth-bound on a GPU.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

_ROUNDS = 8  # Feistel rounds; four already give a pseudo-random permutation (Luby and Rackoff)


def _mix(x: Array, key: Array) -> Array:
    """A keyed round function of ``u32`` values (a multiply-xorshift mixer)."""
    x = (x ^ key) * jnp.uint32(0x9E3779B1)
    x = x ^ (x >> 15)
    x = x * jnp.uint32(0x85EBCA6B)
    return x ^ (x >> 13)


def _round_keys(key: Array, stream: Array | int) -> Array:
    """``u32[_ROUNDS]`` the Feistel round keys of ``stream`` (a ``u32`` counter) under ``key``:
    the stream's counters mixed with each word of the key's data (any ``jax.random``
    implementation), a few integer operations rather than a ``jax.random`` draw, whose program
    takes a first call more time to prepare than the whole shuffle."""
    x = jnp.arange(_ROUNDS, dtype=jnp.uint32) + jnp.asarray(stream, jnp.uint32) * jnp.uint32(_ROUNDS)
    for word in jax.random.key_data(key).reshape(-1).astype(jnp.uint32):
        x = _mix(x, word)
    return _mix(x, jnp.uint32(0x27D4EB2F))


def permutation(key: Array, n: int, stream: Array | int = 0) -> Array:
    """``i32[n]`` a pseudo-random permutation of ``0..n-1`` drawn from ``key`` and ``stream``
    (traceable; ``n`` static)."""
    half = max(1, -(-(n - 1).bit_length() // 2))  # bits of each Feistel half
    mask = jnp.uint32((1 << half) - 1)
    round_keys = _round_keys(key, stream)
    i = jnp.arange(1 << (2 * half), dtype=jnp.uint32)
    left, right = i >> half, i & mask
    for r in range(_ROUNDS):  # a fixed number of elementwise rounds, unrolled
        left, right = right, left ^ (_mix(right, round_keys[r]) & mask)
    values = (left << half) | right  # a bijection of [0, 4**half)
    return values[jnp.nonzero(values < n, size=n)[0]].astype(jnp.int32)  # those under n, in order


@functools.partial(jax.jit, static_argnames=("repeats", "n", "n_sub"))
def row_draws(key: Array, repeats: int, n: int, n_sub: int) -> tuple[Array, Array]:
    """``(take i32[R, n_sub], source i32[R, n_sub])``: per repeat, the rows scored (in order) and,
    for each, the row whose values it receives, drawn on the key's device (repeat ``r`` from the
    streams ``2 r`` and ``2 r + 1``)."""
    def one(r):
        if n_sub == n:
            return jnp.arange(n, dtype=jnp.int32), permutation(key, n, 2 * r)
        rows = jnp.nonzero(permutation(key, n, 2 * r) < n_sub, size=n_sub)[0].astype(jnp.int32)
        return rows, rows[permutation(key, n_sub, 2 * r + 1)]

    return jax.vmap(one)(jnp.arange(repeats, dtype=jnp.uint32))


def _seeded(seed: int) -> Array:
    """``jax.random.key(seed)`` for a seed below ``2**32``; for JAX's default threefry keys, the
    key's words ``[0, seed]`` wrapped directly (the same key, without compiling a seeding
    program on a first call)."""
    if jax.config.jax_default_prng_impl != "threefry2x32":
        return jax.random.key(seed)
    return jax.random.wrap_key_data(jax.device_put(np.array([0, seed], np.uint32)))


def as_key(random_state: Any, fn_name: str) -> Array:
    """A typed ``jax.random`` key from an int, None, a JAX key or a NumPy generator.

    An int ``s < 2**32`` gives ``jax.random.key(s)``; larger ints fold their high word in.
    """
    if random_state is None:
        random_state = int(np.random.default_rng().integers(2**63))
    elif isinstance(random_state, np.random.RandomState):
        random_state = int(random_state.randint(2**31))
    elif isinstance(random_state, np.random.Generator):
        random_state = int(random_state.integers(2**63))
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool):
        if not 0 <= random_state < 2**64:
            raise ValueError(f"{fn_name}: random_state must be an int in [0, 2**64); got {random_state}")
        seed = int(random_state)
        with jax.transfer_guard("allow"):  # the seed, put on the device on purpose
            key = _seeded(seed & 0xFFFFFFFF)
            return key if seed < 2**32 else jax.random.fold_in(key, seed >> 32)
    if isinstance(random_state, jax.Array):
        if jnp.issubdtype(random_state.dtype, jax.dtypes.prng_key) and random_state.shape == ():
            return random_state
        if random_state.dtype == jnp.uint32 and random_state.ndim == 1:  # a raw (legacy) key
            return jax.random.wrap_key_data(random_state)
    raise TypeError(
        f"{fn_name}: random_state must be an int, None, a jax.random key or a NumPy Generator; "
        f"got {type(random_state).__name__}"
    )
