"""The import graph between gossipfl's packages (issue 38; docs/design.md, "Imports").

Every ``import`` is read from the source with :mod:`ast`, those inside functions too (a lazy
import is an arrow all the same). A *unit* is a subpackage (``topology``) or a top-level
module (``config``). The tests: no circle between units; the layers that docs/design.md
lists are imported downward only; ``config`` (the schema) imports no component.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gossipfl

PACKAGE = Path(gossipfl.__file__).resolve().parent

#: docs/design.md's order, top to bottom; units of one layer may import each other.
LAYERS = [
    ["cli"], ["api"], ["studies"], ["results"], ["core"], ["analysis"], ["assembly"],
    ["systems", "testing"], ["schedules", "scaffold"], ["algorithms", "distributed"],
    ["network"], ["topology", "data", "models", "trust", "compression", "output"], ["config"],
    ["engine"], ["common"], ["validation", "plugins", "io"], ["errors"],
]

#: What the schema may import: no component.
CONFIG_IMPORTS = {"errors", "io", "common", "validation", "plugins"}


def unit(module: str) -> str:
    """``gossipfl.topology.graphs`` → ``topology``; ``gossipfl.config`` → ``config``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def arrows() -> dict[str, dict[str, set[str]]]:
    """unit → imported unit → the module pairs behind the arrow (within gossipfl)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    out: dict[str, dict[str, set[str]]] = {}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = name.split(".")[:len(name.split(".")) - node.level
                                       + (path.name == "__init__.py")]
                targets = [".".join([*base, *filter(None, [node.module])])]
            elif isinstance(node, ast.ImportFrom):
                targets = [node.module or ""]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            if isinstance(node, ast.ImportFrom):  # from gossipfl import plugins: the module
                names = [f"{targets[0]}.{alias.name}" for alias in node.names]
                targets = [n for n in names if n in modules] or targets
            for target in targets:
                if target in modules and unit(target) != unit(name) and unit(name) != "__init__":
                    out.setdefault(unit(name), {}).setdefault(unit(target), set()).add(
                        f"{name} -> {target}")
    return out


def circles(graph: dict[str, dict[str, set[str]]]) -> list[list[str]]:
    """The strongly connected components of more than one unit (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def test_the_reader_sees_lazy_imports():
    """The graph holds an import made inside a function (loading imports the registries
    only when a config is checked)."""
    graph = arrows()
    assert "gossipfl.assembly.loading -> gossipfl.algorithms" in graph["assembly"]["algorithms"]
    assert "topology" in graph["assembly"]


def test_no_circle_between_packages():
    graph = arrows()
    found = circles(graph)
    assert not found, "circles between units: " + "; ".join(
        f"{' / '.join(c)}: " + ", ".join(sorted(e for a in c for b in c
                                                for e in graph.get(a, {}).get(b, ())))
        for c in found)


def test_layers_import_downward_only():
    layer = {name: i for i, names in enumerate(LAYERS) for name in names}
    upward = sorted(edge for a, targets in arrows().items() if a in layer
                    for b, edges in targets.items() if b in layer and layer[b] < layer[a]
                    for edge in edges)
    assert not upward, f"imports against docs/design.md's layers: {upward}"


def test_the_schema_imports_no_component():
    imported = set(arrows().get("config", {}))
    assert imported <= CONFIG_IMPORTS, f"config imports {sorted(imported - CONFIG_IMPORTS)}"


def test_the_layers_name_real_units():
    names = {unit(module_name(p)) for p in PACKAGE.rglob("*.py")}
    listed = {name for names in LAYERS for name in names}
    assert listed <= names, sorted(listed - names)


#: The package's root holds only what a user or a plugin imports by name; everything else
#: lives in a package that names its layer (issue 49).
PUBLIC_ROOT = {"__init__", "__main__", "api", "cli", "config", "errors", "io", "plugins",
               "scaffold", "testing", "validation"}


def test_the_root_holds_the_public_surface_only():
    root = {p.stem for p in PACKAGE.glob("*.py")}
    assert root == PUBLIC_ROOT, (f"modules at the root that no user imports: "
                                 f"{sorted(root - PUBLIC_ROOT)}; missing: "
                                 f"{sorted(PUBLIC_ROOT - root)}")


def test_every_layer_is_a_real_package():
    for names in LAYERS:
        for name in names:
            assert (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file(), name
