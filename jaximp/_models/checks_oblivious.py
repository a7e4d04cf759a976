"""Validation of :class:`~jaximp._models.oblivious.ObliviousEnsemble` at construction: its
layout's shapes and the values of its splits (see :mod:`jaximp._models.checks` for the tiers
and the shared checks)."""

from __future__ import annotations

from typing import Any

import numpy as np

from jaximp._models.checks import ArraySpec, check_arrays, check_numbers, check_static, check_values, first_bad

_OBLIVIOUS = "ObliviousEnsemble"
_OBLIVIOUS_ARRAYS = (
    ArraySpec("split_features", ("T", "D"), "int"),
    ArraySpec("split_borders", ("T", "D"), "float"),
    ArraySpec("split_bins", ("T", "D"), "int"),
    ArraySpec("split_mask", ("T", "D"), "bool"),
    ArraySpec("borders", ("E", "n_borders"), "float"),
    ArraySpec("leaf_values", ("T", "L", "K"), "float"),
    ArraySpec("leaf_weights", ("T", "L"), "float"),
    ArraySpec("scale", (), "float"),
    ArraySpec("bias", ("K",), "float"),
)


def check_oblivious(ens: Any) -> None:
    """The checks of ``ObliviousEnsemble.__post_init__`` (see its docstring)."""
    sizes = check_arrays(_OBLIVIOUS, ens, _OBLIVIOUS_ARRAYS)
    if "D" in sizes and "L" in sizes and sizes["L"] != 1 << sizes["D"]:
        raise ValueError(f"{_OBLIVIOUS}: leaf_values must have L = 2**D = {1 << sizes['D']} leaves per tree "
                         f"(D = {sizes['D']}: split_features' depths); got {sizes['L']}")
    check_static(_OBLIVIOUS, ens, sizes.get("E"))
    check_numbers(_OBLIVIOUS, ens, finite=("leaf_values", "leaf_weights", "scale", "bias"),
                  not_nan=("split_borders", "borders"))
    n_evaluated = len(ens.nan_modes)
    check_values(_check_split_features, (ens.split_features,), n_evaluated)
    check_values(_check_mask, (ens.split_mask,))
    check_values(_check_borders, (ens.borders,))
    if "n_borders" in sizes:
        check_values(_check_bins, (ens.split_bins, ens.split_mask), sizes["n_borders"])
        check_values(_check_bin_borders, (ens.split_features, ens.split_bins, ens.split_mask, ens.borders))
    check_values(_check_padded_leaves, (ens.split_mask, ens.leaf_weights))


def _check_split_features(features: np.ndarray, n_evaluated: int) -> bool:
    bad = (features < 0) | (features >= n_evaluated)
    if bad.any():
        raise ValueError(f"{_OBLIVIOUS}: split_features must be evaluated features in [0, E = {n_evaluated}) (E: "
                         f"nan_modes, borders' rows; 0 on padded depths); got "
                         f"{first_bad(features, bad)}")
    return True


def _check_mask(mask: np.ndarray) -> bool:
    bad = mask[..., 1:] & ~mask[..., :-1]
    if bad.any():
        raise ValueError(f"{_OBLIVIOUS}: split_mask must be True on each tree's first depths and False after them "
                         f"(padded depths last); got a real depth after a padded one: {first_bad(mask[..., 1:], bad)}")
    return True


def _check_borders(borders: np.ndarray) -> bool:
    bad = borders[..., 1:] < borders[..., :-1]
    if bad.any():
        raise ValueError(f"{_OBLIVIOUS}: borders must be sorted in each row (ascending, +inf padding last); got a "
                         f"decrease to {first_bad(borders[..., 1:], bad)}")
    return True


def _check_bins(bins: np.ndarray, mask: np.ndarray, n_borders: int) -> bool:
    bad = np.where(mask, (bins < 0) | (bins >= n_borders), bins != n_borders)
    if bad.any():
        raise ValueError(f"{_OBLIVIOUS}: split_bins must index the split's border in its feature's row of borders, "
                         f"in [0, n_borders = {n_borders}), and be n_borders on padded depths (a split never "
                         f"taken); got {first_bad(bins, bad)}")
    return True


def _check_bin_borders(features: np.ndarray, bins: np.ndarray, mask: np.ndarray, borders: np.ndarray) -> bool:
    if features.ndim != 2 or bins.ndim != 2 or mask.ndim != 2 or borders.ndim != 2:
        return True  # a stacked batch: each model's bins are in range (above)
    bad = mask & (borders[features, np.minimum(bins, borders.shape[1] - 1)] == np.inf)
    if bad.any():
        raise ValueError(f"{_OBLIVIOUS}: split_bins must index a real border of the split's feature, not the +inf "
                         f"padding of its row of borders; got bin "
                         f"{first_bad(bins, bad)} (feature {features[bad].flat[0]})")
    return True


def _check_padded_leaves(mask: np.ndarray, weights: np.ndarray) -> bool:
    """The leaves whose index sets the bit of a padded depth are never reached: weight 0."""
    depth = mask.shape[-1]
    padded_bits = np.sum(np.where(mask, 0, 1 << np.arange(depth, dtype=np.int64)), axis=-1)  # [..., T]
    try:
        unreached = (np.arange(weights.shape[-1])[None, :] & padded_bits[..., None]) != 0
        bad = unreached & (weights != 0)
    except ValueError:  # stacked batches of different batch axes: not compared
        return True
    if bad.any():
        raise ValueError(f"{_OBLIVIOUS}: leaf_weights must be 0 on leaves of padded depths (a leaf index with the "
                         f"bit of a depth where split_mask is False); got "
                         f"{first_bad(weights, bad)}")
    return True
