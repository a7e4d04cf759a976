"""CatBoost models as users have them: trees without splits, multi-target CTRs, ``.cbm`` files read
without CatBoost, ``catboost.Pool`` rows with categorical features, and the drop-in's pairs of
ShapInteractionValues on combinations of columns.

Oracles: CatBoost's own numbers of each model (``predict(prediction_type="RawFormulaVal")``,
``calc_leaf_indexes``, ``get_feature_importance``), CatBoost's JSON export (the dict jaximp's
``.cbm`` reader must give), and jaximp's numbers on the raw frame a Pool was built from (the
evaluated rows must be identical). Tolerances: ``rtol=1e-5, atol=1e-5 * max(1, magnitude)``
(float32 sums against CatBoost's float64); evaluated rows and leaf indices exactly.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import catboost
import models
import numpy as np
import pandas as pd
import pytest
from oracles import assert_close, catboost_interactions, catboost_shap, raw_output

import jaximp
from jaximp._importers.cbm import read_cbm
from jaximp._leaves.predict import KERNELS, predict_rows
from jaximp._rows import ctr_values, featurize, pools
from jaximp._rows.batching import features_first, map_rows
from jaximp._rows.hashing import projection_hash
from jaximp._rows.inputs import as_features, as_raw_columns
from jaximp._rows.tuning import ACCELERATOR, CPU

# Trees without splits -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", models.CATBOOST_NEW_USER)
def test_trees_without_splits(kind):
    """A first categorical model (CatBoost's defaults, one categorical column) has trees without
    splits (``"splits": null``); each adds its one leaf value, read from the .cbm file, the model
    object or the JSON export."""
    fitted = models.catboost_null_splits(kind)
    model, frame = fitted.model, fitted.X
    assert any(tree["splits"] is None for tree in fitted.json["oblivious_trees"])
    data = catboost.Pool(frame, label=fitted.y, cat_features=["c"])
    ens = jaximp.from_catboost(fitted.path)
    np.testing.assert_array_equal(ens.leaf_values, fitted.ens.leaf_values)  # from the model object
    raw = raw_output(model, data).reshape(len(frame), -1)
    assert_close(np.asarray(ens.predict(frame)).reshape(raw.shape), raw)
    if kind != "multiregression":  # its JSON export is refused (per-target CTRs)
        assert_close(np.asarray(models.from_json(fitted.json).predict(frame)).reshape(raw.shape), raw)
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, data), model.calc_leaf_indexes(data))
    values, expected = catboost_shap(model, data)
    assert_close(np.asarray(jaximp.shap_values(ens, frame)).reshape(values.shape), values)
    assert_close(np.asarray(jaximp.expected_value(ens)).reshape(-1), expected)
    assert_close(jaximp.prediction_values_change(ens), model.get_feature_importance(type="PredictionValuesChange"))
    if kind == "regression":
        exact, _ = catboost_shap(model, data, shap_calc_type="Exact")
        assert_close(np.asarray(jaximp.shap_values(ens, frame, method="exact")).reshape(exact.shape), exact)
        assert_close(jaximp.shap_interaction_values(ens, frame), catboost_interactions(model, data))
    if kind == "binary":
        assert_close(jaximp.loss_function_change(ens, frame, fitted.y),
                     model.get_feature_importance(data, type="LossFunctionChange"))


# Multi-target models with CTRs (one CTR table per target) -----------------------------------------------------


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.slow) if name == "multi_rmse" else name
                                  for name in models.CATBOOST_MULTI_TARGET])
def test_multi_target_ctrs(name):
    """A multi-target model keeps a CTR table per target, which its JSON export merges (the reloaded
    export predicts differently): read from the .cbm file or the model object, jaximp gives the
    model's numbers, and it refuses the JSON export, pointing to the .cbm file."""
    fitted = models.catboost_multi_target(name)
    model, ens = fitted.model, fitted.ens
    classifiers = {ctr.target_classifier for ctr in ens.featurizer.ctrs}
    assert len(classifiers) > 1
    frame, _ = models.explained("multiregression")
    data = models.pool(frame)
    raw = raw_output(model, data)
    values, expected = catboost_shap(model, data)
    for source in (ens, jaximp.from_catboost(model)):
        assert_close(source.predict(frame), raw)
        assert_close(source.predict(data), raw)
        assert_close(jaximp.shap_values(source, data), values)
        assert_close(jaximp.expected_value(source), expected)
    assert_close(jaximp.prediction_values_change(ens), model.get_feature_importance(type="PredictionValuesChange"))
    model_json, reloaded, path = models.json_reloaded(model)
    assert not np.allclose(raw_output(reloaded, data), raw)  # why the export is refused
    with pytest.raises(ValueError, match=r"multi-target model has CTR features.*\.cbm file"):
        jaximp.from_catboost(path)


# .cbm files ------------------------------------------------------------------------------------------------------


def _same(got, want, where="model"):
    """``got`` (jaximp's .cbm reader) holds everything ``want`` (CatBoost's JSON export) holds,
    numbers equal in float32; the CTR tables and identifiers are compared apart."""
    if isinstance(want, dict):
        for key, value in want.items():
            if key not in ("ctr_data", "identifier"):
                assert key in got, f"{where}.{key} missing"
                _same(got[key], value, f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), where
        for i, (a, b) in enumerate(zip(got, want)):
            _same(a, b, f"{where}[{i}]")
    elif isinstance(want, float) or isinstance(got, float):
        assert np.float32(got) == np.float32(want), (where, got, want)
    else:
        assert got == want, (where, got, want)


def _tables(model_json):
    """``{(CTR type, combination): [(sorted keys, numbers, denominator)]}`` of a model's tables."""
    out = {}
    for ctr in model_json.get("features_info", {}).get("ctrs", []):
        table = model_json["ctr_data"][ctr.get("table", ctr["identifier"])]
        if "keys" in table:
            keys, counts = np.asarray(table["keys"], np.uint64), np.asarray(table["counts"])
        else:
            stride, flat = table["hash_stride"], table["hash_map"]
            keys = np.array([int(k) for k in flat[::stride]], np.uint64)
            counts = np.array([flat[i + 1:i + stride] for i in range(0, len(flat), stride)]).reshape(len(keys), -1)
            keys, counts = keys[keys != np.uint64(2**64 - 1)], counts[keys != np.uint64(2**64 - 1)]
        order = np.argsort(keys)
        key = json.dumps([ctr["ctr_type"], ctr["elements"]], sort_keys=True)
        out.setdefault(key, []).append((keys[order], counts[order], table.get("counter_denominator")))
    return out


CBM_MODELS = {
    "ctr_types": lambda: models.catboost_categorical("ctr_types").model,
    "combinations_4": lambda: models.catboost_categorical("combinations_4").model,
    "multiclass": lambda: models.catboost_categorical("multiclass").model,
    "lossguide_mixed": lambda: models.catboost_categorical_trees("lossguide_mixed").trained,
    "depthwise_numeric": lambda: models.catboost_trees("multiclass", "Depthwise", 5, None, "Min").trained,
    "summed": lambda: models.summed()[0],
    "mean_ctr": lambda: models.catboost_mean_ctr().model,
    "null_splits": lambda: models.catboost_null_splits("binary").model,
}


@pytest.mark.parametrize("name", CBM_MODELS)
def test_cbm_reader_gives_the_json_export(name, tmp_path):
    """jaximp's .cbm reader gives the dict of CatBoost's JSON export: features, trees (oblivious
    and non-symmetric), metadata, scale and bias, and the same CTR tables."""
    model = CBM_MODELS[name]()
    model.save_model(tmp_path / "m.cbm")
    model.save_model(tmp_path / "m.json", format="json")
    got = read_cbm((tmp_path / "m.cbm").read_bytes())
    want = json.loads((tmp_path / "m.json").read_text())
    _same(got, want)
    mine, theirs = _tables(got), _tables(want)
    assert mine.keys() == theirs.keys()
    for key, tables in theirs.items():
        for keys, counts, denominator in tables:
            assert any(np.array_equal(k, keys) and np.allclose(c, counts) and d == denominator
                       for k, c, d in mine[key])


def test_cbm_files_import_without_catboost():
    """A .cbm file imports, and its model predicts, in a process where catboost cannot be imported."""
    fitted = models.catboost_categorical("combinations_2")
    path = os.path.join(os.path.dirname(models.write_json({})), "m.cbm")
    fitted.model.save_model(path)
    frame, _ = models.explained("binary")
    rows = os.path.join(os.path.dirname(path), "rows.pkl")
    frame.to_pickle(rows)
    script = ("import sys; sys.modules['catboost'] = None\n"
              "import pandas as pd, numpy as np, jaximp\n"
              f"ens = jaximp.from_catboost({path!r})\n"
              f"np.save(sys.argv[1], np.asarray(ens.predict(pd.read_pickle({rows!r}))))\n")
    out = os.path.join(os.path.dirname(path), "raw.npy")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd()] + sys.path))
    subprocess.run([sys.executable, "-c", script, out], check=True, env=env, timeout=120)
    assert_close(np.load(out), raw_output(fitted.model, models.pool(frame)))


