"""Scale: where results live, results that do not depend on batch sizes or devices, global
importances without the per-row matrix, default step sizes, several devices and the persistent
compilation cache. (Permutation importance, LossFunctionChange and PVC with rows check their own
batch sizes and devices in tests/test_importances_*.py; files streamed by explain_files:
tests/test_frontends_files.py.)

Oracles: the same functions on host rows, in one step and on one device (results must be
identical: the same compiled block program runs every row), and the mean of the per-row values
computed in memory in float64 (global importances add float32 sums of 1024-row blocks, so they
agree to about ``1024 * 6e-8``: ``rtol=1e-5`` of the largest entry).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys
import textwrap

import catboost
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from models import CATBOOST_TREES, catboost_trees, depthwise_multiclass, explained_rows, make_data, train
from oracles import assert_close, mean_abs

import jaximp
from jaximp._rows import batching as _batching

# The module's heaviest checks on the Depthwise model (every tree kernel compiled for rows on a
# second device) run with -m slow; the same functions of that model run by default in the tests of
# global importances below and of files (test_frontends_files.py), and on the oblivious model here.
OBLIVIOUS_BY_DEFAULT = pytest.mark.parametrize("ensemble", ["oblivious", pytest.param("tree", marks=pytest.mark.slow)],
                                               indirect=True)


def row_functions(ens, X):
    """Every public function of rows, as ``name -> fn(rows)``."""
    background = X[:40]
    explainer = jaximp.Explainer(ens)
    return {
        "predict": lambda x: jaximp.predict(ens, x),
        "leaf_indices": lambda x: jaximp.leaf_indices(ens, x),
        "shap_values": lambda x: jaximp.shap_values(ens, x),
        "shap_values interventional": lambda x: jaximp.shap_values(ens, x, method="interventional",
                                                                  background=background),
        "shap_values approximate": lambda x: jaximp.shap_values(ens, x, method="approximate"),
        "shap_interaction_values": lambda x: jaximp.shap_interaction_values(ens, x),
        "shap_importance": lambda x: jaximp.shap_importance(ens, x),
        "shap_interaction_importance": lambda x: jaximp.shap_interaction_importance(ens, x),
        "Explainer.shap_values": lambda x: explainer.shap_values(x),
        "prediction_values_change with rows": lambda x: jaximp.prediction_values_change(ens, x),
    }


# 1. Where results live ---------------------------------------------------------------------


@OBLIVIOUS_BY_DEFAULT
def test_results_live_where_the_rows_are(ensemble):
    ens, X = ensemble
    x = X[:300]
    device = jax.devices()[-1]  # conftest forces 2 CPU devices: not the default one
    on_device = jax.device_put(jnp.asarray(x), device)
    for name, fn in row_functions(ens, X).items():
        host, resident = fn(x), fn(on_device)
        assert isinstance(host, np.ndarray), name
        assert isinstance(resident, jax.Array) and resident.devices() == {device}, name
        assert resident.dtype == host.dtype and resident.shape == host.shape, name
        np.testing.assert_array_equal(np.asarray(resident), host, err_msg=name)


def test_functions_of_the_model_alone_return_jax_arrays(ensemble):
    ens, X = ensemble
    outputs = [jaximp.prediction_values_change(ens), jaximp.expected_value(ens), jaximp.Explainer(ens).expected_value,
               jaximp.expected_value(ens, method="interventional", background=X[:20])]
    if isinstance(ens, jaximp.ObliviousEnsemble):
        outputs += [jaximp.interaction(ens), jaximp.split_importance(ens, "gain")]
    for out in outputs:
        assert isinstance(out, jax.Array)


# 2. Batch sizes and devices -------------------------------------------------------------------


@pytest.mark.parametrize("batch_size", [1, 7, 64, 1000])
def test_leaves_do_not_depend_on_batch_size(batch_size):
    model, X, _, _ = train("multiclass", depth=6)
    ens = jaximp.from_catboost(model)
    np.testing.assert_array_equal(ens.predict(X, batch_size=batch_size), ens.predict(X))
    np.testing.assert_array_equal(
        jaximp.leaf_indices(ens, X, batch_size=batch_size), jaximp.leaf_indices(ens, X)
    )


@pytest.mark.parametrize("method", ["path_dependent", "exact", "approximate", "interventional"])
def test_shap_does_not_depend_on_batch_size(method):
    model, X, _, _ = train("multiclass", depth=6)
    ens = jaximp.from_catboost(model)
    background = X[:25] if method == "interventional" else None
    expected = jaximp.shap_values(ens, X, method=method, background=background)
    for batch_size in (1, 7, 300):
        got = jaximp.shap_values(ens, X, method=method, background=background, batch_size=batch_size)
        np.testing.assert_array_equal(got, expected)


def test_steps_copied_to_the_host_in_two_threads_give_the_same_results(monkeypatch):
    """Large steps are copied to the host by two threads, each its half of the result's memory
    (the trees of a tree-major leaf table, the rows of row-major values): with every copy split,
    leaves, predictions (one output or several) and SHAP values of several steps are identical
    to one-thread copies, and the result keeps its memory order."""
    from jaximp._rows import threads, tuning

    model, X, _, _ = train("multiclass", depth=6)
    ens = jaximp.from_catboost(model)
    X = np.resize(X, (2500, X.shape[1]))  # three steps of 1024 rows
    regression = jaximp.from_catboost(train("regression", depth=6)[0])
    calls = {
        "leaf_indices": lambda: jaximp.leaf_indices(ens, X, batch_size=1024),
        "predict": lambda: jaximp.predict(ens, X, batch_size=1024),
        "predict of one output": lambda: jaximp.predict(regression, X, batch_size=1024),  # 1-D
        "shap_values": lambda: jaximp.shap_values(ens, X, batch_size=1024),
    }
    expected = {name: call() for name, call in calls.items()}
    splits = []
    monkeypatch.setattr(tuning, "CPU", dataclasses.replace(tuning.CPU, split_copy_bytes=1))
    original = threads.worker
    monkeypatch.setattr(threads, "worker", lambda name: splits.append(name) or original(name))
    for name, call in calls.items():
        got = call()
        np.testing.assert_array_equal(got, expected[name])
        assert got.flags.f_contiguous == expected[name].flags.f_contiguous, name
    assert len(splits) >= 3 * len(calls)  # every step of every call was split


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork: POSIX only")
@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # JAX's: the child does not use JAX
def test_a_forked_process_makes_its_own_helper_thread():
    """The helper thread of host copies and featurization is made once per process: a process
    forked from one that used it (where that thread does not exist) gets a thread that runs its
    work, instead of waiting forever on the parent's."""
    from jaximp._rows import threads

    assert threads.worker("jaximp-test").submit(lambda: 7).result(timeout=10) == 7
    assert threads.worker("jaximp-test") is threads.worker("jaximp-test")
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 only if its helper ran the work
        try:
            ran = threads.worker("jaximp-test").submit(lambda: 7).result(timeout=10) == 7
        except BaseException:  # noqa: BLE001 - reported through the exit code
            ran = False
        os._exit(0 if ran else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.slow  # by default, TreeEnsemble steps and devices: the tests of rows on a device and of permutation
def test_tree_ensembles_do_not_depend_on_batch_size():
    fitted = catboost_trees(*CATBOOST_TREES[1])
    ens, x = fitted.ens, explained_rows(fitted.X, 300)
    whole = jaximp.predict(ens, x)
    np.testing.assert_array_equal(jaximp.predict(ens, x, batch_size=64), whole)
    np.testing.assert_array_equal(jaximp.predict(ens, x, devices=2), whole)
    np.testing.assert_array_equal(jaximp.leaf_indices(ens, x, batch_size=100), jaximp.leaf_indices(ens, x))
    np.testing.assert_array_equal(jaximp.shap_values(ens, x, batch_size=64), jaximp.shap_values(ens, x))


def test_leaves_sharded_over_devices(regression_model):
    _, ens, X, _ = regression_model
    expected = ens.predict(X)
    np.testing.assert_array_equal(ens.predict(X, devices=1), expected)
    np.testing.assert_array_equal(ens.predict(X, devices=[jax.devices()[0]]), expected)
    if len(jax.devices()) >= 2:
        np.testing.assert_array_equal(ens.predict(X, devices=2, batch_size=64), expected)
        np.testing.assert_array_equal(jaximp.leaf_indices(ens, X, devices=2), jaximp.leaf_indices(ens, X))
    with pytest.raises(ValueError, match="devices must be between 1 and"):
        ens.predict(X, devices=1000)
    with pytest.raises(TypeError, match="devices must be None, an int or a list"):
        ens.predict(X, devices="gpu")
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        ens.predict(X, batch_size=0)


def test_shap_sharded_over_devices():
    model, X, _, _ = train("multiclass", depth=5)
    ens = jaximp.from_catboost(model)
    for method, background in (("path_dependent", None), ("interventional", X[:33])):
        expected = jaximp.shap_values(ens, X, method=method, background=background)
        np.testing.assert_array_equal(jaximp.shap_values(ens, X, method=method, background=background, devices=1),
                                      expected)
        if len(jax.devices()) >= 2:
            got = jaximp.shap_values(ens, X, method=method, background=background, devices=2, batch_size=64)
            np.testing.assert_array_equal(got, expected)


# 3. Global importances ---------------------------------------------------------------------


def assert_mean_close(got, expected):
    assert_close(got, expected, floor=0.0)


@pytest.mark.parametrize("method", ["path_dependent", "interventional", "approximate", "exact"])
def test_shap_importance_is_the_mean_absolute_shap_value(ensemble, method):
    ens, X = ensemble
    if method == "exact" and isinstance(ens, jaximp.TreeEnsemble):
        pytest.skip("exact SHAP is defined for oblivious trees only (as in CatBoost)")
    kw = dict(method=method, background=X[:40] if method == "interventional" else None)
    got = jaximp.shap_importance(ens, X, **kw)
    assert got.shape == (ens.n_features, ens.n_outputs) and got.dtype == np.float32
    assert_mean_close(got, mean_abs(jaximp.shap_values(ens, X, **kw)))


def test_shap_interaction_importance_is_the_mean_absolute_interaction(ensemble):
    ens, X = ensemble
    got = jaximp.shap_interaction_importance(ens, X)
    f = ens.n_features
    assert got.shape == (f, f, ens.n_outputs)
    assert_mean_close(got, mean_abs(jaximp.shap_interaction_values(ens, X)))
    np.testing.assert_array_equal(got, np.swapaxes(got, 0, 1))


def test_global_importances_do_not_depend_on_batch_size_or_devices():
    model, X, _, _ = train("regression", n=3000)
    ens = jaximp.from_catboost(model)
    expected = jaximp.shap_importance(ens, X)
    assert expected.shape == (ens.n_features,)
    for kw in (dict(batch_size=1024), dict(batch_size=2048), dict(devices=2), dict(devices=2, batch_size=1)):
        np.testing.assert_array_equal(jaximp.shap_importance(ens, X, **kw), expected, err_msg=str(kw))
    pairs = jaximp.shap_interaction_importance(ens, X)
    np.testing.assert_array_equal(jaximp.shap_interaction_importance(ens, X, batch_size=1024, devices=2), pairs)


def test_categorical_columns_get_the_mean_of_their_shared_values():
    """Mean |SHAP| per column is taken after a combination's value is shared among its columns."""
    import pandas as pd

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.choice(list("pqrstu"), 600), "b": rng.choice(list("xyz"), 600),
                          "num": rng.normal(size=600).astype(np.float32)})
    y = (frame.a.isin(["p", "q"]) ^ (frame.b == "x")).astype(float) + frame.num
    model = catboost.CatBoostRegressor(iterations=20, depth=3, cat_features=["a", "b"], max_ctr_complexity=2,
                                       one_hot_max_size=2, random_seed=0, verbose=0, thread_count=1,
                                       allow_writing_files=False).fit(frame, y)
    ens = jaximp.from_catboost(model)
    assert_mean_close(jaximp.shap_importance(ens, frame), mean_abs(jaximp.shap_values(ens, frame)))


