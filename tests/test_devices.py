"""Several devices share a call's work: each device runs the kernel on its own slice of the rows,
rows already split over devices are taken as they are, results stay split the same way, and the
numbers are those of one device, bit for bit.

Four CPU devices (``XLA_FLAGS=--xla_force_host_platform_device_count=4``) in a fresh process: the
suite's own processes have two (tests/conftest.py). Work shared, not repeated, is read from the
compiled step: the loop over blocks of rows runs ``1 / D`` as many times on each of D devices, and
no device gathers the others' rows.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

_CHILD = r"""
import collections, json, re, sys
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

import models
import jaximp
from jaximp._rows import batching

assert len(jax.devices()) == 4
steps = []  # (step program, its arguments) of each compiled step called
compiled = batching.sharded_step


def spied(*args, **kwargs):
    program = compiled(*args, **kwargs)

    def call(params, rows):
        steps.append((program, params, rows))
        return program(params, rows)

    return call


batching.sharded_step = spied
fitted = {
    "xgboost": models.xgboost_model("squarederror"),
    "lightgbm": models.lightgbm_model("regression"),
}
model, X, y, _ = models.train("regression", depth=4, iterations=10)
fitted["catboost"] = models.Fitted(model=model, ens=jaximp.from_catboost(model), X=X, y=y)
rows = np.random.default_rng(0).normal(size=(1000, 6)).astype(np.float32)
mesh = Mesh(np.asarray(jax.devices()), ("d",))
split = jax.device_put(rows, NamedSharding(mesh, PartitionSpec("d")))  # rows already over 4 devices
index_model = "lightgbm"  # INDEX_MODEL: the interaction indices, the slowest compilations, on one model
out = {}
for name, f in fitted.items():
    ens = f.ens
    y = np.asarray(jaximp.predict(ens, rows)) + np.random.default_rng(1).normal(size=len(rows)).astype(np.float32)
    background = rows[:100]
    calls = {
        "predict": lambda x, **kw: jaximp.predict(ens, x, **kw),
        "leaf_indices": lambda x, **kw: jaximp.leaf_indices(ens, x, **kw),
        "shap_values": lambda x, **kw: jaximp.shap_values(ens, x, **kw),
        "interventional": lambda x, **kw: jaximp.shap_values(ens, x, method="interventional",
                                                             background=background, **kw),
        "interactions": lambda x, **kw: jaximp.shap_interaction_values(ens, x[:200], **kw),
        "shap_importance": lambda x, **kw: jaximp.shap_importance(ens, x, **kw),
        "loss_function_change": lambda x, **kw: jaximp.loss_function_change(ens, x, y, **kw),
        "permutation_importance": lambda x, **kw: jaximp.permutation_importance(
            ens, x, y, n_repeats=2, random_state=0, progress=False, **kw).importances,
    }
    if name == index_model:
        calls.update({
            "interaction_values": lambda x, **kw: jaximp.interaction_values(ens, x[:200], index="k-SII", order=2,
                                                                            **kw).values,
            "interaction_values_interventional": lambda x, **kw: jaximp.interaction_values(
                ens, x[:200], index="k-SII", order=2, method="interventional", background=background, **kw).values,
            "interaction_importance": lambda x, **kw: jaximp.interaction_importance(ens, x[:200], index="SII",
                                                                                    order=2, **kw).values,
        })
    for fn, call in calls.items():
        host = np.asarray(call(rows, devices=1))
        one = np.asarray(call(jax.device_put(rows), devices=1))
        four = call(jax.device_put(rows), devices=4, batch_size=128)
        given = call(split)
        per_row = fn not in ("shap_importance", "loss_function_change", "permutation_importance",
                             "interaction_importance")
        # a reduction of host rows is read back and finished in float64, of device rows on the
        # device in float32: equal to float32 rounding of the largest value
        like_host = (np.array_equal(host, one) if per_row
                     else np.allclose(host, one, rtol=0, atol=1e-6 * np.abs(host).max()))
        out[f"{name}/{fn}"] = dict(
            same=bool(like_host and np.array_equal(one, np.asarray(four)) and np.array_equal(one, np.asarray(given))),
            split=[str(a.sharding.spec) if per_row else "-" for a in (four, given)],
            devices=[len(a.devices()) for a in (four, given)])
    if name == index_model:  # banzhaf_values takes no devices= or batch_size=: rows reach four devices split
        one = np.asarray(jaximp.banzhaf_values(ens, jax.device_put(rows[:200])))
        given = jaximp.banzhaf_values(ens, split[:200])
        out[f"{name}/banzhaf_values"] = dict(
            same=bool(np.array_equal(np.asarray(jaximp.banzhaf_values(ens, rows[:200])), one)
                      and np.array_equal(one, np.asarray(given))),
            split=[str(given.sharding.spec)], devices=[len(given.devices())])
    uneven, home = rows[:997], jax.devices()[2]  # 997 rows: no even split over four devices
    for fn in ("predict", "shap_values", "shap_importance"):
        four = calls[fn](jax.device_put(uneven, home), devices=4, batch_size=128)
        out[f"{name}/{fn}/uneven"] = dict(same=bool(np.array_equal(np.asarray(calls[fn](jax.device_put(uneven, home),
                                                                                        devices=1)), np.asarray(four))),
                                          at_home=four.devices() == {home} if fn != "shap_importance" else True)
    for fn in ("predict", "shap_values"):
        loops = {}
        for d in (1, 4):
            steps.clear()
            getattr(jaximp, fn)(ens, np.tile(rows, (8, 1)), batch_size=8000 // d, devices=d)
            program, params, step_rows = steps[0]
            text = program.lower(params, step_rows).compile().as_text()
            loops[d] = collections.Counter(int(n) for n in re.findall(r'known_trip_count":\{"n":"(\d+)"', text))
            out[f"{name}/{fn}/gathers"] = "all-gather" in text
        out[f"{name}/{fn}/loops"] = [sorted((loops[1] - loops[4]).elements()), sorted((loops[4] - loops[1]).elements())]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def four_devices() -> dict:
    path = os.pathsep.join([str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path, XLA_FLAGS="--xla_force_host_platform_device_count=4")
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(_CHILD)], env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


MODELS = ["xgboost", "lightgbm", "catboost"]
ROW_CALLS = ["predict", "leaf_indices", "shap_values", "interventional", "interactions"]
INDEX_MODEL = "lightgbm"  # the interaction indices run on this model only (index_model in _CHILD)
INDEX_CALLS = ["interaction_values", "interaction_values_interventional", "interaction_importance", "banzhaf_values"]
INDEX_ROW_CALLS = ["interaction_values", "interaction_values_interventional"]


@pytest.mark.parametrize("model", MODELS)
def test_four_devices_give_the_numbers_of_one(four_devices, model):
    calls = {key: v for key, v in four_devices.items() if key.startswith(f"{model}/") and key.count("/") == 1}
    n_calls = 8 + (len(INDEX_CALLS) if model == INDEX_MODEL else 0)
    assert len(calls) == n_calls and all(v["same"] for v in calls.values()), calls


@pytest.mark.parametrize("model", MODELS)
def test_results_of_device_rows_stay_split_over_the_devices(four_devices, model):
    """Rows put on one device and run on four, and rows given split over four: the per-row
    results are split over the four devices along their rows, as the rows were."""
    for fn in ROW_CALLS + (INDEX_ROW_CALLS if model == INDEX_MODEL else []):
        result = four_devices[f"{model}/{fn}"]
        assert result["devices"] == [4, 4], (fn, result)
        assert all(re.fullmatch(r"P\('rows',?\)", spec) for spec in result["split"]), (fn, result)


def test_banzhaf_values_of_split_rows_stay_split(four_devices):
    """``banzhaf_values`` takes no ``devices=``: of rows given split over four devices, its values
    are split over the four along their rows, as the rows were."""
    result = four_devices[f"{INDEX_MODEL}/banzhaf_values"]
    assert result["devices"] == [4] and re.fullmatch(r"P\('rows',?\)", result["split"][0]), result


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("fn", ["predict", "shap_values"])
def test_each_device_runs_its_share_of_the_blocks(four_devices, model, fn):
    """A step of 8,000 rows on one device, or of 2,000 rows a device on four: the compiled programs
    differ in one loop only, the loop over blocks of rows, which each of the four devices runs a
    quarter as many times; and no device gathers the rows of the others."""
    (one,), (four,) = four_devices[f"{model}/{fn}/loops"]
    assert four * 4 == one, (one, four)
    assert not four_devices[f"{model}/{fn}/gathers"]


@pytest.mark.parametrize("model", MODELS)
def test_rows_the_devices_do_not_divide(four_devices, model):
    """997 rows on one device, run on four: the numbers of one device, and the per-row results
    back on the rows' device (JAX splits arrays only evenly), not copied to every device."""
    for fn in ("predict", "shap_values", "shap_importance"):
        result = four_devices[f"{model}/{fn}/uneven"]
        assert result == dict(same=True, at_home=True), (fn, result)