# catboost.Pool rows with categorical features ------------------------------------------------------------------------


POOL_MODELS = {
    "ctr": lambda: models.catboost_categorical("ctr"),
    "combinations_4": lambda: models.catboost_categorical("combinations_4"),
    "multiclass": lambda: models.catboost_categorical("multiclass"),
    "depthwise_ctr": lambda: models.catboost_categorical_trees("depthwise_ctr"),  # slow: the drop-in tests probe it
    "lossguide_mixed": lambda: models.catboost_categorical_trees("lossguide_mixed"),
}


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.slow) if name == "depthwise_ctr" else name
                                  for name in POOL_MODELS])
def test_categorical_pools(name, tmp_path):
    """A Pool with categorical features, read through a probe built from the ensemble alone (here
    imported from a file, no model object at hand), gives exactly the evaluated rows of the frame
    it was built from (unseen categories and NaN included), hence the same numbers from every
    function of rows."""
    fitted = POOL_MODELS[name]()
    model = fitted.trained if fitted.trained is not None else fitted.model
    model.save_model(tmp_path / "m.cbm")
    ens = jaximp.from_catboost(tmp_path / "m.cbm")
    frame, y = models.explained("multiclass" if name in ("multiclass", "lossguide_mixed") else "binary")
    data = models.pool(frame, y)
    np.testing.assert_array_equal(as_features(data, ens, "test"), as_features(frame, ens, "test"))
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, data), jaximp.leaf_indices(ens, frame))
    np.testing.assert_array_equal(ens.predict(data), ens.predict(frame))
    np.testing.assert_array_equal(jaximp.shap_values(ens, data), jaximp.shap_values(ens, frame))
    reference = fitted.model  # for non-symmetric trees: the model reloaded from its JSON export
    assert_close(np.asarray(ens.predict(data)).reshape(len(frame), -1),
                 raw_output(reference, data).reshape(len(frame), -1))
    values, _ = catboost_shap(reference, data)
    assert_close(np.asarray(jaximp.shap_values(ens, data)).reshape(values.shape), values)


