"""The documentation site builds with warnings as errors (``mkdocs build --strict``): every public name
has an API entry, every notebook is a page, every link resolves; and the README stays short."""

from __future__ import annotations

import ast
import html.parser
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built once into a temporary folder (a few seconds: notebooks are rendered, not run)."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout[-4000:]}\n{run.stderr[-8000:]}"
    assert not (ROOT / ".cache").exists(), "the build must not leave a cache folder in the repository"
    return out


def test_every_public_name_has_an_api_entry(site):
    import jaximp
    import jaximp.dask
    import jaximp.plots

    page = (site / "api" / "index.html").read_text()
    names = ([f"jaximp.{name}" for name in jaximp.__all__]
             + [f"jaximp.dask.{name}" for name in jaximp.dask.__all__]
             + [f"jaximp.plots.{name}" for name in jaximp.plots.__all__]
             + ["jaximp.Explainer.__call__", "jaximp.ObliviousEnsemble.predict", "jaximp.TreeEnsemble.predict"])
    missing = [name for name in names if f'id="{name}"' not in page]
    assert not missing, f"no API reference entry for {missing}"


# Words of prose, never of a type: a Returns section that starts with a sentence holding a colon has
# the sentence's start taken as its type.
_PROSE = {"a", "an", "and", "as", "else", "for", "if", "in", "is", "of", "on", "or", "the", "when", "with"}
_TYPE_NODES = (ast.Expression, ast.Name, ast.Attribute, ast.Subscript, ast.BinOp, ast.BitOr, ast.Constant,
               ast.Tuple, ast.List, ast.Load)


def _type_problem(text: str | None) -> str | None:
    """Why a Returns/Yields cell's type text is not a type expression (``np.ndarray | jax.Array``,
    ``tuple[int, ...]``, ``Interactions``), or None."""
    if not text:
        return "no type"
    if "`" in text:
        return "a backtick"
    if text in ("Any", "typing.Any"):  # a section without its type shows the signature's annotation
        return "Any says nothing: name the type"
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return "not a Python expression"
    if isinstance(tree.body, ast.Tuple):
        return "a comma outside brackets"
    for node in ast.walk(tree):
        if not isinstance(node, _TYPE_NODES) or (isinstance(node, ast.BinOp) and not isinstance(node.op, ast.BitOr)):
            return f"a {type(node).__name__} node"
        if isinstance(node, (ast.Name, ast.Attribute)) and (node.id if isinstance(node, ast.Name)
                                                            else node.attr).lower() in _PROSE:
            return "a word of prose"
    return None


def _rendered_objects() -> list[tuple[str, object]]:
    """``(path, griffe object)`` of everything notebooks/api.md renders, loaded as mkdocstrings loads it
    (the handler's paths, docstring style and options from mkdocs.yml; each ``:::`` block's own
    options over them): the ``:::`` identifiers, their members kept by ``filters`` (or an explicit
    ``members`` list), inherited ones with ``inherited_members``, recursively."""
    import griffe
    from mkdocs.utils.yaml import yaml_load

    config = yaml_load((ROOT / "mkdocs.yml").read_text())
    plugin = next(p["mkdocstrings"] for p in config["plugins"] if isinstance(p, dict) and "mkdocstrings" in p)
    python = plugin["handlers"]["python"]
    options = python["options"]
    loader = griffe.GriffeLoader(search_paths=[str(ROOT / path) for path in python.get("paths", ["."])],
                                 docstring_parser=griffe.Parser(options["docstring_style"]),
                                 docstring_options=options.get("docstring_options", {}))
    blocks = re.findall(r"^::: (\S+)\n((?:[ \t]+.*\n)*)", (ROOT / "notebooks" / "api.md").read_text(), flags=re.M)
    for identifier, _ in blocks:
        loader.load(identifier.split(".")[0])
    loader.resolve_aliases(implicit=False, external=False)

    def keep(name: str, filters: list[str]) -> bool:  # mkdocstrings-python's rule
        kept, rules = None, set()
        for rule in filters:
            rules.add(rule.startswith("!"))
            if re.search(rule.removeprefix("!"), name):
                kept = not rule.startswith("!")
        return rules != {False} if kept is None else kept

    found: list[tuple[str, object]] = []

    def walk(path: str, obj, opts: dict, members: list[str] | None) -> None:
        obj = obj.final_target if obj.is_alias else obj
        found.append((path, obj))
        if obj.is_class or obj.is_module:
            children = obj.all_members if obj.is_class and opts.get("inherited_members") else obj.members
            for name, member in children.items():
                if (name in members) if members is not None else keep(name, opts.get("filters", [])):
                    walk(f"{path}.{name}", member, opts, None)

    for identifier, block in blocks:
        own = (yaml_load(textwrap.dedent(block)) or {}).get("options", {}) if block.strip() else {}
        opts = {**options, **own}
        members = opts.get("members") if isinstance(opts.get("members"), list) else None
        walk(identifier, loader.modules_collection[identifier], opts, members)
    return found