def test_shap_importance_under_grad_and_jit():
    """A traced model takes the one-call path: the same mean, differentiable in the leaf values."""
    model, X, _, _ = train("regression")
    ens = jaximp.from_catboost(model)

    def total(values):
        import dataclasses

        return jaximp.shap_importance(dataclasses.replace(ens, leaf_values=values), X).sum()

    value, grad = jax.jit(jax.value_and_grad(total))(ens.leaf_values)
    assert_mean_close(value, float(jaximp.shap_importance(ens, X).astype(np.float64).sum()))
    assert grad.shape == ens.leaf_values.shape and np.isfinite(np.asarray(grad)).all()


def test_bad_arguments():
    model, X, _, _ = train("regression")
    ens = jaximp.from_catboost(model)
    with pytest.raises(ValueError, match="method"):
        jaximp.shap_importance(ens, X, method="bogus")
    with pytest.raises(ValueError, match="background"):
        jaximp.shap_importance(ens, X, method="interventional")
    with pytest.raises(ValueError, match="batch_size"):
        jaximp.shap_interaction_importance(ens, X, batch_size=0)
    with pytest.raises(ValueError, match="columns|features"):
        jaximp.shap_importance(ens, X[:, :3])


# 4. Default step sizes ---------------------------------------------------------------------


