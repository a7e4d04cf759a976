"""Thresholds that rows are compared with in float64, as the library compares them (LightGBM),
and borders kept clear of subnormal values (:func:`normal_borders`), which XLA flushes to zero.

jaximp's kernels compare float32 values with float32 borders (``x > border``). A library that
compares a float64 value with a float64 threshold (LightGBM: ``x <= threshold`` goes left, both
doubles) agrees with that rule on float32 values when each border is the largest float32 at or
below its threshold. On float64 values it does not: a value between a threshold and its border
rounds to the border's side, and two thresholds closer than float32's resolution share one
border. The model then carries, per input column, its sorted distinct thresholds
(:class:`ValueThresholds`, a static field of ``TreeEnsemble``), and the rows stage
(``jaximp._rows.thresholds``) turns each value into a float32 value that the nodes' borders decide
exactly as the library decides the original value:

* a column in *value* mode keeps float32 values as they are (its nodes' borders are float32
  borders); a float64 value ``x`` becomes the float32 value nearest it between the same two
  borders: ``clip(float32(x), next(borders[k - 1]), borders[k])`` with ``k`` the number of
  thresholds below ``x``, so float32 rows are unchanged and float64 rows exact;
* a column in *bin* mode (two of its thresholds share a float32 border) holds, for every row,
  the number of its thresholds below the value (NaN stays NaN), and each of its nodes' borders
  is its threshold's position ``j``: ``bin > j`` exactly when ``x > thresholds[j]``;
* the zero band ``|x| <= zero_band`` reads as 0.0, or as missing (NaN, which each node sends its
  default way) in a column whose zeros are missing (LightGBM's ``zero_as_missing``);
* a categorical column's float64 values are truncated to integers (the category the library
  reads), so that float32 rounding cannot carry ``2.9999999999`` to category 3.

The arrays are kept as bytes so that the field hashes and compares fast (a static field is
part of every compiled call's signature).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

ZERO_BAND = float(np.float32(1e-35))  # LightGBM's kZeroThreshold (include/LightGBM/meta.h), a double


MIN_NORMAL = np.float32(np.finfo(np.float32).tiny)  # 2**-126, float32's smallest normal value


def normal_borders(borders: np.ndarray) -> np.ndarray:
    """``f32`` borders with no subnormal value: one in ``(-2**-126, 0)`` becomes ``-2**-126``, one in
    ``(0, 2**-126)`` becomes 0.

    XLA on CPU flushes subnormals to zero inside its kernels, so ``x > border`` would read a border
    just below 0 (XGBoost's ``split_condition`` 0 is stored as ``nextafter(0, -inf)``) as 0 and send
    rows equal to 0 the wrong way. No normal float32 lies between such a border and 0, so the
    border of the same sign next to 0 decides every normal value and 0 alike; the rows' subnormal
    values become ``±2**-126`` too (``jaximp._rows.inputs``)."""
    borders = np.asarray(borders, np.float32)
    below = (borders < 0) & (borders > -MIN_NORMAL)
    above = (borders > 0) & (borders < MIN_NORMAL)
    if not (below.any() or above.any()):
        return borders
    return np.where(below, -MIN_NORMAL, np.where(above, np.float32(0.0), borders)).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class ValueThresholds:
    """Per input column (F of them), the float64 thresholds its numerical nodes compare with and
    how rows' values are brought to what the nodes' float32 borders decide (see the module
    docstring). Hashable: a static field of ``TreeEnsemble``.

    Attributes:
        library: the library whose rule this is ("LightGBM"): it also names the library of the
            model (``split_importance`` reads its importance types by that name).
        thresholds: ``f64[n_thresholds]`` as bytes: each column's sorted distinct thresholds,
            column after column.
        borders: ``f32[n_thresholds]`` as bytes: each threshold's float32 border in value mode;
            in bin mode the largest float32 at or below it (what a float32 value is searched
            against).
        offsets: F + 1 offsets: column ``j``'s thresholds are ``[offsets[j]:offsets[j + 1]]``.
        binned: per column, rows hold the number of thresholds below their value (bin mode).
        zero_missing: per column, the zero band reads as missing (NaN), not as 0.0.
        categorical: per column, the column holds category codes (integers, as the library
            truncates them).
        zero_band: the largest ``|x|`` that reads as zero (LightGBM's ``kZeroThreshold``).
    """

    library: str
    thresholds: bytes
    borders: bytes
    offsets: tuple[int, ...]
    binned: tuple[bool, ...]
    zero_missing: tuple[bool, ...]
    categorical: tuple[bool, ...]
    zero_band: float = ZERO_BAND

    @property
    def n_features(self) -> int:
        """F, the columns described."""
        return len(self.binned)

    @functools.cached_property
    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return np.frombuffer(self.thresholds, np.float64), np.frombuffer(self.borders, np.float32)

    @functools.cached_property
    def scratch(self) -> dict:
        """Tables the rows stage makes once per model (not a field: neither hashed nor compared)."""
        return {}

    def column(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """``(thresholds f64[n], borders f32[n])`` of column ``j`` (read-only views)."""
        thresholds, borders = self._arrays
        part = slice(self.offsets[j], self.offsets[j + 1])
        return thresholds[part], borders[part]

    @property
    def float32_work(self) -> bool:
        """Whether float32 rows change too (a column in bin mode, or one whose zeros are missing)."""
        return any(self.binned) or any(self.zero_missing)

    def work_columns(self, wide: bool) -> list[int]:
        """The columns whose values change: for float64 rows (``wide``) every column with
        thresholds or category codes; for float32 rows those in bin mode or with missing zeros."""
        if wide:
            return [j for j in range(self.n_features)
                    if self.categorical[j] or self.zero_missing[j] or self.offsets[j + 1] > self.offsets[j]]
        return [j for j in range(self.n_features) if self.binned[j] or self.zero_missing[j]]


def value_thresholds(library: str, columns: list[tuple[np.ndarray, np.ndarray, bool]], zero_missing: list[bool],
                     categorical: list[bool], zero_band: float = ZERO_BAND) -> ValueThresholds:
    """Build a :class:`ValueThresholds` from each column's ``(thresholds f64[n] sorted distinct,
    borders f32[n] (the value-mode borders), binned)``."""
    offsets = np.concatenate([[0], np.cumsum([len(t) for t, _, _ in columns])]).astype(int)
    thresholds = np.concatenate([np.asarray(t, np.float64) for t, _, _ in columns] or [np.zeros(0)])
    borders = np.concatenate([np.asarray(b, np.float32) for _, b, _ in columns] or [np.zeros(0, np.float32)])
    return ValueThresholds(
        library=library,
        thresholds=thresholds.astype(np.float64).tobytes(),
        borders=borders.astype(np.float32).tobytes(),
        offsets=tuple(int(o) for o in offsets),
        binned=tuple(bool(b) for _, _, b in columns),
        zero_missing=tuple(bool(z) for z in zero_missing),
        categorical=tuple(bool(c) for c in categorical),
        zero_band=float(zero_band),
    )
