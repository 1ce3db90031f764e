"""The vendors' own tools as oracles for `qtool check --target`, each run once per model.

- Vela (`ethos-u-vela`) compiles the model; ops left in its output model (anything but the
  `ethos-u` custom op) run on the CPU, the others on the NPU. Ops are matched by output tensor.
- TFLite Micro's Python interpreter initialises and invokes the model (in a forked child: a failing
  kernel may abort), and its int8 outputs are compared with LiteRT's reference kernels.
- LiteRT with its default XNNPACK delegate: the nodes a DELEGATE node replaced are those between
  its input and output tensors.
"""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import io
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from qtool.model import Model, parse_model

ARENA_BYTES = 1 << 24


@functools.cache
def vela_compiled(data: bytes) -> bytes:
    """The model Vela compiles from `data` for the Ethos-U55-128: its NPU part as `ethos-u`
    custom ops, the other ops left for the CPU."""
    from ethosu.vela.vela import main as vela_main

    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "model.tflite"
        source.write_bytes(data)
        with _quiet():
            vela_main(
                [str(source), "--accelerator-config", "ethos-u55-128", "--output-dir", folder]
            )
        return (Path(folder) / "model_vela.tflite").read_bytes()


@functools.cache
def vela_cpu_ops(data: bytes) -> frozenset[tuple[int, int]]:
    """(subgraph, op index) of the ops Vela leaves on the CPU (Ethos-U55-128)."""
    # The validator knows the ethos-u op and its scratch tensors (schemas/ops.json).
    compiled = parse_model(vela_compiled(data))
    left = {
        compiled.subgraphs[s].tensors[op.outputs[0]].name
        for s, _, _, op in compiled.iter_ops()
        if compiled.op_type(op) != "ethos-u" and op.outputs
    }
    model = parse_model(data)
    return frozenset(
        (s, i)
        for s, i, subgraph, op in model.iter_ops()
        if op.outputs and subgraph.tensors[op.outputs[0]].name in left
    )


@contextlib.contextmanager
def _quiet():
    """Silence Python and C-level output (Vela's regor core writes to the file descriptors)."""
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


def _feeds(model: Model, seed: int = 0) -> list[np.ndarray]:
    from qtool.model import numpy_dtype

    rng = np.random.default_rng(seed)
    subgraph = model.subgraphs[0]
    feeds = []
    for t in subgraph.inputs:
        tensor = subgraph.tensors[t]
        dtype = numpy_dtype(tensor.dtype)
        if np.issubdtype(dtype, np.floating):
            feeds.append(rng.uniform(-1, 1, tensor.shape).astype(dtype))
        else:
            info = np.iinfo(dtype)
            feeds.append(
                rng.integers(info.min, info.max, tensor.shape, endpoint=True).astype(dtype)
            )
    return feeds


def _tflm_child(data: bytes, feed_sets: list[list[np.ndarray]]) -> dict:
    from tflite_micro.python.tflite_micro import runtime

    try:
        interpreter = runtime.Interpreter.from_bytes(data, arena_size=ARENA_BYTES)
        runs = []
        for feeds in feed_sets:
            for i, feed in enumerate(feeds):
                interpreter.set_input(feed, i)
            interpreter.invoke()
            runs.append([interpreter.get_output(i).tolist() for i in range(_count_outputs(data))])
    except Exception as exc:
        return {"runs": False, "error": str(exc)}
    return {"runs": True, "outputs": runs[0], "runs_outputs": runs}


def _count_outputs(data: bytes) -> int:
    return len(parse_model(data).subgraphs[0].outputs)


@functools.cache
def tflm_result(data: bytes) -> dict:
    """{"runs": bool, "error": str} or {"runs": True, "outputs": [...]} from TFLite Micro."""
    return tflm_run(data, [_feeds(parse_model(data))])


def tflm_run(data: bytes, feed_sets: list[list[np.ndarray]]) -> dict:
    """TFLite Micro's verdict on `data` invoked once per set of `feed_sets`, from a forked child
    (a failing kernel may abort the process): as `tflm_result`, with "runs_outputs" holding
    every invocation's outputs."""
    from tflite_micro.python.tflite_micro import runtime  # noqa: F401 - imported once, not per child

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(read)
        faulthandler.disable()  # a kernel that aborts needs no traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        result = _tflm_child(data, feed_sets)
        with os.fdopen(write, "w") as pipe:
            json.dump(result, pipe)
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    _, status = os.waitpid(pid, 0)
    if not text:
        return {"runs": False, "error": f"TFLM crashed (status {status})"}
    return json.loads(text)


def litert_reference_outputs(data: bytes) -> list[np.ndarray]:
    """Outputs of LiteRT's reference kernels on the same inputs as `tflm_result`.

    LiteRT's reference int8 SUM reads its input as uint8 (wrong results; its optimized kernel
    and TFLM are right), so models with SUM run on the optimized builtin kernels instead.
    """
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    model = parse_model(data)
    has_sum = any(model.op_type(op) == "SUM" for _, _, _, op in model.iter_ops())
    resolver = (
        OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES if has_sum else OpResolverType.BUILTIN_REF
    )
    interpreter = Interpreter(model_content=data, experimental_op_resolver_type=resolver)
    interpreter.allocate_tensors()
    for detail, feed in zip(interpreter.get_input_details(), _feeds(model), strict=True):
        interpreter.set_tensor(detail["index"], feed)
    interpreter.invoke()
    by_index = {d["index"]: d for d in interpreter.get_output_details()}
    return [interpreter.get_tensor(by_index[t]["index"]) for t in model.subgraphs[0].outputs]


@functools.cache
def xnnpack_ops(data: bytes) -> frozenset[int]:
    """Indices of the subgraph-0 ops LiteRT's default XNNPACK delegate took."""
    from ai_edge_litert.interpreter import Interpreter

    with _quiet():
        interpreter = Interpreter(model_content=data)
        interpreter.allocate_tensors()
    details = interpreter._get_ops_details()
    originals = [d for d in details if d["op_name"] != "DELEGATE"]
    producer = {t: d["index"] for d in originals for t in d["outputs"]}
    taken: set[int] = set()
    for delegate in (d for d in details if d["op_name"] == "DELEGATE"):
        boundary = set(delegate["inputs"])
        pending = [t for t in delegate["outputs"] if t in producer]
        while pending:
            index = producer[pending.pop()]
            if index in taken:
                continue
            taken.add(index)
            pending += [
                t for t in originals[index]["inputs"] if t in producer and t not in boundary
            ]
    return frozenset(taken)