def test_default_steps_fit_the_device(monkeypatch):
    """A default step's output takes at most 1/16 of the device's memory and at most the tuning's
    budget, down to one block, and blocks shrink for outputs too wide for that: interaction values
    of F = 200 features on a 16 GB device, on a 24 GB host and on a 1 GB one."""
    from jaximp._rows.tuning import CPU

    device = jax.devices()[0]
    for memory in (16 << 30, 24 << 30, 1 << 30):
        monkeypatch.setattr(_batching, "device_memory", lambda _d, m=memory: m)
        for row_floats in (50, 200 * 200, 200 * 200 * 10):
            step, block = _batching.step_shape(None, device, "f", row_floats)
            budget = min(memory // 16, CPU.step_output_bytes)
            assert step % block == 0 and 4 * row_floats * step <= budget, (memory, row_floats)
            assert 4 * row_floats * step > budget // 2 or step == CPU.step_rows, (memory, row_floats)  # not smaller
    monkeypatch.undo()
    assert _batching.step_shape(None, device, "f") == _batching.step_shape(None, device, "f", 1)
    assert _batching.step_shape(1000, device, "f", 200 * 200)[0] == 1024  # explicit: rounded up


WIDE_STEP_BYTES = 64 << 20  # the documented budget of a default step's output on a CPU


@functools.cache
def wide_model(layout: str):
    """A model of 200 features (20 trees of depth 6) and 600 rows: oblivious (CatBoost) or general
    trees (XGBoost)."""
    X, y = make_data("regression", n=600, n_features=200)
    if layout == "oblivious":
        model = catboost.CatBoostRegressor(iterations=20, depth=6, random_seed=0, verbose=0, thread_count=1,
                                           allow_writing_files=False).fit(X, y)
        return jaximp.from_catboost(model), X
    import xgboost

    return jaximp.from_xgboost(xgboost.XGBRegressor(n_estimators=20, max_depth=6, n_jobs=1).fit(X, y)), X


def record_steps(monkeypatch) -> list:
    """Every step program run from now on, as ``(kernel, output bytes, temporary bytes)`` from XLA's
    memory analysis of the compiled step (once per step shape)."""
    seen, shapes = [], set()
    sharded = _batching.sharded_step

    def recording(kernel, devices, static, rows_at, rows_in="first"):
        step = sharded(kernel, devices, static, rows_at, rows_in)

        def run(params, rows):
            shape = (kernel, static, tuple(a.shape for a in jax.tree_util.tree_leaves(rows)))
            if shape not in shapes:
                shapes.add(shape)
                memory = step.lower(params, rows).compile().memory_analysis()
                seen.append((kernel.__name__, memory.output_size_in_bytes, memory.temp_size_in_bytes))
            return step(params, rows)

        return run

    monkeypatch.setattr(_batching, "sharded_step", recording)
    return seen


@pytest.mark.parametrize("method", ["path_dependent", "interventional"])
@pytest.mark.parametrize("layout", ["oblivious", "trees"])
def test_wide_interaction_values_take_bounded_steps(monkeypatch, layout, method):
    """Interaction values of 200 features (160 KB a row) go in default steps whose output takes
    at most the documented 64 MiB and whose program (output and intermediates, by XLA's memory
    analysis) at most twice that, and no host array the size of all rows' values beyond the result
    (the interventional values over the model's subsets are laid out in each step); the numbers
    are the bits of one-row batches and of steps sized by the device's memory alone."""
    import tracemalloc

    from jaximp._rows import tuning

    ens, X = wide_model(layout)
    kwargs = {"method": method, "background": X[:50] if method == "interventional" else None}
    jaximp.shap_interaction_values(ens, X[:2], **kwargs)  # the model's tables, once
    steps = record_steps(monkeypatch)
    tracemalloc.start()
    try:
        got = jaximp.shap_interaction_values(ens, X, **kwargs)
        host_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got.shape == (600, 200, 200) and steps
    for kernel, output, temporary in steps:
        assert output <= WIDE_STEP_BYTES and output + temporary <= 2 * WIDE_STEP_BYTES, (kernel, output, temporary)
    assert host_peak - got.nbytes <= got.nbytes // 16, host_peak  # nothing the size of all rows' values
    np.testing.assert_array_equal(jaximp.shap_interaction_values(ens, X[:3], batch_size=1, **kwargs), got[:3])
    np.testing.assert_array_equal(jaximp.shap_interaction_values(ens, X[3], **kwargs), got[3])
    assert tuning.CPU.step_output_bytes == WIDE_STEP_BYTES  # the budget documented
    monkeypatch.setattr(tuning, "CPU", dataclasses.replace(tuning.CPU, step_output_bytes=1 << 40))
    np.testing.assert_array_equal(jaximp.shap_interaction_values(ens, X, **kwargs), got)  # 1024-row steps


def test_an_explicit_batch_size_still_sets_the_step(monkeypatch):
    """``batch_size`` is honoured, rounded up to whole blocks (256 rows of 200 features on a CPU),
    whatever the budget of a default step, with the same numbers."""
    ens, X = wide_model("oblivious")
    expected = jaximp.shap_interaction_values(ens, X)
    steps = record_steps(monkeypatch)
    np.testing.assert_array_equal(jaximp.shap_interaction_values(ens, X, batch_size=300), expected)
    assert [output for _, output, _ in steps] == [512 * 200 * 200 * 4, 256 * 200 * 200 * 4]  # 512 rows, then 88
    np.testing.assert_array_equal(jaximp.shap_interaction_importance(ens, X, batch_size=300),
                                  jaximp.shap_interaction_importance(ens, X))


def test_a_wide_model_explains_in_small_blocks(monkeypatch):
    """F = 200 interaction values on a (pretended) 64 MB device run in blocks that fit it and give
    the same numbers as blocks of the usual size."""
    X, y = make_data("regression", n=300, n_features=200)
    model = catboost.CatBoostRegressor(iterations=10, depth=3, random_seed=0, verbose=0, thread_count=1,
                                       allow_writing_files=False).fit(X, y)
    ens = jaximp.from_catboost(model)
    expected = jaximp.shap_interaction_values(ens, X[:50])
    monkeypatch.setattr(_batching, "device_memory", lambda _d: 64 << 20)
    assert _batching.block_size(jax.devices()[0], 200 * 200) == 16
    got = jaximp.shap_interaction_values(ens, X[:50])
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)


