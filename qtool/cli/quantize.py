"""`qtool quantize MODEL --data PATH`: calibrate a float model and write its int8 version."""

from __future__ import annotations

import sys

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from qtool.calibrate import ENGINES
from qtool.cli.render import print_json, stderr, stdout
from qtool.jobs import QuantizeJob, QuantizeOutcome, quantize_file
from qtool.quantize import IO_MODES, QuantizeOptions
from qtool.report import summary_counts


@click.command("quantize")
@click.argument("model_path", metavar="MODEL")
@click.option("-o", "--output", help="Output model (default: <stem>_int8.tflite beside MODEL).")
@click.option(
    "--data",
    multiple=True,
    metavar="[KEY=]PATH",
    help="Calibration data: .npy, .npz, a directory of them, or module:function "
    "(a generator of samples). Repeatable. A model with several signatures takes "
    "KEY=PATH per signature.",
)
@click.option(
    "--synthetic",
    is_flag=True,
    help="Calibrate on random data (ranges are NOT meaningful; for smoke tests).",
)
@click.option("--samples", type=int, help="Use at most N calibration samples.")
@click.option(
    "--io",
    "io_mode",
    type=click.Choice(IO_MODES),
    default="float",
    show_default=True,
    help="Type of the model's inputs and outputs.",
)
@click.option(
    "--per-tensor-fc",
    is_flag=True,
    help="Per-tensor FULLY_CONNECTED weights (TFLite Micro, NNAPI, Arm Ethos-U).",
)
@click.option(
    "--keep-float",
    multiple=True,
    metavar="PATTERN",
    help="Keep matching ops in float: an op-type glob (SOFTMAX, '*POOL*') or a glob over the "
    "names of the tensors an op produces. Repeatable.",
)
@click.option("--strict", is_flag=True, help="Fail (exit 1) if any op has to stay float.")
@click.option("--report", "report_path", help="Report file (default: <output stem>.report.json).")
@click.option(
    "--engine",
    type=click.Choice(ENGINES),
    default="auto",
    show_default=True,
    help="What runs the float model during calibration.",
)
@click.option(
    "--custom-ops",
    metavar="MODULE",
    help="Python module that registers numpy kernels for custom ops.",
)
@click.option(
    "--layer-errors",
    is_flag=True,
    help="Measure each layer's SQNR against the float model (runs both in LiteRT) and list "
    "the worst; all of them go in the report.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of --synthetic data.")
