"""A FlatBuffers reader that trusts nothing in the buffer: the tables and vectors of CatBoost's
``.cbm`` model files, every offset and declared length checked against the bytes that are there
before anything is read or allocated.

FlatBuffers (the format's own documentation, "FlatBuffers internals"): a buffer starts with the
``u32`` offset of its root table. A table starts with an ``i32`` whose subtraction from the
table's position gives its *vtable*: ``u16`` vtable size, ``u16`` table size, then one ``u16``
per field, the field's offset inside the table (0: absent, the schema's default applies). A
scalar field is stored inline; a string, vector or sub-table field holds a ``u32`` offset,
relative to the field, to a ``u32`` length followed by the elements (a vector of tables holds
one such offset per element). All numbers are little-endian.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import numpy as np

MAX_DEPTH = 64  # nested tables, as CatBoost's own verifier allows


def corrupt(what: str) -> ValueError:
    """The error of a damaged buffer (callers name the file)."""
    return ValueError(f"corrupt FlatBuffers data: {what}")


def read_u32(data: bytes, at: int, what: str) -> tuple[int, int]:
    """``(value, position after it)`` of the little-endian ``u32`` at ``at``, or a clear error when
    the file ends before ``what``."""
    if at + 4 > len(data):
        raise corrupt(f"the file ends before {what}")
    return struct.unpack_from("<I", data, at)[0], at + 4


class Table:
    """One table of a buffer, its vtable checked.

    Args:
        data: the whole buffer.
        pos: the table's position in it.
        depth: how deep this table is nested (at most :data:`MAX_DEPTH`).
        name: what the table is, for messages.

    Raises:
        ValueError: the table or its vtable lies outside the buffer, or is malformed.
    """

    __slots__ = ("data", "pos", "vtable", "vsize", "tsize", "depth", "name")

    def __init__(self, data: bytes, pos: int, depth: int = 0, name: str = "the root table"):
        if depth > MAX_DEPTH:
            raise corrupt(f"tables nested deeper than {MAX_DEPTH} levels")
        self.data, self.pos, self.depth, self.name = data, pos, depth, name
        if pos < 0 or pos + 4 > len(data):
            raise corrupt(f"{name} lies outside the {len(data)} bytes of the buffer")
        vtable = pos - struct.unpack_from("<i", data, pos)[0]
        if vtable < 0 or vtable + 4 > len(data):
            raise corrupt(f"the field table of {name} lies outside the buffer")
        self.vtable = vtable
        self.vsize, self.tsize = struct.unpack_from("<HH", data, vtable)
        if self.vsize < 4 or self.vsize % 2 or vtable + self.vsize > len(data):
            raise corrupt(f"the field table of {name} has an impossible size {self.vsize}")
        if self.tsize < 4 or pos + self.tsize > len(data):
            raise corrupt(f"{name} declares {self.tsize} bytes, past the end of the buffer")

    def _field(self, index: int, size: int) -> int:
        """The position of field ``index`` (``size`` bytes inline), or 0 when absent."""
        slot = 4 + 2 * index
        if slot + 2 > self.vsize:
            return 0
        offset = struct.unpack_from("<H", self.data, self.vtable + slot)[0]
        if offset == 0:
            return 0
        if offset + size > self.tsize:
            raise corrupt(f"field {index} of {self.name} lies outside the table")
        return self.pos + offset

    def scalar(self, index: int, fmt: str, default: float | int | bool) -> float | int | bool:
        """Scalar field ``index`` (``struct`` format ``fmt``), or ``default`` when absent."""
        at = self._field(index, struct.calcsize(fmt))
        return struct.unpack_from("<" + fmt, self.data, at)[0] if at else default

    def _target(self, index: int, what: str) -> int | None:
        """Where the offset field ``index`` points, or None when absent."""
        at = self._field(index, 4)
        if not at:
            return None
        target = at + struct.unpack_from("<I", self.data, at)[0]
        if target + 4 > len(self.data):
            raise corrupt(f"{what} of {self.name} lies outside the buffer")
        return target

    def _length(self, start: int, item_size: int, what: str) -> int:
        """The declared element count at ``start``, checked against the bytes after it."""
        count = struct.unpack_from("<I", self.data, start)[0]
        if count * item_size > len(self.data) - start - 4:
            raise corrupt(f"{what} of {self.name} declares {count} elements of {item_size} bytes, "
                          f"more than the {len(self.data) - start - 4} bytes left in the buffer")
        return count

    def array(self, index: int, dtype: str | np.dtype, what: str) -> np.ndarray:
        """Vector field ``index`` of fixed-size elements as a NumPy array (empty when absent)."""
        dtype = np.dtype(dtype)
        start = self._target(index, what)
        if start is None:
            return np.zeros(0, dtype)
        count = self._length(start, dtype.itemsize, what)
        return np.frombuffer(self.data, dtype, count, start + 4).copy()

    def string(self, index: int, what: str) -> str | None:
        """String field ``index`` (UTF-8), or None when absent."""
        start = self._target(index, what)
        return None if start is None else self._string_at(start, what)

    def _string_at(self, start: int, what: str) -> str:
        count = self._length(start, 1, what)
        try:
            return self.data[start + 4:start + 4 + count].decode("utf-8")
        except UnicodeDecodeError as e:
            raise corrupt(f"{what} of {self.name} is not UTF-8 text") from e

    def table(self, index: int, what: str) -> Table | None:
        """Sub-table field ``index``, or None when absent."""
        start = self._field(index, 4)
        if not start:
            return None
        return Table(self.data, start + struct.unpack_from("<I", self.data, start)[0], self.depth + 1, what)

    def _elements(self, index: int, what: str, make: Callable[[int, str], object]) -> list:
        start = self._target(index, what)
        if start is None:
            return []
        count = self._length(start, 4, what)
        out = []
        for k in range(count):
            at = start + 4 + 4 * k
            out.append(make(at + struct.unpack_from("<I", self.data, at)[0], f"{what} [{k}]"))
        return out

    def tables(self, index: int, what: str) -> list[Table]:
        """Vector-of-tables field ``index`` (empty when absent)."""
        return self._elements(index, what, lambda at, name: Table(self.data, at, self.depth + 1, name))

    def strings(self, index: int, what: str) -> list[str]:
        """Vector-of-strings field ``index`` (empty when absent)."""
        def make(at: int, name: str) -> str:
            if at + 4 > len(self.data):
                raise corrupt(f"{name} of {self.name} lies outside the buffer")
            return self._string_at(at, name)

        return self._elements(index, what, make)


def root(data: bytes, name: str) -> Table:
    """The root table of a buffer."""
    if len(data) < 8:
        raise corrupt(f"{name} has {len(data)} bytes, too few for a FlatBuffers table")
    return Table(data, struct.unpack_from("<I", data, 0)[0], 0, name)
