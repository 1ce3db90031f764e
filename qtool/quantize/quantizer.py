"""The quantization pipeline: fold constants, calibrate, plan from the spec, rewrite."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from qtool.calibrate import CalibrationResult, Dataset, calibrate
from qtool.errors import UsageError
from qtool.model import Model
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

    def __post_init__(self) -> None:
        if self.io not in IO_MODES:
            raise UsageError(f"--io must be one of {', '.join(IO_MODES)}, not {self.io!r}")

    @property
    def profiles(self) -> tuple[str, ...]:
        return ("per-tensor-fc",) if self.per_tensor_fc else ()


@dataclass
class FloatOp:
    index: int | None  # operator index in the input model
    op_type: str
    reason: str


@dataclass
class QuantizeResult:
    model: Model  # the int8 model
    float_model: Model  # the float model after constant folding (what was calibrated)
    calibration: CalibrationResult
    plan: Plan
    folded: list[FoldedOp]
    float_ops: list[FloatOp]
    notes: RewriteNotes
    warnings: list[str] = field(default_factory=list)


def prepare_float_model(model: Model) -> tuple[Model, list[FoldedOp], dict[int, int]]:
    """A copy of `model` with constant operators folded, and each operator's original index."""
    work = clone_model(model)
    source_index = {id(op): i for i, op in enumerate(work.subgraphs[0].operators)}
    folded = fold_constants(work)
    remove_unused(work)
    return work, folded, source_index


def quantize_model(
    model: Model,
    dataset: Dataset,
    options: QuantizeOptions = QuantizeOptions(),
    progress: Callable[[int], None] | None = None,
) -> QuantizeResult:
    """Quantize subgraph 0 of a float model to int8 per the spec; `model` is left unchanged."""
    if len(model.subgraphs) > 1:
        raise UsageError(
            f"the model has {len(model.subgraphs)} subgraphs; qtool quantizes "
            "single-subgraph models (control flow and multi-signature models are "
            "not supported yet)"
        )
    spec = load_spec(options.profiles)
    float_model, folded, source_index = prepare_float_model(model)
    calibration = calibrate(float_model, dataset, engine=options.engine, progress=progress)
    work = clone_model(float_model)
    # clone_model copies operators, so map the originals' indices onto the copies by position.
    source_by_position = [source_index[id(op)] for op in float_model.subgraphs[0].operators]
    work_index = {id(op): source_by_position[i] for i, op in enumerate(work.subgraphs[0].operators)}
    plan = make_plan(work, spec, calibration.ranges, options.keep_float, work_index)
    float_ops = [
        FloatOp(decision.source_index, work.op_type(op), decision.reason or "")
        for op in work.subgraphs[0].operators
        if (decision := plan.decision(op)).mode == FLOAT
    ]
    notes = rewrite(work, plan, spec, io=options.io)
    warnings = list(notes.warnings)
    if dataset.synthetic:
        warnings.insert(
            0,
            "calibrated on synthetic random data: activation ranges do not "
            "reflect real inputs, so accuracy is not meaningful",
        )
    return QuantizeResult(
        model=work,
        float_model=float_model,
        calibration=calibration,
        plan=plan,
        folded=folded,
        float_ops=float_ops,
        notes=notes,
        warnings=warnings,
    )
