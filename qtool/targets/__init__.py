"""Target profiles: what a device runs, read from `schemas/targets/NAME.json` (data only: read
by `qtool check --target` to place ops and by `qtool quantize --target` to plan).

A profile lists the ops its accelerator (or runtime) takes and the constraints each must meet,
every one naming a constraint function of :mod:`qtool.targets.constraints` and the limits it
applies; the function's text, filled in with those limits, is what users read. Every fact carries
the source it was transcribed from (a document, or a file of a released tool, with its version).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from qtool.errors import UsageError

TARGETS_DIR = "targets"
SCHEMA_FILE = "target.schema.json"

# Where ops the accelerator does not take run: another profile, TFLite's own CPU kernels (every
# builtin op), or nowhere (the model cannot run).
TFLITE_CPU = "tflite-cpu"


@dataclass(frozen=True)
class ConstraintUse:
    """One constraint a profile applies: the constraint's id, the limits it fills in, and the
    source they were transcribed from."""

    check: str  # the constraint function's stable id, e.g. "stride-range"
    params: dict[str, Any]
    source: str  # key into Target.sources
    exempt: frozenset[str] = frozenset()  # op types the constraint does not apply to


@dataclass(frozen=True)
class CompileTime:
    """Shape computations a device's compiler resolves from static shapes and removes: ops
    computed from shapes alone (`shape_ops` on static shapes, and ops of their results and
    constants) that feed only `shape_inputs` (op type -> input positions)."""

    shape_inputs: dict[str, frozenset[int]]
    shape_ops: frozenset[str]
    source: str  # key into Target.sources
    declared_batch: bool = False  # a dynamic first dimension is compiled at its declared size


@dataclass(frozen=True)
class Target:
    """A device profile as loaded from `schemas/targets/NAME.json`.

    Attributes:
        name: the profile's file name without .json ("ethos-u").
        title: the device as users read its name.
        sources: what the facts are transcribed from, by key: {"document", and where known
            "package", "version", "url"}.
        generic: the constraints every listed op must meet (unless it is exempt).
        notes: where the profile departs from or adds to its sources, each {"topic", "text",
            "evidence"}.
    """

    name: str
    title: str
    accelerator: str  # what runs the supported ops, e.g. "Ethos-U NPU"
    fallback: str | None  # where the other ops run: a profile name, TFLITE_CPU, or None
    partition: str  # "per-op" | "first-unsupported" (later ops also leave the accelerator)
    sources: dict[str, dict[str, str]]
    generic: tuple[ConstraintUse, ...]
    ops: dict[str, tuple[ConstraintUse, ...]]  # op type -> its specific constraints
    op_source: str  # source of the op list
    spec_profiles: tuple[str, ...] = ()  # int8 spec profiles `qtool quantize --target` plans with
    notes: tuple[dict[str, str], ...] = field(default_factory=tuple)
    compile_time: CompileTime | None = None  # what the compiler folds away (Vela: shape chains)

    def source_label(self, key: str) -> str:
        """A source as users read it: its document, with the version in parentheses when known."""
        source = self.sources[key]
        version = source.get("version")
        return source["document"] + (f" ({version})" if version else "")


def _uses(raw: list[dict[str, Any]], default_source: str) -> tuple[ConstraintUse, ...]:
    return tuple(
        ConstraintUse(
            check=entry["check"],
            params=dict(entry.get("params", {})),
            source=entry.get("source", default_source),
            exempt=frozenset(entry.get("except", ())),
        )
        for entry in raw
    )


def _parse(raw: dict[str, Any]) -> Target:
    op_source = raw["op_list"]["source"]
    ops = {
        name: _uses(spec.get("constraints", []), spec.get("source", op_source))
        for name, spec in raw["op_list"]["ops"].items()
    }
    return Target(
        name=raw["name"],
        title=raw["title"],
        accelerator=raw["accelerator"],
        fallback=raw["fallback"],
        partition=raw["partition"],
        sources=raw["sources"],
        generic=_uses(raw.get("generic", []), op_source),
        ops=ops,
        op_source=op_source,
        spec_profiles=tuple(raw.get("quantize", {}).get("spec_profiles", ())),
        notes=tuple(raw.get("notes", ())),
        compile_time=_compile_time(raw.get("compile_time")),
    )


def _compile_time(raw: dict[str, Any] | None) -> CompileTime | None:
    if raw is None:
        return None
    return CompileTime(
        shape_inputs={op: frozenset(positions) for op, positions in raw["shape_inputs"].items()},
        shape_ops=frozenset(raw["shape_ops"]),
        source=raw["source"],
        declared_batch=raw.get("declared_batch", False),
    )


def _folder():
    return resources.files("qtool").joinpath("_schemas", TARGETS_DIR)


def target_names() -> list[str]:
    """Names of the shipped target profiles."""
    return sorted(
        entry.name.removesuffix(".json")
        for entry in _folder().iterdir()
        if entry.name.endswith(".json") and entry.name != SCHEMA_FILE
    )


def raw_target(name: str) -> dict[str, Any]:
    """The profile `name` as its JSON data; UsageError naming the known targets for another name."""
    if name not in target_names():
        raise UsageError(f"unknown target {name!r}; known targets: {', '.join(target_names())}")
    return json.loads(_folder().joinpath(f"{name}.json").read_text())


def constraint_uses(target: Target) -> list[ConstraintUse]:
    """Every constraint the profile applies: the generic ones, then each op's own."""
    return list(target.generic) + [u for specific in target.ops.values() for u in specific]


@functools.cache
def load_target(name: str) -> Target:
    """The target profile `name` (e.g. "ethos-u"), with every cited source and fallback known.
    (`qtool.targets.placement.checked_target` also checks its constraints exist.)"""
    target = _parse(raw_target(name))
    for use in constraint_uses(target):
        if use.source not in target.sources:
            raise ValueError(f"target {name!r}: constraint {use.check!r} cites no known source")
    if target.compile_time is not None and target.compile_time.source not in target.sources:
        raise ValueError(f"target {name!r}: compile_time cites no known source")
    if target.fallback not in (None, TFLITE_CPU, *target_names()):
        raise ValueError(f"target {name!r} falls back to unknown target {target.fallback!r}")
    return target
