"""The tuning of each platform, chosen in one place: frozen and hashable (a static argument of the
kernels), picked from a device's platform, the CPU tricks off on accelerators, and a row's numbers
unchanged when the tuning only cuts the rows into more or fewer steps.

Oracle: the same call with the CPU tuning as shipped.
"""

from __future__ import annotations

import dataclasses
import types

import jax
import numpy as np
import pytest
from models import Fitted, depthwise_multiclass, train, xgboost_model

import jaximp
from jaximp._rows import batching, tuning
from jaximp._rows.tuning import ACCELERATOR, CPU, Tuning, tuning_for


@pytest.mark.parametrize("chosen", [CPU, ACCELERATOR], ids=["cpu", "accelerator"])
def test_each_platforms_tuning_is_frozen_and_hashable(chosen):
    assert isinstance(chosen, Tuning)
    with pytest.raises(dataclasses.FrozenInstanceError):
        chosen.block_rows = 1  # type: ignore[misc]
    assert hash(chosen) == hash(dataclasses.replace(chosen))
    assert chosen == dataclasses.replace(chosen) and chosen != dataclasses.replace(chosen, step_rows=7)
    jax.jit(lambda x, *, tuning: x + tuning.block_rows, static_argnames="tuning")(1.0, tuning=chosen)


def test_tuning_for_picks_by_platform():
    assert tuning_for(jax.devices("cpu")[0]) is CPU
    for platform in ("gpu", "tpu", "cuda", "rocm"):
        assert tuning_for(types.SimpleNamespace(platform=platform)) is ACCELERATOR, platform
    assert CPU.name == "cpu" and ACCELERATOR.name == "accelerator"


def test_the_cpu_tricks_are_off_on_accelerators():
    assert CPU.features_first and CPU.split_copy_bytes > 0
    assert not ACCELERATOR.features_first and ACCELERATOR.split_copy_bytes == 0
    rows = np.asfortranarray(np.ones((10, 3), np.float32))
    kernel = jaximp._leaves.oblivious.predict_kernel
    assert batching.features_first(kernel, rows, CPU) and not batching.features_first(kernel, rows, ACCELERATOR)


def test_the_tuning_reaches_the_kernels(monkeypatch):
    """``map_rows`` hands a kernel with a ``tuning`` keyword the devices' tuning (seen as the
    kernel is traced, once per step shape), and its block and default step sizes are the tuning's."""
    seen = []

    def kernel(params, x, *, block, tuning):
        seen.append((block, tuning))
        return x

    x = np.zeros((3000, 2), np.float32)
    batching.map_rows(kernel, None, x, batch_size=None, devices=None, fn_name="test", progress=False)
    assert {t for _, t in seen} == {CPU} and {b for b, _ in seen} == {CPU.block_rows}
    smaller = dataclasses.replace(CPU, block_rows=256, step_rows=512)
    monkeypatch.setattr(tuning, "CPU", smaller)
    assert batching.step_shape(None, jax.devices("cpu")[0], "test") == (512, 256)
    seen.clear()
    batching.map_rows(kernel, None, x, batch_size=None, devices=None, fn_name="test", progress=False)
    assert {t for _, t in seen} == {smaller} and {b for b, _ in seen} == {256}


def _calls(fitted):
    ens, rows = fitted.ens, np.asarray(fitted.X, np.float32)
    rows = np.tile(rows, (-(-3000 // len(rows)), 1))[:3000]
    return rows, {
        "predict": lambda x: jaximp.predict(ens, x),
        "leaf_indices": lambda x: jaximp.leaf_indices(ens, x),
        "shap_values": lambda x: jaximp.shap_values(ens, x),
        "interventional": lambda x: jaximp.shap_values(ens, x, method="interventional", background=rows[:40]),
        "feature-major predict": lambda x: jaximp.predict(ens, np.asfortranarray(x)),
    }


def _catboost() -> Fitted:
    model, X, y, _ = train("multiclass", depth=4, iterations=10, nan_fraction=0.05)
    return Fitted(model=model, ens=jaximp.from_catboost(model), X=X, y=y)


MODELS = {"catboost": _catboost, "xgboost": lambda: xgboost_model("squarederror"),
          "catboost_depthwise": depthwise_multiclass}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_steps_of_another_size_give_the_same_bits(monkeypatch, name):
    """The tuning's default step rows (and smallest step) change only how many steps a call
    takes, never a row's numbers; the CPU tricks turned off change nothing either."""
    rows, calls = _calls(MODELS[name]())
    expected = {call_name: np.asarray(call(rows)) for call_name, call in calls.items()}
    for changed in (dict(step_rows=CPU.block_rows), dict(step_rows=3 * CPU.block_rows, min_step_rows=8),
                    dict(features_first=False, split_copy_bytes=1)):
        monkeypatch.setattr(tuning, "CPU", dataclasses.replace(CPU, **changed))
        for call_name, call in calls.items():
            np.testing.assert_array_equal(np.asarray(call(rows)), expected[call_name], err_msg=f"{call_name} {changed}")