@pytest.mark.parametrize("layout", ["oblivious", "trees"])
def test_featurized_rows_reach_the_kernels_feature_major(layout):
    """A categorical model's rows come out of featurizing feature-major (Fortran order) and go to
    the kernels so, step after step (the last one partly padding), on one device and sharded over
    two: predictions, leaf indices and SHAP values (path-dependent, and Saabas for non-symmetric
    trees) equal CatBoost's, and predictions and leaf indices are identical to those of the same
    rows laid out row-major (which the kernels transpose); SHAP interaction values too."""
    if layout == "oblivious":
        fitted = models.catboost_categorical("combinations_2")
    else:
        fitted = models.catboost_categorical_trees("depthwise_ctr")
    ens, model = fitted.ens, fitted.model  # for non-symmetric trees, CatBoost's JSON reload
    frame = models.make_frame(2500, seed=7, unseen=True)
    x = as_features(frame, ens, "test")
    row_major = np.ascontiguousarray(x)
    kernels = KERNELS[layout]
    assert x.flags.f_contiguous and not x.flags.c_contiguous
    assert features_first(kernels.predict, x, CPU) and not features_first(kernels.predict, row_major, CPU)
    assert not features_first(kernels.predict, x, ACCELERATOR)  # a CPU trick
    data = models.pool(frame)
    expected_raw = raw_output(model, data)
    values, _ = catboost_shap(model, data)
    approximate, _ = catboost_shap(model, data, shap_calc_type="Approximate")
    for kw in (dict(batch_size=1024), dict(batch_size=1024, devices=2), {}):
        raw = predict_rows(ens, x, **kw)
        np.testing.assert_array_equal(raw, predict_rows(ens, row_major, **kw))
        assert_close(np.asarray(raw).reshape(expected_raw.shape), expected_raw)
        leaves = [map_rows(kernels.leaves, kernels.params(ens), rows, fn_name="test", host_dtype=np.int32,
                           rows_last=True, **{"batch_size": None, "devices": None, **kw}) for rows in (x, row_major)]
        np.testing.assert_array_equal(*leaves)
        np.testing.assert_array_equal(jaximp.leaf_indices(ens, frame, **kw), leaves[0])
        if layout == "oblivious":
            np.testing.assert_array_equal(leaves[0], model.calc_leaf_indexes(data))
        assert_close(np.asarray(jaximp.shap_values(ens, frame, **kw)).reshape(values.shape), values)
        if layout == "trees":
            assert_close(np.asarray(jaximp.shap_values(ens, frame, method="approximate", **kw))
                         .reshape(values.shape), approximate)
    if layout == "oblivious":
        few = frame.iloc[:300]
        pairs = catboost_interactions(model, models.pool(few))
        interactions = jaximp.shap_interaction_values(ens, few, batch_size=128)
        assert_close(np.asarray(interactions).reshape(pairs.shape), pairs)


