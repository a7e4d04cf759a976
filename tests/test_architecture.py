"""The package's layout as a contract: the pipeline's stages import only the stages before them
(import-linter, configured in pyproject.toml), no module imports jaximp modules inside a
function or the top-level package, and no module is longer than a reader can hold.

The import-linter check runs on this checkout and, to show that it can fail, on a copy of the
package with one import that flows backwards.
"""

from __future__ import annotations

import ast
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "jaximp"
MAX_LINES = 500
# the command line's entry imports the library after parsing its arguments, so that --help is fast
LAZY_ALLOWED = {"jaximp/_frontends/cli.py"}


def _modules() -> list[pathlib.Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _lint_imports(root: pathlib.Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on the package under ``root``, with the contracts of pyproject.toml."""
    return subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                               "sys.exit(lint_imports_command())", "--no-cache"],
        cwd=root, capture_output=True, text=True, timeout=300,
        env={"PYTHONPATH": str(root), "PATH": "", "PYTHONDONTWRITEBYTECODE": "1"},
    )


def test_import_contracts_hold():
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_backward_import_breaks_the_contracts(tmp_path):
    """The model importing the SHAP stage (a circle-in-waiting) fails the layers contract."""
    shutil.copytree(PACKAGE, tmp_path / "jaximp", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    ensemble = tmp_path / "jaximp" / "_models" / "ensemble.py"
    ensemble.write_text(ensemble.read_text() + "\nfrom jaximp._shap import values as _backwards  # noqa\n")
    result = _lint_imports(tmp_path)
    assert result.returncode != 0
    assert "jaximp._models.ensemble -> jaximp._shap.values" in result.stdout


def _jaximp_imports(tree: ast.AST):
    """``(node, module name, inside a function)`` of every import of jaximp in a module."""
    def walk(node, in_function):
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            of_jaximp = (getattr(child, "module", None) or "").split(".")[0] == "jaximp"
            if isinstance(child, ast.ImportFrom) and child.level == 0 and of_jaximp:
                yield child, child.module, in_function
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.split(".")[0] == "jaximp":
                        yield child, alias.name, in_function
            yield from walk(child, inside)
    yield from walk(tree, False)


def test_no_import_of_jaximp_inside_functions_nor_of_the_package_itself():
    """Circles are untied where the code belongs, not hidden in functions; stages never import
    the public package (``import jaximp``, ``from jaximp import x``)."""
    found = []
    for path in _modules():
        name = path.relative_to(ROOT).as_posix()
        for node, module, in_function in _jaximp_imports(ast.parse(path.read_text())):
            if in_function and name not in LAZY_ALLOWED:
                found.append(f"{name}:{node.lineno} imports {module} inside a function")
            top_level = module == "jaximp" and isinstance(node, ast.Import)
            from_package = module == "jaximp" and isinstance(node, ast.ImportFrom)
            if (top_level or from_package) and name != "jaximp/__init__.py":
                found.append(f"{name}:{node.lineno} imports the top-level package")
    assert not found, "\n".join(found)


def test_no_module_longer_than_a_reader_holds():
    long = {path.relative_to(ROOT).as_posix(): n for path in _modules()
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_the_conftest_lives_outside_the_package():
    assert not list(PACKAGE.rglob("conftest.py"))


def test_ruff_is_clean():
    """The style configured in pyproject.toml holds for the package, the tests and the scripts."""
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "jaximp", "tests", "scripts"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
