"""The child process of `litert_worker`: runs int8 models in LiteRT and sends their outputs back.

Run as a script (`python -I litert_child.py`), so that it imports only numpy and LiteRT, not
qtool. Each request on stdin is a length-prefixed pickle `(model, inputs, leading_one)` (the
model's bytes, or the path of the file a large one was written to)
(its buffers out of band: `_write`),
inputs None for the same ones as the request before; each reply on stdout is
`("outputs", [array per output, samples stacked])` or `("error", text)`.
A model LiteRT aborts on kills this process only.
"""

from __future__ import annotations

import os
import pickle
import struct
import sys

# Before numpy loads OpenBLAS: this process computes nothing with BLAS, and each OpenBLAS
# thread of an idle pool spins after any product (measured with perf on pose_landmark_full).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

_HEADER = struct.Struct("<Q")


def _read(stream) -> object | None:
    """A message `_write` wrote; None at the end of the stream (or a truncated header)."""
    sizes = []
    for _ in range(2):
        header = stream.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return None
        sizes.append(_HEADER.unpack(header)[0])
    data, count = stream.read(sizes[0]), sizes[1]
    buffers = [stream.read(_HEADER.unpack(stream.read(_HEADER.size))[0]) for _ in range(count)]
    return pickle.loads(data, buffers=buffers)


def _write(stream, message: object) -> None:
    """Length-prefixed pickle, its large buffers (arrays, a model in a pickle.PickleBuffer)
    written out of band, straight from their memory: a 100 MB model is not copied into the
    pickle first."""
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(message, protocol=5, buffer_callback=buffers.append)
    stream.write(_HEADER.pack(len(data)) + _HEADER.pack(len(buffers)))
    stream.write(data)
    for buffer in buffers:
        with buffer.raw() as raw:
            stream.write(_HEADER.pack(raw.nbytes))
            stream.write(raw)
    stream.flush()


def _outputs(model: bytes | str, inputs: list[np.ndarray], leading_one: bool) -> list[np.ndarray]:
    from ai_edge_litert.interpreter import Interpreter

    # A path: the parent wrote a large model to a file, which every child maps in place.
    source = {"model_path": model} if isinstance(model, str) else {"model_content": model}
    interpreter = Interpreter(**source, num_threads=1)
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