# 5. Several devices and the compilation cache (fresh processes) ----------------------------


def run_python(code: str, env: dict | None = None) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            env={**os.environ, **(env or {})}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.mark.slow  # two devices in this process, by default: above, test_importances_permutation.py and others
def test_one_two_and_four_devices_give_identical_numbers(tmp_path):
    model, X, y, _ = train("multiclass", depth=4, iterations=10)
    path = tmp_path / "model.cbm"
    model.save_model(str(path))
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    out = run_python(f"""
        import json, numpy as np, jax, jaximp
        assert len(jax.devices()) == 4
        ens = jaximp.from_catboost({str(path)!r})
        X, y = np.load({str(tmp_path / "X.npy")!r}), np.load({str(tmp_path / "y.npy")!r})
        fns = dict(predict=lambda d: jaximp.predict(ens, X, devices=d, batch_size=64),
                   leaves=lambda d: jaximp.leaf_indices(ens, X, devices=d),
                   shap=lambda d: jaximp.shap_values(ens, X, devices=d, batch_size=100),
                   importance=lambda d: jaximp.shap_importance(ens, X, devices=d),
                   permutation=lambda d: jaximp.permutation_importance(ens, X, y, n_repeats=2, random_state=0,
                                                                       devices=d, batch_size=64).importances,
                   loss_change=lambda d: jaximp.loss_function_change(ens, X, y, devices=d, batch_size=64))
        same = {{name: all(np.array_equal(fn(1), fn(d)) for d in (2, 4)) for name, fn in fns.items()}}
        print(json.dumps(same))
    """, env={"XLA_FLAGS": "--xla_force_host_platform_device_count=4"})
    assert json.loads(out.strip().splitlines()[-1]) == dict(predict=True, leaves=True, shap=True, importance=True,
                                                            permutation=True, loss_change=True)


