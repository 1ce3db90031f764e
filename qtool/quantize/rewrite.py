"""Rewriting a planned float graph into its integer form.

Every activation exists in the version its producer writes (a float tensor, or the slot an
integer operator writes) and in the versions its readers need (float for float operators, the
planned slots for integer ones). Each version is one tensor; a missing one is made once by a
converter placed just before its first reader: QUANTIZE (float -> integer, or integer ->
integer with other parameters or width) or DEQUANTIZE (integer -> float). Model inputs and
outputs keep their tensor indices (signature defs refer to them) in the type `io` asks for; a
producer whose version differs from the output's writes a fresh tensor that a converter turns
into the output.

Constant operands of integer operators get quantized copies: the planned weights and biases
(`Plan.weights`), and constants read as activations (quantized with their slot's parameters;
`constant_store.py`). The float originals are dropped when unused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from qtool.model import Model, Operator, QuantParams, Subgraph, Tensor, TensorType
from qtool.model.edit import NameAllocator, clone_model, remove_unused
from qtool.numerics import AffineParams, activation_params, qrange
from qtool.op_facts import options_table
from qtool.prepare.fold import StoredForm
from qtool.quantize.constant_store import ConstantStore
from qtool.quantize.decisions import FLOAT, INT8, INT16
from qtool.quantize.plan import QUANTIZED, Plan, Slot
from qtool.quantize.recurrent import RecurrentOperands
from qtool.quantize.variables import initialiser_plans
from qtool.spec import Mode, QuantSpec

UINT8 = Mode.UINT8
IO_TYPES = (FLOAT, INT8, UINT8)
_TENSOR_TYPES = {
    INT8: TensorType.INT8,
    INT16: TensorType.INT16,
    UINT8: TensorType.UINT8,
    FLOAT: TensorType.FLOAT32,
}


@dataclass
class RewriteNotes:
    """What the rewriter reports beside the model.

    Attributes:
        warnings: one line for each thing the user should know (bias overflows avoided, ...).
        enlarged_weight_scales: the layers whose weight scales were enlarged so that the bias fits,
            each {"subgraph", "op_index", "tensor", "channels"}.
    """

    warnings: list[str] = field(default_factory=list)
    enlarged_weight_scales: list[dict] = field(default_factory=list)
    # Per rewritten subgraph, for each operator of the result in order: the index of the planned
    # operator it is, or None for a converter the rewrite added.
    origins: dict[int, list[int | None]] = field(default_factory=dict)
    # Integer copies of constants and the name of the float original they replace: once the
    # original is gone, the copy takes its name back (users know their weights by it).
    copies: list[tuple[int, Tensor, str]] = field(default_factory=list)


@dataclass(frozen=True)
class _Version:
    """How one version of an activation is stored: its type and parameters (None: float)."""

    dtype: str
    params: AffineParams | None

    def same_as(self, other: _Version) -> bool:
        if self.dtype != other.dtype:
            return False
        if self.params is None or other.params is None:
            return self.params is other.params
        return np.array_equal(self.params.scale, other.params.scale) and np.array_equal(
            self.params.zero_point, other.params.zero_point
        )


class _Rewriter(ConstantStore):
    def __init__(
        self,
        model: Model,
        plan: Plan,
        specs: Mapping[str, QuantSpec],
        io: str,
        notes: RewriteNotes,
        stored_forms: Mapping[str, StoredForm],
        sparsify: bool = False,
    ) -> None:
        self.model = model
        self.stored_forms = stored_forms  # how the source stored folded constants, by name
        self.sparsify = sparsify  # dense weights stored sparse too where that is smaller
        self.plan = plan
        self.specs = specs
        self.io = io
        self.subgraph: Subgraph = model.subgraphs[plan.subgraph_index]
        self.names = NameAllocator(self.subgraph)
        self.tensor_of: dict[tuple, int] = {}  # version key -> tensor index
        self.kind: dict[tuple, _Version] = {}  # version key -> type and parameters
        self.home: dict[int, tuple] = {}  # activation -> key of the version it is produced in
        self.stored_as: dict[int, str] = {}  # tensor -> the type it ends up with
        self.emitted: list[Operator] = []
        self.origins: list[int | None] = []  # the planned operator of each emitted one
        self.constant_copies: dict[tuple, int] = {}
        self.restored: dict[int, int] = {}  # folded float constant -> its float32 in stored form
        self.notes = notes
        self.notes.warnings.extend(plan.widened)

    # ------------------------------------------------------------------ versions

    def _slot_version(self, slot: Slot) -> _Version:
        return _Version(slot[1], self.plan.params[slot])

    def _boundary_version(self, t: int, output: bool = False) -> _Version:
        """The version of a model input or output that `io` asks for; in a subgraph control
        flow runs, the version its caller passes (`Plan.boundary_inputs`/`_outputs`)."""
        given = (self.plan.boundary_outputs if output else self.plan.boundary_inputs).get(t)
        if given is not None:
            return _Version(self.plan.boundary_dtype, given)
        if self.plan.boundary_inputs or self.plan.boundary_outputs or self.io == FLOAT:
            return _Version(FLOAT, None)
        params = self.plan.params.get((t, INT8))
        if params is None:
            if t not in self.plan.ranges:  # never calibrated: it keeps its float boundary
                return _Version(FLOAT, None)
            params = activation_params(*self.plan.ranges[t])
        if self.io == UINT8:
            # uint8 at the boundary is the int8 tensor shifted by the difference of the minimums.
            shift = qrange(np.uint8)[0] - qrange(np.int8)[0]
            params = AffineParams(params.scale, params.zero_point + shift)
        return _Version(self.io, params)

    def _register(self, key: tuple, version: _Version, t: int) -> None:
        self.tensor_of[key] = t
        self.kind[key] = version
        self.stored_as[t] = version.dtype

    def _assign_homes(self) -> None:
        tensors = self.subgraph.tensors
        boundary = set(self.subgraph.inputs) | set(self.subgraph.outputs)
        for t in self.subgraph.inputs:
            if tensors[t].dtype == TensorType.FLOAT32:
                self._register(("io", t), self._boundary_version(t), t)
                self.home[t] = ("io", t)
        for i, op in enumerate(self.subgraph.operators):
            for position, t in enumerate(op.outputs):
                if tensors[t].dtype != TensorType.FLOAT32:
                    continue
                slot = self.plan.writes.get((i, position))
                key = slot if slot is not None else ("float", t)
                version = self._slot_version(slot) if slot is not None else _Version(FLOAT, None)
                self.home[t] = key
                if t not in boundary:
                    self._register(key, version, t)
                    continue
                outer = self._boundary_version(t, output=t in self.subgraph.outputs)
                self._register(("io", t), outer, t)
                if outer.dtype == FLOAT:
                    self._register(("float", t), outer, t)  # float readers use the output itself
                if not outer.same_as(version):
                    self._register(key, version, self._copy_tensor(t, version.dtype))
                else:
                    self.tensor_of[key], self.kind[key] = t, outer
        # An int8 model input read in int8 with the same parameters needs no converter.
        for t in self.subgraph.inputs:
            key = ("io", t)
            if key in self.kind and (t, INT8) in self.plan.params:
                version = self._slot_version((t, INT8))
                if self.kind[key].same_as(version):
                    self.tensor_of[(t, INT8)], self.kind[(t, INT8)] = t, version

    def _copy_tensor(self, t: int, dtype: str) -> int:
        original = self.subgraph.tensors[t]
        return self._add_tensor(
            f"{original.name}_{dtype}",
            original.shape,
            TensorType.FLOAT32,
            shape_signature=original.shape_signature,
        )

    def need(self, t: int, key: tuple, version: _Version) -> int:
        """The tensor holding activation `t` as `key`, adding a converter before the current op."""
        if key in self.tensor_of:
            return self.tensor_of[key]
        source = self.tensor_of[self.home.get(t, ("float", t))] if t in self.home else t
        target = self._copy_tensor(t, version.dtype if len(key) < 3 else f"{version.dtype}_rq")
        self._register(key, version, target)
        self._emit_converter(source, target, version.dtype)
        return target

    def _float_key(self, t: int) -> tuple:
        home = self.home.get(t)
        if home is not None and self.kind.get(home, _Version(FLOAT, None)).dtype == FLOAT:
            return home
        return ("float", t)

    def _emit_converter(self, source: int, target: int, dtype: str) -> None:
        op_type = "DEQUANTIZE" if dtype == FLOAT else "QUANTIZE"
        version = self.specs[INT8].rule(op_type).int8_version
        if INT16 in (dtype, self.stored_as.get(source, FLOAT)):
            version = max(version, self.specs[INT16].rule(op_type).int8_version)
        converter = Operator(
            opcode_index=self.model.opcode_for(op_type, version), inputs=[source], outputs=[target]
        )
        self._emit(converter, None)

    def _emit(self, op: Operator, origin: int | None) -> None:
        self.emitted.append(op)
        self.origins.append(origin)

    # ------------------------------------------------------------------ operators

    def _rewrite_quantized(self, i: int, op: Operator, mode: str) -> None:
        op_type = self.model.op_type(op)
        rule = self.specs[mode].rule(op_type)
        code = self.model.operator_codes[op.opcode_index]
        code.version = max(code.version, rule.int8_version)
        required = self.specs[mode].required_options.get(op_type, {})
        if required and op.options_type is None:  # written without its table: the defaults
            op.options_type = options_table(op_type)
        for name, value in required.items():
            op.set_option(name, value)
        layer = self.plan.weights.get(i)
        if isinstance(layer, RecurrentOperands):
            self._store_recurrent(op, layer)
        elif layer is not None:
            self._store_weights(i, op, layer)
        tensors = self.subgraph.tensors
        for (op_index, position), slot in self.plan.reads.items():
            if op_index != i:
                continue
            t = op.inputs[position]
            if self.model.is_constant(tensors[t]):
                op.inputs[position] = self._quantized_constant(t, slot)
            else:
                op.inputs[position] = self.need(t, slot, self._slot_version(slot))

    def _rewrite_float(self, i: int, op: Operator) -> None:
        tensors = self.subgraph.tensors
        hybrid = self.is_hybrid(i, op)
        for position, t in enumerate(op.inputs):
            if t < 0 or tensors[t].dtype != TensorType.FLOAT32:
                continue
            narrow = self.plan.narrow.get((i, position))
            if t in self.home:
                op.inputs[position] = self.need(t, self._float_key(t), _Version(FLOAT, None))
            elif narrow is not None:  # the weight modes (weight_store.py)
                op.inputs[position] = self.store_narrow(op, t, narrow)
            elif self.model.is_constant(tensors[t]) and not hybrid:
                op.inputs[position] = self._restored_float(t)

    def run(self) -> RewriteNotes:
        self._assign_homes()
        for i, op in enumerate(list(self.subgraph.operators)):
            mode = self.plan.decisions[i].mode
            if mode in QUANTIZED:
                self._rewrite_quantized(i, op, mode)
            elif mode == FLOAT:
                self._rewrite_float(i, op)
            boundary_outputs = []
            for position, t in enumerate(op.outputs):
                if t not in self.home:
                    continue
                produced = self.tensor_of[self.home[t]]
                op.outputs[position] = produced
                if produced != t:
                    boundary_outputs.append(t)
            self._emit(op, i)
            for t in boundary_outputs:
                self._emit_converter(self.tensor_of[self.home[t]], t, self.kind[("io", t)].dtype)
        self._passed_through()
        for key, t in self.tensor_of.items():
            self._set_type(t, self.kind[key])
        self.subgraph.operators = self.emitted
        self.notes.origins[self.plan.subgraph_index] = self.origins
        return self.notes

    def _passed_through(self) -> None:
        """An output that is an input of the subgraph (a branch passing an operand on) leaves
        with the parameters its caller expects: a requantized copy where they differ."""
        for position, t in enumerate(self.subgraph.outputs):
            wanted = self.plan.boundary_outputs.get(t)
            if t not in self.subgraph.inputs or wanted is None:
                continue
            version = _Version(self.plan.boundary_dtype, wanted)
            if self.kind[("io", t)].same_as(version):
                continue
            copy = self._copy_tensor(t, f"{version.dtype}_out")
            self._register(("out", t), version, copy)
            self._emit_converter(t, copy, version.dtype)
            self.subgraph.outputs[position] = copy

    def _set_type(self, t: int, version: _Version) -> None:
        tensor = self.subgraph.tensors[t]
        tensor.dtype = _TENSOR_TYPES[version.dtype]
        if version.params is None:
            tensor.quantization = None
        else:
            tensor.quantization = QuantParams.of(version.params.scale, version.params.zero_point)


StoredForms = Mapping[int, Mapping[str, StoredForm]]


def rewrite(
    model: Model,
    plan: Plan,
    specs: Mapping[str, QuantSpec],
    io: str = FLOAT,
    notes: RewriteNotes | None = None,
    stored_forms: Mapping[str, StoredForm] | None = None,
    sparsify: bool = False,
) -> RewriteNotes:
    """Turn a planned float subgraph (in place) into its integer form.

    Tensor indices stay valid (the float originals remain, unused) so that several subgraphs can
    be rewritten one after the other; `remove_unused` drops the leftovers at the end.
    `stored_forms` (by tensor name: `prepare.fold`) lets folded float16 and sparse weights be
    stored that way again; `sparsify` stores dense weights sparse too where that is smaller.
    """
    rewriter = _Rewriter(
        model, plan, specs, io, notes or RewriteNotes(), stored_forms or {}, sparsify
    )
    return rewriter.run()


def rewrite_plans(
    work: Model,
    plans: Mapping[int, Plan],
    specs: Mapping[str, QuantSpec],
    io: str = FLOAT,
    stored_forms: StoredForms | None = None,
    sparsify: bool = False,
) -> RewriteNotes:
    """Rewrite every planned subgraph of `work` (and those its control flow runs, planned with
    it) in place, then drop the unused float originals (operators stay: `RewriteNotes.origins`
    maps the result's operators to the plans')."""
    notes = RewriteNotes()
    forms = stored_forms or {}
    planned: dict[int, tuple[Plan, str]] = {}
    for entry in plans.values():
        for plan in entry.with_bodies():
            # The boundary of a subgraph control flow runs is its caller's business.
            planned.setdefault(plan.subgraph_index, (plan, io if plan is entry else FLOAT))
    # The subgraphs that initialise quantized variables store their initial values quantized.
    every = {s: plan for s, (plan, _) in planned.items()}
    for s, plan in initialiser_plans(work, every).items():
        planned.setdefault(s, (plan, FLOAT))
    for s, (plan, boundary) in planned.items():
        rewrite(work, plan, specs, boundary, notes, forms.get(s), sparsify)
    remove_unused(work)
    _restore_names(work, notes.copies)
    return notes


def _restore_names(model: Model, copies: list[tuple[int, Tensor, str]]) -> None:
    """Give each integer copy of a constant its original's name where the original is gone."""
    for s, subgraph in enumerate(model.subgraphs):
        names = {tensor.name for tensor in subgraph.tensors}
        present = {id(tensor) for tensor in subgraph.tensors}
        for copy_subgraph, tensor, base in copies:
            if copy_subgraph == s and id(tensor) in present and base not in names:
                names.discard(tensor.name)
                tensor.name = base
                names.add(base)


def rewritten(
    model: Model,
    plans: Mapping[int, Plan],
    specs: Mapping[str, QuantSpec],
    io: str = FLOAT,
    stored_forms: StoredForms | None = None,
    sparsify: bool = False,
) -> tuple[Model, RewriteNotes]:
    """A copy of `model` with every planned subgraph rewritten, unused parts dropped."""
    work = clone_model(model)
    return work, rewrite_plans(work, plans, specs, io, stored_forms, sparsify)
