"""What running a float model over samples needs in memory, from its shapes alone, checked
before the first sample runs.

The validator bounds each activation tensor (1 GiB a sample), not their sum: a model of thirty
1 GiB activations is valid and needs 30 GiB for one sample, since calibration observes every
activation of a sample (each engine keeps a pass's tensors until they are observed). Found only
when memory ran out, that was a MemoryError deep in a kernel or, where Linux overcommits, the
kernel's OOM killer ending the process without a word. The least any engine needs is one
sample's activations and the model's weights: when that is more than the machine has
available, calibration is refused up front, naming the largest tensors.
"""

from __future__ import annotations

import contextlib
import math
import os
import resource

from qtool.errors import ModelError
from qtool.model import Model, numpy_dtype
from qtool.model.types import dtype_name

_GIB = 1 << 30


def activation_bytes(model: Model, subgraph_index: int = 0) -> list[tuple[int, int]]:
    """(bytes per sample, tensor index) of every tensor running the subgraph produces (its
    inputs and its operators' outputs), largest first. A leading dimension is the batch axis."""
    subgraph = model.subgraphs[subgraph_index]
    produced = set(subgraph.inputs) | {t for op in subgraph.operators for t in op.outputs}
    sizes = []
    for t in produced:
        tensor = subgraph.tensors[t]
        if t < 0 or model.is_constant(tensor):
            continue
        shape = tensor.shape[1:] if tensor.shape[:1] == [1] else tensor.shape
        try:
            itemsize = numpy_dtype(tensor.dtype).itemsize
        except (KeyError, ValueError):  # strings, resources: a pointer's worth
            itemsize = 8
        sizes.append((math.prod(max(d, 1) for d in shape) * itemsize, t))
    return sorted(sizes, reverse=True)


def available_memory() -> int | None:
    """Bytes this process can still use: what the system has available (MemAvailable), within
    the address-space limit if one is set; None where neither can be read."""
    limits = []
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    limits.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        limits.append(soft - _address_space_used())
    if not limits and hasattr(os, "sysconf"):
        with contextlib.suppress(OSError, ValueError):
            limits.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    return max(min(limits), 0) if limits else None


def _address_space_used() -> int:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _gib(nbytes: int) -> str:
    return f"{nbytes / _GIB:.1f} GiB"


def check_memory(model: Model, subgraph_index: int = 0, what: str = "calibrating") -> None:
    """ModelError when one sample's activations and the weights exceed the memory available."""
    sizes = activation_bytes(model, subgraph_index)
    needed = sum(size for size, _ in sizes) + model.weights_nbytes()
    available = available_memory()
    if available is None or needed <= available:
        return
    tensors = model.subgraphs[subgraph_index].tensors
    largest = ", ".join(
        f"{tensors[t].name!r} {tensors[t].shape} {dtype_name(tensors[t].dtype)} ({_gib(size)})"
        for size, t in sizes[:3]
    )
    raise ModelError(
        f"{what} subgraph {subgraph_index} needs at least {_gib(needed)} of memory (one "
        f"sample's {len(sizes)} activations and the weights; the largest: {largest}), more than "
        f"the {_gib(available)} available"
    )
