"""pytest's set-up of the suite: two host devices, programs compiled without LLVM's optimizations,
compiled programs released after each module, and the fixtures of trained models that several
modules share (the models themselves, cached per session: tests/models.py; the oracles:
tests/oracles.py). The suite runs in two worker processes (pytest-xdist, ``-n 2`` in
pyproject.toml): each compilation runs on one thread."""

from __future__ import annotations

import os

# Two host devices, so that sharding over devices is tested on a CPU-only machine. Set before
# JAX initialises its backends; the default device (and so every default computation) is cpu:0.
# The suite is compile-bound (about 8 XLA programs per test, 85% of its time); LLVM's optimization
# of the generated machine code is a third of each compilation, and skipping it (level 0) changes
# no program, only how fast its code runs: results differ from the optimized code's in the last
# bit of some float32 sums (summation order), far inside every test's tolerance.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2 --xla_backend_optimization_level=0")

import jax  # noqa: E402
import pytest  # noqa: E402
from models import depthwise_multiclass, train  # noqa: E402

import jaximp  # noqa: E402
from jaximp._rows import devices as _devices  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop every compiled program after each test module. A session compiles thousands of XLA
    programs, each holding its own memory mappings; kept alive to the end, they exceed Linux's
    default limit of 65,530 mappings per process and XLA crashes in its next compilation."""
    yield
    _devices.sharded_step.cache_clear()
    _devices.device_step.cache_clear()
    jax.clear_caches()


@pytest.fixture(scope="session")
def regression_model():
    """A small fitted regression model with its ensemble: ``(model, ens, X, y)``."""
    model, X, y, _ = train("regression")
    return model, jaximp.from_catboost(model), X, y


@pytest.fixture(scope="module", params=["oblivious", "tree"])
def ensemble(request):
    """``(ens, X)``: a multiclass oblivious model and a multiclass Depthwise one, NaN in X."""
    if request.param == "oblivious":
        model, X, _, _ = train("multiclass", depth=4, iterations=10, nan_fraction=0.05)
        return jaximp.from_catboost(model), X
    fitted = depthwise_multiclass()
    return fitted.ens, fitted.X
