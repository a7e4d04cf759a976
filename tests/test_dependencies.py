"""A fresh machine runs what the README promises: every third-party module that the suite, the
notebooks, the documentation's code and the scripts import is a dependency that pyproject.toml
declares for them (the core dependencies, or the extra that runs them), and CI (``.ci/run``) runs the
README's own commands, each in a new virtual environment.

A module may instead be skipped with ``pytest.importorskip(name, reason=...)``, for an optional
library the suite does not install; a declared one is imported plainly, so that a missing install
fails instead of skipping tests quietly.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import sys
from importlib import metadata
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest's own TOML parser
    import tomli as tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]

# The extra that runs each file (beside the core dependencies). The README's code and the pages'
# code run in the suite (tests/test_package.py, tests/test_docs.py), and so do the notebooks.
RUN_BY = {"tests/**/*.py": "test", "notebooks/*.ipynb": "test", "notebooks/**/*.md": "test", "README.md": "test",
          "scripts/bench.py": "bench", "scripts/execute_notebooks.py": "notebooks"}
# Import names of distributions that the test extra does not install, where the two names differ
# (the installed ones are read from their metadata).
NOT_INSTALLED = {"woodelf": "woodelf-explainer"}
FIRST_PARTY = {"jaximp"}


def python_sources(path: Path) -> list[str]:
    """The Python code of a file: a module, a notebook's code cells, a page's ```python blocks."""
    text = path.read_text()
    if path.suffix == ".ipynb":
        return ["".join(cell["source"]) for cell in json.loads(text)["cells"] if cell["cell_type"] == "code"]
    if path.suffix == ".md":
        return re.findall(r"```python\n(.*?)```", text, flags=re.S)
    return [text]


def imports(source: str) -> tuple[set[str], dict[str, bool]]:
    """``(top-level modules imported, {module: has a reason} of each pytest.importorskip)``."""
    imported, skipped = set(), {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module.split(".")[0])
        elif (isinstance(node, ast.Call) and "importorskip" in (getattr(node.func, "attr", None),
                                                                getattr(node.func, "id", None))
              and node.args and isinstance(node.args[0], ast.Constant)):
            skipped[node.args[0].value.split(".")[0]] = any(k.arg == "reason" for k in node.keywords)
    return imported, skipped


def local_modules(path: Path) -> set[str]:
    """Modules importable beside a file (tests/models.py, tests/oracles.py, ...)."""
    return {p.stem for p in path.parent.glob("*.py")} | {p.name for p in path.parent.iterdir() if p.is_dir()}


def declared(project: dict, extra: str) -> set[str]:
    """Distributions installed by ``pip install ".[extra]"``: the core ones, the extra's, and those of
    the extras it names (``jaximp[test]``), by their canonical names."""
    extras, own = project.get("optional-dependencies", {}), canonicalize_name(project["name"])
    names, todo, seen = set(), [None, extra], set()  # None: the core dependencies
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for requirement in map(Requirement, project["dependencies"] if name is None else extras.get(name, [])):
            if canonicalize_name(requirement.name) == own:
                todo += sorted(requirement.extras)
            else:
                names.add(canonicalize_name(requirement.name))
    return names


@functools.cache
def _installed() -> dict[str, list[str]]:
    return metadata.packages_distributions()


@functools.cache
def distributions(module: str) -> set[str]:
    """The canonical names of the distributions that provide a top-level module."""
    found = _installed().get(module)
    return {canonicalize_name(d) for d in found} if found else {canonicalize_name(NOT_INSTALLED.get(module, module))}


def undeclared(root: Path, project: dict) -> list[str]:
    """Each third-party import under ``root`` that no extra running its file installs, and each
    importorskip that lacks a reason or skips a declared dependency."""
    standard = set(sys.stdlib_module_names) | FIRST_PARTY
    problems = []
    for pattern, extra in RUN_BY.items():
        installed = declared(project, extra)
        for path in sorted(root.glob(pattern)):
            where = path.relative_to(root)
            local = local_modules(path) if path.suffix == ".py" else set()
            for source in python_sources(path):
                imported, skipped = imports(source)
                for module, has_reason in sorted(skipped.items()):
                    if distributions(module) & installed:
                        problems.append(f"{where}: importorskip({module!r}) skips a declared dependency: import it")
                    elif not has_reason:
                        problems.append(f"{where}: importorskip({module!r}) without a reason")
                for module in sorted(imported - standard - local - set(skipped)):
                    # declared: a distribution that provides it, or the one named as the module
                    # (griffe 2 is "griffe", whose module comes from its dependency griffelib)
                    if not (distributions(module) | {canonicalize_name(module)}) & installed:
                        problems.append(f"{where}: imports {module} ({', '.join(sorted(distributions(module)))}), "
                                        f"which neither the core dependencies nor the {extra!r} extra declare")
    return sorted(set(problems))


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_every_import_is_declared_by_the_extra_that_runs_it():
    problems = undeclared(ROOT, pyproject())
    assert not problems, "\n".join(problems)


def test_an_undeclared_import_is_found(tmp_path):
    """The check fails where it should: a test dependency dropped from the extra, a notebook's import
    of an undeclared library, an importorskip of a declared one and one without a reason."""
    project = pyproject()
    extras = project["optional-dependencies"]
    without = {**project, "optional-dependencies": {**extras, "test": [
        r for r in extras["test"] if canonicalize_name(Requirement(r).name) != "hypothesis"]}}
    found = undeclared(ROOT, without)
    assert any("test_hostile_rows.py: imports hypothesis" in p for p in found), found

    (tmp_path / "tests").mkdir()
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "import pytest\nimport helper\npd = pytest.importorskip('pandas', reason='r')\n"
        "def test():\n    from woodelf import WoodelfExplainer\n    pytest.importorskip('not_a_module')\n")
    (tmp_path / "tests" / "helper.py").write_text("")
    (tmp_path / "notebooks" / "a.ipynb").write_text(json.dumps(
        {"cells": [{"cell_type": "code", "source": ["import numpy\n", "import not_declared_anywhere\n"]}]}))
    assert undeclared(tmp_path, project) == [
        "notebooks/a.ipynb: imports not_declared_anywhere (not-declared-anywhere), which neither the core "
        "dependencies nor the 'test' extra declare",
        "tests/test_x.py: importorskip('not_a_module') without a reason",
        "tests/test_x.py: importorskip('pandas') skips a declared dependency: import it",
        "tests/test_x.py: imports woodelf (woodelf-explainer), which neither the core dependencies nor the 'test' "
        "extra declare",
    ]


def test_extras_naming_other_extras_install_theirs():
    project = pyproject()
    assert {"hypothesis", "pytest", "jax", "nbclient"} <= declared(project, "notebooks")
    assert "hypothesis" not in declared(project, "bench") and "woodelf-explainer" in declared(project, "bench")


def readme_commands() -> list[str]:
    """The README's set-up commands, in order: the demo's, then the tests'."""
    return re.findall(r"^`(python -m pip install [^`]+)`$", (ROOT / "README.md").read_text(), flags=re.M)


def test_ci_runs_the_readmes_commands_in_fresh_virtual_environments():
    demo, tests = readme_commands()[:2]
    assert "jaximp demo" in demo and "pytest" in tests
    ci = (ROOT / ".ci" / "run").read_text()
    code = "\n".join(line for line in ci.splitlines() if not line.lstrip().startswith("#"))
    assert f"'{demo}'" in code, "CI does not run the README's demo command"
    assert tests in code.splitlines(), "CI does not run the README's test command on a line of its own"
    assert code.rstrip().splitlines()[-1] == tests, "the test command's exit status must be CI's"
    assert re.search(r"python3? -m venv ", code) and "system-site-packages" not in code
    assert code.index("fresh_env demo") < code.index(demo) < code.index("fresh_env test") < code.index(tests)
