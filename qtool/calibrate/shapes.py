"""The input shapes a model is calibrated and quantized at.

A model whose inputs declare dynamic dimensions (-1 in `shape_signature`) runs at the shapes
the user names (`--input-shape NAME=1,1760`, `input_shapes={name: shape}`), else at the shape
of the data where the signature lets the data choose (openWakeWord's melspectrogram: input
[1, 1], signature [-1, -1], fed windows of 1760 samples), else at its declared shape. The model
is resized to them before anything runs (`qtool.prepare.shapes.resized`), so that an operator
that cannot run at a shape is a one-line error, not a failure inside a kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from qtool.calibrate.datasets import Dataset
from qtool.calibrate.inputs import InputSpec, entry_subgraphs, model_inputs
from qtool.errors import UsageError
from qtool.model import Model
from qtool.prepare.shapes import is_dynamic, resized

# The dataset of one entry subgraph for input specs (None: no data for it).
DataFor = Callable[[int, list[InputSpec]], Dataset | None]


def parse_input_shapes(texts: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """`NAME=1,1760` options as {name: shape} (an empty shape, `NAME=`, is a scalar)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for text in texts:
        name, separator, dims = text.rpartition("=")
        try:
            shape = tuple(int(d) for d in dims.split(",")) if dims.strip() else ()
        except ValueError:
            shape = None
        if not separator or not name or shape is None or any(d < 1 for d in shape):
            raise UsageError(
                f"input shape {text!r}: give NAME=DIMS, positive dimensions separated by "
                "commas (e.g. input=1,1760)"
            )
        if name in shapes:
            raise UsageError(f"input shape of {name!r} given twice")
        shapes[name] = shape
    return shapes


def shaped_model(
    model: Model,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    data_for: DataFor | None = None,
) -> Model:
    """`model` resized to the input shapes it is to run at: `input_shapes` (keyed by input
    tensor or signature name), else the data's where a signature allows it, else declared.
    A model whose inputs are all static and unnamed is returned as it is."""
    named = {name: tuple(int(d) for d in shape) for name, shape in (input_shapes or {}).items()}
    used: set[str] = set()
    for s in entry_subgraphs(model):
        subgraph = model.subgraphs[s]
        specs = model_inputs(model, s)
        shapes: dict[int, tuple[int, ...]] = {}
        for t, spec in zip(subgraph.inputs, specs, strict=True):
            chosen = [name for name in named if spec.matches(name)]
            if chosen:
                shapes[t] = named[chosen[0]]
                used.update(chosen)
        if not shapes and not is_dynamic(model, s):
            continue
        open_inputs = [
            position
            for position, t in enumerate(subgraph.inputs)
            if t not in shapes and -1 in (subgraph.tensors[t].shape_signature or ())
        ]
        if open_inputs and data_for is not None:
            shapes.update(_data_shapes(model, s, open_inputs, data_for))
        model = resized(model, shapes, s)
    unknown = sorted(set(named) - used)
    if unknown:
        known = [spec.name for s in entry_subgraphs(model) for spec in model_inputs(model, s)]
        raise UsageError(
            f"input shape for {unknown[0]!r}: the model has no such input (inputs: "
            f"{', '.join(known)})"
        )
    return model


def _data_shapes(
    model: Model, s: int, positions: list[int], data_for: DataFor
) -> dict[int, tuple[int, ...]]:
    """The shapes the first sample of the data gives the dynamic inputs at `positions`."""
    dataset = data_for(s, model_inputs(model, s, flexible=True))
    first = None if dataset is None else next(iter(dataset.iter_chunks(1)), None)
    if first is None:
        return {}
    subgraph = model.subgraphs[s]
    batched = subgraph.inputs_lead_with_one()
    shapes = {}
    for position in positions:
        sample = tuple(first[position].shape[1:])
        shapes[subgraph.inputs[position]] = (1, *sample) if batched else sample
    return shapes
