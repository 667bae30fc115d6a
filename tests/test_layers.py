"""The package's layers (docs/design.md §8): imports go only downward, never in a cycle, and
no module imports another module's private name.

Every import statement counts, function-level ones included (they hide cycles, not remove
them). Layers, lowest first: the compiled extension ``daskwp._ext``; ``core``; ``backends``;
``frames`` and ``memory`` (side by side); ``distributed``; ``accessors``, ``jobs``, ``io`` and ``testing`` (side by side:
none imports another); ``cli``. The package root ``daskwp/__init__.py`` is the public face:
it may import any layer, and no module imports from it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import daskwp

PACKAGE = Path(daskwp.__file__).resolve().parent
ROOT = "daskwp"

#: Sub-package (or module) -> layer number.
LAYERS = {
    "daskwp._ext": 0,
    "daskwp.core": 1,
    "daskwp.backends": 2,
    "daskwp.frames": 3,
    "daskwp.memory": 3,
    "daskwp.distributed": 4,
    "daskwp.accessors": 5,
    "daskwp.jobs": 5,
    "daskwp.io": 5,
    "daskwp.testing": 5,
    "daskwp.cli": 6,
    "daskwp.__main__": 7,
}


def _modules() -> dict[str, Path]:
    mods = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _group(module: str) -> str | None:
    """The LAYERS key a module belongs to (its sub-package, or itself)."""
    for key in sorted(LAYERS, key=len, reverse=True):
        if module == key or module.startswith(key + "."):
            return key
    return None


def _resolve(module: str, is_package: bool, target: str | None, level: int) -> str:
    if level == 0:
        return target or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[:len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _imports(module: str, path: Path) -> list[tuple[str, str | None, int]]:
    """(imported daskwp module, imported name or None, line) for every import statement."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == ROOT or a.name.startswith(ROOT + "."):
                    out.append((a.name, None, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, is_package, node.module, node.level)
            if not (target == ROOT or target.startswith(ROOT + ".")):
                continue
            for a in node.names:
                sub = f"{target}.{a.name}"
                if sub in MODULES or sub == "daskwp._ext":
                    out.append((sub, None, node.lineno))     # a module
                else:
                    out.append((target, a.name, node.lineno))
    return out


EDGES = {m: _imports(m, p) for m, p in MODULES.items()}


def test_every_module_has_a_layer():
    unplaced = [m for m in MODULES if m != ROOT and _group(m) is None]
    assert not unplaced, f"modules outside every layer (add them to LAYERS and §8): {unplaced}"


def test_imports_go_only_downward():
    bad = []
    for m, edges in EDGES.items():
        if m == ROOT:
            continue
        g = _group(m)
        for target, name, line in edges:
            if target == ROOT:
                bad.append(f"{m}:{line} imports the package root (import from the layer "
                           f"that defines {name!r})")
                continue
            tg = _group(target)
            if tg is None:
                bad.append(f"{m}:{line} imports {target}, which has no layer")
            elif LAYERS[tg] > LAYERS[g]:
                bad.append(f"{m} (layer {LAYERS[g]}):{line} imports {target} "
                           f"(layer {LAYERS[tg]})")
            elif LAYERS[tg] == LAYERS[g] and tg != g:
                bad.append(f"{m}:{line} imports {target}: {g} and {tg} are side by side")
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_no_private_names_cross_modules():
    bad = [f"{m}:{line} imports {target}.{name}"
           for m, edges in EDGES.items() for target, name, line in edges
           if name is not None and name.startswith("_") and not name.startswith("__")
           and target != m]
    assert not bad, "private names imported across modules:\n" + "\n".join(bad)


def test_no_import_cycles():
    graph = {m: {t for t, _, _ in edges if t in MODULES and t != m and t != ROOT}
             for m, edges in EDGES.items() if m != ROOT}
    # A package's __init__ only re-exports: edges into a package module are edges to it.
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v):
        state[v] = 1
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                cycles.append(" -> ".join(stack[stack.index(w):] + [w]))
            elif w not in state:
                visit(w)
        stack.pop()
        state[v] = 2

    for v in sorted(graph):
        if v not in state:
            visit(v)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


@pytest.mark.parametrize("bad", [
    ("daskwp.core.x", [("daskwp.backends.tokenizer", None, 1)]),
    ("daskwp.jobs.x", [("daskwp.accessors.lazy", None, 1)]),
])
def test_the_rule_catches_an_upward_import(bad, monkeypatch):
    """The checks above can fail: an invented upward / sideways import is caught."""
    module, edges = bad
    monkeypatch.setitem(EDGES, module, edges)
    with pytest.raises(AssertionError):
        test_imports_go_only_downward()


def test_the_rule_catches_a_private_import(monkeypatch):
    monkeypatch.setitem(EDGES, "daskwp.frames.x", [("daskwp.core.windows", "_secret", 3)])
    with pytest.raises(AssertionError, match="_secret"):
        test_no_private_names_cross_modules()


def test_the_rule_catches_a_cycle(monkeypatch):
    monkeypatch.setitem(EDGES, "daskwp.core.options",
                        EDGES["daskwp.core.options"] + [("daskwp.core.windows", None, 1)])
    with pytest.raises(AssertionError, match="cycle"):
        test_no_import_cycles()
