"""What structured mutators pick: a subgraph, an operator, a tensor, and edge values."""

from __future__ import annotations

import random

import numpy as np

from qtool.model import Model, Operator, Subgraph, Tensor

INT32_EDGES = (-(2**31), -2, -1, 0, 1, 2, 3, 7, 255, 2**16, 2**31 - 1)
FLOATS = (0.0, -1.0, 1e-45, 1e38, float("inf"), float("nan"), 3.5)


def pick_subgraph(model: Model, rng: random.Random, with_ops: bool = True) -> Subgraph | None:
    candidates = [s for s in model.subgraphs if s.operators or not with_ops]
    return rng.choice(candidates) if candidates else None


def pick_operator(model: Model, rng: random.Random) -> tuple[Subgraph, Operator] | None:
    subgraph = pick_subgraph(model, rng)
    return None if subgraph is None else (subgraph, rng.choice(subgraph.operators))


def pick_tensor_index(subgraph: Subgraph, rng: random.Random) -> int:
    """A tensor index: mostly valid, sometimes -1 or past the end."""
    roll = rng.random()
    if roll < 0.75 and subgraph.tensors:
        return rng.randrange(len(subgraph.tensors))
    if roll < 0.85:
        return -1
    return len(subgraph.tensors) + rng.randrange(4)


def constant_tensors(model: Model, subgraph: Subgraph) -> list[Tensor]:
    return [t for t in subgraph.tensors if model.is_constant(t)]


def int_like(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def pick_tensor(model: Model, rng: random.Random) -> Tensor | None:
    """Any tensor of any subgraph; None when the model has none."""
    subgraph = pick_subgraph(model, rng, with_ops=False)
    if subgraph is None or not subgraph.tensors:
        return None
    return rng.choice(subgraph.tensors)
