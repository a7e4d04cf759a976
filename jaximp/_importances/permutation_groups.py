"""Which evaluated features a permutation of input columns moves, for permutation importance.

Permutation importance permutes input columns (or groups of them, ``feature_groups``). For a
numeric model the kernel's columns are the input columns. For a model with categorical
features it reads evaluated features (float features, one-hot values, CTRs;
``jaximp._models.featurizer``), and permuting a group ``G`` of input columns with the row
permutation ``pi`` moves them as follows:

* an evaluated feature that reads only columns of ``G`` (a float feature, a one-hot value or a
  CTR of a categorical column in ``G``, a CTR over a combination inside ``G``) takes the value
  of row ``pi(i)``: it is permuted with the rows, exactly like a numeric column, so the kernel's
  group path handles it;
* one that reads no column of ``G`` is unchanged;
* one that reads columns inside and outside ``G`` (a CTR over a combination that straddles the
  group) takes a new value that no row has: the group's raw values are permuted, the rows are
  featurized again and the model predicts them (``refeaturized_predictions``), once per repeat
  and such group. This is exact and costs one featurization and prediction of the rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jaximp._models.ensemble import Ensemble
from jaximp._rows.inputs import RawColumns, featurize


def check_groups(feature_groups: Any, ens: Ensemble, fn_name: str) -> list[np.ndarray]:
    """Groups as arrays of input column indices; names are looked up in ``ens.feature_names``."""
    if feature_groups is None:
        return [np.array([f]) for f in range(ens.n_features)]
    if isinstance(feature_groups, (str, bytes)) or not hasattr(feature_groups, "__len__") or not len(feature_groups):
        raise ValueError(f"{fn_name}: feature_groups must be a non-empty list of lists of columns; "
                         f"got {feature_groups!r}")
    names = {name: i for i, name in enumerate(ens.feature_names)}
    groups = []
    for g, group in enumerate(feature_groups):
        if isinstance(group, (str, bytes, int, np.integer)) or not hasattr(group, "__len__") or not len(group):
            raise ValueError(f"{fn_name}: feature_groups[{g}] must be a non-empty list of columns; got {group!r}")
        columns = []
        for c in group:
            if isinstance(c, (int, np.integer)) and not isinstance(c, bool) and 0 <= c < ens.n_features:
                columns.append(int(c))
            elif isinstance(c, str) and c in names:
                columns.append(names[c])
            else:
                raise ValueError(
                    f"{fn_name}: feature_groups[{g}] must hold column indices in [0, {ens.n_features}) "
                    f"or feature names; got {c!r}"
                )
        if len(set(columns)) != len(columns):
            raise ValueError(f"{fn_name}: feature_groups[{g}] must not repeat a column; got {list(group)!r}")
        groups.append(np.array(columns))
    return groups


def evaluated_groups(ens: Ensemble, groups: list[np.ndarray]) -> tuple[list[np.ndarray], list[int]]:
    """The kernel's groups of evaluated features, and the groups that need re-featurizing.

    Returns:
        ``(groups of evaluated features, indices of the straddled groups)``: group ``g`` of the
        kernel holds the evaluated features that read only columns of ``groups[g]``; a group
        some evaluated feature straddles is listed in the second result, and its kernel group
        is empty (its predictions come from :func:`refeaturized_predictions`).
    """
    if ens.reads is None:
        return groups, []
    reads = [set(columns) for columns in ens.reads]
    kernel_groups, straddled = [], []
    for g, group in enumerate(groups):
        members = set(group.tolist())
        inside = [e for e, cols in enumerate(reads) if cols <= members]
        if any(cols & members and not cols <= members for cols in reads):
            straddled.append(g)
            inside = []
        kernel_groups.append(np.asarray(inside, np.int64))
    return kernel_groups, straddled


def refeaturized_predictions(ens: Ensemble, raw: Any, group: np.ndarray, take: np.ndarray,
                             source: np.ndarray, predict: Any) -> np.ndarray:
    """``f32[n, K]`` predictions of rows ``take`` with the columns of ``group`` taken from rows
    ``source`` (raw values permuted, then featurized again).

    Args:
        ens: a model with categorical features.
        raw: the rows' ``RawColumns`` (float features, categorical hashes).
        group: the input columns permuted.
        take: ``i[n]`` the rows scored.
        source: ``i[n]`` the rows their group values come from.
        predict: ``f(x f32[n, E]) -> f32[n, K]`` the batched prediction of evaluated rows.
    """
    featurizer = ens.featurizer
    members = set(group.tolist())
    floats, hashes = raw.floats[take], raw.cat_hashes[take]
    for i, column in enumerate(featurizer.float_columns):
        if column in members:
            floats[:, i] = raw.floats[source, i]
    for i, column in enumerate(featurizer.cat_columns):
        if column in members:
            hashes[:, i] = raw.cat_hashes[source, i]
    return predict(featurize(ens, RawColumns(floats, hashes)))
