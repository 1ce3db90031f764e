"""qtool's Python API: one call per command, models and data as Python objects.

    import qtool

    result = qtool.quantize_model("model.tflite", samples)  # arrays, dicts, a generator...
    print(result.accuracy)                                  # each output's SQNR, held out
    result.save("model_int8.tflite")                        # model and report, atomically
    report = qtool.check_model(result.model_bytes, target="ethos-u")
    stats = qtool.calibrate_model("model.tflite", shard)    # merge shards, then
    qtool.quantize_model("model.tflite", statistics=stats)

A model is a path, the bytes of a .tflite file or a loaded `Model`. Data is a path (or list
of paths) as on the command line, a numpy array (one input, samples along axis 0), a list of
arrays (one per input), a dict of arrays keyed by input name, an iterable or a generator
function of samples like TensorFlow's `representative_dataset` (each sample a list or dict of
arrays, batch dimension optional), or a `qtool.calibrate.Dataset`. For a model with several
signatures, a dict keyed by signature.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from qtool import arguments
from qtool.calibrate import ENGINES, model_inputs
from qtool.calibrate.collect import calibration_statistics
from qtool.calibrate.datasets import as_dataset, entry_data, entry_datasets
from qtool.calibrate.inputs import entry_subgraphs
from qtool.calibrate.shapes import shaped_model
from qtool.calibrate.statistics import CalibrationStatistics
from qtool.check.audit import check_loaded
from qtool.check.findings import SEVERITY_RANK, Finding
from qtool.check.gates import DEFAULT_MIN_SQNR, AccuracyGate
from qtool.errors import UsageError
from qtool.files import InputFiles, recording_inputs
from qtool.model import Model, model_to_bytes, parse_model
from qtool.model import load_model as _load_path
from qtool.quantize import QuantizeOptions, QuantizeResult
from qtool.quantize.quantizer import analyze_loaded
from qtool.quantize.weight_plan import FULL
from qtool.report.analysis_report import analysis_section
from qtool.spec import spec_profiles
from qtool.targets import target_names

ModelLike = str | os.PathLike | bytes | bytearray | memoryview | Model


InputShapes = dict[str, "tuple[int, ...] | list[int]"]


def _shaped(model: Model, data: Any, input_shapes: InputShapes | None) -> tuple[Model, Any]:
    """The model at the input shapes it runs at (`input_shapes`, else the data's where a
    dynamic input lets the data choose), and the data (a one-shot iterator whose first sample
    was read to learn the shape gets it back in front; nothing more is read)."""
    per_entry = {} if data is None else entry_data(model, data)
    peeked = False

    def data_for(s: int, specs):
        """The data of entry subgraph s read as `specs` ask."""
        nonlocal peeked
        given = per_entry.get(s)
        if isinstance(given, Iterator):
            head = list(itertools.islice(given, 1))
            per_entry[s], given, peeked = itertools.chain(head, given), head, True
        return None if given is None else as_dataset(given, specs)

    shaped = shaped_model(model, input_shapes, data_for)
    if peeked:
        entries = entry_subgraphs(model)
        data = (
            next(iter(per_entry.values()))
            if len(entries) == 1
            else {entries[s]: given for s, given in per_entry.items()}
        )
    return shaped, data


def load_model(model: ModelLike, validate: bool = True) -> Model:
    """A model from a path, the bytes of a .tflite file, or a Model (returned as is). With
    `validate`, a model that is not a valid graph raises (check audits it instead)."""
    if isinstance(model, Model):
        return model
    if isinstance(model, bytes | bytearray | memoryview):
        return parse_model(bytes(model), validate=validate)
    if isinstance(model, str | os.PathLike):
        return _load_path(model, validate=validate)
    raise UsageError(f"model must be a path, bytes or a Model, not {type(model).__name__}")


@dataclass
class Quantized:
    """The outcome of `quantize`: the quantized model, its report, and where to save it."""

    result: QuantizeResult
    report: dict[str, Any]
    model_bytes: bytes
    inputs: InputFiles | None = None  # the files quantize read: save never replaces one

    @property
    def model(self) -> Model:
        """The quantized model (the object `model_bytes` was serialised from)."""
        return self.result.model

    @property
    def accuracy(self) -> dict[str, float | None]:
        """Each output's SQNR (dB) against the float model on samples no choice saw (None:
        exact); `outputs` has each output's whole record."""
        return {row["name"]: row["sqnr_db"] for row in self.report["accuracy"]["outputs"]}

    @property
    def outputs(self) -> list[dict[str, Any]]:
        """Each output's record on samples no choice saw: kind, SQNR and fitting SQNR, their
        spread over samples, the kind's measures (the report's `accuracy.outputs`)."""
        return self.report["accuracy"]["outputs"]

    @property
    def metric(self) -> float | None:
        """The user's metric (`metric=`) on samples no choice saw (subgraph 0's); None without
        one."""
        found = self.report["accuracy"].get("metric") or []
        return found[0]["value"] if found else None

    @property
    def compliant(self) -> bool:
        """Whether the audit of the quantized model found no errors."""
        return not self.report["audit"]["errors"]

    def html(self) -> str:
        """The self-contained HTML page of this quantization (what `qtool quantize --html`
        writes); its per-layer SQNR chart needs `quantize(..., layer_sqnr=True)`."""
        from qtool.report.html import quantize_html
        from qtool.report.pictures import quantize_pictures

        return quantize_html(self.report, quantize_pictures(self.result))

    def save(
        self,
        path: str | os.PathLike,
        report: str | os.PathLike | None = None,
        *,
        html: str | os.PathLike | None = None,
        force: bool = False,
    ) -> Path:
        """Write the model and its report (`<stem>.report.json` beside it by default), and the
        HTML page to `html` if given, all or none, after reading the model back; an existing
        file is replaced only with `force`, and never a file the quantization read (the model,
        its data)."""
        from qtool.jobs import write_pair

        path = Path(path)
        report_path = Path(report) if report else path.with_name(f"{path.stem}.report.json")
        self.report["output_model"]["path"] = str(path)
        pages = [(Path(html), self.html())] if html is not None else []
        source = self.result.float_model
        write_pair(
            path,
            self.model_bytes,
            report_path,
            self.report,
            force,
            pages,
            self.inputs,
            source=source.source_data or model_to_bytes(source),
        )
        return path


