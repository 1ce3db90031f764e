"""The child process of `litert_worker`: runs int8 models in LiteRT and sends their outputs back.

Run as a script (`python -I litert_child.py`), so that it imports only numpy and LiteRT, not
qtool. Each request on stdin is a length-prefixed pickle `(model bytes, inputs, leading_one)`,
inputs None for the same ones as the request before; each reply on stdout is
`("outputs", [array per output, samples stacked])` or `("error", text)`.
A model LiteRT aborts on kills this process only.
"""

from __future__ import annotations

import pickle
import struct
import sys

import numpy as np

_HEADER = struct.Struct("<Q")


def _read(stream) -> object | None:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        return None
    return pickle.loads(stream.read(_HEADER.unpack(header)[0]))


def _write(stream, message: object) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)))
    stream.write(data)
    stream.flush()


def _outputs(model: bytes, inputs: list[np.ndarray], leading_one: bool) -> list[np.ndarray]:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=model, num_threads=1)
    interpreter.allocate_tensors()
    sources = [d["index"] for d in interpreter.get_input_details()]
    sinks = [d["index"] for d in interpreter.get_output_details()]
    per_sample = []
    for i in range(inputs[0].shape[0]):
        for index, values in zip(sources, inputs, strict=True):
            interpreter.set_tensor(index, values[i : i + 1] if leading_one else values[i])
        interpreter.invoke()
        per_sample.append([interpreter.get_tensor(t).copy() for t in sinks])
    return [np.stack(parts) for parts in zip(*per_sample, strict=True)]


def main() -> None:
    """Answer requests from stdin until it closes; a model LiteRT refuses gets an ("error", text)
    reply."""
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    inputs = None
    while (request := _read(source)) is not None:
        model, sent, leading_one = request
        inputs = inputs if sent is None else sent
        try:
            reply = ("outputs", _outputs(model, inputs, leading_one))
        except Exception as exc:  # LiteRT's refusals: the parent simulates instead
            reply = ("error", f"{type(exc).__name__}: {exc}")
        _write(sink, reply)


if __name__ == "__main__":
    main()
