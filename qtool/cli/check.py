"""`qtool check MODEL...`: audit quantized models against the int8 spec (a CI step)."""

from __future__ import annotations

import json
from collections import Counter

import click
from click.core import ParameterSource

from qtool.check import AccuracyGate, check_paths
from qtool.check.findings import ModelResult
from qtool.check.formats.json_report import to_json
from qtool.check.formats.text import render_rules, render_text, to_text
from qtool.check.gates import DEFAULT_MIN_SQNR
from qtool.check.suppress import (
    BASELINE,
    Ignore,
    apply_ignores,
    load_baseline,
    subtract_baseline,
)
from qtool.cli.config import SETTINGS_FILE
from qtool.cli.render import stderr, stdout
from qtool.display import printable
from qtool.files import refuse_shared_destinations
from qtool.model import write_atomic
from qtool.model.io import refuse_input_overwrite
from qtool.spec import spec_profiles
from qtool.targets import target_names

EXIT_OK, EXIT_FINDINGS, EXIT_UNREADABLE = 0, 1, 2


@click.command("check")
@click.argument("models", nargs=-1, metavar="MODEL...", type=click.Path(dir_okay=True))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json", "junit", "sarif"]),
    default="text",
    show_default=True,
    help="Report format.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    help="Write the report to FILE (atomically) instead of stdout.",
)
@click.option(
    "--fail-on",
    type=click.Choice(["error", "warning"]),
    default="error",
    show_default=True,
    help="Lowest severity that makes the exit code 1.",
)
@click.option(
    "--per-tensor-fc",
    is_flag=True,
    help="Target runtimes that need per-tensor FULLY_CONNECTED weights (older TFLite Micro, "
    "NNAPI): per-axis FC weights become errors.",
)
@click.option(
    "--target",
    type=click.Choice(target_names()),
    help="Also say where each op runs on this device (schemas/targets/NAME.json): its "
    "accelerator, the CPU fallback (warning) or nowhere (error).",
)
@click.option(
    "--reference",
    type=click.Path(dir_okay=False),
    help="Float model to compare outputs with (accuracy gate; needs --data).",
)
@click.option(
    "--data",
    "data",
    multiple=True,
    help="Samples for --reference: .npy/.npz file, directory, or a generator (module:function "
    "or file.py:function). Repeatable.",
)
@click.option(
    "--min-sqnr",
    type=float,
    default=DEFAULT_MIN_SQNR,
    show_default=True,
    help="With --reference: an output below this SQNR (dB) is an error (the SQNR that fits "
    "the output's kind: about the decision threshold for probabilities).",
)
@click.option(
    "--metric",
    metavar="MODULE:FUNCTION",
    help="With --reference: your own measure of the outputs (as for qtool quantize --metric), "
    "reported.",
)
@click.option(
    "--min-metric",
    type=float,
    metavar="VALUE",
    help="With --metric: a value below this is an error.",
)
@click.option(
    "--ignore",
    "ignores",
    multiple=True,
    metavar="RULE[:[path|op|tensor:]GLOB]",
    help="Leave out findings of RULE (an id or a glob over ids); with :path:GLOB, :op:GLOB or "
    ":tensor:GLOB only those whose model path, op type or tensor name matches GLOB (:GLOB: the "
    "path or a builtin op type). Recorded as suppressed in every format. Repeatable.",
)
@click.option(
    "--baseline",
    type=click.Path(dir_okay=False),
    help="Report only findings not in this file (a --format json report or --write-baseline).",
)
@click.option(
    "--write-baseline",
    type=click.Path(dir_okay=False),
    help="Write the findings of this run (after --ignore) to FILE as the baseline to keep.",
)
@click.option("-q", "--quiet", is_flag=True, help="Text format: print only the summary lines.")
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@click.option("--list-rules", is_flag=True, help="Print the rule catalogue and exit.")
@click.pass_context
def check_command(
    ctx: click.Context,
    models: tuple[str, ...],
    fmt: str,
    output: str | None,
    fail_on: str,
    per_tensor_fc: bool,
    target: str | None,
    reference: str | None,
    data: tuple[str, ...],
    min_sqnr: float,
    metric: str | None,
    min_metric: float | None,
    ignores: tuple[str, ...],
    baseline: str | None,
    write_baseline: str | None,
    quiet: bool,
    as_json: bool,
    list_rules: bool,
) -> None:
    """Audit MODEL... against the TFLite int8 spec.

    Exit code 0: no finding at or above --fail-on; 1: such findings; 2: a model could not be
    read (the others are still checked).
    """
    if list_rules:
        render_rules(stdout)
        return
    if not models:
        raise click.UsageError("give at least one MODEL (or --list-rules)")
    if as_json:
        if fmt not in ("text", "json"):
            raise click.UsageError(f"--json and --format {fmt} contradict each other")
        fmt = "json"
    outputs = [path for path in (output, write_baseline) if path is not None]
    inputs = [*models, *(path for path in (reference, baseline) if path is not None)]
    if data:
        from qtool.calibrate.sample_sources import source_files  # the data reader: --data only

        inputs += [file for source in data for file in source_files(source)]
    for path in outputs:
        refuse_input_overwrite(path, inputs)
    refuse_shared_destinations(*outputs, what="the report and the baseline")
    if (reference is None) != (not data):
        raise click.UsageError("--reference and --data go together (the accuracy gate)")
    if metric is not None and reference is None:
        raise click.UsageError("--metric needs --reference and --data (the accuracy gate)")
    if min_metric is not None and metric is None:
        raise click.UsageError("--min-metric needs --metric")
    settings = ctx.meta.get(SETTINGS_FILE)
    from_file = ctx.get_parameter_source("ignores") is ParameterSource.DEFAULT_MAP
    ignore_rules = [
        Ignore.parse(text, f"{settings}: ignore {text}" if from_file else None) for text in ignores
    ]
    known = load_baseline(baseline) if baseline is not None else None
    profiles = spec_profiles(per_tensor_fc)
    accuracy = (
        AccuracyGate(reference, data, min_sqnr, metric=metric, min_metric=min_metric)
        if reference is not None
        else None
    )
    results, _ = apply_ignores(check_paths(models, profiles, target, accuracy), ignore_rules)
    if write_baseline is not None:
        write_atomic(write_baseline, _report("json", results, profiles, quiet, fail_on))
    if known is not None:
        results, _ = subtract_baseline(results, known, f"baseline {baseline}")

    if fmt == "text" and output is None:
        render_text(results, stdout, quiet=quiet)
    else:
        report = _report(fmt, results, profiles, quiet, fail_on)
        if output is None:
            click.echo(report, nl=False)
        else:
            write_atomic(output, report)
            # The report went to a file: keep the CI log informative with one line per model.
            render_text(results, stdout, quiet=True)
        for result in results:
            if result.error is not None:
                stderr.out(f"qtool: error: {printable(result.error)}", highlight=False)
    _say_suppressed(results)

    if any(result.error is not None for result in results):
        ctx.exit(EXIT_UNREADABLE)
    ctx.exit(EXIT_FINDINGS if any(r.fails(fail_on) for r in results) else EXIT_OK)


def _report(
    fmt: str, results: list[ModelResult], profiles: tuple[str, ...], quiet: bool, fail_on: str
) -> str:
    if fmt == "text":
        return to_text(results, quiet=quiet)
    if fmt == "json":
        return json.dumps(to_json(results, profiles), indent=2) + "\n"
    if fmt == "junit":
        from qtool.check.formats.junit import to_junit

        return to_junit(results, fail_on=fail_on)
    from qtool.check.formats.sarif import to_sarif

    return json.dumps(to_sarif(results, profiles), indent=2) + "\n"


def _say_suppressed(results: list[ModelResult]) -> None:
    """How many findings each ignore or baseline left out, on stderr (report formats on stdout
    stay pure; every format also records each of them)."""
    counts = Counter((s.kind, s.source) for result in results for s in result.suppressed)
    for (kind, source), count in counts.items():
        what = f"already in the {source}" if kind == BASELINE else f"left out by {source}"
        stderr.out(f"qtool: {count} finding(s) {printable(what)}", highlight=False)
