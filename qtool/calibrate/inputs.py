"""What a model asks of calibration data: its entry subgraphs and their inputs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qtool.model import Model, numpy_dtype


@dataclass(frozen=True)
class InputSpec:
    """One model input as calibration data must match it."""

    name: str  # the tensor name in the model
    aliases: tuple[str, ...]  # signature name, name without the ":0" suffix...
    sample_shape: tuple[int, ...]
    dtype: np.dtype
    # The sample's dimensions as the input's shape_signature declares them (-1: the data may
    # choose), where the data may give another shape than `sample_shape` (while the model's
    # shape is being taken from the data); None: exactly `sample_shape`.
    signature: tuple[int, ...] | None = None

    def matches(self, key: str) -> bool:
        """Whether `key` names this input: its tensor name or one of its aliases."""
        return key == self.name or key in self.aliases

    def fits(self, shape: tuple[int, ...]) -> bool:
        """Whether samples of `shape` fit this input."""
        if tuple(shape) == tuple(self.sample_shape):
            return True
        signature = self.signature
        return (
            signature is not None
            and len(signature) == len(shape)
            and all(s == -1 or s == d for s, d in zip(signature, shape, strict=True))
        )


Batch = list[np.ndarray]  # one array per model input, shape (N, *sample_shape)


def entry_subgraphs(model: Model) -> dict[int, str | None]:
    """Subgraphs to calibrate and their signature keys: each signature's entry point, or
    subgraph 0 alone in a model without signatures."""
    entries = {sig["subgraph_index"]: sig["signature_key"] for sig in model.signature_defs}
    return dict(sorted(entries.items())) or {0: None}


def model_inputs(model: Model, subgraph_index: int = 0, flexible: bool = False) -> list[InputSpec]:
    """The inputs calibration data must provide, with the names users may key them by.
    `flexible`: samples may take any shape their input's signature allows (to learn the shape
    the data gives a dynamic input)."""
    subgraph = model.subgraphs[subgraph_index]
    signature_names: dict[int, str] = {}
    for signature in model.signature_defs:
        if signature["subgraph_index"] == subgraph_index:
            for entry in signature["inputs"] or []:
                signature_names[entry["tensor_index"]] = entry["name"]
    batched = subgraph.inputs_lead_with_one()
    specs = []
    for t in subgraph.inputs:
        tensor = subgraph.tensors[t]
        aliases = {tensor.name.split(":")[0]}
        if t in signature_names:
            aliases.add(signature_names[t])
        if tensor.name.startswith("serving_default_"):
            aliases.add(tensor.name.removeprefix("serving_default_").split(":")[0])
        shape = tuple(tensor.shape[1:] if batched else tensor.shape)
        signature = tensor.shape_signature
        if signature is not None and len(signature) == len(tensor.shape):
            signature = tuple(signature[1:] if batched else signature)
        else:
            signature = None
        specs.append(
            InputSpec(
                name=tensor.name,
                aliases=tuple(sorted(aliases - {tensor.name})),
                sample_shape=shape,
                dtype=numpy_dtype(tensor.dtype),
                signature=signature if flexible else None,
            )
        )
    return specs
