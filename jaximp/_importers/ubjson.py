"""A reader of Universal Binary JSON (UBJSON, Draft 12), the binary form of XGBoost's model files.

XGBoost's ``save_model("m.ubj")`` (its default format since 2.1) writes the same document as its
JSON format, in UBJSON: objects ``{`` with keys as length-prefixed strings, arrays ``[``,
optionally strongly typed (``$`` element type, ``#`` count) so that the trees' per-node arrays are
raw big-endian float32 or int32 blocks. This reader turns such a file into the dictionary that
``json.loads`` gives for the JSON form, except that strongly typed numeric arrays come back as
NumPy arrays (read in one ``frombuffer`` each), so jaximp reads ``.ubj`` models without XGBoost.

Reference: the UBJSON specification (ubjson.org, Draft 12): markers ``Z`` null, ``N`` no-op,
``T``/``F`` booleans, ``i`` int8, ``U`` uint8, ``I`` int16, ``l`` int32, ``L`` int64, ``d``
float32, ``D`` float64, ``H`` high-precision number (a string), ``C`` char, ``S`` string, all
numbers big-endian.

A model file is untrusted input: every count and length is checked against the bytes left
before anything is allocated (each element of a container takes at least one byte, so a count
larger than the bytes left is refused; typed containers of an element type without a payload,
``Z``, ``T``, ``F``, which XGBoost never writes, are refused), nesting is limited to
``_MAX_DEPTH`` levels, and every failure is a ``ValueError``. The result is thus never larger
than a small multiple of the file.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

_NUMBERS = {  # marker -> big-endian NumPy dtype
    b"i": np.dtype(">i1"), b"U": np.dtype(">u1"), b"I": np.dtype(">i2"), b"l": np.dtype(">i4"),
    b"L": np.dtype(">i8"), b"d": np.dtype(">f4"), b"D": np.dtype(">f8"),
}
_STRUCTS = {marker: struct.Struct(">" + code) for marker, code in
            zip(_NUMBERS, ("b", "B", "h", "i", "q", "f", "d"))}
_MAX_DEPTH = 64  # nesting deeper than any model file (XGBoost's are 6 deep): corrupt input
_NO_PAYLOAD = (b"Z", b"T", b"F", b"N")  # element types that take no bytes after the type marker


def loads(data: bytes) -> Any:
    """Parse one UBJSON value (an XGBoost ``.ubj`` model: a dictionary).

    Args:
        data: the whole file's bytes.

    Returns:
        The value: dictionaries, lists, strings, numbers, booleans, None; strongly typed numeric
        arrays as NumPy arrays of their native-endian dtype.

    Raises:
        ValueError: not well-formed UBJSON (unknown marker, truncated data, a count or length
            past the end of the data, nesting deeper than 64 levels, trailing bytes).

    Examples:
        >>> loads(b"{i\\x01aU\\x07}")
        {'a': 7}
    """
    reader = _Reader(bytes(data))
    try:
        value = reader.value(reader.marker(), 0)
    except (IndexError, struct.error, UnicodeDecodeError, OverflowError, RecursionError) as e:
        raise ValueError(f"truncated or corrupt UBJSON at byte {reader.pos} ({e!r})") from e
    if reader.pos != len(reader.data):
        raise ValueError(f"trailing bytes after the UBJSON value at byte {reader.pos}")
    return value


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise IndexError(f"{n} bytes wanted, {len(self.data) - self.pos} left")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def marker(self) -> bytes:
        marker = self.take(1)
        while marker == b"N":  # no-op
            marker = self.take(1)
        return marker

    def number(self, marker: bytes) -> int | float:
        return _STRUCTS[marker].unpack(self.take(_STRUCTS[marker].size))[0]

    def length(self) -> int:
        marker = self.marker()
        if marker not in (b"i", b"U", b"I", b"l", b"L"):
            raise ValueError(f"UBJSON length must be an integer; got marker {marker!r} at byte {self.pos - 1}")
        n = self.number(marker)
        if n < 0:
            raise ValueError(f"UBJSON length must be non-negative; got {n} at byte {self.pos}")
        return n

    def left(self) -> int:
        """The bytes not read yet."""
        return len(self.data) - self.pos

    def string(self) -> str:
        return self.take(self.length()).decode("utf-8")

    def value(self, marker: bytes, depth: int) -> Any:
        if marker in _STRUCTS:
            return self.number(marker)
        if marker == b"S":
            return self.string()
        if marker == b"H":
            text = self.string()
            return float(text) if any(c in text for c in ".eE") else int(text)
        if marker == b"C":
            return self.take(1).decode("utf-8")
        if marker in (b"T", b"F", b"Z"):
            return {b"T": True, b"F": False, b"Z": None}[marker]
        if marker in (b"[", b"{"):
            if depth >= _MAX_DEPTH:
                raise ValueError(f"UBJSON nested deeper than {_MAX_DEPTH} levels")
            return self.container(marker == b"{", depth + 1)
        raise ValueError(f"unknown UBJSON marker {marker!r} at byte {self.pos - 1}")

    def peek(self) -> bytes:
        """The next marker, past any no-ops, without taking it."""
        while self.data[self.pos:self.pos + 1] == b"N":
            self.pos += 1
        if self.pos >= len(self.data):
            raise IndexError("the data ends inside a container")
        return self.data[self.pos:self.pos + 1]

    def container(self, is_object: bool, depth: int) -> Any:
        kind, count = None, None
        if self.peek() == b"$":  # strongly typed: one element type, then a count
            self.pos += 1
            kind = self.take(1)
            if kind in _NO_PAYLOAD:
                raise ValueError(f"UBJSON typed container of element type {kind!r} (no payload) at byte {self.pos - 1}")
            if self.peek() != b"#":
                raise ValueError(f"UBJSON typed container must give a count at byte {self.pos}")
        if self.peek() == b"#":
            self.pos += 1
            count = self.length()
        if not is_object and kind in _NUMBERS and count is not None:  # one block of numbers
            dtype = _NUMBERS[kind]
            block = np.frombuffer(self.take(count * dtype.itemsize), dtype)
            return block.astype(dtype.newbyteorder("="))
        if count is not None and count > self.left():  # every element takes at least one byte
            raise ValueError(f"UBJSON container count {count} exceeds the {self.left()} bytes left at byte {self.pos}")
        end = b"}" if is_object else b"]"
        keys: list[str] = []
        items: list[Any] = []
        while len(items) < count if count is not None else self.peek() != end:
            if is_object:
                keys.append(self.string())
            items.append(self.value(kind if kind is not None else self.marker(), depth))
        if count is None:
            self.pos += 1  # the end marker
        return dict(zip(keys, items)) if is_object else items
