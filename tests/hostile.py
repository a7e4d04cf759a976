"""The property every hostile input must have: the reference library's numbers, or a clear
``ValueError``/``TypeError`` naming the problem, within a time and memory limit.

``bounded`` runs a call under a wall-clock alarm and a soft address-space limit a little above
what the process already maps, so that an importer that trusts a declared size fails the test
with a ``MemoryError`` instead of exhausting the machine, and one that loops fails with a
``TimeoutError``. ``outcome`` classifies what a call did; ``assert_clear_refusal`` is the check.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

SECONDS = 30  # wall clock for one hostile call (imports of real models take well under a second)
MEGABYTES = 1024  # extra address space one hostile call may map
# Examples per property-based test in the default run (slow variants run several times more)
EXAMPLES = int(os.environ.get("JAXIMP_HYPOTHESIS_EXAMPLES", 25))


def _mapped_bytes() -> int:
    """The address space this process maps now (``VmSize``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


@contextlib.contextmanager
def bounded(seconds: float = SECONDS, megabytes: int = MEGABYTES) -> Iterator[None]:
    """Run the body with a ``TimeoutError`` after ``seconds`` and a ``MemoryError`` for any
    allocation past ``megabytes`` more than the process maps on entry."""
    def alarm(_signum, _frame):
        raise TimeoutError(f"took longer than {seconds} s")

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _mapped_bytes() + (megabytes << 20)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def outcome(fn: Callable[[], Any], **limits: Any) -> tuple[str, Any]:
    """``("value", result)``, ``("refused", error)`` for a ``ValueError``/``TypeError``, or
    ``("failed", error)`` for anything else (a traceback from deep inside, a hang, a huge
    allocation), ``fn`` run under :func:`bounded`."""
    try:
        with bounded(**limits):
            return "value", fn()
    except (ValueError, TypeError) as e:
        return "refused", e
    except Exception as e:  # noqa: BLE001 - the point is to classify every other failure
        return "failed", e


def assert_clear_refusal(error: BaseException, *words: str) -> None:
    """A refusal that names the problem: the public function's name first (``"fn: ..."``) and,
    when given, each of ``words`` (case-insensitive); never an internal error text such as
    "list index out of range" alone."""
    message = str(error)
    assert re.match(r"^[\w.]+: \S", message), f"the message does not name the function: {message!r}"
    for word in words:
        assert word.lower() in message.lower(), f"{word!r} not in {message!r}"


def assert_refused_or_equal(fn: Callable[[], Any], reference: Callable[[], Any] | None, *,
                            rtol: float = 1e-5, atol: float = 1e-4, **limits: Any) -> str:
    """The property: ``fn()`` equals ``reference()`` (within float32 tolerances) or refuses
    clearly; never fails another way. Returns ``"value"`` or ``"refused"``."""
    kind, result = outcome(fn, **limits)
    assert kind != "failed", f"{type(result).__name__}: {result}"
    if kind == "refused":
        assert_clear_refusal(result)
    elif reference is not None:
        np.testing.assert_allclose(np.asarray(result), np.asarray(reference()), rtol=rtol, atol=atol)
    return kind