def test_every_returns_section_starts_with_its_type():
    """With ``returns_multiple_items: false`` and ``returns_named_value: false`` (mkdocs.yml), the API
    reference's Type column of a Returns (Yields) section is the text before the section's first
    colon: each section starts ``Type: description`` with a real type, not a sentence holding a
    colon (whose start, backticks and all, would fill the Type cell)."""
    objects = _rendered_objects()
    paths = {path for path, _ in objects}
    assert {"jaximp.from_catboost", "jaximp.ObliviousEnsemble.predict", "jaximp.Explainer.__call__",
            "jaximp.dask.shap_values", "jaximp.plots.summary"} <= paths, "the API reference's objects were not found"
    bad, sections = [], 0
    for path, obj in objects:
        for section in obj.docstring.parsed if obj.docstring else []:
            if section.kind.value not in ("returns", "yields"):
                continue
            sections += 1
            for item in section.value:
                text = None if item.annotation is None else str(item.annotation)
                problem = _type_problem(text)
                if problem:
                    bad.append(f"{path} ({obj.relative_filepath}:{obj.docstring.lineno}): "
                               f"{section.kind.value.capitalize()} type {text!r}: {problem}")
    assert sections > 20, f"only {sections} Returns/Yields sections found"
    assert not bad, "Returns/Yields sections whose type cell is not a type:\n" + "\n".join(bad)


def test_every_notebook_is_a_page(site):
    assert NOTEBOOKS
    for notebook in NOTEBOOKS:
        page = site / notebook.stem / "index.html"
        assert page.is_file(), f"{notebook.name} is not a page of the site"
        assert "jp-Cell" in page.read_text() or "jupyter" in page.read_text().lower()


def test_benchmarks_page_is_scripts_benchmarks_md(site):
    """The page includes scripts/BENCHMARKS.md as bench.py writes it (not a copy)."""
    first_row = next(line for line in (ROOT / "scripts" / "BENCHMARKS.md").read_text().splitlines()
                     if line.startswith("| ") and "---" not in line and "workload" not in line)
    workload = first_row.split("|")[1].strip()
    assert workload in (site / "benchmarks" / "index.html").read_text()


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []
        self.toc_links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        for key in ("href", "src"):
            if attrs.get(key) and tag in ("a", "img"):
                toc = key == "href" and attrs[key].startswith("#") and "md-nav__link" in (attrs.get("class") or "")
                (self.toc_links if toc else self.links).append(attrs[key])


def test_no_link_in_the_site_is_broken(site):
    """Every relative link of every page (markdown, notebooks, docstrings) points at a file of the site,
    and its #anchor at an id of that page. Not checked: a notebook page's own table of contents in the
    sidebar, which mkdocs-jupyter 0.26 slugs differently from the heading's id when a notebook heading
    holds inline code (one such link in differentiable.ipynb); markdown pages' tables of contents are
    checked by mkdocs itself (``validation: anchors`` in mkdocs.yml)."""
    parsed: dict[Path, _Links] = {}

    def links_of(page: Path) -> _Links:
        if page not in parsed:
            parsed[page] = _Links()
            parsed[page].feed(page.read_text(errors="replace"))
        return parsed[page]

    broken = []
    for page in site.rglob("*.html"):
        if page.name == "404.html":
            continue
        for link in links_of(page).links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "data:", "javascript:")):
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(site)}: {link}")
            elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in links_of(target).ids:
                broken.append(f"{page.relative_to(site)}: {link} (no such anchor)")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_readme_is_short_and_links_every_notebook_and_the_docs():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    for notebook in NOTEBOOKS:
        assert f"notebooks/{notebook.name}" in text, f"the README does not link {notebook.name}"
    assert 'python -m pip install -e ".[docs]" && mkdocs serve' in text
    assert re.search(r"<!-- headline -->\n\|.*\n<!-- /headline -->", text, flags=re.S)
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    missing = [link for link in links if "://" not in link and not (ROOT / link).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


def test_getting_started_quick_start_is_the_readmes():
    """The site's first explanation is the README's quick start, which tests/test_package.py runs."""
    readme = (ROOT / "README.md").read_text()
    quick_start = re.search(r"```python\n(.*?)```", readme[readme.index("## Quick start\n"):], flags=re.S).group(1)
    assert quick_start in _python_blocks(ROOT / "notebooks" / "getting-started.md")


# The pages whose ```python blocks run top to bottom as one script (other-libraries.md shows fragments).
RUNNABLE_PAGES = ["migrating/catboost.md", "migrating/shap.md", "migrating/sklearn.md",
                  "migrating/xgboost-lightgbm.md", "guides/huge-data.md", "guides/differentiable.md",
                  "guides/gpu-analysis.md"]


@pytest.mark.slow
@pytest.mark.parametrize("page", RUNNABLE_PAGES)
def test_page_snippets_run(page, tmp_path):
    """Each page's code runs as written and its asserts (jaximp against the reference library) hold
    (10 to 30 s a page on 2 cores)."""
    code = "import matplotlib\nmatplotlib.use('Agg')\n" + "\n".join(_python_blocks(ROOT / "notebooks" / page))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAXIMP_CACHE_DIR": str(tmp_path / "cache")}
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, f"{page}:\n{run.stderr[-4000:]}"
