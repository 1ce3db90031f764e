"""The import structure: one direction of flow, no circles.

Every import in qtool (at module level or inside a function) is read from the source; a module
may import only from its own layer or those below it, and no set of modules imports each other
in a loop. The layers are the architecture's (README, docs/architecture.md), lowest first.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "qtool"

# Lowest first: a module imports from its own layer or below.
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "qtool.errors",
        "qtool.version",
        "qtool.signals",
        "qtool.display",
        "qtool.numerics",
        "qtool.files",
        "qtool.arguments",
        "qtool.spec",
        "qtool.op_facts",
        "qtool.weight_spec",
        "qtool.heap",
    ),
    ("qtool.model",),
    ("qtool.runtime", "qtool.targets", "qtool.readback"),
    ("qtool.prepare",),
    ("qtool.calibrate",),
    ("qtool.quantize", "qtool.evaluate"),
    ("qtool.check",),
    ("qtool.report",),
    ("qtool.jobs", "qtool.refusals", "qtool.api"),
    ("qtool.cli", "qtool", "qtool.entry", "qtool.__main__"),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int:
    best, rank = -1, None
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), index
    assert rank is not None, f"{module} is in no layer of tests/test_architecture.py"
    return rank


def imports_of(path: Path, module: str) -> set[str]:
    """The qtool modules `path` imports (`from qtool.x import y` counts y when it is a module)."""
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("qtool")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if not base.startswith("qtool"):
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in MODULES else base)
    return {name for name in found if name in MODULES}


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}
GRAPH = {name: imports_of(path, name) for name, path in MODULES.items()}


def test_every_module_is_in_a_layer() -> None:
    for name in MODULES:
        layer_of(name)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_from_a_lower_layer_to_a_higher_one(module: str) -> None:
    upward = sorted(
        target
        for target in GRAPH[module]
        if layer_of(target) > layer_of(module) and not module.startswith(f"{target}.")
    )
    assert not upward, f"{module} (layer {layer_of(module)}) imports higher layers: {upward}"


def test_no_import_circles() -> None:
    edges = GRAPH
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for name in sorted(edges):
        if name not in index:
            visit(name)
    assert not circles, f"import circles: {circles}"
