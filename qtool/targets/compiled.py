"""What a device's compiler has done, or will do, to a model: ops it already compiled (a custom
op holding its program, such as Vela's `ethos-u`: `compiled_for` in schemas/ops.json) and
shape computations it resolves from static shapes and removes (`compile_time` of the target
profile: Vela folds a RESHAPE's shape input computed by SHAPE -> STRIDED_SLICE -> PACK)."""

from __future__ import annotations

from qtool.model import Model
from qtool.model.graph import Subgraph, Tensor
from qtool.op_facts import load_op_facts
from qtool.targets import CompileTime, Target


def compiled_for(op_type: str) -> str | None:
    """The target whose compiler wrote ops of `op_type`, or None for an ordinary op."""
    return load_op_facts().compiled_for(op_type)


def folded_ops(model: Model, target: Target) -> set[tuple[int, int]]:
    """(subgraph, op index) of the ops `target`'s compiler removes: computed from shapes alone,
    their results feeding only the shape inputs it replaces (directly or through such ops)."""
    rules = target.compile_time
    if rules is None:
        return set()
    return {
        (s, i)
        for s, subgraph in enumerate(model.subgraphs)
        for i in _folded_in(model, subgraph, rules)
    }


def _folded_in(model: Model, subgraph: Subgraph, rules: CompileTime) -> set[int]:
    from_shapes = _from_shapes(model, subgraph, rules)
    readers: dict[int, list[tuple[int, int]]] = {}
    for i, op in enumerate(subgraph.operators):
        for position, t in enumerate(op.inputs):
            if t >= 0:
                readers.setdefault(t, []).append((i, position))
    folded: set[int] = set()
    # Readers come after their producers: deciding from the last op back sees each reader first.
    for i in range(len(subgraph.operators) - 1, -1, -1):
        outputs = subgraph.operators[i].outputs
        if i not in from_shapes or not outputs or set(outputs) & set(subgraph.outputs):
            continue
        if all(
            reader in folded
            or position in rules.shape_inputs.get(model.op_type(subgraph.operators[reader]), ())
            for t in outputs
            for reader, position in readers.get(t, [])
        ):
            folded.add(i)
    return folded


def _from_shapes(model: Model, subgraph: Subgraph, rules: CompileTime) -> set[int]:
    """Ops whose results the compiler knows from static shapes and constants alone."""
    known = {t for t, tensor in enumerate(subgraph.tensors) if model.is_constant(tensor)}
    ops = set()
    for i, op in enumerate(subgraph.operators):
        inputs = [t for t in op.inputs if t >= 0]
        if model.op_type(op) in rules.shape_ops:
            computed = all(_known_shape(subgraph.tensors[t], rules) for t in inputs)
        else:
            computed = bool(inputs) and all(t in known for t in inputs)
        if computed:
            ops.add(i)
            known.update(op.outputs)
    return ops


def _known_shape(tensor: Tensor, rules: CompileTime) -> bool:
    """Whether the compiler knows the tensor's shape: static, or dynamic in the first
    dimension only where the compiler takes it at its declared size."""
    signature = tensor.shape_signature or []
    fixed = signature[1:] if rules.declared_batch else signature
    return all(d >= 0 for d in fixed)
