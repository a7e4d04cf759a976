"""The notebooks run top to bottom (their cells assert against the reference libraries)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path):
    cells = json.loads(path.read_text())["cells"]
    namespace: dict = {"__name__": "__notebook__"}
    try:
        for i, cell in enumerate(c for c in cells if c["cell_type"] == "code"):
            exec(compile("".join(cell["source"]), f"{path.name}[code cell {i}]", "exec"), namespace)
    finally:
        if "matplotlib.pyplot" in sys.modules:  # the notebook's figures, shown inline in Jupyter
            sys.modules["matplotlib.pyplot"].close("all")
