"""What a quantization produced and decided: `QuantizeResult`, for the report and the caller, in
every mode (the full int8 pipeline, `quantizer.py`, and the weight modes, `weight_quantizer.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from qtool.calibrate import CalibrationResult
from qtool.calibrate.statistics import CalibrationStatistics
from qtool.model import Model
from qtool.prepare.canonical import RewrittenOp
from qtool.prepare.equalize import EqualizedPair
from qtool.prepare.fold import FoldedOp
from qtool.quantize.accuracy import OutputAccuracy
from qtool.quantize.agreement import SimulationCheck
from qtool.quantize.diagnosis import Diagnosis
from qtool.quantize.plan import Plan
from qtool.quantize.planner import Recipe
from qtool.quantize.remedies import Remedy
from qtool.quantize.rewrite import RewriteNotes
from qtool.quantize.search import SearchResult
from qtool.quantize.weight_plan import WeightPlan
from qtool.quantize.weight_search import WeightSearchResult


@dataclass
class FloatOp:
    """An operator the quantized model keeps in float, and why (the planner's reason; may be
    empty)."""

    subgraph: int
    index: int | None  # operator index in the input model
    op_type: str
    reason: str


@dataclass
class QuantizeResult:
    """Everything a quantization produced and decided, for the report and the caller; keyed by
    subgraph index where per subgraph.

    Attributes:
        plans: the plan each calibrated subgraph was rewritten from.
        folded: the constant operators folded before calibration.
        equalized: the activations whose narrow channels were scaled up (`equalize`).
        float_ops: the operators left in float, and why.
        notes: what the rewriter noted (warnings, weight scales enlarged for the bias).
        statistics: the calibration statistics the plans were fitted on (what `qtool calibrate`
            saves).
        accuracy: each output's record on the estimate's samples (held-out data, or the estimate
            fold no choice saw; in the weight modes, samples no choice saw), measured in LiteRT
            where it runs.
        accuracy_source: how and on which samples `accuracy` was measured, as text ("" when it was
            not).
        metric: per subgraph, the user's metric on the estimate's samples.
        target_confirmed: per subgraph with a target: whether the estimate meets it too (a
            target is reached only when the search and the estimate both say so).
        simulation_checks: the simulation of the estimated plan against LiteRT on the same
            samples, per output (what the analysis and the search's ranking rely on).
        warnings: what the user should know about the result (synthetic data, uncalibrated
            subgraphs, ...).
    """

    model: Model  # the quantized model
    float_model: Model  # the float model after preparation (what was calibrated)
    calibrations: dict[int, CalibrationResult]  # per quantized subgraph
    plans: dict[int, Plan]
    folded: list[FoldedOp]
    float_ops: list[FloatOp]
    notes: RewriteNotes
    rewritten: dict[tuple[int, int], RewrittenOp]  # (subgraph, input-model op) -> rewrite
    statistics: CalibrationStatistics
    method: str  # the calibration method used
    method_scores: dict[str, float] = field(default_factory=dict)  # auto: worst fitting SQNR
    method_metrics: dict[str, float] = field(default_factory=dict)  # auto: the user's metric
    recipes: dict[int, Recipe] = field(default_factory=dict)  # the choices, per subgraph
    rounded: dict[int, list[Remedy]] = field(default_factory=dict)  # optimize_rounding's layers
    # With a target: the full pipeline's SearchResult, a weight mode's WeightSearchResult.
    searches: dict[int, SearchResult | WeightSearchResult] = field(default_factory=dict)
    baseline_size: int | None = None  # with a target: bytes of the model without remedies
    diagnosis: Diagnosis | None = None  # where the error comes from, when asked for
    accuracy: list[OutputAccuracy] = field(default_factory=list)
    accuracy_source: str = ""
    metric: dict[int, float] = field(default_factory=dict)
    estimate_independent: bool | None = None  # whether no choice saw the estimate's samples
    target_confirmed: dict[int, bool] = field(default_factory=dict)
    simulation_checks: list[SimulationCheck] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # When asked for: per subgraph, each quantized activation's SQNR (dB) against the float
    # tensor along the simulated model, in graph order, on held-out samples.
    layer_sqnr: dict[int, dict[int, float]] = field(default_factory=dict)
    mode: str = "full"  # full, or a weight mode: dynamic, weights, float16
    # The weight modes: every op with weights, its ladder and the form it got, per subgraph.
    weight_plans: dict[int, WeightPlan] = field(default_factory=dict)
    synthetic: bool = False  # the weight modes: accuracy measured on synthetic samples
    equalized: list[EqualizedPair] = field(default_factory=list)
