"""Compiled programs kept on disk whole, so that a new process skips tracing and lowering too.

JAX's persistent compilation cache (``jax_compilation_cache_dir``, which
``jaximp.enable_compilation_cache`` turns on) finds a program on disk by its lowered form: a new
process still traces each kernel and lowers it before it can look, which is most of a first
call once the cache is filled (about 0.15 s of 0.3 s for a LightGBM model's first SHAP call on
a CPU). While that cache is on, :func:`stored_jit` also keeps each jaximp program's executable
in the same directory (``jaximp-programs/``), under a key spelled from everything that makes
the program, without tracing it:

* the function and its static arguments (a function by its module, name, bytecode, constants and
  the values it closes over: lambdas and closures of jaximp, JAX and NumPy are named exactly);
* the structure of the other arguments (with the static data of their pytree nodes), and each
  array's shape, dtype, weak type and devices;
* the devices, JAX's settings that change a trace (``jax_enable_x64``, promotion rules, ...),
  ``XLA_FLAGS``, the versions of JAX and jaxlib, and a digest of jaximp's own source.

A key that cannot be spelled exactly (a static argument of a type it does not know, a user's
function, which may change between processes unseen, a traced argument) uses ``jax.jit`` alone,
as does every call while the cache is off. The executables are loaded as JAX loads its own
cached programs: the directory must be as trusted as the code that runs (JAX's warning on
``deserialize_and_load``).

Loading an executable takes time too (about 0.07 s for a LightGBM model's SHAP program on a CPU,
in C++, without Python's lock). Within :func:`prefetched`, a public function's call names the
programs it runs (``calls/`` in the same folder, per function and the shapes of its arguments),
and the same call in a later process loads them in a helper thread while this one builds the
call's host plan. The list is a hint: each program is still found by its own key.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import hashlib
import os
import pickle
import sys
import tempfile
import threading
import types
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import jax
import jaxlib
import numpy as np
from jax.experimental import serialize_executable

FOLDER = "jaximp-programs"
# JAX's settings that change what a function traces to or how it compiles.
_SETTINGS = ("jax_enable_x64", "jax_default_matmul_precision", "jax_numpy_dtype_promotion",
             "jax_numpy_rank_promotion", "jax_default_prng_impl", "jax_threefry_partitionable",
             "jax_debug_nans", "jax_debug_infs", "jax_enable_checks", "jax_use_shardy_partitioner",
             "jax_dynamic_shapes", "jax_softmax_custom_jvp", "jax_default_device")
# Modules whose functions and types a key may name: their code is covered by the versions and
# the source digest in the key. A user's function could change between processes unseen.
_KNOWN_MODULES = ("jaximp", "jax", "jaxlib", "numpy", "ml_dtypes", "builtins", "functools", "operator", "math")
_LOADED: dict[str, Callable] = {}  # key -> the program, called as run(leaves, args, kwargs), for this process


class _Unspellable(Exception):
    """A value the key cannot spell exactly: the call uses ``jax.jit`` alone."""


def stored_jit(fun: Callable | None = None, *, static_argnames: tuple[str, ...] = (), **jit_kwargs: Any) -> Any:
    """``jax.jit(fun, static_argnames=..., **jit_kwargs)`` whose programs are also kept on disk
    (whole executables, see the module's docstring) while JAX's persistent compilation cache is on.

    Static arguments must be passed by keyword. Usable as a decorator, with or without arguments.
    """
    if fun is None:
        return functools.partial(stored_jit, static_argnames=static_argnames, **jit_kwargs)
    return _Stored(fun, tuple(static_argnames), jit_kwargs)


class _Stored:
    """A jitted function that looks its programs up on disk by key before it traces them."""

    def __init__(self, fun: Callable, static_argnames: tuple[str, ...], jit_kwargs: dict):
        self._jitted = jax.jit(fun, static_argnames=static_argnames, **jit_kwargs)
        self._static = static_argnames
        self._fun, self._jit_kwargs, self._name = fun, jit_kwargs, None
        functools.update_wrapper(self, fun)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        directory = folder()
        if directory is None:
            return self._jitted(*args, **kwargs)
        static = {k: v for k, v in kwargs.items() if k in self._static}
        dynamic = {k: v for k, v in kwargs.items() if k not in self._static}
        leaves, tree = jax.tree_util.tree_flatten((args, dynamic))
        try:
            self._name = self._name or _spell(self._fun) + _spell(self._jit_kwargs)
            key = _known_key(self._name, static, leaves, tree)
        except _Unspellable:  # a local function, an object of unknown type, a tracer: jax.jit alone
            return self._jitted(*args, **kwargs)
        _record(key)
        program = _LOADED.get(key) or _prefetch_result(key)
        if program is None:
            program = _load(directory / key)
            if program is None:
                hits = _jax_cache_hits()
                compiled = self._jitted.lower(*args, **kwargs).compile()
                if _jax_cache_hits() == hits:  # JAX cannot write out again what it read from its cache
                    _store(directory / key, compiled)
                program = functools.partial(_run_whole, compiled)
            _LOADED[key] = program
        return program(leaves, args, dynamic)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        return self._jitted.lower(*args, **kwargs)


_HITS = threading.local()  # JAX's persistent-cache hits in this thread


def _jax_cache_hits() -> int:
    """How many programs JAX's own persistent cache has given this thread so far.

    An executable JAX read from its cache does not serialize whole again (on CPU its functions
    are missing from the bytes: loading them fails at the first call), so such a program is used
    but not kept; it is kept once JAX compiles it, when its own entry is gone."""
    if not _LISTENING:
        jax.monitoring.register_event_listener(_count_hit)
        _LISTENING.append(True)
    return getattr(_HITS, "n", 0)


_LISTENING: list[bool] = []


def _count_hit(event: str, **kwargs: Any) -> None:
    if event == "/jax/compilation_cache/cache_hits":
        _HITS.n = getattr(_HITS, "n", 0) + 1


def folder() -> Path | None:
    """Where the programs are kept: ``jaximp-programs/`` in JAX's persistent cache directory when
    it is set, on a local file system and not under ``jax.disable_jit``; else None."""
    directory = jax.config.jax_compilation_cache_dir
    if not directory or "://" in str(directory) or jax.config.jax_disable_jit:
        return None
    return Path(directory) / FOLDER


def forget() -> None:
    """Drop this process's loaded programs (they hold memory mappings, as ``jax.clear_caches``'s do)."""
    _LOADED.clear()
    _KEYS.clear()
    _PREFETCHED.clear()


def _run_whole(program: Any, leaves: list, args: tuple, kwargs: dict) -> Any:
    """Run a program compiled in this process (it takes the call's arguments as given)."""
    return program(*args, **kwargs)


def _run_flat(program: Any, leaves: list, args: tuple, kwargs: dict) -> Any:
    """Run a program loaded from disk (it takes the leaves of ``(args, kwargs)``, in order)."""
    return program(*leaves)


_KEYS: dict[tuple, str] = {}  # a call's signature, as jax.jit compares them -> its program's key
_MAX_KEYS = 256  # signatures kept (each holds its pytree's static data, a model's featurizer say)


def _known_key(name: str, static: dict, leaves: list, tree: Any) -> str:
    """:func:`program_key` of the arguments flattened to ``leaves`` and ``tree``, spelled once per call
    signature: the static arguments, the pytree structure and each leaf's type, shape, dtype,
    weak type and sharding, and JAX's settings, compared as ``jax.jit`` compares them to reuse a
    program within a process. Spelling every leaf at every call would cost a third of a one-row
    prediction."""
    try:
        signature = (name, tuple(sorted(static.items())), tree, tuple(map(_leaf_signature, leaves)),
                     tuple(getattr(jax.config, setting, None) for setting in _SETTINGS), os.environ.get("XLA_FLAGS"))
        key = _KEYS.get(signature)
    except TypeError:  # an unhashable static value: spelled at every call
        signature = key = None
    if key is None:
        key = _flat_key(name, static, leaves, tree)
        if signature is not None:
            if len(_KEYS) >= _MAX_KEYS:
                _KEYS.clear()
            _KEYS[signature] = key
    return key


def _leaf_signature(x: Any) -> tuple:
    if isinstance(x, jax.core.Tracer):
        raise _Unspellable(x)
    if isinstance(x, jax.Array):
        return type(x), x.shape, x.dtype, getattr(x, "weak_type", False), x.sharding
    if isinstance(x, (np.ndarray, np.generic)):
        return type(x), x.shape, x.dtype
    return (type(x),)


def program_key(name: str, static: dict, arguments: Any) -> str:
    """The hex digest naming the program of ``name`` with ``static`` arguments for ``arguments``
    (see the module's docstring); ``_Unspellable`` when it cannot be spelled exactly."""
    return _flat_key(name, static, *jax.tree_util.tree_flatten(arguments))


def _flat_key(name: str, static: dict, leaves: list, tree: Any) -> str:
    """:func:`program_key` of the arguments flattened to ``leaves`` and ``tree``."""
    try:
        parts = [name, _spell(static), _spell_tree(tree), ";".join(map(_spell_leaf, leaves)), _environment()]
    except RecursionError:  # a function that closes over itself
        raise _Unspellable(name) from None
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


@functools.cache
def source_digest() -> str:
    """A digest of jaximp's source files: a program kept by another version is never loaded."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _environment() -> str:
    settings = [f"{name}={getattr(jax.config, name, None)!r}" for name in _SETTINGS]
    devices = [(d.platform, d.device_kind, d.id) for d in jax.devices()]
    return "|".join([sys.version, jax.__version__, jaxlib.__version__, source_digest(),
                     os.environ.get("XLA_FLAGS", ""), repr(devices), jax.default_backend(), *settings])


def _name(obj: Any) -> str:
    """``module.qualname`` of a module-level function or type from :data:`_KNOWN_MODULES`."""
    module, qualname = getattr(obj, "__module__", None) or "", getattr(obj, "__qualname__", "")
    if not qualname or "<" in qualname or module.split(".")[0] not in _KNOWN_MODULES:
        raise _Unspellable(obj)  # a class or function defined inside a function, or a user's
    return f"{module}.{qualname}"


def _spell(value: Any) -> str:
    """An exact text form of a static value (equal values, equal texts; different values of the
    known kinds, different texts)."""
    if value is None or value is Ellipsis or isinstance(value, (bool, int, float, complex, str)):
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, slice):
        return f"slice({_spell(value.start)},{_spell(value.stop)},{_spell(value.step)})"
    if isinstance(value, (bytes, np.ndarray)):
        data = value if isinstance(value, bytes) else np.ascontiguousarray(value).tobytes()
        shape = "" if isinstance(value, bytes) else f"{value.dtype}{value.shape}"
        return f"bytes{shape}:{hashlib.sha256(data).hexdigest()}"
    if isinstance(value, np.generic):
        return f"{value.dtype}:{value.tobytes().hex()}"
    if isinstance(value, np.dtype):
        return f"dtype:{value}"
    if isinstance(value, enum.Enum):
        return f"{_name(type(value))}.{value.name}"
    if isinstance(value, (tuple, list, frozenset)):
        kind = type(value).__name__ if type(value) in (tuple, list, frozenset) else _name(type(value))
        items = sorted(map(_spell, value)) if isinstance(value, frozenset) else map(_spell, value)
        return f"{kind}(" + ",".join(items) + ")"
    if isinstance(value, dict):
        return "dict(" + ",".join(sorted(f"{_spell(k)}:{_spell(v)}" for k, v in value.items())) + ")"
    if isinstance(value, type):
        return _name(value)
    if dataclasses.is_dataclass(value):
        return _spell_dataclass(value)
    if isinstance(value, functools.partial):
        return f"partial({_spell(value.func)},{_spell(value.args)},{_spell(value.keywords)})"
    if isinstance(value, types.FunctionType):  # its code, and the values it closes over
        module = value.__module__ or ""
        if module.split(".")[0] not in _KNOWN_MODULES:
            raise _Unspellable(value)  # a user's function may change between processes
        try:
            cells = tuple(cell.cell_contents for cell in value.__closure__ or ())
        except ValueError:  # an empty cell
            raise _Unspellable(value) from None
        code = hashlib.sha256(_spell_code(value.__code__).encode()).hexdigest()
        return (f"function:{module}.{value.__qualname__}:{code}:{_spell(cells)}:{_spell(value.__defaults__)}:"
                f"{_spell(value.__kwdefaults__)}")
    if isinstance(value, (types.BuiltinFunctionType, np.ufunc)):
        return "builtin:" + _name(value)
    if isinstance(value, jax.sharding.NamedSharding):
        return f"NamedSharding({_spell(value.mesh.devices.shape)},{_spell([d.id for d in value.mesh.devices.flat])}," \
               f"{_spell(value.mesh.axis_names)},{_spell(tuple(value.spec))})"
    raise _Unspellable(value)


_SPELLED: dict[int, tuple[Any, str]] = {}  # id of a frozen dataclass -> (a weak reference to it, its text)


def _spell_dataclass(value: Any) -> str:
    """A dataclass spelled field by field; a frozen one once per object, found by identity (a
    model's featurizer holds megabytes of CTR tables, spelled again on every call otherwise)."""
    key, frozen = id(value), type(value).__dataclass_params__.frozen
    known = _SPELLED.get(key) if frozen else None
    if known is not None and known[0]() is value:
        return known[1]
    fields = ",".join(f"{f.name}={_spell(getattr(value, f.name))}" for f in dataclasses.fields(value))
    text = f"{_name(type(value))}({fields})"
    if frozen:
        try:
            _SPELLED[key] = (weakref.ref(value, lambda _, key=key: _SPELLED.pop(key, None)), text)
        except TypeError:  # not weakly referenceable: spelled at every call
            pass
    return text


def _spell_code(code: types.CodeType) -> str:
    """A code object's bytecode, constants (nested code included) and names. Not ``marshal``'s
    bytes: they mark objects by their reference counts, which differ between processes."""
    consts = ",".join(_spell_code(c) if isinstance(c, types.CodeType) else _spell(c) for c in code.co_consts)
    return "|".join([code.co_code.hex(), consts, *(repr(getattr(code, name)) for name in _CODE_FIELDS)])


_CODE_FIELDS = ("co_names", "co_varnames", "co_freevars", "co_cellvars", "co_argcount", "co_posonlyargcount",
                "co_kwonlyargcount", "co_flags", "co_qualname")


def _spell_tree(tree: Any) -> str:
    """A pytree structure spelled with each node's type and static data."""
    data = tree.node_data()
    if data is None:
        return "*"
    kind, aux = data
    return f"{_name(kind)}[{_spell(aux)}](" + ",".join(map(_spell_tree, tree.children())) + ")"


def _spell_leaf(x: Any) -> str:
    """An argument's shape, dtype, weak type and devices: what the program was compiled for."""
    if isinstance(x, jax.core.Tracer):
        raise _Unspellable(x)
    if isinstance(x, jax.Array):  # typed keys too: their dtype names their implementation ("key<fry>")
        devices = sorted(d.id for d in x.devices())
        spec = _spell(tuple(x.sharding.spec)) if hasattr(x.sharding, "spec") else type(x.sharding).__name__
        return f"{x.dtype}{x.shape}{'w' if getattr(x, 'weak_type', False) else ''}@{devices}:{spec}"
    if isinstance(x, (np.ndarray, np.generic)):
        return f"{x.dtype}{x.shape}"
    if type(x) in (bool, int, float, complex):
        return f"{type(x).__name__}w"  # Python scalars: weakly typed
    raise _Unspellable(x)


def _load(path: Path) -> Callable | None:
    """The program kept at ``path``, called as ``run(leaves, args, kwargs)``; None when there is
    none or it cannot be read (it is then compiled again and kept anew).

    It is loaded for the flat list of its arguments' leaves (their number is kept with it), so
    that it can be loaded before the call's arguments exist (:func:`prefetched`)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        payload, out_tree, device_ids, n_leaves = pickle.loads(data)
        devices = {d.id: d for d in jax.devices()}
        flat = jax.tree_util.tree_structure(((0,) * n_leaves, {}))
        program = serialize_executable.deserialize_and_load(payload, flat, out_tree,
                                                            execution_devices=[devices[i] for i in device_ids])
    except Exception:  # noqa: BLE001 - truncated or not a program: dropped, and compiled instead
        path.unlink(missing_ok=True)
        return None
    return functools.partial(_run_flat, program)


def _store(path: Path, program: Any) -> None:
    """Keep ``program`` at ``path``, written whole or not at all (a temporary file renamed)."""
    try:
        payload, in_tree, out_tree = serialize_executable.serialize(program)
        device_ids = [d.id for d in program._executable._unloaded_executable.device_list]  # what it runs on
        _write(path, pickle.dumps((payload, out_tree, device_ids, in_tree.num_leaves)))
    except (ValueError, NotImplementedError, pickle.PicklingError, TypeError, AttributeError):
        pass  # a program that cannot be kept is compiled again next time


def _write(path: Path, data: bytes) -> None:
    """Write ``data`` at ``path`` whole or not at all (a temporary file renamed); a folder that
    cannot be written only costs the next process time."""
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".writing-", delete=False) as file:
            temporary = Path(file.name)
            file.write(data)
        os.replace(temporary, path)
    except OSError:
        if temporary is not None:
            temporary.unlink(missing_ok=True)


# A call's programs, loaded ahead ----------------------------------------------------------------

CALLS = "calls"  # in FOLDER: per public call (function, shapes of its arguments), the keys it ran
_MAX_LISTED = 64  # keys listed per call at most (a longer list is cut, and garbage is ignored)
_PREFETCHED: set[str] = set()  # calls whose programs this process has looked for
_PENDING: dict[str, Future] = {}  # key -> its program, being loaded by a helper thread
_RECORDS = threading.local()  # .keys: the keys run by this thread's call within prefetched()


@contextlib.contextmanager
def prefetched(name: str, static: dict, arguments: Any) -> Iterator[None]:
    """Within: the programs that this call ran the last time (``name`` with ``static`` values
    and arguments of these shapes, in any process) are loaded from disk by a helper thread, and
    the keys the call runs are listed for the next process. Once per call signature and process;
    nothing while the cache is off or the call cannot be spelled (see :func:`program_key`)."""
    directory = folder()
    if directory is None or getattr(_RECORDS, "keys", None) is not None:
        yield  # no cache, or within another prefetched call (it lists the keys)
        return
    leaves, tree = jax.tree_util.tree_flatten(arguments)
    try:
        call = _known_key("call:" + name, static, leaves, tree)
    except _Unspellable:
        yield
        return
    if call in _PREFETCHED:
        yield
        return
    _PREFETCHED.add(call)
    index = directory / CALLS / call
    listed = _listed(index)
    stop = threading.Event()
    loading = _start_loading(directory, listed, stop)
    _RECORDS.keys = []
    try:
        yield
        ran = list(dict.fromkeys(_RECORDS.keys))[:_MAX_LISTED]
        if ran != listed:
            _write(index, "\n".join(ran).encode())
    finally:
        _RECORDS.keys = None
        stop.set()  # the programs the call did not run: loaded (kept) or not started (dropped)
        if loading is not None:
            helper, keys = loading
            helper.join()
            for key in keys:
                _PENDING.pop(key, None)


def _listed(index: Path) -> list[str]:
    """The keys listed at ``index``: the hex keys of its first lines, the rest ignored."""
    try:
        lines = index.read_bytes()[:65 * _MAX_LISTED].decode("ascii", "replace").split("\n")
    except OSError:
        return []
    return [line for line in lines[:_MAX_LISTED]
            if len(line) == 64 and all(c in "0123456789abcdef" for c in line)]


def _start_loading(directory: Path, keys: list[str], stop: threading.Event) -> tuple[threading.Thread, list] | None:
    """A started thread that loads the programs of ``keys`` not loaded yet, in order, and the
    keys it took; each one's :data:`_PENDING` future gets its program (None once ``stop`` is
    set, or when it cannot be read)."""
    todo = [(key, Future()) for key in keys if key not in _LOADED and key not in _PENDING]
    if not todo:
        return None
    _PENDING.update(todo)

    def load() -> None:
        for key, future in todo:
            program = None if stop.is_set() else _load(directory / key)
            if program is not None:
                _LOADED[key] = program
            future.set_result(program)

    helper = threading.Thread(target=load, name="jaximp-programs", daemon=True)
    helper.start()
    return helper, [key for key, _ in todo]


def _prefetch_result(key: str) -> Callable | None:
    """The program of ``key`` when a helper thread is loading it (waited for), else None."""
    future = _PENDING.pop(key, None)
    return None if future is None else future.result()


def _record(key: str) -> None:
    keys = getattr(_RECORDS, "keys", None)
    if keys is not None:
        keys.append(key)
