"""CatBoost's categorical splits as the model describes them: the evaluated features.

A CatBoost model with categorical features splits on three kinds of binary features (CatBoost's
``TModelTrees``, the ``split_index`` order of its JSON export): float features against borders,
one-hot features (a categorical value equals one of the model's values) and CTRs (a target
statistic of a categorical value, or of a combination of categorical values and binarized float
features, against borders). Each becomes one column of the *evaluated features* that every
kernel reads, so that every split stays ``x[e] > border``:

* a float feature: the raw value (NaN treated by the kernels, as for numeric models);
* a one-hot value ``v`` of categorical feature ``c``: 1 where ``hash(c) == v`` else 0 (one
  split at border 0.5);
* a CTR: its value, computed exactly as CatBoost's model calcer does.

This module holds the model's side: the :class:`Featurizer` (which columns are float and
categorical, the one-hot values, the CTRs with their tables), a static field of the ensemble.
The rows' side (hashing categorical values, projection keys, bins of many rows) is
``jaximp._rows.hashing`` and ``jaximp._rows.featurize``; the CatBoost JSON reader is
``jaximp._importers.catboost_ctrs``.

CTR values, in float32 as CatBoost computes them (``(count + prior_num) / (total + prior_denom)``,
then ``(ctr + shift) * scale``): ``Borders`` (binary: positives / all; multiclass: the classes
above ``target_border_idx`` / all), ``Buckets`` (the class ``target_border_idx`` / all),
``Counter`` and ``FeatureFreq`` (the key's count / the table's ``counter_denominator``),
``BinarizedTargetMeanValue`` and ``FloatTargetMeanValue`` (target sum / count). A key missing
from the model's table (a category never seen in training) gives the CTR of zero counts,
``(prior_numerator / prior_denominator + shift) * scale`` (for ``Counter``, a count of 0 over the
table's denominator), exactly as in CatBoost.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

_COUNT_TYPES = ("Counter", "FeatureFreq")
_MEAN_TYPES = ("BinarizedTargetMeanValue", "FloatTargetMeanValue")
CTR_TYPES = ("Borders", "Buckets") + _COUNT_TYPES + _MEAN_TYPES


@dataclasses.dataclass(frozen=True, eq=False)
class Ctr:
    """One CTR of the model (``features_info.ctrs[i]`` with its ``ctr_data`` table).

    Attributes:
        ctr_type: one of ``CTR_TYPES``.
        cat_features: categorical feature indices of the projection, in hashing order.
        float_elements: ``(float feature index, border)`` binarized float features.
        one_hot_elements: ``(categorical feature index, value hash)`` exact-value elements.
        prior_num, prior_denom, shift, scale: the CTR's constants (float32).
        target_border_idx: the class (Buckets) or target border (Borders) counted as "good".
        borders: ``f32[n_borders]`` the CTR's sorted borders (its splits are ``value > border``).
        keys: ``u64[n_keys]`` sorted projection hashes of the table.
        counts: ``[n_keys, n_numbers]`` the table's numbers per key (class counts, a count, or
            sum/count).
        counter_denominator: Counter's denominator.
        target_classifier: the target the CTR's table counts (CatBoost's
            ``TargetBorderClassifierIdx``: one per target of a multi-target model; 0 when the
            model file does not say, as CatBoost's JSON export).
    """

    ctr_type: str
    cat_features: tuple[int, ...]
    float_elements: tuple[tuple[int, float], ...]
    one_hot_elements: tuple[tuple[int, int], ...]
    prior_num: float
    prior_denom: float
    shift: float
    scale: float
    target_border_idx: int
    borders: np.ndarray
    keys: np.ndarray
    counts: np.ndarray
    counter_denominator: float
    target_classifier: int = 0

    def values(self, key: np.ndarray) -> np.ndarray:
        """``f32[n]`` the CTR of rows with projection hashes ``key: u64[n]``."""
        f32 = np.float32
        at = np.minimum(np.searchsorted(self.keys, key), len(self.keys) - 1)
        found = (self.keys[at] == key) if len(self.keys) else np.zeros(key.shape, bool)
        counts = np.where(found[:, None], self.counts[at], 0) if len(self.keys) else np.zeros((len(key), 1))
        if self.ctr_type in _COUNT_TYPES:
            good = counts[:, 0].astype(f32)
            total = np.full(len(key), self.counter_denominator, f32)
        elif self.ctr_type in _MEAN_TYPES:
            good, total = counts[:, 0].astype(f32), counts[:, 1].astype(f32)
        elif self.ctr_type == "Buckets":
            good = counts[:, self.target_border_idx].astype(f32)
            total = counts.sum(axis=1).astype(f32)
        elif counts.shape[1] == 2:  # Borders of two classes: the second is "good", whatever the border
            good = counts[:, 1].astype(f32)
            total = counts.sum(axis=1).astype(f32)
        else:  # Borders: the classes above the target border are "good"
            good = counts[:, self.target_border_idx + 1:].sum(axis=1).astype(f32)
            total = counts.sum(axis=1).astype(f32)
        if self.ctr_type not in _COUNT_TYPES:  # an unseen key's count is 0 of the table's denominator
            total = np.where(found, total, f32(0))
        good = np.where(found, good, f32(0))
        ctr = (good + f32(self.prior_num)) / (total + f32(self.prior_denom))
        return ((ctr + f32(self.shift)) * f32(self.scale)).astype(f32)

    def bins(self, key: np.ndarray) -> np.ndarray:
        """``f32[n]`` the bin of the CTR of rows with projection hashes ``key``: the number of
        its borders below the value (what the kernels compare split thresholds with)."""
        return np.searchsorted(self.borders, self.values(key), side="left").astype(np.float32)


@dataclasses.dataclass(frozen=True, eq=False)
class Featurizer:
    """The description of a model's categorical splits: what maps raw columns to the evaluated
    features (``jaximp._rows.featurize`` runs it).

    Host-side and static: it is a static field of the ensemble, hashed and compared by a digest
    of the model's categorical description, so that kernels compile once per model shape.

    Attributes:
        n_columns: F, the model's input columns (float and categorical, in CatBoost's flat order).
        float_columns: the flat column of each float feature (evaluated features ``0..`` in order).
        cat_columns: the flat column of each categorical feature.
        one_hot: ``(categorical feature index, value hash)`` of each one-hot evaluated feature.
        ctrs: the CTR evaluated features, after the one-hot ones.
        float_nan_fill: per float feature, the value NaN takes in a binarized combination element
            (-inf for "Min"/"AsIs", +inf for "Max").
        digest: hash of the description (equality and hashing).
        float_borders: each float feature's sorted borders (its bins are counted here).
        bin_dtype: ``uint8``, or ``int32`` when a feature has more than 254 borders.
    """

    n_columns: int
    float_columns: tuple[int, ...]
    cat_columns: tuple[int, ...]
    one_hot: tuple[tuple[int, int], ...]
    ctrs: tuple[Ctr, ...]
    float_nan_fill: tuple[float, ...]
    digest: str
    float_borders: tuple[np.ndarray, ...] = dataclasses.field(repr=False)
    bin_dtype: Any = dataclasses.field(repr=False)

    def __hash__(self) -> int:
        return hash(self.digest)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Featurizer) and other.digest == self.digest

    @property
    def n_evaluated(self) -> int:
        """E: float features, then one-hot values, then CTRs."""
        return len(self.float_columns) + len(self.one_hot) + len(self.ctrs)

    def evaluated_columns(self, *, attributed: bool = False) -> list[tuple[int, ...]]:
        """For each evaluated feature, the flat columns of its elements, sorted: a CTR over a
        combination lists a column once per element (a float feature binarized at two borders
        twice), as CatBoost's PredictionValuesChange shares a split's effect per element.

        With ``attributed``, the set of columns CatBoost's SHAP attributes it to instead (its
        "combination class"): the projection's categorical values only, not the float features
        binarized into it nor its one-hot elements (both rules checked against CatBoost).
        """
        cat = self.cat_columns
        out = [(c,) for c in self.float_columns] + [(cat[i],) for i, _ in self.one_hot]
        for ctr in self.ctrs:
            cols = [cat[i] for i in ctr.cat_features]
            if not attributed:
                cols += [cat[i] for i, _ in ctr.one_hot_elements]
                cols += [self.float_columns[i] for i, _ in ctr.float_elements]
            out.append(tuple(sorted(cols)))
        return out

    def interaction_features(self) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
        """CatBoost's internal features of ``Interaction`` and the columns each is credited to.

        Internal features are the float features, the one-hot categorical features (all their
        values together) and the CTRs. ``CalcFeatureInteraction`` credits a float feature to
        its column and any other internal feature to the columns of its CTR projection's
        binarized float features and categorical values: a one-hot feature has no projection
        and is credited to no column (its interactions only count in the total), and a CTR's
        one-hot elements are not credited either.

        Returns:
            ``(internal feature of each evaluated feature [E], credited columns of each)``.
        """
        n_float, cat = len(self.float_columns), self.cat_columns
        one_hot_features = sorted({c for c, _ in self.one_hot})
        internal_of = list(range(n_float))
        internal_of += [n_float + one_hot_features.index(c) for c, _ in self.one_hot]
        first_ctr = n_float + len(one_hot_features)
        internal_of += [first_ctr + j for j in range(len(self.ctrs))]
        credited = [(c,) for c in self.float_columns] + [()] * len(one_hot_features)
        credited += [tuple(self.float_columns[f] for f, _ in ctr.float_elements)
                     + tuple(cat[i] for i in ctr.cat_features) for ctr in self.ctrs]
        return tuple(internal_of), tuple(credited)
