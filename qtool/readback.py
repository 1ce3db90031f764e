"""The read-back check of a model qtool writes, before it is renamed into place.

The bytes written to the temporary file are read back and must decode and pass the model
validator, and load in LiteRT with its builtin kernels only (no XNNPACK delegate:
`Interpreter(...).allocate_tensors()`) when `ai-edge-litert` is
installed and the model has no custom operators (which LiteRT could not resolve anyway). LiteRT runs in a forked child: it aborts the whole process on some inconsistent
models, and that must cost qtool one line of error, not its life.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import select
import signal
import time
from pathlib import Path

from qtool.errors import ModelError, first_line
from qtool.model import BuiltinOperator, Model, parse_model
from qtool.runtime.litert import litert_available

LITERT_TIMEOUT = 120.0  # seconds for LiteRT to load a model in the child


def written_model_problem(path: Path, source: bytes | None = None) -> str | None:
    """Why the model file at `path` must not be put in place (None: it is fine). An op that
    fails to prepare does not count in a model with dynamic input dimensions whose `source`
    LiteRT refuses as well: such a model (openWakeWord's melspectrogram, declared [1, 1]) may
    not prepare at its declared shapes, float or quantized."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return f"it cannot be read back ({exc.strerror or exc})"
    try:
        model = parse_model(data, name="the written model")
    except ModelError as exc:
        return f"qtool cannot read it back: {exc}"
    if any(code.builtin_code == BuiltinOperator.CUSTOM for code in model.operator_codes):
        return None
    problem = litert_problem(data)
    if problem and _shape_bound(model, problem) and source is not None and litert_problem(source):
        return None
    return problem


def _shape_bound(model: Model, problem: str) -> bool:
    """Whether LiteRT's refusal may come from the declared shapes alone: an op failed to prepare
    and an input of the entry subgraph has dimensions that are only known at run time."""
    entry = model.subgraphs[0]
    dynamic = any(-1 in (entry.tensors[t].shape_signature or ()) for t in entry.inputs if t >= 0)
    return dynamic and "failed to prepare" in problem


def litert_problem(data: bytes) -> str | None:
    """Why LiteRT refuses the model (None: it loads, or LiteRT is not installed)."""
    if not litert_available():
        return None
    if not hasattr(os, "fork"):
        return _load_in_litert(data)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child, which only loads the model and reports
        os.close(read)
        try:
            for name in ("SIGINT", "SIGTERM", "SIGHUP"):  # not the parent's Python handlers
                if hasattr(signal, name):
                    signal.signal(getattr(signal, name), signal.SIG_DFL)
            faulthandler.disable()  # an abort needs no traceback
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            try:
                message = _load_in_litert(data) or ""
            except BaseException as exc:
                message = f"LiteRT fails loading it ({type(exc).__name__}: {exc})"
            os.write(write, message.encode()[:4000])
        finally:
            os._exit(0)
    os.close(write)
    return _child_verdict(pid, read)


def _child_verdict(pid: int, read: int) -> str | None:
    deadline = time.monotonic() + LITERT_TIMEOUT
    chunks = []
    try:
        with os.fdopen(read, "rb") as pipe:
            while True:
                ready, _, _ = select.select([pipe], [], [], max(deadline - time.monotonic(), 0))
                if not ready:
                    _stop(pid)
                    return f"LiteRT did not load it within {LITERT_TIMEOUT:.0f} s"
                chunk = pipe.read1(4096)
                if not chunk:
                    break
                chunks.append(chunk)
    except BaseException:  # interrupted while waiting: the child goes too
        _stop(pid)
        raise
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"LiteRT crashes loading it (signal {os.WTERMSIG(status)})"
    return b"".join(chunks).decode(errors="replace") or None


def _stop(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _load_in_litert(data: bytes) -> str | None:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    # LiteRT's builtin kernels only: XNNPACK accepts models the builtin kernels refuse at
    # prepare (a clamp bound that overflows int32), and a model must run without it.
    try:
        Interpreter(
            model_content=bytes(data),
            experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
        ).allocate_tensors()
    except (RuntimeError, ValueError) as exc:
        return f"LiteRT refuses it: {first_line(exc, type(exc).__name__)}"
    return None
