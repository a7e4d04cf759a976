"""The first call compiles few programs, and a call of another number of rows compiles none.

A first ``shap_values`` or ``predict`` call pays for every XLA program it compiles (most of its
time on CPU), so the number of programs is bounded here, counted without timing: in a fresh
process (no compiled program of another test hides one), by JAX's monitoring event of each
backend compilation. The bounds are what the library compiles today; a change that adds programs
to a first call has to raise them on purpose.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

TESTS = pathlib.Path(__file__).resolve().parent

# The most programs a first call may compile, per model type and function.
# SHAP values of general trees compile their row kernel only (their plan is built in NumPy); those
# of symmetric trees compile their tables' program too.
MOST = {"shap_values": {"xgboost": 1, "lightgbm": 1, "catboost": 2},
        "predict": {"xgboost": 1, "lightgbm": 1, "catboost": 1}}

_CHILD = r"""
import json, sys
import jax
import numpy as np

compiled = [0]


def count(event, duration, **kwargs):
    if event == "/jax/core/compile/backend_compile_duration":
        compiled[0] += 1


jax.monitoring.register_event_duration_secs_listener(count)
import models  # noqa: E402
import jaximp  # noqa: E402

trained = {
    "xgboost": models.xgboost_model("squarederror").model,
    "lightgbm": models.lightgbm_model("regression").model,
    "catboost": models.train("regression")[0],
}
before = compiled[0]
ensembles = {name: getattr(jaximp, "from_" + name)(model) for name, model in trained.items()}
out = {"import": [compiled[0] - before]}
rows = np.random.default_rng(0).normal(size=(1000, 6)).astype(np.float32)
for name, ens in ensembles.items():
    for fn in ("shap_values", "predict"):
        calls = []
        for n in (1000, 700):  # the first call, then one of another number of rows
            before = compiled[0]
            np.asarray(getattr(jaximp, fn)(ens, rows[:n]))
            calls.append(compiled[0] - before)
        out[f"{fn}/{name}"] = calls
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def compiled() -> dict:
    """``{"function/model": [programs compiled by a first call of 1000 rows, then by a call of
    700]}``, counted in a fresh process."""
    path = os.pathsep.join([str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path, JAX_ENABLE_COMPILATION_CACHE="false")
    run = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_importing_models_compiles_nothing(compiled):
    """Reading a model puts its arrays on the device without compiling a program (a NumPy array
    given to ``jnp.asarray`` outside a trace would compile one per shape)."""
    assert compiled["import"] == [0], compiled


@pytest.mark.parametrize("fn", sorted(MOST))
@pytest.mark.parametrize("model", ["xgboost", "lightgbm", "catboost"])
def test_first_call_compiles_few_programs(compiled, fn, model):
    first, _ = compiled[f"{fn}/{model}"]
    assert 1 <= first <= MOST[fn][model], (fn, model, compiled)


@pytest.mark.parametrize("fn", sorted(MOST))
@pytest.mark.parametrize("model", ["xgboost", "lightgbm", "catboost"])
def test_other_number_of_rows_compiles_nothing(compiled, fn, model):
    _, second = compiled[f"{fn}/{model}"]
    assert second == 0, (fn, model, compiled)


def test_garbage_collector_held_off_while_programs_are_traced(monkeypatch):
    """Python's cyclic garbage collector, whose collections walk every object of the process,
    is off while a call traces its row kernel and its plan, and back as it was afterwards: on
    after a call, after nested pauses and after an error inside one; still off when it was off."""
    import gc

    import jax.numpy as jnp
    import numpy as np

    import jaximp
    from jaximp._rows import batching
    from jaximp._shap import tree_plans

    seen = []

    def kernel(params, x, *, block):
        seen.append(gc.isenabled())  # runs while the step's program is traced
        return x * params

    assert gc.isenabled()
    batching.map_rows(kernel, jnp.float32(2.0), np.ones((5, 3), np.float32), batch_size=None, devices=None,
                      fn_name="test")
    assert seen == [False] and gc.isenabled()

    program = tree_plans._PLAN

    def plan_program(*args, **kwargs):  # the plan's program, called while the collector is noted
        seen.append(gc.isenabled())
        return program(*args, **kwargs)

    # interaction tables are built by the plan's program (a concrete model's other plans, in NumPy)
    monkeypatch.setattr(tree_plans, "_PLAN", plan_program)
    import models

    jaximp.shap_interaction_values(models.xgboost_model("squarederror").ens, np.zeros((3, 6), np.float32))
    assert seen[1] is False and gc.isenabled()

    with batching.gc_paused():
        with batching.gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), batching.gc_paused():
        raise RuntimeError
    assert gc.isenabled()
    gc.disable()
    try:
        with batching.gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


_FILLED_CHILD = r"""
import collections, json, sys
import jax
import numpy as np

events = collections.Counter()
jax.monitoring.register_event_listener(lambda event, **kwargs: events.update([event]))
import models  # noqa: E402
import jaximp  # noqa: E402

jaximp.enable_compilation_cache(sys.argv[1])
trained = {
    "xgboost": models.xgboost_model("squarederror").model,
    "lightgbm": models.lightgbm_model("regression").model,
    "catboost": models.train("regression")[0],
}
rows = np.random.default_rng(0).normal(size=(1000, 6)).astype(np.float32)
out, values = {}, {}
for name, model in trained.items():
    ens = getattr(jaximp, "from_" + name)(model)
    for fn in ("shap_values", "predict"):
        events.clear()
        values[f"{fn}/{name}"] = np.asarray(getattr(jaximp, fn)(ens, rows))
        out[f"{fn}/{name}"] = [events[f"/jax/compilation_cache/cache_{kind}"] for kind in ("misses", "hits")]
np.savez(sys.argv[2], **{key.replace("/", "-"): v for key, v in values.items()})
print(json.dumps(out))
"""


def test_a_filled_cache_spares_a_new_process_compiling(tmp_path):
    """With JAX's persistent cache on, a process that finds the programs of its calls on disk
    compiles none of them (JAX's monitoring events: every program a cache hit, none a miss), and
    gives the same numbers as the process that compiled them."""
    path = os.pathsep.join([str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)
    stages = []
    for run in ("filling", "filled"):
        result = subprocess.run([sys.executable, "-c", _FILLED_CHILD, str(tmp_path / "cache"), str(tmp_path / run)],
                                env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        stages.append(json.loads(result.stdout.strip().splitlines()[-1]))
    filling, filled = stages
    assert all(misses >= 1 for misses, _ in filling.values()), filling  # each call compiles a program
    assert all(misses == 0 and hits == filling[call][0] for call, (misses, hits) in filled.items()), (filling, filled)
    import numpy as np

    first, second = np.load(tmp_path / "filling.npz"), np.load(tmp_path / "filled.npz")
    for key in first.files:
        np.testing.assert_array_equal(first[key], second[key], err_msg=key)
