"""The notebooks run top to bottom (their cells assert against the reference libraries).

gpu_analysis and huge_data run with ``-m slow`` (about a minute on 2 cores together): what their
cells assert is asserted by default elsewhere, against the same oracles (tests/test_shap_*.py and
test_importances_*.py for every library's numbers, test_frontends_plots.py, test_scale.py for rows
on a device, batch sizes, devices and the compilation cache, test_frontends_files.py for
explain_files against in-memory SHAP, test_frontends_dask.py and test_frontends_cli.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
SLOW = {"gpu_analysis.ipynb", "huge_data.ipynb"}


@pytest.mark.parametrize("path", [pytest.param(p, id=p.name, marks=pytest.mark.slow if p.name in SLOW else ())
                                  for p in NOTEBOOKS])
def test_notebook_runs(path):
    cells = json.loads(path.read_text())["cells"]
    namespace: dict = {"__name__": "__notebook__"}
    try:
        for i, cell in enumerate(c for c in cells if c["cell_type"] == "code"):
            exec(compile("".join(cell["source"]), f"{path.name}[code cell {i}]", "exec"), namespace)
    finally:
        if "matplotlib.pyplot" in sys.modules:  # the notebook's figures, shown inline in Jupyter
            sys.modules["matplotlib.pyplot"].close("all")
