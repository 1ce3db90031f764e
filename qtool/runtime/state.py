"""What a model keeps from one invocation to the next, kept the way LiteRT keeps it.

Two kinds of state exist in TFLite models:

- variable tensors (`Tensor.is_variable`): the output and cell states of UNIDIRECTIONAL_SEQUENCE_LSTM
  and LSTM. LiteRT sets them to zero when it allocates the interpreter (ResetVariableTensor) and
  each invocation continues from where the last one left them.
- resource variables: VAR_HANDLE names a variable by (container, shared_name), ASSIGN_VARIABLE
  stores a value in it, READ_VARIABLE reads it back; a CALL_ONCE operator runs an initialising
  subgraph (usually assigning the variables' initial values) on the first invocation only.

A stateful model's samples therefore form one sequence: the engine runs them one after another,
in order, on one thread (`Engine`), state carried from each sample to the next, as LiteRT does
when a program invokes an interpreter repeatedly. A fresh engine (or `ModelState.reset`) starts
a new sequence from the initial state.
"""

from __future__ import annotations

import numpy as np

from qtool.errors import ModelError
from qtool.model.calls import called_subgraphs
from qtool.model.graph import Model, Subgraph
from qtool.model.types import numpy_dtype

# The operators that create, read, write or initialise resource variables.
RESOURCE_OPS = frozenset({"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE"})


def keeps_state(model: Model, subgraph_index: int = 0) -> bool:
    """Whether running the subgraph changes what its next run computes: it, or a subgraph it
    runs, has variable tensors or operates on resource variables."""
    for s in (subgraph_index, *called_subgraphs(model, subgraph_index)):
        subgraph = model.subgraphs[s]
        if any(tensor.is_variable for tensor in subgraph.tensors) or any(
            model.op_type(op) in RESOURCE_OPS for op in subgraph.operators
        ):
            return True
    return False


def state_tensors(model: Model, subgraph_index: int = 0) -> list[int]:
    """The float variable tensors of a subgraph (LSTM states), which the engine observes at every
    step their operator takes."""
    subgraph = model.subgraphs[subgraph_index]
    return [
        t
        for t, tensor in enumerate(subgraph.tensors)
        if tensor.is_variable and np.issubdtype(numpy_dtype(tensor.dtype), np.floating)
    ]


class ModelState:
    """The state of one run of a model: variable tensors and resource variables, shared by the
    engines of every subgraph the run enters, plus the values kernels report for observation
    (every step of an LSTM's states, its intermediate results).

    The engines of the subgraphs control flow runs share it (`qtool.runtime.engine.Callees`).
    """

    def __init__(self, model: Model) -> None:
        self.model = model
        self.resource_ids: dict[tuple[str, str], int] = {}  # as LiteRT numbers them
        self.reset()

    def reset(self) -> None:
        """Back to the initial state: variable tensors zero, no resource variable assigned, every
        initialiser to run again."""
        self.tensors: dict[tuple[int, int], np.ndarray] = {}
        self.resources: dict[int, np.ndarray] = {}
        self.initialised: set[int] = set()
        self.observed: list[tuple[int, np.ndarray]] = []

    # ------------------------------------------------------------------ variable tensors

    def variable(self, subgraph: Subgraph, t: int) -> np.ndarray:
        """The current value of variable tensor `t` (zeros before anything wrote it)."""
        key = (id(subgraph), t)
        if key not in self.tensors:
            tensor = subgraph.tensors[t]
            self.tensors[key] = np.zeros(tensor.shape, numpy_dtype(tensor.dtype))
        return self.tensors[key]

    def set_variable(self, subgraph: Subgraph, t: int, value: np.ndarray) -> None:
        """Store the value an operator leaves in variable tensor `t` for the next invocation."""
        self.tensors[(id(subgraph), t)] = np.asarray(value)

    # ------------------------------------------------------------------ resource variables

    def handle(self, container: str, shared_name: str) -> np.ndarray:
        """VAR_HANDLE's output: the variable's id (int32), the same for the same name."""
        key = (container, shared_name)
        if key not in self.resource_ids:
            self.resource_ids[key] = len(self.resource_ids)
        return np.asarray(self.resource_ids[key], np.int32)

    def name_of(self, handle: np.ndarray) -> str:
        """A variable's shared name, for messages."""
        wanted = int(np.asarray(handle).reshape(-1)[0])
        return next((name for (_, name), i in self.resource_ids.items() if i == wanted), "?")

    def read(self, handle: np.ndarray) -> np.ndarray:
        """READ_VARIABLE: the value last assigned (a copy: the reader may keep it)."""
        key = int(np.asarray(handle).reshape(-1)[0])
        if key not in self.resources:
            raise ModelError(
                f"READ_VARIABLE reads variable {self.name_of(handle)!r} before anything assigned "
                "it (LiteRT refuses this too)"
            )
        return self.resources[key].copy()

    def assign(self, handle: np.ndarray, value: np.ndarray) -> None:
        """ASSIGN_VARIABLE: the variable holds a copy of `value` from now on."""
        self.resources[int(np.asarray(handle).reshape(-1)[0])] = np.array(value)

    def first_run(self, subgraph_index: int) -> bool:
        """CALL_ONCE: whether its initialising subgraph is yet to run in this sequence (from now
        on it has run)."""
        if subgraph_index in self.initialised:
            return False
        self.initialised.add(subgraph_index)
        return True

    # ------------------------------------------------------------------ observation

    def observe(self, t: int, value: np.ndarray) -> None:
        """A value tensor `t` took inside an operator (every step of a state, an intermediate),
        handed to the run's observers after the operator."""
        self.observed.append((t, value))

    def take_observed(self) -> list[tuple[int, np.ndarray]]:
        """The values observed since the last call."""
        found, self.observed = self.observed, []
        return found
