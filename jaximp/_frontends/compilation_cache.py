"""JAX's persistent compilation cache, so that a new process does not recompile jaximp's kernels.

Every kernel is compiled once per process for each model shape and step shape (1 to 11 s on a
GPU, about 2 s per function on a CPU). JAX can keep compiled programs on disk and load them in
later processes instead (``jax_compilation_cache_dir``); :func:`enable_compilation_cache` turns
that on for every program, however quick to compile, and so does the environment variable
``JAXIMP_COMPILATION_CACHE`` when ``jaximp`` is imported. It is JAX's own cache, and the only one:
a program is found on disk by its lowered form, keyed by JAX on everything that compiles it.
"""

from __future__ import annotations

import os
from pathlib import Path

import jax


def default_cache_dir() -> Path:
    """``$JAXIMP_CACHE_DIR``, else ``$XDG_CACHE_HOME/jaximp/jax`` (``~/.cache/jaximp/jax``)."""
    if os.environ.get("JAXIMP_CACHE_DIR"):
        return Path(os.environ["JAXIMP_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "jaximp" / "jax"


def enable_compilation_cache(path: str | os.PathLike | None = None) -> Path:
    """Keep compiled programs on disk and reuse them in later processes (JAX's persistent cache).

    Call it once at the start of a session (a notebook's first cell), before the first jaximp
    call, or set ``JAXIMP_COMPILATION_CACHE=1`` (or a directory) in the environment, which
    turns it on when ``jaximp`` is imported. Programs compiled from then on are written to
    ``path`` and read back by any later process that enables the same directory, on the same
    device kind and JAX version. It applies to all of the process's JAX programs, not only
    jaximp's.

    A later process still traces and lowers each program, then loads it instead of compiling
    it. Loading a program runs code from ``path``: the folder must be as trusted as the code
    itself (JAX's warning on its persistent cache).

    Args:
        path: the cache directory (created if missing); None: ``$JAXIMP_CACHE_DIR`` if set, else
            ``$XDG_CACHE_HOME/jaximp/jax`` (``~/.cache/jaximp/jax``).

    Returns:
        Path: the directory used, a ``pathlib.Path``.

    Raises:
        OSError: the directory cannot be created.

    Examples:
        >>> import tempfile
        >>> folder = jaximp.enable_compilation_cache(tempfile.mkdtemp())  # None: ~/.cache/jaximp/jax
        >>> folder.is_dir()
        True
    """
    directory = Path(path).expanduser() if path is not None else default_cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return directory


_OFF, _ON = ("", "0", "false", "no", "off"), ("1", "true", "yes", "on")


def enable_from_environment() -> Path | None:
    """Turn the cache on when ``$JAXIMP_COMPILATION_CACHE`` asks for it (called on import).

    ``1``, ``true``, ``yes`` or ``on``: the default directory (see
    :func:`enable_compilation_cache`); unset, empty, ``0``, ``false``, ``no`` or ``off``: nothing;
    any other value: that directory.

    Returns:
        The directory used, or None when the variable does not ask for the cache.
    """
    value = os.environ.get("JAXIMP_COMPILATION_CACHE", "").strip()
    if value.lower() in _OFF:
        return None
    return enable_compilation_cache(None if value.lower() in _ON else value)
