"""Categorical splits of XGBoost, LightGBM and scikit-learn models: how a model codes categories
(:class:`CategoryCodes`, a static field of the ensemble) and the bitsets its set-membership
splits hold (``jaximp._models.trees`` for the decision rule). The rows' side, turning a
DataFrame's columns into those codes, is ``jaximp._rows.codes``."""

from __future__ import annotations

import dataclasses

import numpy as np

UNSEEN = ("missing", "error")


@dataclasses.dataclass(frozen=True)
class CategoryCodes:
    """How a model's rows become the category codes its splits read (hashable: a static field).

    Attributes:
        library: the library's name, for messages ("XGBoost", "LightGBM", "scikit-learn").
        columns: per input column (F entries), its training categories in code order (category
            ``columns[j][i]`` has code ``i``), or ``None`` where the model stores none (a numeric
            column, or one whose numbers are codes).
        frame_categories: LightGBM's ``pandas_categorical``: the categories of the training
            frame's ``category`` columns, matched in order to a new frame's ``category`` columns
            (empty when that frame had none); None for a LightGBM model trained on an array,
            which reads a frame's ``category`` columns by their own codes.
        lookup_numbers: numbers are looked up in ``columns`` too (scikit-learn); else numbers are
            codes already.
        unseen: what a value outside the training categories becomes: ``"missing"`` (NaN) or
            ``"error"`` (a ``ValueError``, as XGBoost raises).
    """

    library: str
    columns: tuple[tuple | None, ...]
    frame_categories: tuple[tuple, ...] | None = ()
    lookup_numbers: bool = False
    unseen: str = "missing"

    def __post_init__(self):
        if self.unseen not in UNSEEN:
            raise ValueError(f"CategoryCodes: unseen must be one of {UNSEEN}; got {self.unseen!r}")
        if not isinstance(self.columns, tuple) or not all(c is None or isinstance(c, tuple) for c in self.columns):
            raise TypeError("CategoryCodes: columns must be a tuple of one entry per input column, each a tuple of "
                            f"categories or None; got {self.columns!r:.200}")
        if self.frame_categories is not None and (not isinstance(self.frame_categories, tuple) or not all(
                isinstance(c, tuple) for c in self.frame_categories)):
            raise TypeError("CategoryCodes: frame_categories must be None or a tuple of tuples; got "
                            f"{self.frame_categories!r:.200}")
        if not isinstance(self.library, str) or not isinstance(self.lookup_numbers, bool):
            raise TypeError("CategoryCodes: library must be a str and lookup_numbers a bool; got "
                            f"{self.library!r}, {self.lookup_numbers!r}")


MAX_CATEGORY_WORDS = 1 << 27  # 512 MiB of node bitsets


def category_words(categorical: np.ndarray, right: list[np.ndarray], others: np.ndarray,
                   fn_name: str) -> np.ndarray:
    """``u32[T, M, n_words]`` the bitset words of every node (see ``jaximp._models.trees``), 0 at
    numerical nodes.

    Args:
        categorical: ``bool[T, M]`` the categorical nodes, ``n_split`` of them.
        right: per categorical node in row-major order, ``bool[n_categories]`` whether category
            ``c < n_categories`` (the node's own count) goes right.
        others: ``bool[n_split]`` where every other value of each node goes (right when True):
            categories at or past the node's ``n_categories``, and values below the smallest
            category.
        fn_name: the importer, for messages.

    Returns:
        ``u32[T, M, n_words]`` with ``32 n_words - 1`` above every node's ``n_categories``: bit
        ``c`` the direction of category ``c``, bits from the node's ``n_categories`` on (the
        last one included) ``others``.

    Raises:
        ValueError: the bitsets would exceed ``MAX_CATEGORY_WORDS`` words (category codes in the
            millions).
    """
    t, m = categorical.shape
    width = max((len(r) for r in right), default=0) + 1  # + the bit of the other values
    n_words = max(1, -(-width // 32))
    if t * m * n_words > MAX_CATEGORY_WORDS:
        raise ValueError(f"{fn_name}: the model's categorical splits read category codes up to {width - 2}, "
                         f"whose bitsets take {t} x {m} x {n_words} words, more than jaximp holds "
                         f"({MAX_CATEGORY_WORDS} words); code the categories 0, 1, 2, ... (a category "
                         "column) before training")
    bits = np.repeat(np.asarray(others, bool)[:, None], 32 * n_words, axis=1)
    for s, r in enumerate(right):  # per categorical node, at import
        bits[s, :len(r)] = r
    words = np.zeros((t, m, n_words), np.uint32)
    words[categorical] = np.packbits(bits, axis=1, bitorder="little").view("<u4")
    return words


def bitset_members(words: np.ndarray) -> np.ndarray:
    """``bool[..., 32 n]`` the members of bitsets held in ``n`` 32-bit words (``u32[..., n]``):
    member ``c`` is bit ``c % 32`` of word ``c // 32``."""
    little = np.ascontiguousarray(np.asarray(words).astype("<u4"))
    return np.unpackbits(little.view(np.uint8), axis=-1, bitorder="little").astype(bool)
