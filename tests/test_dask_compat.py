"""The one door to dask's private modules (daskwp/distributed/dask_compat.py, docs/design.md
§8.2): every name it promises is dask's own object, no other daskwp module imports a private
dask module, and the range it states is pyproject.toml's and holds the installed dask.

`.ci/dask-versions` runs this file with the other Dask tests against the oldest and the
newest dask + distributed that pyproject.toml allows: a release that moves one of these
names fails here by name.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

from daskwp.distributed import dask_compat

ROOT = Path(__file__).resolve().parents[1]
#: Modules whose names are dask's private API (a leading underscore, or dask-expr's internals).
_PRIVATE = re.compile(r"^dask(\.\w+)*\.(_\w+|dask_expr)(\.|$)")


def _requirements() -> dict[str, str]:
    """The specifier of dask and of distributed in pyproject.toml's dependencies."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        tomllib = pytest.importorskip("tomli")
    from packaging.requirements import Requirement
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["dependencies"]
    reqs = {r.name: r for r in map(Requirement, deps)}
    return {name: str(reqs[name].specifier) for name in ("dask", "distributed")}


@pytest.mark.parametrize("name", [n for n in dask_compat.__all__ if n != "TESTED_DASK"])
def test_every_promised_name_is_dasks_own(name):
    obj = getattr(dask_compat, name)
    module = getattr(obj, "__module__", "")
    assert module.startswith("dask."), (name, module)
    assert _PRIVATE.match(module), f"{name} comes from {module}, not a private dask module"


def test_the_tested_range_is_pyprojects_and_holds_the_installed_releases():
    from packaging.specifiers import SpecifierSet
    tested = SpecifierSet(dask_compat.TESTED_DASK)
    assert _requirements() == {"dask": str(tested), "distributed": str(tested)}
    for dist in ("dask", "distributed"):
        version = importlib.metadata.version(dist)
        assert version in tested, f"{dist} {version} is outside {tested}"


def _private_dask_imports(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found += [(node.lineno, n) for n in names if _PRIVATE.match(n)]
    return found


def test_the_scan_finds_private_imports():
    src = ("import dask.dataframe\nfrom dask._task_spec import Task\n"
           "from dask.dataframe.dask_expr._expr import Fused\nfrom dask import _collections\n"
           "from dask.dataframe import from_pandas\n")
    assert [n for _, n in _private_dask_imports(ast.parse(src))] == [
        "dask._task_spec", "dask._task_spec.Task", "dask.dataframe.dask_expr._expr",
        "dask.dataframe.dask_expr._expr.Fused", "dask._collections"]


def test_no_other_module_imports_a_private_dask_module():
    door = ROOT / "daskwp" / "distributed" / "dask_compat.py"
    found = []
    for path in sorted((ROOT / "daskwp").rglob("*.py")):
        if path == door:
            continue
        for line, name in _private_dask_imports(ast.parse(path.read_text("utf-8"))):
            found.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    assert not found, "import these from daskwp.distributed.dask_compat:\n" + "\n".join(found)
    assert _private_dask_imports(ast.parse(door.read_text("utf-8")))
