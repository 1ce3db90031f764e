"""Structured mutators of what a model shows its callers: subgraph inputs and outputs, names,
signatures."""

from __future__ import annotations

import random

from qtool.model import Model
from qtool.model.types import BuiltinOperator
from tests.fuzz.mutate.picking import pick_subgraph, pick_tensor_index

NON_UTF8 = (b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80abc", b"name\xfe\xff")


def subgraph_io(model: Model, rng: random.Random) -> bool:
    subgraph = pick_subgraph(model, rng, with_ops=False)
    if subgraph is None:
        return False
    ends = subgraph.inputs if rng.random() < 0.5 else subgraph.outputs
    roll = rng.random()
    if roll < 0.3 and ends:
        del ends[rng.randrange(len(ends))]
    elif roll < 0.5 and ends:
        ends.append(ends[0])
    elif roll < 0.6:
        ends.clear()
    else:
        ends.append(pick_tensor_index(subgraph, rng))
    return True


def names(model: Model, rng: random.Random) -> bool:
    """Names that are not UTF-8: tensors, signatures, subgraphs, metadata, custom codes."""
    raw = rng.choice(NON_UTF8)
    roll = rng.random()
    subgraph = rng.choice(model.subgraphs)
    if roll < 0.45 and subgraph.tensors:
        tensor = subgraph.tensors[
            rng.choice(subgraph.inputs + subgraph.outputs or [0]) % len(subgraph.tensors)
        ]
        if rng.random() < 0.5:
            tensor = rng.choice(subgraph.tensors)
        tensor.name = raw + tensor.name.encode() if isinstance(tensor.name, str) else raw
    elif roll < 0.65 and model.signature_defs:
        signature = rng.choice(model.signature_defs)
        if rng.random() < 0.5:
            signature["signature_key"] = raw
        else:
            entries = (signature["inputs"] or []) + (signature["outputs"] or [])
            if not entries:
                return False
            rng.choice(entries)["name"] = raw
    elif roll < 0.75:
        subgraph.name = raw
    elif roll < 0.85:
        model.description = raw
    elif roll < 0.93 and model.metadata:
        rng.choice(model.metadata)["name"] = raw
    else:
        model.operator_codes.append(
            model.operator_codes[0].__class__(builtin_code=BuiltinOperator.CUSTOM, custom_code=raw)
        )
        if subgraph.operators:
            rng.choice(subgraph.operators).opcode_index = len(model.operator_codes) - 1
    return True


def signatures(model: Model, rng: random.Random) -> bool:
    if not model.signature_defs:
        return False
    signature = rng.choice(model.signature_defs)
    roll = rng.random()
    entries = (signature["inputs"] or []) + (signature["outputs"] or [])
    if roll < 0.25:
        signature["subgraph_index"] = rng.choice((1, 2, -1, 7))
    elif roll < 0.5 and entries:
        rng.choice(entries)["tensor_index"] = rng.choice((0, 1, -1, 10**6, rng.randrange(50)))
    elif roll < 0.7:
        model.signature_defs.append(dict(signature))  # the same key twice
    elif roll < 0.85:
        signature[rng.choice(("inputs", "outputs"))] = []
    else:
        model.signature_defs.clear()
    return True