def test_compilation_cache_is_reused_by_a_new_process(tmp_path):
    model, X, _, _ = train("regression")
    path = tmp_path / "model.cbm"
    model.save_model(str(path))
    cache = tmp_path / "cache"
    code = f"""
        import numpy as np, jaximp
        print(jaximp.enable_compilation_cache({str(cache)!r}))
        ens = jaximp.from_catboost({str(path)!r})
        jaximp.shap_values(ens, np.zeros((10, ens.n_features), np.float32))
    """
    assert run_python(code).strip().splitlines()[-1] == str(cache)
    written = sorted(p.name for p in cache.iterdir())
    assert written  # programs were written ...
    run_python(code)
    assert sorted(p.name for p in cache.iterdir()) == written  # ... and read back, not recompiled


@pytest.mark.parametrize("value", ["1", "folder", "0", ""])
def test_compilation_cache_from_the_environment(tmp_path, value):
    """``JAXIMP_COMPILATION_CACHE=1`` turns the cache on at import (in ``$JAXIMP_CACHE_DIR`` here),
    a directory names its own folder, and ``0`` or empty leaves it off."""
    folder = tmp_path / "folder"
    env = {"JAXIMP_CACHE_DIR": str(tmp_path / "default"),
           "JAXIMP_COMPILATION_CACHE": str(folder) if value == "folder" else value}
    code = """
        import jax, jaximp
        print(jax.config.jax_compilation_cache_dir)
    """
    used = run_python(code, env=env).strip().splitlines()[-1]
    expected = {"1": str(tmp_path / "default"), "folder": str(folder)}.get(value, "None")
    assert used == expected
    assert (tmp_path / "default").is_dir() == (value == "1") and folder.is_dir() == (value == "folder")