def quantize_model(
    model: ModelLike,
    data: Any = None,
    *,
    holdout: Any = None,
    statistics: CalibrationStatistics | str | os.PathLike | None = None,
    samples: int | None = None,
    input_shapes: InputShapes | None = None,
    strict: bool = False,
    analyze: bool = False,
    layer_sqnr: bool = False,
    max_size: str | int | None = None,
    progress: Callable[[int], None] | None = None,
    **options: Any,
) -> Quantized:
    """Quantize a float model (what `qtool quantize` does, without writing anything).

    `options` are those of `QuantizeOptions`: io, calibration, bias_correction,
    optimize_rounding, equalize, activations, int16, target_sqnr, allow_float, keep_float, per_tensor_fc,
    target, engine, metric (`module:function` or a callable `metric(reference_outputs,
    quantized_outputs) -> float`, higher is better), target_metric, budget, mode (full, dynamic,
    weights, float16), weight_bits, block_size, min_weight_elements. The weight modes need no
    data: without it their accuracy is measured on synthetic samples (a warning says so).
    `input_shapes` ({input name: shape}) sets the shape a dynamic input (-1 in its signature)
    runs at; without it, the data's shape where the signature allows it. `layer_sqnr` also
    measures each quantized activation's SQNR along the graph (simulated on the held-out
    samples, for `Quantized.html()`). `max_size` (bytes, or a ratio of the input's size as
    "0.5x") refuses a bigger result. Raises QtoolError subclasses for bad input; `strict`,
    `max_size` and an unreachable `target_sqnr` raise too (exit code 1 on the command line).
    """
    from qtool.jobs import finish_quantization
    from qtool.refusals import SizeLimit

    settings = _options("quantize_model", options)
    samples = arguments.sample_limit(samples)
    for name, value in (("strict", strict), ("analyze", analyze), ("layer_sqnr", layer_sqnr)):
        arguments.flag(name, value)
    arguments.callback("progress", progress)
    limit = None if max_size is None else SizeLimit.parse(max_size)
    with recording_inputs() as inputs:  # what is read here, `save` will not replace
        original = load_model(model)
        loaded, data = _shaped(original, data, input_shapes)
        if isinstance(statistics, str | os.PathLike):
            statistics = CalibrationStatistics.load(statistics)
        elif statistics is not None and not isinstance(statistics, CalibrationStatistics):
            raise UsageError(
                "`statistics` must be CalibrationStatistics or the path of a statistics file, "
                f"not {type(statistics).__name__}"
            )
        if data is None and statistics is None and settings.mode == FULL:
            raise UsageError("quantize needs data (or statistics from qtool.calibrate)")
        datasets = {} if data is None else entry_datasets(loaded, data, samples)
        holdouts = {} if holdout is None else entry_datasets(loaded, holdout)
        source = model if isinstance(model, str | os.PathLike) else None
        result, report, blob = finish_quantization(
            loaded,
            datasets,
            holdouts,
            settings,
            statistics=statistics,
            analyze=analyze,
            strict=strict,
            progress=progress,
            input_path=None if source is None else os.fspath(source),
            input_data=original.source_data or model_to_bytes(original),
            data_sources=[_describe(data)],
            samples_limit=samples,
            measure_layer_sqnr=layer_sqnr,
            max_size=limit,
        )
    return Quantized(result, report, blob, inputs)


def _options(function: str, options: Mapping[str, Any]) -> QuantizeOptions:
    """QuantizeOptions from a call's keywords: unknown keywords and bad values are UsageErrors."""
    arguments.known_keywords(function, options, (f.name for f in fields(QuantizeOptions)))
    return QuantizeOptions(**options)


