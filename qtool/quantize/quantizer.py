"""The quantization pipeline: fold constants, calibrate, plan from the spec, rewrite."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from qtool.calibrate import CalibrationResult, Dataset, calibrate
from qtool.errors import UsageError
from qtool.model import Model, TensorType
from qtool.model.edit import clone_model, remove_unused
from qtool.quantize.fold import FoldedOp, fold_constants
from qtool.quantize.plan import FLOAT, Plan, make_plan
from qtool.quantize.rewrite import RewriteNotes, rewrite
from qtool.spec import load_spec

IO_MODES = ("float", "int8", "uint8")


@dataclass(frozen=True)
class QuantizeOptions:
    io: str = "float"  # model boundary: float, int8 or uint8
    per_tensor_fc: bool = False  # per-tensor FULLY_CONNECTED weights (TFLM, NNAPI, Ethos-U)
    keep_float: tuple[str, ...] = ()  # op types or tensor-name globs kept in float on purpose
    engine: str = "auto"
    target: str | None = None  # a device profile (schemas/targets/): plan with its spec profiles

    def __post_init__(self) -> None:
        if self.io not in IO_MODES:
            raise UsageError(f"--io must be one of {', '.join(IO_MODES)}, not {self.io!r}")

    @property
    def profiles(self) -> tuple[str, ...]:
        profiles = ("per-tensor-fc",) if self.per_tensor_fc else ()
        if self.target is not None:
            from qtool.check.targets import load_target  # data only: no check logic in quantize

            profiles += tuple(
                p for p in load_target(self.target).spec_profiles if p not in profiles
            )
        return profiles


@dataclass
class FloatOp:
    subgraph: int
    index: int | None  # operator index in the input model
    op_type: str
    reason: str


@dataclass
class QuantizeResult:
    model: Model  # the int8 model
    float_model: Model  # the float model after constant folding (what was calibrated)
    calibrations: dict[int, CalibrationResult]  # per quantized subgraph
    plans: dict[int, Plan]
    folded: list[FoldedOp]
    float_ops: list[FloatOp]
    notes: RewriteNotes
    warnings: list[str] = field(default_factory=list)


@dataclass
class FloatModel:
    """A float model ready for calibration, with constant operators folded away."""

    model: Model
    folded: list[FoldedOp]
    source_index: list[list[int]]  # per subgraph: input-model index of each operator


def prepare_float_model(model: Model) -> FloatModel:
    """A copy of `model` with constant operators folded in every subgraph."""
    work = clone_model(model)
    positions = [{id(op): i for i, op in enumerate(sg.operators)} for sg in work.subgraphs]
    folded = [op for s in range(len(work.subgraphs)) for op in fold_constants(work, s)]
    remove_unused(work)
    source_index = [
        [positions[s][id(op)] for op in sg.operators] for s, sg in enumerate(work.subgraphs)
    ]
    return FloatModel(work, folded, source_index)


def _computes_in_float(model: Model, subgraph_index: int) -> bool:
    """Whether an operator other than a QUANTIZE/DEQUANTIZE boundary has a float32 operand."""
    subgraph = model.subgraphs[subgraph_index]
    return any(
        model.op_type(op) not in ("QUANTIZE", "DEQUANTIZE")
        and any(
            t >= 0 and subgraph.tensors[t].dtype == TensorType.FLOAT32
            for t in op.inputs + op.outputs
        )
        for op in subgraph.operators
    )


def quantize_model(
    model: Model,
    data: Dataset | Mapping[int, Dataset],
    options: QuantizeOptions = QuantizeOptions(),
    progress: Callable[[int], None] | None = None,
) -> QuantizeResult:
    """Quantize every subgraph that has calibration data; `model` is left unchanged.

    `data` is one Dataset for subgraph 0, or a Dataset per subgraph index (one per signature of
    a multi-signature model). Subgraphs without data (e.g. control-flow bodies) stay float and
    are named in the warnings.
    """
    datasets = {0: data} if isinstance(data, Dataset) else dict(data)
    spec = load_spec(options.profiles)
    prepared = prepare_float_model(model)
    if not any(_computes_in_float(prepared.model, s) for s in datasets):
        raise UsageError(
            "the model is already quantized: no operator computes in float (qtool check audits it)"
        )
    calibrations = {
        s: calibrate(
            prepared.model, dataset, engine=options.engine, progress=progress, subgraph_index=s
        )
        for s, dataset in sorted(datasets.items())
    }
    work = clone_model(prepared.model)
    plans, float_ops = {}, []
    notes = RewriteNotes()
    for s, calibration in calibrations.items():
        plan = make_plan(
            work, spec, calibration.ranges, options.keep_float, prepared.source_index[s], s
        )
        float_ops += [
            FloatOp(s, decision.source_index, work.op_type(op), decision.reason or "")
            for op in work.subgraphs[s].operators
            if (decision := plan.decision(op)).mode == FLOAT
        ]
        rewrite(work, plan, spec, io=options.io, subgraph_index=s, notes=notes)
        plans[s] = plan
    remove_unused(work)
    warnings = list(notes.warnings)
    for s, subgraph in enumerate(work.subgraphs):
        if s not in calibrations:
            warnings.append(
                f"subgraph {s} ({subgraph.name or 'unnamed'}) has no calibration "
                "data (not a signature's entry point): kept in float"
            )
    if any(d.synthetic for d in datasets.values()):
        warnings.insert(
            0,
            "calibrated on synthetic random data: activation ranges do not "
            "reflect real inputs, so accuracy is not meaningful",
        )
    return QuantizeResult(
        model=work,
        float_model=prepared.model,
        calibrations=calibrations,
        plans=plans,
        folded=prepared.folded,
        float_ops=float_ops,
        notes=notes,
        warnings=warnings,
    )
