"""Every choice of a quantization (the options of `qtool quantize`), checked when made."""

from __future__ import annotations

import math
from dataclasses import dataclass

from qtool.arguments import choice, flag, patterns
from qtool.calibrate import ENGINES
from qtool.calibrate.ranges import parse_method
from qtool.errors import UsageError
from qtool.quantize.auto import AUTO
from qtool.quantize.decisions import INT8, INT16, Precision
from qtool.quantize.rewrite import IO_TYPES
from qtool.quantize.search import Target
from qtool.quantize.user_metric import MetricFunction
from qtool.quantize.weight_plan import FULL
from qtool.quantize.weight_quantizer import weight_options_problem
from qtool.spec import QUANTIZED, load_spec, spec_profiles
from qtool.targets import load_target, target_names

IO_MODES = tuple(mode.value for mode in IO_TYPES)  # what a user may ask for at the boundary
ACTIVATION_TYPES = tuple(mode.value for mode in QUANTIZED)  # what `activations` may be
DEFAULT_CALIBRATION = AUTO


@dataclass(frozen=True)
class QuantizeOptions:
    """Every choice of a quantization (the options of `qtool quantize`); invalid values raise
    UsageError when the options are made.

    Attributes:
        engine: what calibration runs the float model on: auto, numpy or litert.
    """

    io: str = "float"  # model boundary: float, int8 or uint8
    per_tensor_fc: bool = False  # per-tensor FULLY_CONNECTED weights (older TFLM, NNAPI)
    keep_float: tuple[str, ...] = ()  # op types or tensor-name globs kept in float on purpose
    engine: str = "auto"
    calibration: str = DEFAULT_CALIBRATION  # a method of qtool.calibrate.ranges, or "auto"
    bias_correction: bool | None = None  # None: on, or chosen with the method under auto
    activations: str = INT8  # int8, or int16 for the 16x8 scheme on every op that has it
    int16: tuple[str, ...] = ()  # op-type or tensor-name globs run in int16x8
    optimize_rounding: bool = False  # rounding optimisation for the weight-limited layers
    # Scale up the narrow channels of activations that feed a weighted layer, before
    # calibration (qtool/prepare/equalize.py); needs calibration data, not saved statistics.
    equalize: bool = True
    target_sqnr: float | None = None  # dB every output must reach on held-out samples
    allow_float: bool = False  # the target search may keep operators in float
    # A device profile (schemas/targets/): plan with its spec profiles, and keep in float the
    # ops the device runs only in float (qtool/quantize/targeting.py).
    target: str | None = None
    # Also store dense weights sparse (int8 behind a DENSIFY) where that is smaller.
    sparsify: bool = False
    # full int8, or a weight mode (weight_quantizer.py): dynamic (hybrid kernels), weights
    # (weight-only, DEQUANTIZE in front of float ops) or float16; the width of integer weights,
    # int4 blocks, and the fewest weights an op needs to get integer ones (None: 1024).
    mode: str = FULL
    weight_bits: int = 8
    block_size: int | None = None
    min_weight_elements: int | None = None
    # The user's measure of the outputs (`module:function` or a callable, user_metric.py):
    # reported, maximised by the auto choice, and with `target_metric` a target.
    metric: str | MetricFunction | None = None
    target_metric: float | None = None  # the value `metric` must reach on held-out samples
    # Seconds a target search may take (None: BUDGET_FACTOR times what quantizing took before
    # it, at least MIN_BUDGET_S); past it, the best candidate measured, not reached.
    budget: float | None = None

    def __post_init__(self) -> None:
        # Python callers can pass anything: every field is checked (lists become tuples).
        choice("io", self.io, IO_MODES)
        choice("activations", self.activations, ACTIVATION_TYPES)
        choice("engine", self.engine, ENGINES)
        choice("target", self.target, target_names(), optional=True)
        for name in ("per_tensor_fc", "optimize_rounding", "allow_float", "equalize"):
            flag(name, getattr(self, name))
        if self.bias_correction is not None:
            flag("bias_correction", self.bias_correction)
        for name in ("keep_float", "int16"):
            object.__setattr__(self, name, patterns(name, getattr(self, name)))
        if not isinstance(self.calibration, str):
            raise UsageError(f"`calibration` must be a method name, not {self.calibration!r}")
        problem = weight_options_problem(self)
        if problem:
            raise UsageError(problem)
        if self.calibration != AUTO:
            parse_method(self.calibration)
        if self.target_sqnr is not None and (
            isinstance(self.target_sqnr, bool)
            or not isinstance(self.target_sqnr, int | float)
            or not math.isfinite(self.target_sqnr)
        ):
            raise UsageError(f"target_sqnr must be a finite number of dB, not {self.target_sqnr}")
        if self.budget is not None and (
            isinstance(self.budget, bool)
            or not isinstance(self.budget, int | float)
            or not self.budget > 0
            or not math.isfinite(self.budget)
        ):
            raise UsageError(f"budget must be a positive number of seconds, not {self.budget!r}")
        if self.target_metric is not None:
            if self.metric is None:
                raise UsageError("target_metric needs a metric (`metric=module:function`)")
            if not math.isfinite(self.target_metric):
                raise UsageError(f"target_metric must be a finite number, not {self.target_metric}")

    @property
    def accuracy_target(self) -> Target | None:
        """What every output must reach (`target_sqnr`, `target_metric`); None without one."""
        if self.target_sqnr is None and self.target_metric is None:
            return None
        return Target(self.target_sqnr, self.target_metric)

    @property
    def profiles(self) -> tuple[str, ...]:
        """The spec profiles the plan follows: those the options select, then the target
        device's."""
        profiles = spec_profiles(self.per_tensor_fc)
        if self.target is not None:
            profiles += tuple(
                p for p in load_target(self.target).spec_profiles if p not in profiles
            )
        return profiles

    @property
    def int16_patterns(self) -> tuple[str, ...]:
        """The patterns of the operators asked to run in int16x8 ("*" for all under
        activations=int16)."""
        return ("*",) if self.activations == INT16 else self.int16

    def precision(self) -> Precision:
        """The int8 and int16x8 spec tables under `profiles`, with the operators asked to run in
        int16x8."""
        specs = {INT8: load_spec(self.profiles), INT16: load_spec(self.profiles, INT16)}
        return Precision(specs, self.int16_patterns, self.weight_bits)