@click.option("--quiet", is_flag=True, help="No progress bar and no summary table.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--force", is_flag=True, help="Replace an existing output file.")
def quantize_command(
    model_path: str,
    output: str | None,
    data: tuple[str, ...],
    synthetic: bool,
    samples: int | None,
    io_mode: str,
    per_tensor_fc: bool,
    keep_float: tuple[str, ...],
    strict: bool,
    report_path: str | None,
    engine: str,
    custom_ops: str | None,
    layer_errors: bool,
    seed: int,
    quiet: bool,
    as_json: bool,
    force: bool,
) -> None:
    """Quantize a float .tflite MODEL to int8 following the TFLite int8 spec.

    Exit codes: 0 written and compliant, 1 impossible under the options (--strict) or the
    written model fails the audit, 2 bad input or usage.
    """
    job = QuantizeJob(
        model_path=model_path,
        output_path=output,
        report_path=report_path,
        data=data,
        synthetic=synthetic,
        samples=samples,
        seed=seed,
        strict=strict,
        force=force,
        custom_ops=custom_ops,
        layer_errors=layer_errors,
        options=QuantizeOptions(
            io=io_mode, per_tensor_fc=per_tensor_fc, keep_float=keep_float, engine=engine
        ),
    )
    if synthetic and not data:
        stderr.print(
            "[bold yellow]qtool: warning:[/] calibrating on SYNTHETIC random data: the "
            "activation ranges are not meaningful and accuracy will be poor",
            soft_wrap=True,
        )
    show_progress = not (quiet or as_json) and stderr.is_terminal
    with Progress(
        TextColumn("calibrating"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeElapsedColumn(),
        console=stderr,
        disable=not show_progress,
        transient=True,
    ) as bar:
        task = bar.add_task("calibrate", total=None, rate="")

        def advance(count: int) -> None:
            bar.advance(task, count)
            elapsed = bar.tasks[task].elapsed or 0
            if elapsed:
                bar.update(task, rate=f"{bar.tasks[task].completed / elapsed:.0f} samples/s")

        outcome = quantize_file(job, progress=advance, on_total=lambda n: bar.update(task, total=n))
    if as_json:
        print_json(outcome.report)
    elif not quiet:
        render_summary(outcome)
    else:
        stdout.print(Text(f"wrote {outcome.output_path}"), soft_wrap=True)
    sys.exit(outcome.exit_code)


WORST_LAYERS = 10


def render_summary(outcome: QuantizeOutcome) -> None:
    report = outcome.report
    counts = summary_counts(report)
    calibrations = report["calibration"]
    samples = sum(c["samples"] for c in calibrations)
    engines = "/".join(sorted({c["engine"] for c in calibrations}))
    seconds = sum(c["seconds"] for c in calibrations)
    synthetic = any(c["synthetic"] for c in calibrations)
    head = Table.grid(padding=(0, 2))
    head.add_row("[bold]wrote[/]", Text(outcome.output_path))
    head.add_row("report", Text(outcome.report_path))
    head.add_row(
        "size",
        f"{report['input_model']['size_bytes']:,} -> "
        f"{report['output_model']['size_bytes']:,} bytes",
    )
    head.add_row(
        "calibration",
        f"{samples} samples, {engines} engine, {seconds:.2f} s"
        + (" [yellow](synthetic)[/]" if synthetic else "")
        + (f", {len(calibrations)} subgraphs" if len(calibrations) > 1 else ""),
    )
    head.add_row(
        "operators",
        f"{counts['int8']} int8, {counts['float']} float, "
        f"{counts['integer']} integer, {counts['folded']} folded",
    )
    audit = report["audit"]
    status = "[green]compliant[/]" if not audit["errors"] else "[red]NOT compliant[/]"
    head.add_row("audit", f"{status}: {audit['errors']} errors, {audit['warnings']} warnings")
    stdout.print(head)
    io_table = Table(title="model inputs and outputs", title_justify="left")
    for column in ("role", "name", "dtype", "shape", "scale", "zero point"):
        io_table.add_column(column)
    for row in report["io"]:
        q = row["quantization"] or {}
        io_table.add_row(
            row["role"],
            Text(row["name"]),
            row["dtype"],
            str(row["shape"]),
            f"{q['scale'][0]:.6g}" if "scale" in q else "-",
            str(q["zero_point"][0]) if "zero_point" in q else "-",
        )
    stdout.print(io_table)
    if report["float_ops"]:
        table = Table(title="operators left in float", title_justify="left")
        for column in ("#", "op", "reason"):
            table.add_column(column)
        for row in report["float_ops"]:
            table.add_row(str(row["index"]), Text(row["op"]), Text(row["reason"]))
        stdout.print(table)
    if report["layer_errors"]:
        worst = Table(title="layers with the largest quantization error", title_justify="left")
        for column in ("tensor", "op", "SQNR dB"):
            worst.add_column(column, overflow="fold")
        for row in report["layer_errors"][:WORST_LAYERS]:
            sqnr = "exact" if row["sqnr_db"] is None else f"{row['sqnr_db']:.1f}"
            worst.add_row(Text(row["tensor"]), Text(row["op"]), sqnr)
        stdout.print(worst)
    for warning in report["warnings"]:
        stdout.print(Text.assemble(("warning:", "yellow"), f" {warning}"))
    for finding in audit["findings"]:
        if finding["severity"] == "error":
            line = f" {finding['rule']}: {finding['message']}"
            stdout.print(Text.assemble(("audit error", "red"), line))
