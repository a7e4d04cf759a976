"""A bounded pipeline for files streamed through the model: reading, computing and writing overlap,
with a fixed number of batches alive however many rows the files hold.

:func:`run_pipeline` runs three stages at once. A reader thread pulls record batches from
the files (:func:`scan`: a Parquet file batch by batch, a CSV file block by block), cuts or
joins them into batches of exactly ``batch_rows`` rows (:func:`rechunked`; the last one
shorter) and prepares each one (to the model's features); the calling thread computes (the JAX
kernels); a writer thread consumes the results (running sums, the Parquet file). Between
stages, queues of :data:`DEPTH` batches give back-pressure: a slow writer stops the computing,
which stops the reading. At most :data:`MAX_BATCHES_ALIVE` batches exist at once between being
read and being written (one in each stage and :data:`DEPTH` in each queue), besides what pyarrow
holds while reading (a page or two of each Parquet column, a few blocks of a CSV file).

An exception in any stage (a file that does not parse, a kernel failing, a ``KeyboardInterrupt``
in the calling thread, a full disk) stops all three: the calling thread raises it, once both
threads have ended, so that nothing is still reading or writing when the caller cleans up.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

DEPTH = 2
"""Batches waiting in each queue: between reading and computing, between computing and writing."""

MAX_BATCHES_ALIVE = 2 * DEPTH + 3
"""The most batches between being read and being written at once: one in each of the three
stages and :data:`DEPTH` in each of the two queues."""

_POLL_S = 0.05  # how often a stage blocked on a queue looks whether the others have stopped
_DONE = object()  # the end of a queue's items


class Tally:
    """Counts the batches alive at once (read, not yet written) and the most there ever were;
    thread-safe."""

    def __init__(self) -> None:
        self.alive, self.peak, self.batches = 0, 0, 0
        self._lock = threading.Lock()

    def enter(self) -> None:
        """One more batch read."""
        with self._lock:
            self.alive, self.batches = self.alive + 1, self.batches + 1
            self.peak = max(self.peak, self.alive)

    def leave(self) -> None:
        """One batch written (or dropped)."""
        with self._lock:
            self.alive -= 1


class _Failed:
    """An exception raised in the reader thread, queued in order behind the batches before it."""

    def __init__(self, error: BaseException):
        self.error = error


def scan(dataset: Any, columns: list[str], batch_rows: int) -> Iterator:
    """``dataset``'s record batches of the ``columns`` in order, at most ``batch_rows`` rows each,
    read one file at a time: a Parquet file batch by batch (``pyarrow.parquet.ParquetFile``'s
    ``iter_batches`` through a buffered stream, without pre-buffering), a CSV file block by block
    (``pyarrow.csv.open_csv``); columns of the dataset's types.

    Memory stays flat in the file's rows: a Parquet file's batch reader holds a page or two of
    each column, whatever the row groups' size. A dataset's scan does not: it decodes a whole row
    group at a time (200 MB for a row group of a million rows of 50 float columns) and reads
    ahead on its own while its consumer is slow."""
    import pyarrow.dataset as ds

    if not isinstance(dataset.format, ds.ParquetFileFormat):
        yield from _csv_batches(dataset, columns)
        return
    import pyarrow.parquet as pq

    schema = _selected(dataset, columns)
    for path in dataset.files:
        with dataset.filesystem.open_input_file(path) as stream:
            file = pq.ParquetFile(stream, buffer_size=1 << 20, pre_buffer=False)
            for batch in file.iter_batches(batch_size=batch_rows, columns=columns, use_threads=False):
                yield batch if batch.schema.equals(schema) else _cast(batch, schema)


def _selected(dataset: Any, columns: list[str]) -> Any:
    """The schema of the ``columns`` of ``dataset``, in that order."""
    import pyarrow as pa

    return pa.schema([dataset.schema.field(name) for name in columns])


def _cast(batch: Any, schema: Any) -> Any:
    """``batch``'s columns cast to ``schema``'s types (a value the type cannot hold is an error)."""
    import pyarrow as pa

    return pa.RecordBatch.from_arrays([batch.column(f.name).cast(f.type) for f in schema], schema=schema)


def _csv_batches(dataset: Any, columns: list[str]) -> Iterator:
    """The record batches of a CSV dataset's files in order, each file read block by block with
    the dataset's types for the ``columns`` (a value that does not parse is an error)."""
    import pyarrow.csv as pc

    types = {field.name: field.type for field in _selected(dataset, columns)}
    for path in dataset.files:
        with pc.open_csv(path, convert_options=pc.ConvertOptions(include_columns=columns, column_types=types)) as rows:
            yield from rows


