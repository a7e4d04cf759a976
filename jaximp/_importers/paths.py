"""A path that names no file, refused alike by every entry point that reads files: the importers
(``from_catboost``, ``from_xgboost``, ``from_lightgbm``), ``jaximp.explain_files``,
``jaximp.TreeExplainer`` and ``jaximp explain``.

One error type, ``ValueError`` (jaximp's for bad input), and one message:
``"{who} must be {what}; got {path!r}, which is not an existing file"``, e.g. ``"from_xgboost:
model must be an XGBoost model or an existing model file; got 'model.json', which is not an
existing file"``.
"""

from __future__ import annotations

import os
from typing import Any


def not_existing(who: str, what: str, path: Any, kind: str = "file") -> ValueError:
    """The error for ``path``, which names no ``kind`` (``"file"``; ``"file or directory"`` where
    a directory is read too): ``who`` is the function and the argument (``"from_xgboost:
    model"``, or ``"DATA"`` on the command line), ``what`` what that argument must be."""
    return ValueError(f"{who} must be {what}; got {os.fspath(path)!r}, which is not an existing {kind}")


def existing_file(path: str | os.PathLike, who: str, what: str) -> str:
    """``path`` as a string once it names an existing file; else :func:`not_existing`'s error."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise not_existing(who, what, path)
    return path
