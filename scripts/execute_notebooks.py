"""Execute notebooks in place and store their outputs, as they are committed.

    python scripts/execute_notebooks.py notebooks/quickstart.ipynb [more.ipynb ...]

Runs every cell with nbclient (``python -m pip install -e ".[notebooks]"``; ipywidgets keeps tqdm's
"IProgress not found" warning out of the outputs) in the notebook's folder, drops the per-cell
execution timestamps and re-encodes each stored PNG with a 256-colour palette (the same picture,
about three times smaller), so that a notebook stays a few hundred KB. Run it from a clone with
``PYTHONPATH=$PWD`` so that the kernel imports this checkout's jaximp.
"""

from __future__ import annotations

import base64
import io
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def shrink_png(encoded: str) -> str:
    """A base64 PNG re-encoded with an adaptive 256-colour palette over a white background."""
    from PIL import Image

    image = Image.open(io.BytesIO(base64.b64decode(encoded))).convert("RGBA")
    flat = Image.alpha_composite(Image.new("RGBA", image.size, (255, 255, 255, 255)), image).convert("RGB")
    palette = flat.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    buffer = io.BytesIO()
    palette.save(buffer, "PNG", optimize=True)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def execute(path: Path) -> float:
    """Run ``path`` top to bottom and write it back with its outputs; the seconds it took."""
    notebook = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(notebook, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    seconds = time.perf_counter() - start
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
        for output in cell.get("outputs", []):
            if "image/png" in output.get("data", {}):
                output["data"]["image/png"] = shrink_png(output["data"]["image/png"])
    nbformat.write(notebook, path)
    return seconds


if __name__ == "__main__":
    for name in sys.argv[1:]:
        seconds = execute(Path(name).resolve())
        print(f"{name}: executed in {seconds:.1f} s, {Path(name).stat().st_size / 1024:.0f} KB")
