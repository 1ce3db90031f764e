"""End-to-end jobs behind the commands, callable from Python as well.

`quantize_file` does what `qtool quantize` does: read the float model and the calibration data,
quantize, audit the result with the same rules as `qtool check`, and write the model and its
report. Both are written whole to temporaries first; the model is read back and must pass the
validator (and LiteRT's loader when installed); only then are both renamed into place, the
report first, so a model never appears without its report. Until then an existing output and
report stay as they were, and any failure (or SIGINT/SIGTERM) removes the temporaries.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

from qtool.arguments import sample_limit
from qtool.calibrate import Dataset, InputSpec, load_dataset, model_inputs, synthetic_dataset
from qtool.calibrate.collect import calibration_statistics
from qtool.calibrate.datasets import source_datasets, split_sources
from qtool.calibrate.inputs import entry_subgraphs
from qtool.calibrate.sample_sources import source_files
from qtool.calibrate.shapes import parse_input_shapes, shaped_model
from qtool.calibrate.statistics import CalibrationStatistics
from qtool.check.audit import audit_model
from qtool.check.findings import severity_counts
from qtool.errors import QtoolError, UsageError
from qtool.files import (
    InputFiles,
    check_destination,
    commit,
    discard,
    refuse_shared_destinations,
    stage,
    write_atomic,
)
from qtool.model import Model, load_model, model_to_bytes
from qtool.quantize import QuantizeOptions, QuantizeResult, quantize_loaded
from qtool.quantize.analysis import layer_errors
from qtool.quantize.diagnosis import diagnose_calibrated
from qtool.quantize.quantizer import calibrate_loaded
from qtool.quantize.weight_quantizer import output_suffix, weight_mode_job
from qtool.readback import written_model_problem
from qtool.refusals import (
    SizeLimit,
    StrictModeError,
    refuse_missed_target,
    refuse_size,
)
from qtool.report import build_report
from qtool.report.analysis_report import analysis_section
from qtool.report.html import analysis_html, quantize_html
from qtool.report.json_text import readable_json
from qtool.report.pictures import analysis_histograms, quantize_pictures
from qtool.runtime import load_custom_ops

DEFAULT_SYNTHETIC_SAMPLES = 64


class OutputCheckError(QtoolError):
    """The model qtool wrote does not read back (or LiteRT refuses it): exit 1, nothing written."""

    exit_code = 1


@dataclass
class ModelJob:
    """What every command reads: the float model, its data (or statistics), and the options."""

    model_path: str
    _: KW_ONLY
    data: tuple[str, ...] = ()
    holdout: tuple[str, ...] = ()  # held-out samples: accuracy is measured on them only
    statistics: tuple[str, ...] = ()  # calibration statistics files (merged) instead of data
    synthetic: bool = False
    samples: int | None = None
    seed: int = 0
    custom_ops: str | None = None
    input_shapes: tuple[str, ...] = ()  # NAME=DIMS: the shape a dynamic input runs at
    options: QuantizeOptions = field(default_factory=QuantizeOptions)


@dataclass
class QuantizeJob(ModelJob):
    """`qtool quantize`: the model, report and page it writes, and what it checks first."""

    output_path: str | None = None
    report_path: str | None = None
    _: KW_ONLY
    strict: bool = False
    force: bool = False
    layer_errors: bool = False  # measure every layer's SQNR (needs ai-edge-litert)
    analyze: bool = False  # where the error comes from (simulated), in the report
    html_path: str | None = None  # the HTML page of the run, written with the other outputs
    max_size: SizeLimit | None = None  # refuse to write a bigger model


@dataclass
class AnalyzeJob(ModelJob):
    """`qtool analyze`: the analysis, and the page it may write."""

    _: KW_ONLY
    html_path: str | None = None


@dataclass
class CalibrateJob(ModelJob):
    """`qtool calibrate`: the statistics file it writes."""

    output_path: str = ""
    _: KW_ONLY
    force: bool = False


@dataclass
class QuantizeOutcome:
    """What `run_quantize` wrote (the model, its report, the page when asked) and the result they
    came from."""

    result: QuantizeResult
    report: dict[str, Any]
    output_path: str
    report_path: str
    html_path: str | None = None

    @property
    def exit_code(self) -> int:
        """The command's exit status: 1 when the audit of the quantized model found errors, else
        0."""
        return 1 if self.report["audit"]["errors"] else 0


def default_paths(job: QuantizeJob) -> tuple[Path, Path]:
    """The output model and report paths of a quantize job: as given, else `<model>_int8.tflite`
    (`_dynamic`, `_float16`, `_dynamic_int4`... in a weight mode) beside the input and
    `<output>.report.json` beside the output; UsageError for a path '' or ending in a separator."""
    for what, given in (("output path", job.output_path), ("report path", job.report_path)):
        if given is not None and (given == "" or given.endswith(("/", os.sep))):
            raise UsageError(f"{what} {given!r} is not a file name")
    source = Path(job.model_path)
    output = (
        Path(job.output_path)
        if job.output_path is not None
        else source.with_name(f"{source.stem}_{output_suffix(job.options)}.tflite")
    )
    report = (
        Path(job.report_path)
        if job.report_path is not None
        else output.with_name(f"{output.stem}.report.json")
    )
    return output, report


def job_inputs(job: ModelJob) -> list[str]:
    """Every file the job will read, as far as the command line tells before anything is read
    (what is read later is recorded as it is read, and checked again before the outputs are put
    in place)."""
    files = [job.model_path, *job.statistics]
    for source in (*job.data, *job.holdout):
        files += source_files(source)
        key, separator, path = source.partition("=")
        if separator and key:  # KEY=PATH for a signature
            files += source_files(path)
    return files


def _check_destinations(job: QuantizeJob, *paths: Path) -> None:
    """Refuse unwritable destinations before the work, not after it."""
    inputs = InputFiles.of(job_inputs(job))
    for path in paths:
        check_destination(path, overwrite=job.force, inputs=inputs)
    refuse_shared_destinations(*paths, what="the model, the report and the page")


def load_job_inputs(job: ModelJob) -> tuple[Model, dict[int, Dataset], dict[int, Dataset]]:
    """The model, its calibration datasets and its held-out datasets, per subgraph."""
    sample_limit(job.samples)
    if job.custom_ops:
        load_custom_ops(job.custom_ops)
    model = load_model(job.model_path)
    sources = split_sources(job.data, entry_subgraphs(model)) if job.data else {}

    def data_for(s: int, specs: list[InputSpec]) -> Dataset | None:
        """The `--data` sources of entry subgraph s read as `specs` ask."""
        return load_dataset(sources[s], specs) if s in sources else None

    model = shaped_model(model, parse_input_shapes(job.input_shapes), data_for)
    entries = entry_subgraphs(model)
    weight_mode = weight_mode_job(job)  # a weight mode calibrates nothing
    if job.data:
        datasets = source_datasets(model, job.data, job.samples)
    elif job.statistics or (weight_mode and job.holdout):
        datasets = {}
    elif job.synthetic or weight_mode:  # synthetic samples measure a weight mode (warned)
        count = job.samples or DEFAULT_SYNTHETIC_SAMPLES
        datasets = {s: synthetic_dataset(model_inputs(model, s), count, job.seed) for s in entries}
    else:
        raise UsageError(
            "calibration needs data: give `data`, or `statistics` from qtool calibrate (or "
            "`synthetic=True` to calibrate on random data, which gives meaningless ranges)"
        )
    holdouts = source_datasets(model, job.holdout) if job.holdout else {}
    return model, datasets, holdouts


def merged_statistics(paths: tuple[str, ...]) -> CalibrationStatistics | None:
    """The statistics files merged into one (exactly: counts and fixed-point sums add)."""
    if not paths:
        return None
    merged = CalibrationStatistics.load(paths[0])
    for path in paths[1:]:
        merged.merge(CalibrationStatistics.load(path))
    return merged


def calibrate_file(
    job: CalibrateJob,
    progress: Callable[[int], None] | None = None,
    on_total: Callable[[int | None], None] | None = None,
) -> CalibrationStatistics:
    """Run `qtool calibrate`: the statistics of the job's data, written to its output path;
    `on_total` gets the expected number of samples (None when unknown), as for quantize."""
    inputs = InputFiles.of(job_inputs(job))
    check_destination(job.output_path, overwrite=job.force, inputs=inputs)
    model, datasets, _ = load_job_inputs(job)
    if on_total:
        _announce_total(datasets, on_total)
    statistics = calibration_statistics(model, datasets, job.options.engine, progress)
    statistics.save(job.output_path, overwrite=job.force)
    return statistics


def analyze_file(job: AnalyzeJob, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Run `qtool analyze`: the analysis report of the plan `quantize_file` would make."""
    html = Path(job.html_path) if job.html_path else None
    if html is not None:
        check_destination(html, overwrite=True, inputs=InputFiles.of(job_inputs(job)))
    model, datasets, holdouts = load_job_inputs(job)
    calibrated = calibrate_loaded(model, datasets, job.options, progress, holdouts)
    diagnosis = diagnose_calibrated(calibrated)
    analysis = {"model": job.model_path, **analysis_section(diagnosis)}
    if html is not None:
        tensors = analysis_histograms(diagnosis, calibrated.prepared.model)
        write_atomic(html, analysis_html(analysis, tensors))
    return analysis