def _fresh_features(frame, ens):
    """The evaluated rows of ``frame`` from a new CTR engine (no categories seen before)."""
    featurize._ENGINES.pop(ens.featurizer, None)
    return as_features(frame, ens, "test")


@pytest.mark.parametrize("name", ["combinations_4", "categorical_pairs"])
def test_ctr_tables_whole_filled_as_needed_or_hashed_give_the_same_bins(monkeypatch, name):
    """A projection's table of CTR bins (one categorical column or two, with bits) computed whole,
    filled as rows reach its positions, or replaced by hashing every row, and read by Arrow's
    gathers or NumPy's: the same evaluated rows, and CatBoost's predictions (unseen categories
    included)."""
    fitted = models.catboost_categorical(name)
    frame = models.make_frame(20_000, seed=8, unseen=True)
    expected = _fresh_features(frame, fitted.ens)
    for setting, value in (("_WHOLE_TABLE", 0), ("_WHOLE_TABLE", 1 << 30), ("_MAX_TABLE", 0),
                           ("_ARROW_ROWS", 1 << 30)):  # NumPy's gathers, as for few rows
        with monkeypatch.context() as patch:
            patch.setattr(ctr_values, setting, value)
            np.testing.assert_array_equal(_fresh_features(frame, fitted.ens), expected, err_msg=setting)
    assert_close(predict_rows(fitted.ens, expected), raw_output(fitted.model, models.pool(frame)))


@pytest.mark.parametrize("whole", [0, 1 << 30])
def test_ctr_tables_grow_with_new_categories(monkeypatch, whole):
    """Rows with categories the engine has not seen yet (its vocabularies grow, their categories
    move, the tables start again) give what a new engine gives: the memo is a pure function."""
    monkeypatch.setattr(ctr_values, "_WHOLE_TABLE", whole)
    fitted = models.catboost_categorical("combinations_4")
    first, later = models.make_frame(300, seed=3), models.make_frame(5_000, seed=9, unseen=True)
    _fresh_features(first, fitted.ens)
    grown = as_features(later, fitted.ens, "test")  # the same engine, after the first rows
    np.testing.assert_array_equal(grown, _fresh_features(later, fitted.ens))
    np.testing.assert_array_equal(as_features(first, fitted.ens, "test"), _fresh_features(first, fitted.ens))


