"""scripts/figures.py draws the README's and the docs' pictures (the beeswarm, the importance bars and the
interaction heatmap of the demo's model) as PNG files, and the files it wrote are in notebooks/figures
(about 15 s on 2 cores: the demo's model is trained, explained and drawn once)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "notebooks" / "figures"
NAMES = ["beeswarm.png", "importance.png", "interactions.png"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _script():
    spec = importlib.util.spec_from_file_location("figures_script", ROOT / "scripts" / "figures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def drawn(tmp_path_factory) -> list[Path]:
    """The three files, written by the script's main function into a new folder."""
    out = tmp_path_factory.mktemp("figures") / "new"  # a folder that does not exist yet
    return _script().main(out)


def _png_size(path: Path) -> tuple[int, int]:
    """The (width, height) of a PNG file, after checking that it is a complete, readable PNG."""
    assert path.read_bytes()[:8] == PNG_SIGNATURE, f"{path.name} is not a PNG file"
    with Image.open(path) as image:
        assert image.format == "PNG"
        image.verify()  # every chunk's checksum
    with Image.open(path) as image:
        image.load()  # every pixel decodes
        return image.size


def _check_picture(path: Path) -> tuple[int, int]:
    size = path.stat().st_size
    assert 10_000 < size < 200_000, f"{path.name}: {size} bytes, not a plot of a reasonable size"
    width, height = _png_size(path)
    assert 400 <= width <= 1400 and 400 <= height <= 1400, f"{path.name}: {width} x {height} pixels"
    return width, height


def test_main_writes_the_three_pictures_as_pngs(drawn):
    assert [path.name for path in drawn] == NAMES
    for path in drawn:
        _check_picture(path)


def test_the_committed_pictures_are_the_scripts(drawn):
    """notebooks/figures holds the three pictures, drawn at the size the script draws them now."""
    for path in drawn:
        committed = COMMITTED / path.name
        assert committed.is_file(), f"{committed.relative_to(ROOT)} is missing: run python scripts/figures.py"
        assert _check_picture(committed) == _png_size(path), (
            f"{committed.relative_to(ROOT)} has another size than the script draws: run python scripts/figures.py")


def test_the_default_folder_is_notebooks_figures():
    assert _script().FIGURES == COMMITTED
