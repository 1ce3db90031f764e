"""Build-time generator of `tflite_schema.json`, the TFLite schema as the codec reads it.

    python -m qtool.model.schema_gen          # rewrite qtool/model/tflite_schema.json
    python -m qtool.model.schema_gen --check  # exit 1 if it differs from the installed `tflite`

The `tflite` package (a dev dependency, never imported at run time) holds the flatc-generated
Python classes of the schema. Their layout is learnt by running each accessor method against a
probe that records what it reads, never by reading their source: the vtable offset it asks for,
then whether it reads a scalar (with its flatbuffers type; run on an absent field, the accessor
returns the default), a string, a table, a vector of those, or a union. Enums (BuiltinOperator,
TensorType, the union type codes, ...) are the classes' integer attributes.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import pkgutil
import sys
from pathlib import Path
from typing import Any

SCHEMA_FILE = Path(__file__).with_name("tflite_schema.json")

# Union fields do not name their enum in generated Python, so the schema's unions are listed here.
UNION_ENUMS = {
    ("Operator", "BuiltinOptions"): "BuiltinOptions",
    ("Operator", "BuiltinOptions2"): "BuiltinOptions2",
    ("QuantizationParameters", "Details"): "QuantizationDetails",
    ("DimensionMetadata", "ArraySegments"): "SparseIndexVector",
    ("DimensionMetadata", "ArrayIndices"): "SparseIndexVector",
}
_COMPANION_SUFFIXES = ("AsNumpy", "Length", "IsNone")


class _Probe:
    """Stands in for a flatbuffers Table while an accessor runs, recording what it reads.

    Every accessor starts with ``self._tab.Offset(vtable_offset)``; what it does next tells the
    field's kind: ``Get(flags, ...)`` reads a scalar of that type, ``String`` a string,
    ``Indirect`` a table, ``Union`` a union, and ``Vector`` first means a vector of those.
    With `present` False the field is absent and the accessor returns its default.
    """

    def __init__(self, present: bool) -> None:
        self.Bytes = bytearray(8)  # the Table attributes the accessors read
        self.Pos = 0
        self.present = present
        self.vtable_offset: int | None = None
        self.reads: list[str] = []
        self.scalar: str | None = None

    def Offset(self, vtable_offset: int) -> int:
        # Only the first read is the field's own (OperatorCode.BuiltinCode falls back to another).
        if self.vtable_offset is None:
            self.vtable_offset = vtable_offset
        return 4 if self.present else 0

    def Get(self, flags: type, offset: int) -> int:
        self.reads.append("get")
        if self.scalar is None:
            self.scalar = flags.__name__.removesuffix("Flags")
        return 0

    def String(self, offset: int) -> bytes:
        self.reads.append("string")
        return b""

    def Indirect(self, offset: int) -> int:
        self.reads.append("indirect")
        return 0

    def Union(self, table: Any, offset: int) -> Any:
        self.reads.append("union")
        return table

    def Vector(self, offset: int) -> int:
        self.reads.append("vector")
        return 0

    def VectorLen(self, offset: int) -> int:
        return 0


class _SlotCounter:
    """Stands in for the Builder given to ``<Table>Start``, which declares the slot count."""

    slots = 0

    def StartObject(self, slots: int) -> None:
        self.slots = slots


def _run_accessor(cls: type, function: Any, present: bool) -> tuple[_Probe, Any]:
    probe = _Probe(present)
    instance = cls()
    instance._tab = probe
    args = (0,) if function.__code__.co_argcount == 2 else ()
    return probe, function(instance, *args)


def _field(cls: type, method: str, function: Any) -> list[Any] | None:
    """[accessor, slot, kind, scalar type, default, child] of one accessor, or None."""
    probe, value = _run_accessor(cls, function, present=True)
    if probe.vtable_offset is None:
        return None  # not a field accessor
    slot, reads = (probe.vtable_offset - 4) // 2, probe.reads
    child = type(value).__name__ if "indirect" in reads else None
    if "union" in reads:
        return [method, slot, "union", None, None, UNION_ENUMS[(cls.__name__, method)]]
    if reads[:1] == ["vector"]:
        kind = (
            "string_vector" if "string" in reads else "table_vector" if child else "scalar_vector"
        )
        return [method, slot, kind, probe.scalar, None, child]
    if "string" in reads:
        return [method, slot, "string", None, None, None]
    if child:
        return [method, slot, "table", None, None, child]
    _, default = _run_accessor(cls, function, present=False)
    return [method, slot, "scalar", probe.scalar, default, None]


def _table(module: Any, cls: type) -> dict[str, Any]:
    methods = {key: value for key, value in vars(cls).items() if inspect.isfunction(value)}
    fields = []
    for method, function in methods.items():
        companion = any(
            method.endswith(suffix) and method.removesuffix(suffix) in methods
            for suffix in _COMPANION_SUFFIXES
        )
        if companion or function.__code__.co_argcount not in (1, 2):
            continue
        field = _field(cls, method, function)
        if field is not None:
            fields.append(field)
    start = _SlotCounter()
    getattr(module, f"{cls.__name__}Start")(start)
    fields.sort(key=lambda f: f[1])
    return {"slots": max([start.slots, *(f[1] + 1 for f in fields)]), "fields": fields}


def generate() -> dict[str, Any]:
    """The schema of the installed `tflite` package: every table's layout and every enum."""
    import tflite

    tables, enums = {}, {}
    for info in sorted(pkgutil.iter_modules(tflite.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"tflite.{info.name}")
        cls = getattr(module, info.name, None)
        if not inspect.isclass(cls):
            continue  # helper modules (tflite.utils)
        if hasattr(cls, "Init"):
            tables[info.name] = _table(module, cls)
        else:
            enums[info.name] = {
                key: value
                for key, value in vars(cls).items()
                if not key.startswith("_") and isinstance(value, int)
            }
    return {
        "generated_from": f"tflite {tflite.__version__} by qtool/model/schema_gen.py: do not edit",
        "tables": tables,
        "enums": enums,
    }


def conflicts(shipped: dict[str, Any], installed: dict[str, Any]) -> list[str]:
    """What `shipped` states that `installed` (another `tflite` release's schema) lacks or
    contradicts: a table, field or enum value gone, or a field or value numbered, typed or
    defaulted otherwise. Empty when `installed` only adds to `shipped`: then the shipped table
    reads and writes that release's models alike (it may lack the newest ops)."""
    found = []
    for name, layout in shipped["tables"].items():
        other = installed["tables"].get(name)
        if other is None:
            found.append(f"table {name} is gone")
            continue
        theirs = {field[0]: field for field in other["fields"]}
        found += [
            f"{name}.{field[0]}: {field} is now {theirs.get(field[0])}"
            for field in layout["fields"]
            if theirs.get(field[0]) != field
        ]
    for name, values in shipped["enums"].items():
        other = installed["enums"].get(name, {})
        found += [
            f"{name}.{key}: {value} is now {other.get(key)}"
            for key, value in values.items()
            if other.get(key) != value
        ]
    return found


def dumps(schema: dict[str, Any]) -> str:
    """One table or enum a line, so that a schema update reads as a small diff."""
    lines = ["{", f'"generated_from": {json.dumps(schema["generated_from"])},']
    for section in ("tables", "enums"):
        items = [
            f"  {json.dumps(name)}: {json.dumps(value)}" for name, value in schema[section].items()
        ]
        closing = "}," if section == "tables" else "}"
        lines += [f'"{section}": {{', ",\n".join(items), closing]
    return "\n".join(lines) + "\n}\n"


def main(argv: list[str] | None = None) -> int:
    """Write `tflite_schema.json`, or with --check compare it; returns the exit status (1: it
    differs)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    text = dumps(generate())
    if args.check:
        if SCHEMA_FILE.read_text() != text:
            print(f"{SCHEMA_FILE} differs from the installed tflite package", file=sys.stderr)
            return 1
        return 0
    SCHEMA_FILE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