@pytest.mark.parametrize("name", ["combinations_2", "categorical_pairs"])
@pytest.mark.parametrize("nan_fill", [-np.inf, np.inf])  # NaN as the smallest value (Min), or the largest (Max)
def test_binarized_float_elements_read_from_the_bins(name, nan_fill):
    """A CTR's binarized float element ``value > border`` read from the feature's bins (its
    border is one of the feature's) equals the comparison of the values, NaN included."""
    fitted = models.catboost_categorical(name)
    frame = models.make_frame(3_000, seed=5, unseen=True)
    frame.loc[::7, "f0"] = np.nan
    featurizer = fitted.ens.featurizer
    raw = as_raw_columns(frame, fitted.ens, "test", "X")
    fill = np.full(len(featurizer.float_columns), nan_fill, np.float32)
    bins = np.empty((len(featurizer.float_columns), len(frame)), featurizer.bin_dtype)
    featurize._float_bins(featurizer, raw.floats, fill, bins)
    engine = ctr_values.CtrValues(featurizer.ctrs, projection_hash, featurizer.float_borders)
    assert any(position is not None for _, elements, _ in engine._groups for *_, position in elements)
    from_bins = engine(raw.floats, raw.cat_hashes, fill, featurizer.bin_dtype, float_bins=bins)
    compared = ctr_values.CtrValues(featurizer.ctrs, projection_hash)(raw.floats, raw.cat_hashes, fill,
                                                                     featurizer.bin_dtype)
    np.testing.assert_array_equal(from_bins, compared)


def test_pools_read_in_slices(monkeypatch):
    """A Pool read in slices (bounded leaf indices at a time) gives the same rows."""
    fitted = models.catboost_categorical("combinations_4")
    frame, _ = models.explained("binary")
    monkeypatch.setattr(pools, "_CHUNK", 64)  # a few rows a slice
    np.testing.assert_array_equal(pools.pool_rows(models.pool(frame), fitted.ens, "test"),
                                  as_features(frame, fitted.ens, "test"))


def test_pools_of_mean_value_ctrs():
    """The probe is written as a .cbm (CatBoost's JSON reader rounds the fractional sums of
    mean-value CTRs, and so would misread the Pool): CatBoost's own leaves and numbers."""
    fitted = models.catboost_mean_ctr()
    frame, _ = models.explained("regression")
    data = models.pool(frame)
    np.testing.assert_array_equal(jaximp.leaf_indices(fitted.ens, data), fitted.model.calc_leaf_indexes(data))
    assert_close(fitted.ens.predict(data), raw_output(fitted.model, data))
    values, _ = catboost_shap(fitted.model, data)
    assert_close(jaximp.shap_values(fitted.ens, data), values[..., 0])


def test_counter_ctrs_with_a_prior_on_unseen_categories():
    """An unseen category's Counter CTR is a count of 0 over the table's denominator, not over 0:
    the two differ once the prior's numerator is not 0."""
    frame = models.make_frame(400, seed=0)
    counter = ["Counter:Prior=0.7/1"]
    model = catboost.CatBoost(dict(loss_function="RMSE", iterations=20, depth=4, random_seed=0, verbose=0,
                                   thread_count=1, allow_writing_files=False, cat_features=models.CAT,
                                   one_hot_max_size=1, simple_ctr=counter, combinations_ctr=counter))
    model.fit(frame, models.make_target(frame, "regression"))
    rows, _ = models.explained("regression")
    assert (rows.c1 == "never-seen").any()
    assert_close(jaximp.from_catboost(model).predict(rows), raw_output(model, models.pool(rows)))


