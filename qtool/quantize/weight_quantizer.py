"""A weight mode end to end (`quantize_loaded` with `mode` dynamic, weights or float16): the
plans, the target search, the written model, the measured accuracy, as a `QuantizeResult`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from qtool.calibrate import Dataset
from qtool.errors import UsageError
from qtool.model import Model, model_to_bytes
from qtool.quantize.planner import FOR_TARGET
from qtool.quantize.result import FloatOp, QuantizeResult
from qtool.quantize.weight_modes import (
    SYNTHETIC_WARNING,
    WeightModel,
    empty_statistics,
    measured_accuracy,
    measurement_samples,
    weight_plans,
)
from qtool.quantize.weight_plan import (
    DYNAMIC,
    FLOAT16,
    FULL,
    WEIGHT_MODES,
    WEIGHTS,
    WeightSettings,
    check_block_size,
)
from qtool.quantize.weight_rounding import input_moments
from qtool.quantize.weight_search import WeightSearchResult, search_weights

NO_CALIBRATION = "none"  # the report's method: the weight modes calibrate nothing
NOT_MEASURED = (
    "accuracy not measured: the model does not run on synthetic samples of its declared input "
    "shapes (give data)"
)


@dataclass(frozen=True)
class WeightRun:
    """What a weight mode is asked: its settings, and the accuracy it must reach."""

    settings: WeightSettings
    target_sqnr: float | None = None
    allow_float: bool = False
    seed: int = 0
    optimize_rounding: bool = False  # int8 weights too (int4 ones whenever there is data)


def quantize_weight_mode(
    model: Model,
    data: Mapping[int, Dataset],
    run: WeightRun,
    holdout: Mapping[int, Dataset] | None = None,
) -> QuantizeResult:
    """Quantize `model`'s weights as `run` says; `data` and `holdout` (per subgraph, only
    subgraph 0's are read) give the samples the accuracy is measured on (synthetic without
    them) and a target search fits on."""
    holdout = holdout or {}
    prepared, plans = weight_plans(model, run.settings)
    search = run.target_sqnr is not None
    real_data = 0 in data and not data[0].synthetic
    rounding = run.optimize_rounding or (run.settings.bits == 4 and real_data)
    if (search or run.optimize_rounding) and not real_data:
        raise UsageError(
            "a target SQNR and rounding optimisation need data to fit on (give data, not only "
            "held-out samples)"
        )
    samples = measurement_samples(prepared.model, data, holdout, search or rounding, run.seed)
    moments = input_moments(prepared.model, plans, samples.fitting) if rounding else {}
    for plan in plans.values():
        for op in plan.ops:
            op.rounded = (op.subgraph, op.index) in moments
    weights = WeightModel(prepared, plans, moments)
    searches = {}
    baseline_size = None
    if search:
        baseline_size = _size(weights)
        searches[0] = search_weights(weights, samples.fitting, run.target_sqnr, run.allow_float)
    written, notes = weights.write()
    accuracy, source = measured_accuracy(weights, written, samples)
    # Reached only when the samples the search never saw agree (as in the full pipeline), on
    # the plain SQNR the search fits.
    confirmed = {
        s: found.reached and bool(accuracy) and min(a.sqnr_db for a in accuracy) >= run.target_sqnr
        for s, found in searches.items()
    }
    warnings = list(notes.warnings)
    if samples.synthetic:
        warnings.insert(0, SYNTHETIC_WARNING if accuracy else NOT_MEASURED)
    return QuantizeResult(
        model=written,
        float_model=prepared.model,
        calibrations={},
        plans=weights.int_plans(),
        folded=prepared.folded,
        float_ops=_float_ops(weights),
        notes=notes,
        rewritten=prepared.rewritten,
        statistics=empty_statistics(prepared),
        method=NO_CALIBRATION,
        searches=searches,
        baseline_size=baseline_size,
        accuracy=accuracy,
        accuracy_source=source,
        estimate_independent=True if accuracy else None,  # no choice saw the measured samples
        target_confirmed=confirmed,
        warnings=warnings,
        mode=run.settings.mode,
        weight_plans=dict(weights.plans),
        synthetic=samples.synthetic,
    )


def _size(weights: WeightModel) -> int:
    """The bytes of the model with every op on its first rung."""
    return len(model_to_bytes(weights.write()[0]))


def _float_ops(weights: WeightModel) -> list[FloatOp]:
    """The ops whose weights stay float, and why."""
    found = []
    for op in weights.ops:
        if op.form is not None:
            continue
        reason = op.kept_float or FOR_TARGET
        found.append(FloatOp(op.subgraph, op.source_index, op.op_type, reason))
    return found


class WeightOptions(Protocol):
    """What the weight modes read of `QuantizeOptions` (options.py, which imports this)."""

    mode: str
    weight_bits: int
    block_size: int | None
    min_weight_elements: int | None


MODES = (FULL, *WEIGHT_MODES)
WEIGHT_BITS = (8, 4)
# Options of the full int8 pipeline that a weight mode (no calibration, float activations)
# has no use for: (attribute, value meaning "not given", option name).
_FULL_ONLY = (
    ("io", "float", "io"),
    ("activations", "int8", "activations"),
    ("int16", (), "int16"),
    ("calibration", "auto", "calibration"),
    ("bias_correction", None, "bias_correction"),
    ("sparsify", False, "sparsify"),
    ("target", None, "target"),
    ("metric", None, "metric"),
    ("target_metric", None, "target_metric"),
    ("budget", None, "budget"),
)


def weight_options_problem(options: WeightOptions) -> str | None:
    """Why the mode, weight width, block size and minimum element count of `QuantizeOptions`
    do not go together (None: they do)."""
    mode, bits, block = options.mode, options.weight_bits, options.block_size
    if mode not in MODES:
        return f"mode must be one of {', '.join(MODES)}, not {mode!r}"
    if isinstance(bits, bool) or not isinstance(bits, int) or bits not in WEIGHT_BITS:
        return f"weight_bits must be 8 or 4, not {bits!r}"
    if mode == FLOAT16 and bits != 8:
        return "the float16 mode stores float16 weights: weight_bits does not apply"
    if block is not None:
        if isinstance(block, bool) or not isinstance(block, int):
            return f"block_size must be a whole number, not {block!r}"
        if bits != 4 or mode != DYNAMIC:
            return (
                "block_size asks for blockwise int4 weights, which only hybrid kernels read: "
                "use mode dynamic with weight_bits 4"
            )
        problem = check_block_size(block)
        if problem:
            return problem
    minimum = options.min_weight_elements
    if minimum is not None and (
        isinstance(minimum, bool) or not isinstance(minimum, int) or minimum < 0
    ):
        return f"min_weight_elements must be a whole number >= 0, not {minimum!r}"
    if minimum is not None and mode not in (DYNAMIC, WEIGHTS):
        return "min_weight_elements applies to the dynamic and weights modes"
    if mode == FULL:
        return None
    for name, unset, option in _FULL_ONLY:
        if getattr(options, name) != unset:
            return f"{option} applies to mode full (int8 activations), not to mode {mode}"
    return None


def output_suffix(options: WeightOptions) -> str:
    """What the default output name adds to the input's stem: int8, or the weight mode (with
    int4 when its weights are)."""
    if options.mode == FULL:
        return "int8"
    return options.mode + ("_int4" if options.weight_bits == 4 else "")


def weight_mode_job(job: object) -> bool:
    """Whether a job (jobs.py: its `options`, `statistics`, `layer_errors`, `analyze`) asks for
    a weight mode; UsageError naming what it was given that a weight mode (no calibration,
    float activations) has no use for."""
    mode = job.options.mode
    if mode == FULL:
        return False
    asked = [
        name for name in ("statistics", "layer_errors", "analyze") if getattr(job, name, False)
    ]
    if asked:
        raise UsageError(
            f"{', '.join(asked)} applies to mode full (int8 activations), not to mode {mode}"
        )
    return True


def weight_search_failure(search: WeightSearchResult) -> str:
    """Why a weight mode's target search fell short: the ops whose weights hold the most noise."""
    places = ", ".join(f"{n.op_type} {n.tensor} ({n.chosen})" for n in search.noisiest)
    return f"worst output {min(search.output_sqnr):.1f} dB; most of the noise comes from {places}"
