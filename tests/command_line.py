"""The ``jaximp`` command run in the test process, as a user's shell runs it."""

from __future__ import annotations

from jaximp._frontends.cli import main


def run(argv, capfd) -> tuple[int, str, str]:
    """``(exit status, stdout, stderr)`` of ``jaximp ARGV`` in this process (file descriptors
    captured by pytest's ``capfd``, so that anything a library prints itself counts too)."""
    try:
        status = main([str(a) for a in argv])
    except SystemExit as e:  # argparse's usage errors and --help
        status = e.code
    out, err = capfd.readouterr()
    return status, out, err
