"""`qtool check MODEL...`: audit quantized models against the int8 spec (a CI step)."""

from __future__ import annotations

import json

import click

from qtool.check import AccuracyGate, check_paths
from qtool.check.formats import render_rules, render_text, to_json, to_junit, to_sarif, to_text
from qtool.check.gates import DEFAULT_MIN_SQNR
from qtool.cli.render import stderr, stdout
from qtool.model import write_atomic
from qtool.model.io import refuse_input_overwrite
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
    help="Target runtimes that need per-tensor FULLY_CONNECTED weights "
    "(TFLite Micro, NNAPI, Ethos-U): per-axis FC weights become errors.",
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
    help="Samples for --reference: .npy/.npz file, directory, or module:function (repeatable).",
)
@click.option(
    "--min-sqnr",
    type=float,
    default=DEFAULT_MIN_SQNR,
    show_default=True,
    help="With --reference: an output below this SQNR (dB) is an error.",
)
@click.option("-q", "--quiet", is_flag=True, help="Text format: print only the summary lines.")
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
    quiet: bool,
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
    if output is not None:
        refuse_input_overwrite(output, models)
    if (reference is None) != (not data):
        raise click.UsageError("--reference and --data go together (the accuracy gate)")
    profiles = ("per-tensor-fc",) if per_tensor_fc else ()
    accuracy = AccuracyGate(reference, data, min_sqnr) if reference is not None else None
    results = check_paths(models, profiles, target, accuracy)

    if fmt == "text" and output is None:
        render_text(results, stdout, quiet=quiet)
    else:
        report = {
            "text": lambda: to_text(results, quiet=quiet),
            "json": lambda: json.dumps(to_json(results, profiles), indent=2) + "\n",
            "junit": lambda: to_junit(results),
            "sarif": lambda: json.dumps(to_sarif(results, profiles), indent=2) + "\n",
        }[fmt]()
        if output is None:
            click.echo(report, nl=False)
        else:
            write_atomic(output, report)
            # The report went to a file: keep the CI log informative with one line per model.
            render_text(results, stdout, quiet=True)
        for result in results:
            if result.error is not None:
                stderr.print(f"qtool: error: {result.error}", markup=False, soft_wrap=True)

    if any(result.error is not None for result in results):
        ctx.exit(EXIT_UNREADABLE)
    ctx.exit(EXIT_FINDINGS if any(r.fails(fail_on) for r in results) else EXIT_OK)
