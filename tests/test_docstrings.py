"""Docstrings on public classes and functions, counted from the source.

Public: a class or function at module level, or a method (property, nested class) of a public
class, whose name does not start with `_`; every module counts, whatever its own name. A property
setter or deleter shares its getter's docstring and is not counted again, nor is an `@overload`
stub. The layers users build on (the model, prepare and quantize layers, the Python API) have
one on everything; the package as a whole on at least `PACKAGE_MINIMUM` of it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "qtool"
# Parts of the package where every public class and function has a docstring.
COMPLETE = ("model", "prepare", "quantize", "api.py")
PACKAGE_MINIMUM = 0.90


def _shared_or_stub(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> bool:
    """A property's setter or deleter (documented by its getter), or an `@overload` stub."""
    for decorator in node.decorator_list:
        if isinstance(decorator, ast.Attribute) and decorator.attr in ("setter", "deleter"):
            return True
        name = decorator.attr if isinstance(decorator, ast.Attribute) else None
        name = decorator.id if isinstance(decorator, ast.Name) else name
        if name == "overload":
            return True
    return False


def public_definitions(
    body: list[ast.stmt], prefix: str = ""
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]]:
    """(qualified name, node) of every public definition in `body`, in source order; classes,
    functions and methods defined under a module-level `if` or `try` count too."""
    for node in body:
        if isinstance(node, ast.If | ast.Try):
            branches = [node.body, node.orelse]
            branches += [handler.body for handler in getattr(node, "handlers", [])]
            branches.append(getattr(node, "finalbody", []))
            for branch in branches:
                yield from public_definitions(branch, prefix)
            continue
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if node.name.startswith("_") or _shared_or_stub(node):
            continue
        yield prefix + node.name, node
        if isinstance(node, ast.ClassDef):
            yield from public_definitions(node.body, f"{prefix}{node.name}.")


def undocumented(source: str, where: str) -> tuple[int, list[str]]:
    """How many public definitions `source` has, and `where:line name` of those lacking a
    docstring."""
    found = list(public_definitions(ast.parse(source, where).body))
    missing = [
        f"{where}:{node.lineno} {name}" for name, node in found if not ast.get_docstring(node)
    ]
    return len(found), missing


def coverage(paths: list[Path]) -> tuple[int, list[str]]:
    """Public definitions counted over `paths`, and those lacking a docstring."""
    total, missing = 0, []
    for path in paths:
        count, lacking = undocumented(path.read_text(), str(path.relative_to(PACKAGE.parent)))
        total += count
        missing += lacking
    return total, missing


def _sources(part: str) -> list[Path]:
    path = PACKAGE / part
    return [path] if path.suffix == ".py" else sorted(path.rglob("*.py"))


@pytest.mark.parametrize("part", COMPLETE)
def test_every_public_definition_is_documented(part: str) -> None:
    total, missing = coverage(_sources(part))
    assert total, f"qtool/{part} has no public definitions: has it moved?"
    assert not missing, f"{len(missing)} of {total} lack a docstring:\n" + "\n".join(missing)


def test_package_coverage() -> None:
    total, missing = coverage(sorted(PACKAGE.rglob("*.py")))
    documented = (total - len(missing)) / total
    assert documented >= PACKAGE_MINIMUM, (
        f"public docstring coverage {documented:.1%} < {PACKAGE_MINIMUM:.0%}; lacking:\n"
        + "\n".join(missing)
    )


def test_counting_sees_what_is_missing() -> None:
    source = '''
class Public:
    """Documented."""

    def method(self): ...

    @property
    def value(self):
        """Documented."""

    @value.setter
    def value(self, new): ...

    def _private(self): ...

    class Inner: ...


class _Private:
    def method(self): ...


def function():
    def nested(): ...


if True:
    async def conditional(): ...
'''
    total, missing = undocumented(source, "m.py")
    assert total == 6  # Public, method, value, Inner, function, conditional
    assert [entry.split(" ")[1] for entry in missing] == [
        "Public.method",
        "Public.Inner",
        "function",
        "conditional",
    ]
