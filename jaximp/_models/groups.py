"""Feature groups as players: a model whose splits on any column of a group are credited to
the group, so that SHAP values, interaction indices and Banzhaf values are those of the game
whose players are the groups (one-hot blocks, sensor channels, embeddings), not sums of
per-column values.

A model's players (``players``, ``player_of``, ``reads``: CatBoost's combination classes for
categorical models) already say which splits count as one player; groups replace them. A
categorical model's player (a CTR over several columns, say) must lie inside one group.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from jaximp._models.cache import kept
from jaximp._models.ensemble import Ensemble


def grouped(ens: Ensemble, feature_groups: Any, fn_name: str) -> Ensemble:
    """The model with each of ``feature_groups`` one player (kept with the model, so that its
    plans are kept too).

    Args:
        ens: a checked model.
        feature_groups: a list of lists of column names or indices partitioning the F columns.
        fn_name: the public function, for error messages.

    Returns:
        ``ens`` with ``players`` the groups (each a sorted tuple of columns), in their order.

    Raises:
        TypeError: ``feature_groups`` is not a list of lists of names or indices.
        ValueError: an empty group, an unknown name, an index out of range, a column in two
            groups or in none, or a categorical model's player split between groups.
    """
    groups = group_columns(ens, feature_groups, fn_name)
    return kept(ens, ("feature groups", groups), lambda: _with_players(ens, groups, fn_name))


def group_columns(ens: Ensemble, feature_groups: Any, fn_name: str) -> tuple[tuple[int, ...], ...]:
    """The groups as sorted tuples of column indices, checked (see :func:`grouped`)."""
    if isinstance(feature_groups, (str, bytes)) or not isinstance(feature_groups, (list, tuple)) \
            or not all(isinstance(g, (list, tuple)) for g in feature_groups):
        raise TypeError(f"{fn_name}: feature_groups must be a list of lists of column names or indices, such "
                        f"as [['age'], ['height', 'weight']]; got {feature_groups!r:.100}")
    names = {name: i for i, name in enumerate(ens.feature_names)}
    f, owner, groups = ens.n_features, {}, []
    for g, members in enumerate(feature_groups):
        if not members:
            raise ValueError(f"{fn_name}: feature_groups[{g}] is empty; each group needs a column")
        columns = []
        for member in members:
            if isinstance(member, str):
                if member not in names:
                    raise ValueError(f"{fn_name}: feature_groups[{g}] names {member!r}, not a column of the model "
                                     f"(its columns: {list(ens.feature_names)[:10]}{' ...' if f > 10 else ''})")
                column = names[member]
            elif isinstance(member, (int, np.integer)) and not isinstance(member, bool):
                if not 0 <= member < f:
                    raise ValueError(f"{fn_name}: feature_groups[{g}] holds column {member}, outside [0, {f})")
                column = int(member)
            else:
                raise TypeError(f"{fn_name}: feature_groups[{g}] must hold column names or indices; got "
                                f"{member!r:.50}")
            if column in owner:
                raise ValueError(f"{fn_name}: column {ens.feature_names[column]!r} is in feature_groups"
                                 f"[{owner[column]}] and feature_groups[{g}]; groups must not overlap")
            owner[column] = g
            columns.append(column)
        groups.append(tuple(sorted(columns)))
    missing = [ens.feature_names[c] for c in range(f) if c not in owner]
    if missing:
        raise ValueError(f"{fn_name}: feature_groups must cover every column; {len(missing)} are in no group: "
                         f"{missing[:10]} (add them, each as its own group [[name], ...] if it stands alone)")
    return tuple(groups)


def _with_players(ens: Ensemble, groups: tuple[tuple[int, ...], ...], fn_name: str) -> Ensemble:
    group_of = np.empty(ens.n_features, np.int64)
    for g, columns in enumerate(groups):
        group_of[list(columns)] = g
    if ens.players is None:  # a numeric model: each evaluated feature is its column
        player_of = tuple(int(group_of[e]) for e in range(ens.n_features))
        reads = tuple((e,) for e in range(ens.n_features))
    else:
        for columns in ens.players:
            if len(set(group_of[list(columns)].tolist())) > 1:
                names = [ens.feature_names[c] for c in columns]
                raise ValueError(f"{fn_name}: the model credits columns {names} together (CatBoost combines them "
                                 "in a CTR), so they must be in the same feature group")
        player_of = tuple(int(group_of[ens.players[p][0]]) for p in ens.player_of)
        reads = ens.reads
    return dataclasses.replace(ens, players=groups, player_of=player_of, reads=reads)
