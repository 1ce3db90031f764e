"""The quantization pipeline: prepare, calibrate, choose, plan from the spec, rewrite.

1. Prepare: fold constant operators, rewrite ops into forms with integer kernels.
2. Calibrate: one pass collecting histograms and layer input means, with a selection fold and
   an estimate fold of held-out samples (or a held-out dataset as the estimate's samples) and
   the float model's outputs on them (collect.py).
3. Choose the calibration method (`auto`: the one whose plan, fitted without the folds, scores
   best on the selection fold) and, with a target, the layers that need more precision.
4. Plan every subgraph on all calibration samples: decisions, parameters, integer weights with
   bias correction and optional rounding optimisation.
5. Rewrite the graph.
6. Estimate: the plan fitted without the estimate's samples, with the same choices, run in
   LiteRT on them; a target holds only when this estimate confirms it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache, partial

import numpy as np

from qtool.calibrate import Dataset
from qtool.calibrate.collect import (
    FIT,
    MIN_SAMPLES_FOR_HOLDOUT,
    Collected,
    collect,
    fold_of,
    from_statistics,
    selected,
)
from qtool.calibrate.ranges import parse_method
from qtool.calibrate.statistics import (
    CalibrationStatistics,
    model_fingerprint,
)
from qtool.errors import DataError, UsageError
from qtool.heap import release_free_heap
from qtool.model import Model, model_to_bytes
from qtool.model.calls import called_subgraphs
from qtool.model.sparsity import compact_sparsity, sparsity_nbytes
from qtool.model.temporary import TemporaryModelFile, model_for_litert
from qtool.prepare import FloatModel, prepare_float_model
from qtool.prepare.equalize import SAMPLES as EQUALIZE_SAMPLES
from qtool.prepare.equalize import EqualizedPair, equalize
from qtool.prepare.fold import StoredForm
from qtool.quantize.auto import AUTO, CandidateScore, choose_recipe, start_candidates
from qtool.quantize.decisions import FLOAT, unmatched_pattern
from qtool.quantize.diagnosis import Diagnosis, diagnose_calibrated, layer_sqnr
from qtool.quantize.estimate import estimate_accuracy, start_estimate
from qtool.quantize.float_subgraphs import computes_in_float, float_body_plans, subgraph_warnings
from qtool.quantize.litert_worker import start_children, submit_model
from qtool.quantize.options import QuantizeOptions
from qtool.quantize.plan import Plan
from qtool.quantize.planner import Planner, Recipe
from qtool.quantize.remedies import Remedy
from qtool.quantize.result import FloatOp, QuantizeResult
from qtool.quantize.rewrite import rewritten
from qtool.quantize.search import search, weight_limited_rounding
from qtool.quantize.search_limits import SearchSpace, search_limits
from qtool.quantize.sensitivity import MAX_SAMPLES
from qtool.quantize.targeting import plan_for_target
from qtool.quantize.user_metric import as_metric
from qtool.quantize.weight_plan import FULL, WeightSettings
from qtool.quantize.weight_quantizer import WeightRun, quantize_weight_mode
from qtool.runtime.litert import litert_available
from qtool.runtime.parallel import single_threaded_blas
from qtool.runtime.state import keeps_state
from qtool.targets import load_target
from qtool.weight_spec import default_min_weight_elements


def _as_datasets(data: Dataset | Mapping[int, Dataset] | None) -> dict[int, Dataset]:
    if data is None:
        return {}
    return {0: data} if isinstance(data, Dataset) else dict(data)


@dataclass
class Calibrated:
    """A model prepared and calibrated, with its calibration method chosen: what quantization
    and analysis start from."""

    prepared: FloatModel
    collected: dict[int, Collected]
    statistics: CalibrationStatistics
    planners: dict[int, Planner]
    start: Recipe  # the recipe before any per-place remedy
    method_scores: dict[str, CandidateScore]
    datasets: dict[int, Dataset]
    equalized: list[EqualizedPair] = field(default_factory=list)


def calibrate_loaded(
    model: Model,
    data: Dataset | Mapping[int, Dataset] | None,
    options: QuantizeOptions = QuantizeOptions(),
    progress: Callable[[int], None] | None = None,
    holdout: Dataset | Mapping[int, Dataset] | None = None,
    statistics: CalibrationStatistics | None = None,
) -> Calibrated:
    """Prepare `model`, calibrate every subgraph with data (or take `statistics` gathered
    earlier), and choose the calibration method."""
    datasets = _as_datasets(data)
    holdouts = _as_datasets(holdout)
    precision = options.precision()
    metric = as_metric(options.metric)  # the user's module imports before the long work
    prepared = prepare_float_model(model)
    entries = sorted(statistics.subgraphs) if statistics is not None else sorted(datasets)
    if not any(computes_in_float(prepared.model, s) for s in entries):
        raise UsageError(
            "the model is already quantized: no operator computes in float (qtool check audits it)"
        )
    _check_patterns(prepared, options)
    equalized = []
    if options.equalize and statistics is None and 0 in datasets:
        equalized = _equalize(prepared, datasets[0])

    def planner(s: int) -> Planner:
        return Planner(
            prepared.model,
            precision,
            options.keep_float,
            prepared.source_index[s],
            s,
            input_types=prepared.input_types(s),
            callees=callees,
            metric=metric,
        )

    callees: dict[int, Planner] = {}  # of the subgraphs control flow runs, shared
    called = {b for s in entries for b in called_subgraphs(prepared.model, s)}
    callees.update({b: planner(b) for b in sorted(called)})
    planners = {s: planner(s) for s in entries}
    if statistics is not None:
        _check_fingerprint(statistics, prepared.model)
        collected = {
            s: from_statistics(prepared.model, statistics.subgraphs[s], s, holdouts.get(s))
            for s in entries
        }
    else:
        # The auto choice's candidates run in LiteRT as soon as the fitting fold is calibrated,
        # beside the calibration of the folds.
        on_fit = float_outputs = None
        if litert_available() and 0 in datasets:
            # The children also compute the folds' float outputs, which leaves this process
            # only the folds' observation (in batches).
            start_children()
            float_outputs = partial(
                _outputs_in_children,
                prepared.model,
                cache(partial(model_for_litert, prepared.model)),
            )
            if options.calibration == AUTO:
                on_fit = partial(
                    start_candidates, planners[0], bias_correction=options.bias_correction
                )
        collected = {
            s: collect(
                prepared.model,
                dataset,
                engine=options.engine,
                subgraph_index=s,
                progress=progress,
                holdout=holdouts.get(s),
                on_fit=on_fit if s == 0 else None,
                float_outputs=float_outputs if s == 0 else None,
            )
            for s, dataset in sorted(datasets.items())
        }
        statistics = CalibrationStatistics(
            model_fingerprint(prepared.model), {s: c.statistics for s, c in collected.items()}
        )
        release_free_heap()  # LiteRT's interpreters are gone: XNNPACK's packed weights too
    for s, c in collected.items():
        planners[s].calibration = c.fit_data  # samples for the second moments of rounding
        planners[s].engine = c.calibration.engine
        for b in called_subgraphs(prepared.model, s):  # what observed the subgraphs it runs
            callees[b].engine = c.calibration.engine
    if options.calibration == AUTO:
        start, scores = choose_recipe(prepared.model, collected, planners, options.bias_correction)
    else:
        correct = True if options.bias_correction is None else options.bias_correction
        start, scores = Recipe(parse_method(options.calibration), correct), {}
    return Calibrated(prepared, collected, statistics, planners, start, scores, datasets, equalized)


def _equalize(prepared: FloatModel, dataset: Dataset) -> list[EqualizedPair]:
    """Equalize subgraph 0 of the prepared model on the first few samples of the fitting
    fold (the samples the ranges are fitted on; no choice looks at the other folds)."""
    if keeps_state(prepared.model, 0):
        return []  # a sequence's samples are not independent inputs
    samples = selected(dataset, lambda i: fold_of(i) == FIT, EQUALIZE_SAMPLES)
    chunks = list(samples.iter_chunks(EQUALIZE_SAMPLES))
    if not chunks:
        return []
    arrays = [np.concatenate(parts) for parts in zip(*chunks, strict=True)]
    return equalize(prepared.model, 0, arrays, prepared.source_index[0])


def _check_patterns(prepared: FloatModel, options: QuantizeOptions) -> None:
    """A keep-float or int16 pattern that matches no operator is a mistake worth a stop."""
    types = [prepared.input_types(s) for s in range(len(prepared.model.subgraphs))]
    for kind, given in (("keep-float", options.keep_float), ("int16", options.int16)):
        pattern = unmatched_pattern(prepared.model, types, given)
        if pattern is not None:
            known = sorted({t for per_subgraph in types for t in per_subgraph})
            raise UsageError(
                f"{kind} pattern {pattern!r} matches no operator: neither an op type of the "
                f"model ({', '.join(known)}) nor the name of a tensor an op produces"
            )


def _outputs_in_children(
    model: Model, blob: Callable[[], bytes | TemporaryModelFile], inputs: list
) -> Callable[[], list | None]:
    """What waits for `model`'s outputs on `inputs`, which LiteRT's children compute meanwhile
    (`collect`'s `float_outputs`); `blob`: the model as LiteRT gets it (`model_for_litert`),
    made once for both folds."""
    return submit_model(model, inputs, blob()).result


def _check_fingerprint(statistics: CalibrationStatistics, model: Model) -> None:
    if statistics.fingerprint != model_fingerprint(model):
        raise DataError(
            "the calibration statistics were gathered on another model (or at other input "
            "shapes, or by another qtool version's preparation of it)"
        )


def analyze_loaded(
    model: Model,
    data: Dataset | Mapping[int, Dataset],
    options: QuantizeOptions = QuantizeOptions(),
    progress: Callable[[int], None] | None = None,
    holdout: Dataset | Mapping[int, Dataset] | None = None,
) -> Diagnosis:
    """Where the error of the plan `quantize_loaded` would make comes from (`qtool analyze`)."""
    return diagnose_calibrated(calibrate_loaded(model, data, options, progress, holdout))


@single_threaded_blas()  # why: the docstring
def quantize_loaded(
    model: Model,
    data: Dataset | Mapping[int, Dataset] | None,
    options: QuantizeOptions = QuantizeOptions(),
    progress: Callable[[int], None] | None = None,
    holdout: Dataset | Mapping[int, Dataset] | None = None,
    analyze: bool = False,
    statistics: CalibrationStatistics | None = None,
    measure_layer_sqnr: bool = False,
    search_progress: Callable[[str], None] | None = None,
) -> QuantizeResult:
    """Quantize every subgraph that has calibration data; `model` is left unchanged.

    `data` is one Dataset for subgraph 0, or a Dataset per subgraph index (one per signature of
    a multi-signature model); `holdout`, the same way, held-out samples that only measure
    accuracy. Subgraphs without data (e.g. control-flow bodies) stay float and are named in the
    warnings. `measure_layer_sqnr` fills `layer_sqnr` (one more simulated run, for pictures);
    `search_progress` gets a line per candidate of a target search.

    numpy's BLAS runs on one thread meanwhile: LiteRT, its children and the observers take the
    cores, and OpenBLAS's idle threads spin after each product (12% of the process tree's CPU
    on pose_landmark_full, measured with perf).
    """
    if options.mode != FULL:
        return quantize_weight_mode(
            model, _as_datasets(data), weight_run(options), _as_datasets(holdout)
        )
    began = time.monotonic()
    calibrated = calibrate_loaded(model, data, options, progress, holdout, statistics)
    diagnosis = diagnose_calibrated(calibrated) if analyze else None
    prepared, collected, planners = calibrated.prepared, calibrated.collected, calibrated.planners
    precision = options.precision()
    start, method = calibrated.start, calibrated.start.method
    recipes = {s: start for s in collected}
    rounded: dict[int, list[Remedy]] = {}
    if options.optimize_rounding:
        for s, found in collected.items():
            if found.selection is not None:
                recipes[s], rounded[s] = weight_limited_rounding(
                    planners[s], found.fit, recipes[s], found.selection
                )
    searches = {}
    target = options.accuracy_target
    forms = _stored_forms(prepared, options.target)
    sparsify = options.sparsify and forms is prepared.stored_forms
    if target is not None:
        for s, found in collected.items():
            if found.selection is None:
                raise UsageError(
                    "a target needs held-out samples: give more calibration samples "
                    f"(at least {MIN_SAMPLES_FOR_HOLDOUT}) or a held-out dataset"
                )
            limits = search_limits(
                SearchSpace(model, prepared, planners, collected, recipes, forms, sparsify),
                s,
                options,
                began,
                search_progress,
            )
            searches[s] = search(
                planners[s],
                found.fit,
                recipes[s],
                found.selection,
                target,
                options.allow_float,
                limits=limits,
            )
            recipes[s] = searches[s].recipe
    if options.target is not None:
        statistics_of = {s: found.statistics for s, found in collected.items()}
        recipes = plan_for_target(
            prepared.model,
            planners,
            statistics_of,
            recipes,
            precision.specs,
            options.io,
            options.target,
        )
    estimating = start_estimate(collected, planners, recipes)
    entry_plans = {
        s: planners[s].plan(found.statistics, recipes[s]) for s, found in collected.items()
    }
    # Every planned subgraph: the entry points and what their control flow runs.
    plans = {p.subgraph_index: p for plan in entry_plans.values() for p in plan.with_bodies()}
    work, notes = rewritten(
        prepared.model, entry_plans, precision.specs, options.io, forms, sparsify
    )
    if forms is not prepared.stored_forms:
        notes.warnings += _densified(prepared, plans, options.target)
    float_bodies = float_body_plans(prepared.model, prepared.source_index, plans, notes)
    plans.update(float_bodies)
    float_ops = [  # named as in the input model (a SQUARE kept float, not the MUL it became)
        FloatOp(s, decision.source_index, op_type, decision.reason or "")
        for s, plan in plans.items()
        for op_type, decision in zip(prepared.input_types(s), plan.decisions, strict=True)
        if decision.mode == FLOAT
    ]
    estimate = estimate_accuracy(collected, planners, recipes, precision.specs, estimating)
    release_free_heap()  # the simulation check's dequantized weights (a model's size) too
    layers = {
        s: _layer_sqnr(planners[s], found, recipes[s])
        for s, found in collected.items()
        if measure_layer_sqnr and found.estimate is not None
    }
    baseline_size = None
    if searches:  # what the remedies cost: the size of the model without them
        plain = {
            s: planners[s].plan(
                found.statistics,
                start.with_changes(method=method, device_float=recipes[s].device_float),
            )
            for s, found in collected.items()
        }
        baseline_size = len(
            model_to_bytes(
                rewritten(prepared.model, plain, precision.specs, options.io, forms, sparsify)[0]
            )
        )
    return QuantizeResult(
        model=work,
        float_model=prepared.model,
        calibrations={s: c.calibration for s, c in collected.items()},
        plans=plans,
        folded=prepared.folded,
        equalized=calibrated.equalized,
        rewritten=prepared.rewritten,
        float_ops=float_ops,
        notes=notes,
        statistics=calibrated.statistics,
        method=str(method),
        method_scores={m: c.worst_db for m, c in calibrated.method_scores.items()},
        method_metrics={
            m: c.metric for m, c in calibrated.method_scores.items() if c.metric is not None
        },
        recipes=recipes,
        rounded=rounded,
        searches=searches,
        baseline_size=baseline_size,
        diagnosis=diagnosis,
        accuracy=estimate.outputs,
        accuracy_source=estimate.source,
        metric=estimate.metric,
        estimate_independent=estimate.independent,
        target_confirmed=estimate.confirms(target, searches),
        simulation_checks=estimate.checks,
        warnings=subgraph_warnings(
            work, plans, float_bodies, any(d.synthetic for d in calibrated.datasets.values()), notes
        )
        + estimate.warnings(),
        layer_sqnr=layers,
    )


def weight_run(options: QuantizeOptions, seed: int = 0) -> WeightRun:
    """What a weight mode is asked by the options."""
    settings = WeightSettings(
        options.mode,
        options.weight_bits,
        options.block_size,
        options.min_weight_elements
        if options.min_weight_elements is not None
        else default_min_weight_elements(),
        options.per_tensor_fc,
        options.keep_float,
    )
    return WeightRun(
        settings, options.target_sqnr, options.allow_float, seed, options.optimize_rounding
    )


def _stored_forms(prepared: FloatModel, target: str | None) -> dict[int, dict[str, StoredForm]]:
    """How the written model stores folded weights: as the source did (float16, sparse), except
    on a device whose profile lacks the ops that expand them (DENSIFY, DEQUANTIZE), where they
    are written plain."""
    if target is not None:
        runs = load_target(target).ops
        if not {"DENSIFY", "DEQUANTIZE"} <= set(runs):
            return {}
    return prepared.stored_forms


def _densified(prepared: FloatModel, plans: Mapping[int, Plan], target: str) -> list[str]:
    """What writing the source's sparse weights dense cost, where the device cannot expand
    them (one warning, or none when nothing was sparse)."""
    extra = count = 0
    for s, plan in plans.items():
        tensors = prepared.model.subgraphs[s].tensors
        ops = prepared.model.subgraphs[s].operators
        for index, layer in plan.weights.items():
            name = tensors[ops[index].inputs[layer.weight_position]].name
            form = prepared.stored_forms.get(s, {}).get(name)
            if form is None or form.sparsity is None:
                continue
            stored, sparsity = compact_sparsity(layer.values)
            extra += max(layer.values.nbytes - stored.nbytes - sparsity_nbytes(sparsity), 0)
            count += 1
    if not count:
        return []
    return [
        f"{count} weight tensor(s) stored sparse in the source are written dense: the {target} "
        f"profile runs no DENSIFY ({extra:+,} bytes)"
    ]


def _layer_sqnr(planner: Planner, found: Collected, recipe: Recipe) -> dict[int, float]:
    """Each quantized activation's SQNR along the plan whose accuracy is reported, on the
    first few of the estimate's samples (a picture of where the error builds up needs no
    more)."""
    plan = planner.plan(found.estimate_fit, recipe)
    inputs = [x[:MAX_SAMPLES] for x in found.estimate.inputs]
    return layer_sqnr(planner.model, plan, inputs)