def test_calls_of_several_steps_show_progress(monkeypatch, capfd):
    """A bar appears once a call of several steps lasts over _PROGRESS_DELAY (here 0 s); one step,
    or progress=False, shows none."""
    model, X, y, _ = train("regression", n=3000)
    ens = jaximp.from_catboost(model)
    monkeypatch.setattr(_batching, "_PROGRESS_DELAY", 0.0)
    with_targets = [functools.partial(fn, y=y) for fn in (jaximp.loss_function_change, jaximp.permutation_importance)]
    for fn in (jaximp.shap_values, jaximp.predict, jaximp.leaf_indices, jaximp.shap_importance, *with_targets):
        fn.__name__ = getattr(fn, "func", fn).__name__
        capfd.readouterr()
        fn(ens, X, batch_size=1024)
        assert fn.__name__ in capfd.readouterr().err, fn.__name__
        fn(ens, X, batch_size=1024, progress=False)
        fn(ens, X)  # one step
        assert capfd.readouterr().err == "", fn.__name__


@OBLIVIOUS_BY_DEFAULT
def test_importances_with_targets_live_where_the_rows_are(ensemble):
    """LossFunctionChange and permutation importance of rows on a device: computed there, only
    per-block sums come back, and the result is a jax.Array on that device equal to the host one."""
    ens, X = ensemble
    x = X[:300]
    y = np.argmax(np.asarray(jaximp.predict(ens, x)), axis=1)
    y[::5] = (y[::5] + 1) % ens.n_outputs  # a model that is sometimes wrong
    device = jax.devices()[-1]
    on_device = jax.device_put(jnp.asarray(x), device)
    calls = {
        "loss_function_change": lambda rows: jaximp.loss_function_change(ens, rows, y),
        "permutation_importance": lambda rows: jaximp.permutation_importance(ens, rows, y, n_repeats=2,
                                                                             random_state=0).importances,
        "permutation_importance roc_auc_ovr": lambda rows: jaximp.permutation_importance(
            ens, rows, y, scoring="roc_auc_ovr", n_repeats=2, random_state=0).importances,
    }
    for name, fn in calls.items():
        host, resident = fn(x), fn(on_device)
        assert isinstance(host, np.ndarray), name
        assert isinstance(resident, jax.Array) and resident.devices() == {device}, name
        np.testing.assert_allclose(np.asarray(resident), host, rtol=1e-6, atol=1e-7, err_msg=name)


