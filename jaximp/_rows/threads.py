"""Helper threads of the host work: NumPy's copies, searches and ufuncs and Arrow's gathers
release the GIL, so a second thread runs part of them on a second core."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

import numpy as np

_WORKERS: dict[tuple[str, int], ThreadPoolExecutor] = {}
_LOCK = threading.Lock()


def worker(name: str) -> ThreadPoolExecutor:
    """The one worker thread named ``name``, made on first use in this process (a process forked
    from one that used it makes its own: the parent's thread does not exist there)."""
    key = (name, os.getpid())
    with _LOCK:
        if key not in _WORKERS:
            _WORKERS[key] = ThreadPoolExecutor(1, thread_name_prefix=name)
        return _WORKERS[key]


def in_turn(work: Callable[[Iterator[Any]], Any], items: Sequence[Any], helper: Executor | None) -> None:
    """``work(items)`` in this thread and, when given, in ``helper``'s at once: each takes the next
    item that neither has taken, until none is left; returns once both are done (the helper's
    error, if any, raised)."""
    lock, left = threading.Lock(), iter(items)

    def take() -> Iterator[Any]:
        while True:
            with lock:
                item = next(left, None)
            if item is None:
                return
            yield item

    shared = helper.submit(work, take()) if helper is not None else None
    try:
        work(take())
    finally:
        if shared is not None:
            shared.result()


def copy_in_halves(target: np.ndarray, part: np.ndarray, split_bytes: int) -> None:
    """``target[...] = part``, in two threads at once from ``split_bytes`` written (a step of
    results copied to the host; 0: never, ``jaximp._rows.tuning.Tuning.split_copy_bytes``):
    writing fresh pages, which the kernel zeroes on first write, is most of the cost. The split is
    along the axis of ``target`` farthest apart in memory (the trees of a tree-major leaf table,
    the rows of row-major values), so that each thread writes its own pages."""
    if not split_bytes or target.nbytes < split_bytes:
        target[...] = part
        return
    axis = int(np.argmax(target.strides))
    half = target.shape[axis] // 2
    first, second = (tuple(slice(None) if a != axis else cut for a in range(target.ndim))
                     for cut in (slice(None, half), slice(half, None)))

    def copy(pieces: Iterator[tuple]) -> None:
        for piece in pieces:
            target[piece] = part[piece]

    in_turn(copy, (first, second), worker("jaximp-copy"))
