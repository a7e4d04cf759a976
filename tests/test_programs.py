"""Programs kept on disk whole (``jaximp._rows.programs``): found again by a key that names
everything a program depends on, and never found for a call it was not compiled for.

A program loaded for the wrong arguments would give wrong numbers silently, so the key is
tested for what must change it (static arguments, shapes, dtypes, pytree static data, JAX's
settings) and for what it must refuse to name (functions that may close over values, objects
of unknown types).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.compilation_cache import compilation_cache

from jaximp._rows import programs


@pytest.fixture
def known(monkeypatch):
    """The functions and types of this module taken as jaximp's own (only those may be named by a key)."""
    monkeypatch.setattr(programs, "_KNOWN_MODULES", (*programs._KNOWN_MODULES, __name__.split(".")[0]))


@pytest.fixture
def cache(tmp_path, known):
    """JAX's persistent cache on in ``tmp_path`` for one test, then off as it was."""
    names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
             "jax_persistent_cache_min_entry_size_bytes")
    saved = {name: getattr(jax.config, name) for name in names}
    jax.config.update("jax_compilation_cache_dir", str(tmp_path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    as_a_new_process()
    yield tmp_path / programs.FOLDER
    programs.forget()
    for name, value in saved.items():
        jax.config.update(name, value)
    compilation_cache.reset_cache()


def as_a_new_process():
    """Forget every program this process compiled or loaded, as a new process would start."""
    programs.forget()
    jax.clear_caches()


@pytest.fixture
def traces():
    """A counter of JAX's tracing events while a test runs."""
    events = collections.Counter()

    def listen(event, duration, **kwargs):
        if event == "/jax/core/compile/jaxpr_trace_duration":
            events["traces"] += 1

    jax.monitoring.register_event_duration_secs_listener(listen)
    yield events
    jax.monitoring.unregister_event_duration_listener(listen)


@dataclasses.dataclass(frozen=True)
class Layout:
    depth: int
    names: tuple[str, ...]


@functools.partial(programs.stored_jit, static_argnames=("power", "layout"))
def _scaled(x, params, *, power, layout):
    return {"y": params["a"] * x**power + layout.depth, "n": x.shape[0]}


def _call(x, power=2, layout=Layout(1, ("a",)), a=2.0):
    return _scaled(x, {"a": np.float32(a)}, power=power, layout=layout)


def test_a_program_is_kept_and_loaded_without_tracing(cache, traces):
    x = np.arange(5, dtype=np.float32)
    expected = _call(x)
    assert len(list(cache.iterdir())) == 1 and traces["traces"] == 1
    as_a_new_process()
    again = _call(x, a=3.0)  # the same program (a is an argument, not static)
    assert traces["traces"] == 1
    np.testing.assert_array_equal(again["y"], 3.0 * x**2 + 1)
    np.testing.assert_array_equal(expected["y"], 2.0 * x**2 + 1)
    assert int(again["n"]) == 5


@pytest.mark.parametrize("change", [
    dict(power=3), dict(layout=Layout(2, ("a",))), dict(layout=Layout(1, ("b",))),
    dict(x=np.arange(6, dtype=np.float32)), dict(x=np.arange(5, dtype=np.int32)),
    dict(x=np.arange(10, dtype=np.float32).reshape(5, 2)),
])
def test_a_program_is_not_loaded_for_other_arguments(cache, traces, change):
    x = change.pop("x", np.arange(5, dtype=np.float32))
    _call(np.arange(5, dtype=np.float32))
    as_a_new_process()
    out = _call(x, **change)
    assert traces["traces"] == 2  # traced again, not loaded
    power, depth = change.get("power", 2), change.get("layout", Layout(1, ("a",))).depth
    np.testing.assert_array_equal(out["y"], (2.0 * x.astype(np.float32) ** power + depth).astype(out["y"].dtype))


def test_keys_name_settings_and_pytree_static_data(known):
    x = np.zeros(3, np.float32)
    key = programs.program_key("f", {}, ((x,), {}))
    assert key == programs.program_key("f", {}, ((np.ones(3, np.float32),), {}))  # values do not matter
    with jax.enable_x64(True):
        assert programs.program_key("f", {}, ((x,), {})) != key
    assert programs.program_key("f", {}, ((x.astype(np.float64),), {})) != key
    assert programs.program_key("f", {}, ((jnp.asarray(x),), {})) != key  # on a device, committed or not
    assert programs.program_key("f", {}, ((2.0,), {})) != programs.program_key("f", {}, ((np.float32(2.0),), {}))
    assert programs.program_key("g", {}, ((x,), {})) != key
    assert programs.program_key("f", {"k": 1}, ((x,), {})) != programs.program_key("f", {"k": True}, ((x,), {}))
    big = np.zeros(10_000)
    other = big.copy()
    other[5_000] = 1  # NumPy's text form of both is the same ("[0. 0. 0. ... 0. 0. 0.]")
    assert programs.program_key("f", {"t": big}, ()) != programs.program_key("f", {"t": other}, ())
    one, other = Layout(1, ("a",)), Layout(1, ("b",))
    assert programs.program_key("f", {"t": one}, ()) != programs.program_key("f", {"t": other}, ())
    plus = [lambda v: v + 1, lambda v: v + 2, lambda v: v - 1]  # one name, one line: told apart by their code
    keys = {programs.program_key("f", {"fn": fn}, ()) for fn in plus}
    assert len(keys) == 3 and programs.program_key("f", {"fn": plus[0]}, ()) in keys


def _local_scale(factor=3.0):
    return lambda x: x * factor


class Opaque:
    def __hash__(self):
        return 0

    def __eq__(self, other):
        return isinstance(other, Opaque)


@pytest.mark.parametrize("value", [lambda x: x, _local_scale(), Opaque(), jnp.sin.__call__, object()])
def test_keys_refuse_what_they_cannot_name(value):
    """A user's function or object may change between processes unseen (here this module's, not
    taken as jaximp's own): their calls use jax.jit alone."""
    with pytest.raises(programs._Unspellable):
        programs.program_key("f", {"fn": value}, ())


def test_local_functions_are_named_by_their_code_and_what_they_close_over(cache, traces):
    """A closure is kept under its code and the values it closes over: another value is another
    program (here the factor is compiled in), and a value the key cannot name keeps it out."""
    x = np.ones(2, np.float32)
    np.testing.assert_array_equal(programs.stored_jit(_local_scale(3.0))(x), [3.0, 3.0])
    np.testing.assert_array_equal(programs.stored_jit(_local_scale(5.0))(x), [5.0, 5.0])
    assert len(list(cache.iterdir())) == 2
    as_a_new_process()
    before = traces["traces"]
    np.testing.assert_array_equal(programs.stored_jit(_local_scale(5.0))(x), [5.0, 5.0])
    assert traces["traces"] == before
    opaque = Opaque()
    np.testing.assert_array_equal(programs.stored_jit(lambda v: v + (opaque is not None))(x), [2.0, 2.0])
    assert len(list(cache.iterdir())) == 2


def test_an_unreadable_program_is_compiled_again(cache, traces):
    x = np.arange(4, dtype=np.float32)
    _call(x)
    (path,) = cache.iterdir()
    path.write_bytes(b"not a program")
    as_a_new_process()
    np.testing.assert_array_equal(_call(x)["y"], 2.0 * x**2 + 1)
    assert traces["traces"] == 2 and not path.exists()  # dropped (JAX's cache gave the program again)


def test_programs_from_jax_own_cache_are_used_not_kept(cache, traces):
    """JAX's cache has the program but this folder does not (a program kept by another version
    of jaximp, say): JAX's copy is used, and not written here, where it would not load whole."""
    x = np.arange(4, dtype=np.float32)
    _call(x)
    (path,) = cache.iterdir()
    path.unlink()
    for _ in range(2):
        as_a_new_process()
        np.testing.assert_array_equal(_call(x)["y"], 2.0 * x**2 + 1)
        assert not path.exists()
    for entry in cache.parent.iterdir():  # JAX's own entries gone: compiled, and kept
        if entry.name.startswith("jit_"):
            entry.unlink()
    as_a_new_process()
    _call(x)
    as_a_new_process()
    before = traces["traces"]
    np.testing.assert_array_equal(_call(x)["y"], 2.0 * x**2 + 1)
    assert path.exists() and traces["traces"] == before


def test_a_folder_that_cannot_be_written_only_costs_time(cache, traces):
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text("a file where the folder would be")
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(_call(x)["y"], 2.0 * x**2 + 1)
    assert cache.is_file() and not list(cache.parent.glob(".writing-*"))


def test_nothing_is_kept_while_the_cache_is_off(tmp_path, traces):
    assert jax.config.jax_compilation_cache_dir in (None, "")
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(_call(x)["y"], 2.0 * x**2 + 1)
    assert programs.folder() is None


def test_traced_arguments_are_traced_inline(cache):
    x = np.arange(3, dtype=np.float32)
    grad = jax.grad(lambda a: _scaled(jnp.asarray(x), {"a": a}, power=2, layout=Layout(0, ()))["y"].sum())(1.0)
    assert float(grad) == float((x**2).sum()) and not cache.exists()


def test_public_functions_with_the_cache_on(cache, traces, regression_model):
    """Every function of a model and rows gives, with the cache on, the numbers it gives without
    it: when it compiles and keeps its programs, and when a new process loads them (typed random
    keys, pytrees of the model and plans, static layouts), which then traces nothing."""
    import jaximp

    _, ens, X, y = regression_model
    calls = {
        "predict": lambda: jaximp.predict(ens, X),
        "leaf_indices": lambda: jaximp.leaf_indices(ens, X),
        "shap_values": lambda: jaximp.shap_values(ens, X),
        "interventional": lambda: jaximp.shap_values(ens, X[:50], background=X[:40], method="interventional"),
        "interactions": lambda: jaximp.shap_interaction_values(ens, X[:20]),
        "prediction_values_change": lambda: jaximp.prediction_values_change(ens),
        "interaction": lambda: jaximp.interaction(ens),
        "permutation": lambda: jaximp.permutation_importance(ens, X, y, n_repeats=2, random_state=0).importances,
        "loss_function_change": lambda: jaximp.loss_function_change(ens, X, y),
        "split_importance": lambda: jaximp.split_importance(ens, "gain"),
        "soft_shap_values": lambda: jaximp.soft_shap_values(ens, X[:30], 0.1),
        "shap_importance": lambda: jaximp.shap_importance(ens, X),
    }
    jax.config.update("jax_compilation_cache_dir", None)
    expected = {name: np.asarray(call()) for name, call in calls.items()}
    jax.config.update("jax_compilation_cache_dir", str(cache.parent))
    for _ in range(2):  # compiled and kept, then loaded
        as_a_new_process()
        traced = {}
        for name, call in calls.items():
            before = traces["traces"]
            np.testing.assert_array_equal(np.asarray(call()), expected[name], err_msg=name)
            traced[name] = traces["traces"] - before
    # only jax.random.key(random_state), an op outside any program, traces in permutation_importance
    assert traced == {**dict.fromkeys(calls, 0), "permutation": 2}
    assert len(list(cache.iterdir())) >= len(calls)


def test_call_signatures_seen_in_this_process_keep_their_own_programs(cache, traces):
    """A call's key is spelled once per signature (as jax.jit compares calls), never shared by
    calls that differ in shape, dtype or JAX's settings."""
    x = np.arange(4, dtype=np.float32)
    for _ in range(2):
        np.testing.assert_array_equal(_call(x)["y"], 2.0 * x**2 + 1)
        np.testing.assert_array_equal(_call(x[:3])["y"], 2.0 * x[:3] ** 2 + 1)
        ints = _call(x.astype(np.int32))["y"]
        assert ints.dtype == np.float32 and np.array_equal(ints, 2.0 * x**2 + 1)
        with jax.enable_x64(True):
            wide = _call(x.astype(np.float64), a=np.float64(2.0))["y"]
        assert wide.dtype == np.float64 and np.array_equal(wide, 2.0 * x**2 + 1)
    assert len(programs._KEYS) == len(list(cache.iterdir())) == 4


@functools.partial(programs.stored_jit, static_argnames=("power",))
def _powered(x, *, power):
    return x**power


def _two_programs(x):
    """A call that runs two programs, listed for the next process by ``prefetched``."""
    with programs.prefetched("two", {}, (x,)):
        return np.asarray(_powered(x, power=2)) + np.asarray(_call(x)["y"])


@pytest.fixture
def loads(monkeypatch):
    """The threads that load programs from disk, by the name of each one's thread."""
    threads = collections.Counter()
    load = programs._load

    def counted(path):
        threads[threading.current_thread().name] += 1
        return load(path)

    monkeypatch.setattr(programs, "_load", counted)
    return threads


def test_a_call_loads_its_programs_ahead_in_a_helper_thread(cache, traces, loads):
    """The programs a call ran are listed for it; a new process loads them in a helper thread
    (while the call prepares its arguments) and runs them without tracing."""
    x = np.arange(4, dtype=np.float32)
    expected = 3.0 * x**2 + 1
    np.testing.assert_array_equal(_two_programs(x), expected)
    (listed,) = (cache / programs.CALLS).iterdir()
    assert len(listed.read_text().split()) == 2
    as_a_new_process()
    loads.clear()
    before = traces["traces"]
    np.testing.assert_array_equal(_two_programs(x), expected)
    assert traces["traces"] == before and loads == {"jaximp-programs": 2} and not programs._PENDING
    np.testing.assert_array_equal(_two_programs(x), expected)  # once per process: nothing loaded again
    assert loads == {"jaximp-programs": 2}
    as_a_new_process()
    loads.clear()
    y = np.arange(5, dtype=np.float32)  # other shapes: another call, nothing listed for it yet
    np.testing.assert_array_equal(_two_programs(y), 3.0 * y**2 + 1)
    assert "jaximp-programs" not in loads and len(list((cache / programs.CALLS).iterdir())) == 2


@pytest.mark.parametrize("listing", ["garbage", "unknown key", "unreadable program"])
def test_a_wrong_list_only_costs_time(cache, traces, loads, listing):
    """A list that names no program, a program the call does not run, or a program that cannot
    be read: the call compiles what it must, gives its numbers and lists its programs anew."""
    x = np.arange(4, dtype=np.float32)
    _two_programs(x)
    (listed,) = (cache / programs.CALLS).iterdir()
    keys = listed.read_text().split()
    if listing == "garbage":
        listed.write_bytes(b"\xff" * 10_000 + b"\n../" + b"a" * 61)
    elif listing == "unknown key":
        listed.write_text("\n".join(["0" * 64, *keys]))
    else:
        (cache / keys[0]).write_bytes(b"not a program")
    as_a_new_process()
    np.testing.assert_array_equal(_two_programs(x), 3.0 * x**2 + 1)
    assert not programs._PENDING and listed.read_text().split() == keys
    assert traces["traces"] == 2 + (listing == "unreadable program")


def test_a_call_that_fails_leaves_no_loading_behind(cache, loads):
    """A call that raises before it runs its programs: the helper stops after the program it is
    loading, nothing stays pending, the list is kept as it was, and later calls still work."""
    x = np.arange(4, dtype=np.float32)
    _two_programs(x)
    (listed,) = (cache / programs.CALLS).iterdir()
    keys = listed.read_text()
    as_a_new_process()
    loads.clear()
    with pytest.raises(RuntimeError, match="before"):
        with programs.prefetched("two", {}, (x,)):
            raise RuntimeError("failed before running a program")
    assert not programs._PENDING and listed.read_text() == keys
    assert not [t for t in threading.enumerate() if t.name == "jaximp-programs"]
    np.testing.assert_array_equal(_two_programs(x), 3.0 * x**2 + 1)
    assert sum(loads.values()) == 2  # each program loaded once: by the helper before it stopped, or by the call