def _describe(data: Any) -> str:
    if isinstance(data, str | os.PathLike):
        return os.fspath(data)
    return type(data).__name__


def calibrate_model(
    model: ModelLike,
    data: Any,
    *,
    samples: int | None = None,
    engine: str = "auto",
    progress: Callable[[int], None] | None = None,
    input_shapes: InputShapes | None = None,
) -> CalibrationStatistics:
    """The calibration statistics of `data` (`qtool calibrate`): save, merge with other shards
    (exactly), and pass to `quantize(statistics=...)` (with the same `input_shapes`)."""
    samples = arguments.sample_limit(samples)
    arguments.choice("engine", engine, ENGINES)
    arguments.callback("progress", progress)
    loaded, data = _shaped(load_model(model), data, input_shapes)
    return calibration_statistics(loaded, entry_datasets(loaded, data, samples), engine, progress)


def analyze_model(
    model: ModelLike,
    data: Any,
    *,
    holdout: Any = None,
    samples: int | None = None,
    progress: Callable[[int], None] | None = None,
    input_shapes: InputShapes | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Where the quantization error comes from (`qtool analyze --json`)."""
    settings = _options("analyze_model", options)
    samples = arguments.sample_limit(samples)
    arguments.callback("progress", progress)
    loaded, data = _shaped(load_model(model), data, input_shapes)
    holdouts = {} if holdout is None else entry_datasets(loaded, holdout)
    diagnosis = analyze_loaded(
        loaded, entry_datasets(loaded, data, samples), settings, progress, holdouts
    )
    return analysis_section(diagnosis)


@dataclass
class CheckResult:
    """The audit of one model (`qtool check`): findings, and the verdict at `fail_on`."""

    findings: list[Finding]
    fail_on: str
    target: dict[str, Any] | None = None
    accuracy: dict[str, Any] | None = None
    counts: dict[str, int] = field(default_factory=dict)
    # How the model stores narrow weights (hybrid, weight-only, float16), by form; None: none.
    weights: dict[str, dict[str, int]] | None = None

    @property
    def passed(self) -> bool:
        """Whether no finding is at or above the severity `fail_on`."""
        threshold = SEVERITY_RANK[self.fail_on]
        return all(SEVERITY_RANK[f.severity] < threshold for f in self.findings)

    @property
    def errors(self) -> list[Finding]:
        """The findings of severity error."""
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        """The findings of severity warning."""
        return [f for f in self.findings if f.severity == "warning"]

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data: verdict, counts, findings, the target and accuracy
        sections (None when not asked for), and the narrow weights (None without)."""
        return {
            "passed": self.passed,
            "fail_on": self.fail_on,
            "counts": self.counts,
            "findings": [f.to_dict() for f in self.findings],
            "target": self.target,
            "accuracy": self.accuracy,
            "weights": self.weights,
        }


def check_model(
    model: ModelLike,
    *,
    per_tensor_fc: bool = False,
    target: str | None = None,
    reference: ModelLike | None = None,
    data: Any = None,
    min_sqnr: float = DEFAULT_MIN_SQNR,
    metric: Any = None,
    min_metric: float | None = None,
    fail_on: str = "error",
) -> CheckResult:
    """Audit a quantized model against the int8 spec (`qtool check`), optionally where its ops
    run on a `target` device and how close it stays to a float `reference` on `data`: each
    output's fitting SQNR against `min_sqnr`, and `metric` (`module:function` or a callable
    `metric(reference_outputs, quantized_outputs) -> float`) against `min_metric`."""
    arguments.choice("fail_on", fail_on, SEVERITY_RANK)
    arguments.flag("per_tensor_fc", per_tensor_fc)
    arguments.choice("target", target, target_names(), optional=True)
    min_sqnr = arguments.number("min_sqnr", min_sqnr)
    if min_metric is not None:
        min_metric = arguments.number("min_metric", min_metric)
    if (reference is None) != (data is None):
        raise UsageError("an accuracy check needs both reference and data")
    if metric is not None and reference is None:
        raise UsageError("a metric needs a reference and data")
    if min_metric is not None and metric is None:
        raise UsageError("min_metric needs a metric")
    # Not validated on reading: a model that is not a valid graph is audited (QT-MODEL-INVALID),
    # whether it comes as a path or as bytes.
    loaded = load_model(model, validate=False)
    gate = None
    if reference is not None:
        float_model, data = _shaped(load_model(reference), data, None)
        (s,) = list(entry_subgraphs(float_model))[:1]
        gate = AccuracyGate(
            float_model,
            as_dataset(data, model_inputs(float_model, s)),
            min_sqnr,
            metric=metric,
            min_metric=min_metric,
        )
    profiles = spec_profiles(per_tensor_fc)
    audited = check_loaded(
        loaded,
        profiles,
        target,
        gate,
        path=str(model) if isinstance(model, str | os.PathLike) else "model",
    )
    return CheckResult(
        audited.findings,
        fail_on,
        audited.target,
        audited.accuracy,
        audited.summary,
        audited.weights,
    )