def _announce_total(datasets: dict[int, Dataset], on_total: Callable[[int | None], None]) -> None:
    expected = [d.expected_samples for d in datasets.values()]
    on_total(None if None in expected else sum(expected))


def finish_quantization(
    model: Model,
    datasets: dict[int, Dataset],
    holdouts: dict[int, Dataset],
    options: QuantizeOptions,
    *,
    statistics: CalibrationStatistics | None = None,
    analyze: bool = False,
    strict: bool = False,
    progress: Callable[[int], None] | None = None,
    input_path: str | None = None,
    input_data: bytes | None = None,
    output_path: str | None = None,
    data_sources: list[str] = (),
    samples_limit: int | None = None,
    seed: int | None = None,
    measure_layers: bool = False,
    measure_layer_sqnr: bool = False,
    max_size: SizeLimit | None = None,
    search_progress: Callable[[str], None] | None = None,
) -> tuple[QuantizeResult, dict[str, Any], bytes]:
    """Quantize in memory, refuse what the options forbid, audit, and build the report:
    (result, report, model bytes). Nothing is written. `measure_layers` runs both models in
    LiteRT layer by layer (`layer_errors` in the report); `measure_layer_sqnr` simulates the
    same (`result.layer_sqnr`, for the HTML page)."""
    result = quantize_loaded(
        model,
        datasets,
        options,
        progress=progress,
        holdout=holdouts,
        analyze=analyze,
        statistics=statistics,
        measure_layer_sqnr=measure_layer_sqnr,
        search_progress=search_progress,
    )
    refuse_missed_target(result, options)
    if strict and result.float_ops:
        listed = "; ".join(f"op {f.index} {f.op_type}: {f.reason}" for f in result.float_ops)
        raise StrictModeError(
            f"strict: {len(result.float_ops)} operator(s) cannot be int8 ({listed})"
        )
    blob = model_to_bytes(result.model)
    findings = audit_model(result.model, profiles=options.profiles, target=options.target)
    audit = {
        **severity_counts(findings),
        "findings": [f.to_dict() for f in findings],
    }
    errors = []
    if measure_layers:
        for s, dataset in datasets.items():
            errors += layer_errors(result.float_model, result.model, dataset, s)
    report = build_report(
        result,
        model,
        options,
        input_path=input_path,
        input_data=input_data,
        output_path=output_path,
        output_data=blob,
        data_sources=list(data_sources),
        samples_limit=samples_limit,
        seed=seed,
        audit=audit,
        layer_errors=errors,
    )
    refuse_size(result, report, blob, options, max_size)
    return result, report, blob


