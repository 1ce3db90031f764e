"""Graph edits shared by the rewriting passes: copies, unique names, dead tensor removal."""

from __future__ import annotations

import copy

from qtool.model.graph import Model, Subgraph
from qtool.model.lowbit import referenced_tensors, renumber_references


def clone_model(model: Model) -> Model:
    """A deep copy of the graph that shares the (read-only) buffer arrays and the source file's
    data with the original."""
    shared = {id(b.data): b.data for b in model.buffers if b.data is not None}
    shared[id(model.source_data)] = model.source_data  # a mapping cannot be copied
    return copy.deepcopy(model, shared)


class NameAllocator:
    """Hands out tensor names not yet used in a subgraph (TFLite tools expect unique names)."""

    def __init__(self, subgraph: Subgraph) -> None:
        self.used = {t.name for t in subgraph.tensors}

    def __call__(self, base: str) -> str:
        name, n = base, 1
        while name in self.used:
            n += 1
            name = f"{base}_{n}"
        self.used.add(name)
        return name


def remove_unused(model: Model) -> None:
    """Drop tensors no operator, subgraph I/O or signature refers to, then unused operator codes
    and unreferenced buffers.

    Indices are renumbered everywhere they appear (operators, subgraph I/O, intermediates,
    signature defs); buffer 0 stays the conventional empty buffer.
    """
    for s, subgraph in enumerate(model.subgraphs):
        used = set(subgraph.inputs) | set(subgraph.outputs)
        for op in subgraph.operators:
            used.update(t for t in op.inputs + op.outputs + op.intermediates if t >= 0)
        signatures = [sig for sig in model.signature_defs if sig["subgraph_index"] == s]
        for sig in signatures:
            used.update(e["tensor_index"] for e in (sig["inputs"] or []) + (sig["outputs"] or []))
        # Blockwise scales are read through the parameters of the tensor that names them.
        used.update(r for t in list(used) for r in referenced_tensors(subgraph.tensors[t]))
        keep = sorted(used)
        remap = {old: new for new, old in enumerate(keep)}
        subgraph.tensors = [subgraph.tensors[t] for t in keep]
        subgraph.inputs = [remap[t] for t in subgraph.inputs]
        subgraph.outputs = [remap[t] for t in subgraph.outputs]
        for op in subgraph.operators:
            op.inputs = [remap[t] if t >= 0 else t for t in op.inputs]
            op.outputs = [remap[t] for t in op.outputs]
            op.intermediates = [remap[t] for t in op.intermediates]
        for sig in signatures:
            for entry in (sig["inputs"] or []) + (sig["outputs"] or []):
                entry["tensor_index"] = remap[entry["tensor_index"]]
        for tensor in subgraph.tensors:
            renumber_references(tensor, remap)
    used_codes = sorted({op.opcode_index for sg in model.subgraphs for op in sg.operators})
    remap_code = {old: new for new, old in enumerate(used_codes)}
    model.operator_codes = [model.operator_codes[c] for c in used_codes]
    for subgraph in model.subgraphs:
        for op in subgraph.operators:
            op.opcode_index = remap_code[op.opcode_index]
    used_buffers = {0} | {m["buffer"] for m in model.metadata} | set(model.metadata_buffer)
    used_buffers |= {t.buffer for sg in model.subgraphs for t in sg.tensors}
    keep_buffers = sorted(b for b in used_buffers if 0 <= b < len(model.buffers))
    remap_buffer = {old: new for new, old in enumerate(keep_buffers)}
    model.buffers = [model.buffers[b] for b in keep_buffers]
    for subgraph in model.subgraphs:
        for tensor in subgraph.tensors:
            tensor.buffer = remap_buffer[tensor.buffer]
    for meta in model.metadata:
        meta["buffer"] = remap_buffer[meta["buffer"]]
    # The deprecated metadata_buffer list may name buffers a model lacks (LiteRT ignores it;
    # some MediaPipe exports carry such indices): those name nothing and are dropped.
    model.metadata_buffer = [remap_buffer[b] for b in model.metadata_buffer if b in remap_buffer]