def test_pool_refusals():
    ens = models.catboost_categorical("ctr").ens
    frame, _ = models.explained("binary")
    with pytest.raises(TypeError, match="predict: X is a catboost.Pool that CatBoost cannot read"):
        ens.predict(catboost.Pool(frame[["f0", "f1"]]))
    with pytest.raises(TypeError, match="raw categorical values"):  # permuting columns needs the raw values
        jaximp.permutation_importance(ens, models.pool(frame, np.zeros(len(frame))), np.zeros(len(frame)))


def test_float_categories_refused_beside_equal_integers():
    """A float in an integer categorical column (``5.0`` in an object column, or a category of a
    float dtype) is refused as CatBoost refuses it, also once the integer it equals was hashed
    (by an earlier call, or earlier in the same column)."""
    ens = models.catboost_categorical("ctr").ens
    frame, _ = models.explained("binary")
    ens.predict(frame)  # hashes the integer categories of c2
    value = int(frame.c2.iloc[1])
    for order in ([value, float(value)], [float(value), value]):  # the first of two equal values is kept
        rows = frame.astype({"c2": object})
        rows.loc[rows.index[:2], "c2"] = pd.Series(order, index=rows.index[:2], dtype=object)
        with pytest.raises(catboost.CatBoostError, match="cat_features must be integer or string"):
            models.pool(rows)
        with pytest.raises(TypeError, match=rf"column 'c2' is categorical: .*strings or integers; got {value}\.0"):
            ens.predict(rows)
    rows = frame.astype({"c2": float}).astype({"c2": "category"})
    with pytest.raises(catboost.CatBoostError, match="cat_features must be integer or string"):
        models.pool(rows)
    with pytest.raises(TypeError, match=r"column 'c2' is categorical: .*strings or integers; got \d\.0"):
        ens.predict(rows)


# The drop-in's ShapInteractionValues of one pair ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["categorical_pairs", "multiclass"])
def test_interaction_pairs_of_combinations(name):
    """With ``interaction_indices=(i, j)``, CatBoost puts on the diagonal the main effects of the
    combinations that read both columns (a CTR over ``c0`` and ``c3``, say), divided by their
    sizes: jaximp's drop-in gives CatBoost's numbers for every pair."""
    fitted = models.catboost_categorical(name)
    frame, _ = models.explained("binary")
    data = models.pool(frame.iloc[:6])
    assert any(len(player) > 1 for player in fitted.ens.players)
    for pair in itertools.product(range(fitted.ens.n_features), repeat=2):
        want = fitted.model.get_feature_importance(data, type="ShapInteractionValues", interaction_indices=list(pair))
        got = jaximp.get_feature_importance(fitted.model, data, type="ShapInteractionValues",
                                            interaction_indices=list(pair))
        assert_close(got, want)


@pytest.mark.parametrize("dtype", ["int64", "Int64", "category"])
def test_multiclass_interaction_pairs_of_integer_categories(dtype):
    """A multiclass model whose categorical columns are integers, one-hot (up to 6 values) and
    CTRs over them and their combinations: every pair of ShapInteractionValues is CatBoost's,
    whichever way pandas holds the integers."""
    frame = models.make_frame(400, seed=0)
    y = models.make_target(frame, "multiclass")
    frame = frame.assign(c0=frame.c0.map("abcd".index), c1=frame.c1.str[1:].astype(int))
    frame[["c0", "c1", "c2"]] = frame[["c0", "c1", "c2"]].astype(dtype)
    model = catboost.CatBoostClassifier(loss_function="MultiClass", iterations=12, depth=4, learning_rate=0.3,
                                        one_hot_max_size=6, max_ctr_complexity=3, random_seed=0, verbose=0,
                                        thread_count=1, allow_writing_files=False, cat_features=models.CAT)
    model.fit(frame, y)
    assert any(len(player) > 1 for player in jaximp.from_catboost(model).players)  # a CTR of a combination
    data = catboost.Pool(frame.iloc[:8], cat_features=models.CAT)
    for pair in itertools.product(range(frame.shape[1]), repeat=2):
        want = model.get_feature_importance(data, type="ShapInteractionValues", interaction_indices=list(pair))
        got = jaximp.get_feature_importance(model, data, type="ShapInteractionValues", interaction_indices=list(pair))
        assert_close(got, want)
