"""The weight modes: `--mode dynamic`, `--mode weights` and `--mode float16`, from the .tflite
alone and without calibration.

1. Prepare the float model (constants folded: float16 and sparse weights become float32,
   remembered as the source stored them).
2. Give every op with weights a ladder of forms (`weight_plan.py`), in every subgraph (control-
   flow bodies too: nothing needs calibrating).
3. With `--target-sqnr`, move ops up their ladders until the outputs reach it
   (`weight_search.py`), judged on samples the search did not see.
4. Rewrite: narrow weights stored as the forms say (`weight_store.py`), other constants as the
   source stored them.
5. Measure each output's SQNR against the float model in LiteRT, on the held-out samples, the
   data, or synthetic samples (with a warning).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from qtool.calibrate import Dataset, model_inputs, synthetic_dataset
from qtool.calibrate.collect import first_samples, fold_inputs
from qtool.calibrate.statistics import CalibrationStatistics, model_fingerprint
from qtool.errors import DataError, QtoolError
from qtool.model import Model
from qtool.model.edit import clone_model
from qtool.numerics import sqnr_db
from qtool.prepare import FloatModel, prepare_float_model
from qtool.quantize.accuracy import LITERT, SIMULATION, OutputAccuracy, measure_outputs
from qtool.quantize.decisions import FLOAT, OpDecision
from qtool.quantize.litert_worker import submit_model
from qtool.quantize.plan import Plan
from qtool.quantize.rewrite import RewriteNotes, rewritten
from qtool.quantize.weight_plan import (
    OpWeights,
    WeightPlan,
    WeightSettings,
    plan_weights,
    stored_values,
)
from qtool.quantize.weight_rounding import LayerMoments, rounded
from qtool.quantize.weight_store import FLOAT16, NarrowWeight
from qtool.runtime import Engine
from qtool.runtime.litert import litert_available
from qtool.spec import QUANTIZED, load_spec

SYNTHETIC_SAMPLES = 64
SYNTHETIC_WARNING = (
    "accuracy measured on synthetic random data: it does not reflect real inputs (give data or "
    "held-out samples)"
)


@dataclass
class Samples:
    """The inputs of subgraph 0 the weight modes use: those a target search fits on (empty
    without a target) and those the reported accuracy is measured on, with where they come
    from."""

    fitting: list[np.ndarray]
    measured: list[np.ndarray]
    source: (
        str  # "held-out data", "the data", "the data held out (the rest fitted)", "synthetic data"
    )
    synthetic: bool

    @property
    def count(self) -> int:
        """The number of samples the accuracy is measured on."""
        return int(self.measured[0].shape[0]) if self.measured else 0


def measurement_samples(
    model: Model,
    data: Mapping[int, Dataset],
    holdout: Mapping[int, Dataset],
    search: bool,
    seed: int = 0,
) -> Samples:
    """Samples for subgraph 0: a target search fits on data outside the evaluation fold and is
    judged on the held-out samples or the fold; without a search the accuracy is measured on the
    held-out samples, else the data (its first 128 samples), else synthetic samples."""
    dataset = data.get(0)
    synthetic = dataset is None and 0 not in holdout
    if synthetic:
        dataset = synthetic_dataset(model_inputs(model, 0), SYNTHETIC_SAMPLES, seed)
    fitting: list[np.ndarray] = []
    if 0 in holdout:
        measured = first_samples(holdout[0], 1 << 30)
        if search and dataset is not None:
            fitting = first_samples(dataset)
        source = "held-out data"
    elif search:
        fitting, measured = fold_inputs(dataset)
        source = "synthetic data" if dataset.synthetic else "the data held out (the rest fitted)"
    else:
        measured = first_samples(dataset)
        source = "synthetic data" if dataset.synthetic else "the data"
    if not measured or not measured[0].shape[0]:
        raise DataError("no samples to measure the quantized model on")
    if search and (not fitting or not fitting[0].shape[0]):
        raise DataError("a target SQNR needs samples to fit on besides those it is judged on")
    return Samples(fitting, measured, source, synthetic or bool(dataset and dataset.synthetic))


class WeightModel:
    """The prepared float model, its weight plans, and the model they write: each op on its
    current rung. Where the second moments of an op's inputs are known (`moments`, by
    (subgraph, op)), its integer weights are rounded to minimise its output error
    (`weight_rounding.py`)."""

    def __init__(
        self,
        prepared: FloatModel,
        plans: Mapping[int, WeightPlan],
        moments: Mapping[tuple[int, int], LayerMoments] | None = None,
    ) -> None:
        self.prepared = prepared
        self.plans = dict(plans)
        self.moments = dict(moments or {})
        self._values: dict[tuple, NarrowWeight] = {}

    @property
    def ops(self) -> list[OpWeights]:
        """Every op with weights, over all subgraphs."""
        return [op for plan in self.plans.values() for op in plan.ops]

    def int_plans(self) -> dict[int, Plan]:
        """The rewriter's plans: every operator float, weights narrow as their rungs say."""
        model = self.prepared.model
        found = {}
        for s, plan in self.plans.items():
            subgraph = model.subgraphs[s]
            decisions = [
                OpDecision(FLOAT, None, self.prepared.source_index[s][i])
                for i in range(len(subgraph.operators))
            ]
            narrow = {}
            for ops in plan.ops:
                if ops.form is None:
                    continue
                for position in ops.positions:
                    narrow[(ops.index, position)] = self._narrow(ops, position)
            found[s] = Plan(s, decisions, params={}, ranges={}, narrow=narrow)
        return found

    def _narrow(self, ops: OpWeights, position: int) -> NarrowWeight:
        key = (ops.subgraph, ops.index, position, ops.form)
        if key not in self._values:
            model = self.prepared.model
            subgraph = model.subgraphs[ops.subgraph]
            op = subgraph.operators[ops.index]
            values = stored_values(model, subgraph, op, ops, position)
            moments = self.moments.get((ops.subgraph, ops.index))
            if values is not None and moments is not None:
                values = rounded(model, subgraph, op, position, values, moments, ops.form.bits)
            self._values[key] = NarrowWeight(ops.form, ops.op_type, values)
        return self._values[key]

    def write(self) -> tuple[Model, RewriteNotes]:
        """The model of the current rungs, unused parts dropped."""
        specs = {mode: load_spec((), str(mode)) for mode in QUANTIZED}
        return rewritten(
            self.prepared.model,
            self.int_plans(),
            specs,
            stored_forms=self.prepared.stored_forms,
        )

    def simulated(self) -> Model:
        """The float model with every narrow weight replaced by the values it stands for: what
        the written model computes, but the hybrid kernels' quantization of their inputs."""
        work = clone_model(self.prepared.model)
        for s, plan in self.int_plans().items():
            subgraph = work.subgraphs[s]
            for (i, position), narrow in plan.narrow.items():
                t = subgraph.operators[i].inputs[position]
                if narrow.form.kind == FLOAT16:
                    real = work.tensor_data(subgraph.tensors[t]).astype(np.float16)
                else:
                    real = narrow.values.real()
                work.set_tensor_data(subgraph, t, np.asarray(real, np.float32))
        return work