def rechunked(batches: Iterable, rows: int) -> Iterator:
    """Record batches of exactly ``rows`` rows (the last one fewer) from ``batches`` of any sizes,
    in order: a larger batch is sliced (no copy), smaller ones are joined. Empty batches vanish."""
    pending, count = [], 0
    for batch in batches:
        start = 0
        while start < batch.num_rows:
            take = min(rows - count, batch.num_rows - start)
            pending.append(batch if take == batch.num_rows else batch.slice(start, take))
            count, start = count + take, start + take
            if count == rows:
                yield _joined(pending)
                pending, count = [], 0
    if count:
        yield _joined(pending)


def _joined(pieces: list) -> Any:
    """One record batch of the ``pieces`` (record batches of one schema), copied only when several."""
    import pyarrow as pa

    return pieces[0] if len(pieces) == 1 else pa.Table.from_batches(pieces).combine_chunks().to_batches()[0]


def run_pipeline(batches: Iterable, prepare: Callable, compute: Callable, consume: Callable, *,
                 depth: int = DEPTH, tally: Tally | None = None) -> None:
    """Run ``consume(compute(prepare(batch)))`` for every batch in order, the three stages at once.

    Args:
        batches: the batches, read in a thread of their own (an iterator that may raise).
        prepare: called in the reader thread on each batch (e.g. to the model's features).
        compute: called in the calling thread on each prepared batch (the JAX kernels; a
            ``KeyboardInterrupt`` arrives here).
        consume: called in a writer thread on each result, in order (sums, writing).
        depth: batches waiting in each of the two queues between the stages.
        tally: counts the batches alive at once (:class:`Tally`); None counts nothing.

    Raises:
        BaseException: the first exception of any stage, once both threads have ended.
    """
    stop = threading.Event()  # the calling thread's word to both threads: end now
    ready: queue.Queue = queue.Queue(maxsize=depth)
    done: queue.Queue = queue.Queue(maxsize=depth)
    failures: list[BaseException] = []  # the writer's exception
    reader = threading.Thread(target=_read, args=(batches, prepare, ready, stop, tally), name="jaximp-read",
                              daemon=True)
    writer = threading.Thread(target=_write, args=(consume, done, stop, tally, failures), name="jaximp-write",
                              daemon=True)
    try:
        reader.start()
        writer.start()
        while True:
            item = _get(ready, lambda: failures or not reader.is_alive())
            if item is _DONE or failures:
                break
            if item is None:  # the reader ended without a word: cannot happen, but never wait forever
                raise RuntimeError("the reader thread ended unexpectedly")
            if isinstance(item, _Failed):
                raise item.error
            result = compute(item)
            del item
            _put(done, result, lambda: bool(failures))
            del result
        _put(done, _DONE, lambda: bool(failures))
        writer.join()
        if failures:
            raise failures[0]
    finally:
        stop.set()
        for thread in (reader, writer):
            if thread.ident is not None:  # started
                thread.join()


def _read(batches: Iterable, prepare: Callable, ready: queue.Queue, stop: threading.Event,
          tally: Tally | None) -> None:
    """The reader thread: each batch prepared and queued; at the end ``_DONE``, on an exception
    the exception; returns as soon as ``stop`` is set."""
    iterator = iter(batches)
    try:
        for batch in iterator:
            if tally is not None:
                tally.enter()
            item = prepare(batch)
            del batch
            if not _put(ready, item, stop.is_set) or stop.is_set():
                return
            del item
        _put(ready, _DONE, stop.is_set)
    except BaseException as error:  # handed to the calling thread, which raises it
        _put(ready, _Failed(error), stop.is_set)
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()


def _write(consume: Callable, done: queue.Queue, stop: threading.Event, tally: Tally | None,
           failures: list[BaseException]) -> None:
    """The writer thread: each result consumed in order until ``_DONE``; an exception recorded in
    ``failures``; returns as soon as ``stop`` is set."""
    try:
        while not stop.is_set():
            result = _get(done, stop.is_set)
            if result is _DONE or result is None:
                return
            consume(result)
            del result
            if tally is not None:
                tally.leave()
    except BaseException as error:  # raised by the calling thread
        failures.append(error)


def _put(into: queue.Queue, item: Any, give_up: Callable[[], Any]) -> bool:
    """Put ``item`` into ``into``, waiting for room (back-pressure); False when ``give_up()``
    became true first."""
    while True:
        try:
            into.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            if give_up():
                return False


def _get(source: queue.Queue, give_up: Callable[[], Any]) -> Any:
    """The next item of ``source``; None when ``give_up()`` became true first and nothing came."""
    while True:
        try:
            return source.get(timeout=_POLL_S)
        except queue.Empty:
            if give_up():
                try:
                    return source.get_nowait()  # an item put just before the end
                except queue.Empty:
                    return None