def quantize_file(
    job: QuantizeJob,
    progress: Callable[[int], None] | None = None,
    on_total: Callable[[int | None], None] | None = None,
    search_progress: Callable[[str], None] | None = None,
) -> QuantizeOutcome:
    """Run `qtool quantize`; `progress(n)` follows calibration, `on_total` gets the expected
    number of samples (None when only reading all the data would tell), `search_progress` a
    line per candidate of a target search."""
    output, report_path = default_paths(job)
    html = [Path(job.html_path)] if job.html_path else []
    _check_destinations(job, output, report_path, *html)
    model, datasets, holdouts = load_job_inputs(job)
    if on_total:
        _announce_total(datasets, on_total)
    result, report, blob = finish_quantization(
        model,
        datasets,
        holdouts,
        job.options,
        statistics=merged_statistics(job.statistics),
        analyze=job.analyze,
        strict=job.strict,
        progress=progress,
        input_path=job.model_path,
        input_data=model.source_data,  # what was read, whatever the file holds by now
        output_path=str(output),
        data_sources=list(job.data) or list(job.statistics),
        samples_limit=job.samples,
        seed=job.seed if job.synthetic else None,
        measure_layers=job.layer_errors,
        measure_layer_sqnr=bool(html),
        max_size=job.max_size,
        search_progress=search_progress,
    )
    pages = [(path, quantize_html(report, quantize_pictures(result))) for path in html]
    write_pair(output, blob, report_path, report, job.force, pages, source=model.source_data)
    return QuantizeOutcome(
        result=result,
        report=report,
        output_path=str(output),
        report_path=str(report_path),
        html_path=job.html_path,
    )


def write_pair(
    output: Path,
    blob: bytes,
    report_path: Path,
    report: dict,
    force: bool,
    pages: Sequence[tuple[Path, str]] = (),
    inputs: InputFiles | None = None,
    source: bytes | None = None,
) -> None:
    """Stage the model, its report and any `(path, text)` pages, read the model back, then put
    all in place (the model last) or none. None may replace a file of `inputs` or one the run
    read; without `force` none may replace any file. LiteRT's refusal of the model does not
    count where it refuses the `source` model too."""
    refuse_shared_destinations(
        output, report_path, *(path for path, _ in pages), what="the model, the report and the page"
    )
    staged = []
    try:
        staged.append(stage(output, blob, overwrite=force, inputs=inputs))
        problem = written_model_problem(staged[0].temporary, source)
        if problem:
            raise OutputCheckError(
                f"{output}: the quantized model is not valid, not written: {problem}"
            )
        staged.append(stage(report_path, readable_json(report), overwrite=force, inputs=inputs))
        staged += [stage(path, page, overwrite=force, inputs=inputs) for path, page in pages]
        commit(*reversed(staged))
    except BaseException:
        discard(*staged)
        raise