def model_outputs(model: Model, inputs: Sequence[np.ndarray]) -> tuple[list[np.ndarray], str]:
    """Subgraph 0's outputs on `inputs` (samples stacked): run by LiteRT (in child processes)
    where it is installed and runs the model, else by the numpy engine; and which ran it."""
    if litert_available():
        found = submit_model(model, list(inputs)).result()
        if found is not None:
            return found, LITERT
    return _engine_outputs(model, inputs), SIMULATION


def _engine_outputs(model: Model, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The numpy engine's outputs; a DataError where it cannot run the model on `inputs`
    either (samples of another shape than the model computes on, say)."""
    try:
        return Engine(model).run(list(inputs))
    except (ValueError, IndexError, QtoolError) as error:
        raise DataError(
            f"neither LiteRT nor qtool's engine runs the model on these samples ({error})"
        ) from None


def written_outputs(
    weights: WeightModel, written: Model, inputs: Sequence[np.ndarray]
) -> tuple[list[np.ndarray], str]:
    """The written model's outputs, run by LiteRT; where it cannot be, the float model on the
    weights the narrow ones stand for (the numpy engine has no hybrid kernels)."""
    if litert_available():
        found = submit_model(written, list(inputs)).result()
        if found is not None:
            return found, LITERT
    return _engine_outputs(weights.simulated(), inputs), SIMULATION


def output_sqnr(reference: Sequence[np.ndarray], found: Sequence[np.ndarray]) -> list[float]:
    """Each output's SQNR (dB) against its reference."""
    return [
        sqnr_db(want, np.reshape(got, np.shape(want)))
        for want, got in zip(reference, found, strict=True)
    ]


def measured_accuracy(
    weights: WeightModel, written: Model, samples: Samples
) -> tuple[list[OutputAccuracy], str]:
    """Each output of subgraph 0 against the float model on the measured samples, and how it
    was measured (as the report says it); nothing where the model does not run on synthetic
    samples (the caller warns)."""
    try:
        reference, _ = model_outputs(weights.prepared.model, samples.measured)
        found, engine = written_outputs(weights, written, samples.measured)
    except DataError:
        if samples.synthetic:
            return [], ""
        raise
    shaped = [np.reshape(got, np.shape(want)) for want, got in zip(reference, found, strict=True)]
    # Each output's record on the float model's graph (its kind, fitting SQNR): the written
    # model keeps its outputs' names and order.
    accuracy = measure_outputs(weights.prepared.model, 0, reference, shaped, engine)
    how = "measured in LiteRT" if engine == LITERT else "simulated (LiteRT could not run it)"
    return accuracy, f"{how} on {samples.count} samples of {samples.source}"


def empty_statistics(prepared: FloatModel) -> CalibrationStatistics:
    """The statistics of a quantization that calibrated nothing."""
    return CalibrationStatistics(model_fingerprint(prepared.model), {})


def weight_plans(model: Model, settings: WeightSettings) -> tuple[FloatModel, dict]:
    """The prepared model and the weight plan of every subgraph."""
    prepared = prepare_float_model(model)
    plans = {
        s: plan_weights(prepared.model, s, prepared.source_index[s], settings)
        for s in range(len(prepared.model.subgraphs))
    }
    return prepared, plans