def test_accelerator_step_shapes_give_the_same_tree_shap(monkeypatch):
    """TreeEnsemble SHAP sizes its steps for CPU caches on CPUs only; the accelerator choice (wider
    row steps, more trees per chunk), run here on the CPU, gives the same values."""
    from jaximp._rows.tuning import ACCELERATOR, CPU
    from jaximp._shap import tree_plans as _tree_shap

    fitted = depthwise_multiclass()
    ens, X = fitted.ens, fitted.X
    kind = _tree_shap.Kind("path", _tree_shap._layout(ens, "path", CPU)[0])
    assert _tree_shap._step(ens, kind, ACCELERATOR) != _tree_shap._step(ens, kind, CPU)
    backgrounds = {"path_dependent": None, "interventional": X[:50]}
    expected = {m: jaximp.shap_values(ens, X, method=m, background=b) for m, b in backgrounds.items()}
    expected["interactions"] = jaximp.shap_interaction_values(ens, X[:64])
    monkeypatch.setattr(_tree_shap, "rows_tuning", lambda devices, x, fn_name: ACCELERATOR)
    for m, b in backgrounds.items():
        np.testing.assert_allclose(jaximp.shap_values(ens, X, method=m, background=b), expected[m],
                                   rtol=1e-5, atol=1e-6, err_msg=m)
    np.testing.assert_allclose(jaximp.shap_interaction_values(ens, X[:64]), expected["interactions"],
                               rtol=1e-5, atol=1e-6)
