"""`qtool check` time per thousand operators (or entries) at 10,000 and at 100,000 of them, on
graphs of four shapes: a chain of int8 ADDs, the same with every ADD's output a model output,
one UNPACK with that many outputs, and that many signatures. Linear work keeps the ratio of the
two per-thousand times near 1; a quadratic step makes it near 10 (issue 21: a list lookup per
output or signature made the last two quadratic). Target: well under a second per thousand."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
from rich.console import Console
from rich.table import Table

from qtool.check.audit import check_loaded
from qtool.model import Model, QuantParams, model_to_bytes, parse_model
from qtool.model.build import GraphBuilder

console = Console()


def _scale() -> QuantParams:
    return QuantParams.of(0.05, 0)


def chain(n: int, every_output: bool = False) -> Model:
    builder = GraphBuilder()
    x = builder.input("x", [1, 8], np.int8, quantization=_scale())
    c = builder.constant("c", np.ones((1, 8), np.int8), quantization=_scale())
    outputs = []
    for i in range(n):
        x = builder.op(
            "ADD",
            [x, c],
            output_shape=[1, 8],
            output_dtype=np.int8,
            name=f"add{i}",
            options_type="AddOptions",
            options={},
        )
        builder.subgraph.tensors[x].quantization = _scale()
        outputs.append(x)
    return builder.finish(outputs if every_output else [x])


def unpack(n: int) -> Model:
    builder = GraphBuilder()
    x = builder.input("x", [n, 8], np.int8, quantization=_scale())
    outputs = [builder.tensor(f"o{i}", [8], np.int8, quantization=_scale()) for i in range(n)]
    builder.op("UNPACK", [x], outputs, options_type="UnpackOptions", options={"num": n})
    return builder.finish(outputs)


def signatures(n: int) -> Model:
    model = chain(10)
    subgraph = model.subgraphs[0]
    model.signature_defs = [
        {
            "signature_key": f"k{i}",
            "subgraph_index": 0,
            "inputs": [{"name": "x", "tensor_index": subgraph.inputs[0]}],
            "outputs": [{"name": "y", "tensor_index": subgraph.outputs[0]}],
        }
        for i in range(n)
    ]
    return model


SHAPES: dict[str, Callable[[int], Model]] = {
    "chain of ADDs": chain,
    "every ADD an output": lambda n: chain(n, every_output=True),
    "one UNPACK, n outputs": unpack,
    "n signatures": signatures,
}


def _per_thousand(make: Callable[[int], Model], n: int) -> float:
    data = model_to_bytes(make(n))
    started = time.process_time()
    check_loaded(parse_model(data, validate=False))
    return (time.process_time() - started) / n * 1000


def bench_wide(sizes: tuple[int, int] = (10_000, 100_000)) -> None:
    table = Table(title="qtool check (read + audit), CPU seconds per 1000 ops or entries")
    for column in ("graph", f"{sizes[0]:,}", f"{sizes[1]:,}", "ratio"):
        table.add_column(column, justify="right")
    for name, make in SHAPES.items():
        small, large = (_per_thousand(make, n) for n in sizes)
        table.add_row(name, f"{small:.3f}", f"{large:.3f}", f"{large / small:.2f}x")
    console.print(table)


if __name__ == "__main__":
    bench_wide()
