"""CatBoost's categorical splits as numeric columns: the featurizer every categorical model uses.

A CatBoost model with categorical features splits on three kinds of binary features (CatBoost's
``TModelTrees``, the ``split_index`` order of its JSON export): float features against borders,
one-hot features (a categorical value equals one of the model's values) and CTRs (a target
statistic of a categorical value, or of a combination of categorical values and binarized float
features, against borders). Each becomes one column of the *evaluated features* ``f32[N, E]``
that every kernel reads, so that every split stays ``x[e] > border``:

* a float feature: the raw value (NaN treated by the kernels, as for numeric models);
* a one-hot value ``v`` of categorical feature ``c``: ``1.0`` where ``hash(c) == v`` else ``0.0``
  (one split at border 0.5);
* a CTR: its value, computed here exactly as CatBoost's model calcer does.

The kernels only compare bins with split thresholds (``bin = #{borders < value}``), so the
featurizer hands them bins directly (``u8``): no border search is spent on the many CTRs a model
has, and the rows move 4 times fewer bytes than float values would.

Hashing (CatBoost ``CalcCatFeatureHash``): a categorical value is turned into a string (``str``
as is, integers and booleans in decimal; floats and NaN are refused, as CatBoost refuses them), hashed with CityHash64 v1.0.2 (``clickhouse-cityhash``), and its low 32 bits kept as
a signed ``int32``. A CTR's key is the projection hash: ``h = 0``, then ``h = M * (h + M * e)``
(mod 2**64, ``M = 0x4906ba494954cb65``) over the projection's categorical values (their
``int32`` hashes sign-extended), then its binarized float features and one-hot elements (0/1).
A key missing from the model's table (a category never seen in training) gives the CTR of zero
counts, ``(prior_numerator / prior_denominator + shift) * scale``, exactly as in CatBoost.

CTR values, in float32 as CatBoost computes them (``(count + prior_num) / (total + prior_denom)``,
then ``(ctr + shift) * scale``): ``Borders`` (binary: positives / all; multiclass: the classes
above ``target_border_idx`` / all), ``Buckets`` (the class ``target_border_idx`` / all),
``Counter`` and ``FeatureFreq`` (the key's count / the table's ``counter_denominator``),
``BinarizedTargetMeanValue`` and ``FloatTargetMeanValue`` (target sum / count).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import numpy as np

from jaximp._ctr_values import CtrValues

_MAGIC = np.uint64(0x4906BA494954CB65)
_EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)  # an empty slot of CatBoost's hash tables
_COUNT_TYPES = ("Counter", "FeatureFreq")
_MEAN_TYPES = ("BinarizedTargetMeanValue", "FloatTargetMeanValue")
CTR_TYPES = ("Borders", "Buckets") + _COUNT_TYPES + _MEAN_TYPES


def cat_hash(value: Any) -> int:
    """CatBoost's ``CalcCatFeatureHash`` of one categorical value, as a signed int32.

    Raises:
        TypeError: ``value`` is neither a string nor an integer (CatBoost refuses floats and
            NaN too: "cat_features must be integer or string").
    """
    from clickhouse_cityhash.cityhash import CityHash64

    if isinstance(value, bytes):
        key = value
    elif isinstance(value, str):
        key = value.encode("utf-8")
    elif isinstance(value, (int, np.integer, bool, np.bool_)):  # True -> "1", as CatBoost
        key = str(int(value)).encode()
    else:
        raise TypeError(f"categorical values must be strings or integers; got {value!r}")
    h = CityHash64(key) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def hash_column(values: Any) -> np.ndarray:
    """``i64[N]`` the int32 hash of each value of one categorical column (each distinct value
    hashed once).

    Args:
        values: a 1-D NumPy array (object, string or integer dtype) or a pandas Series
            (``category`` dtype included).

    Raises:
        TypeError: a value that is neither a string nor an integer (NaN and None included).
    """
    codes, uniques = _factorize(values)
    if (codes < 0).any():
        raise TypeError("categorical values must be strings or integers; got a missing value "
                        "(NaN/None: CatBoost refuses them too, convert them to a string such as 'nan')")
    table = np.fromiter((cat_hash(u) for u in uniques), np.int64, len(uniques))
    return table[codes]


def _factorize(values: Any) -> tuple[np.ndarray, Any]:
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is optional; NumPy's unique works too
        pd = None
    if pd is not None:
        if isinstance(values, pd.Series) and isinstance(values.dtype, pd.CategoricalDtype):
            return np.asarray(values.cat.codes), list(values.cat.categories)
        codes, uniques = pd.factorize(np.asarray(values, dtype=object), use_na_sentinel=True)
        return codes, list(uniques)
    array = np.asarray(values, dtype=object)
    if any(v is None or (isinstance(v, float) and np.isnan(v)) for v in array):
        return np.full(len(array), -1), []
    uniques, codes = np.unique(array, return_inverse=True)
    return codes, list(uniques)


def projection_hash(keys: list[np.ndarray], n: int) -> np.ndarray:
    """``u64[n]`` CatBoost's ``CalcHash`` folded over ``keys`` (each ``[n]``, int64 values)."""
    h = np.zeros(n, np.uint64)
    with np.errstate(over="ignore"):
        for key in keys:
            h = _MAGIC * (h + _MAGIC * key.astype(np.int64).view(np.uint64))
    return h


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
        borders: ``f32[B]`` the CTR's sorted borders (its splits are ``value > border``).
        keys: ``u64[M]`` sorted projection hashes of the table.
        counts: ``[M, S]`` the table's numbers per key (class counts, a count, or sum/count).
        counter_denominator: Counter's denominator.
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
        else:  # Borders: the classes above the target border are "good"
            good = counts[:, self.target_border_idx + 1:].sum(axis=1).astype(f32)
            total = counts.sum(axis=1).astype(f32)
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
    """Raw columns -> evaluated split features ``f32[N, E]`` of a model with categorical features.

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
        ctr_values: evaluates the CTRs, memoizing the values of categories already seen.
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
    ctr_values: CtrValues = dataclasses.field(repr=False)

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

    def __call__(self, floats: np.ndarray, cat_hashes: np.ndarray) -> np.ndarray:
        """``[N, E]`` the bin of every evaluated feature: ``#{borders < value}``, as ``u8`` (``i32``
        when a feature has more than 254 borders).

        Args:
            floats: ``f32[N, n_float]`` the float features, in float-feature order.
            cat_hashes: ``i64[N, n_cat]`` the int32 hash of each categorical value.
        """
        n = floats.shape[0]
        out = np.empty((self.n_evaluated, n), self.bin_dtype)  # feature-major, transposed at the end
        fill = np.asarray(self.float_nan_fill, np.float32)
        nan = np.isnan(floats)
        for f, borders in enumerate(self.float_borders):  # NaN per the feature's mode
            column = floats[:, f]
            out[f] = np.searchsorted(borders, np.where(nan[:, f], fill[f], column) if nan[:, f].any() else column)
        n_float = len(self.float_columns)
        for j, (c, value) in enumerate(self.one_hot):
            out[n_float + j] = cat_hashes[:, c] == value
        out[n_float + len(self.one_hot):] = self.ctr_values(floats, cat_hashes, fill, self.bin_dtype)
        return out.T


def featurizer_from_json(model_json: dict, float_features: list[dict], nan_fill: list[float]) -> Featurizer:
    """The featurizer of a CatBoost JSON model with categorical features.

    Args:
        model_json: the parsed JSON export.
        float_features: ``features_info.float_features`` sorted by ``flat_feature_index``.
        nan_fill: per float feature, the value NaN takes against borders.

    Raises:
        ValueError: an unknown CTR type or combination element, or a CTR without its table.
    """
    info = model_json["features_info"]
    cats = sorted(info.get("categorical_features", []), key=lambda c: c["feature_index"])
    one_hot = tuple((c["feature_index"], int(v)) for c in cats for v in c.get("values", []))
    ctrs = tuple(_ctr(ctr, model_json.get("ctr_data", {})) for ctr in info.get("ctrs", []))
    description = json.dumps(
        [info.get("categorical_features"), info.get("ctrs"), sorted(model_json.get("ctr_data", {}).items())],
        sort_keys=True,
    )
    n_columns = len(float_features) + len(cats)
    float_borders = tuple(np.asarray(f.get("borders", []), np.float32) for f in float_features)
    most_borders = max([1] + [len(b) for b in float_borders] + [len(c.borders) for c in ctrs])
    return Featurizer(
        n_columns=n_columns,
        float_columns=tuple(f["flat_feature_index"] for f in float_features),
        cat_columns=tuple(c["flat_feature_index"] for c in cats),
        one_hot=one_hot,
        ctrs=ctrs,
        float_nan_fill=tuple(nan_fill),
        digest=hashlib.sha256(description.encode()).hexdigest(),
        float_borders=float_borders,
        bin_dtype=np.uint8 if most_borders < 255 else np.int32,
        ctr_values=CtrValues(ctrs, projection_hash),
    )


def _ctr(ctr: dict, ctr_data: dict) -> Ctr:
    ctr_type = ctr["ctr_type"]
    if ctr_type not in CTR_TYPES:
        raise ValueError(f"unknown CTR type {ctr_type!r}")
    cat_features, float_elements, one_hot_elements = [], [], []
    for element in ctr["elements"]:
        kind = element["combination_element"]
        if kind == "cat_feature_value":
            cat_features.append(int(element["cat_feature_index"]))
        elif kind == "float_feature":
            float_elements.append((int(element["float_feature_index"]), float(element["border"])))
        elif kind == "cat_feature_exact_value":
            one_hot_elements.append((int(element["cat_feature_index"]), int(element["value"])))
        else:
            raise ValueError(f"unknown CTR combination element {kind!r}")
    table = ctr_data.get(ctr["identifier"])
    if table is None:
        raise ValueError(f"the CTR {ctr['identifier']} has no ctr_data table")
    stride = int(table["hash_stride"])
    flat = table["hash_map"]
    keys = np.array([int(k) for k in flat[0::stride]], np.uint64)
    counts = np.array([flat[i + 1: i + stride] for i in range(0, len(flat), stride)], np.float64)
    counts = counts.reshape(len(keys), stride - 1)
    real = keys != _EMPTY
    order = np.argsort(keys[real], kind="stable")
    return Ctr(
        ctr_type=ctr_type,
        cat_features=tuple(cat_features),
        float_elements=tuple(float_elements),
        one_hot_elements=tuple(one_hot_elements),
        prior_num=float(ctr.get("prior_numerator", 0.0)),
        prior_denom=float(ctr.get("prior_denomerator", ctr.get("prior_denominator", 1.0))),
        shift=float(ctr.get("shift", 0.0)),
        scale=float(ctr.get("scale", 1.0)),
        target_border_idx=int(ctr.get("target_border_idx", 0)),
        borders=np.asarray(ctr["borders"], np.float32),
        keys=keys[real][order],
        counts=counts[real][order],
        counter_denominator=float(table.get("counter_denominator", 0)),
    )
