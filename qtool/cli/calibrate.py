"""`qtool calibrate MODEL --data PATH -o stats.json`: calibration statistics to merge and reuse.

Statistics of shards of the data, gathered on several machines, merge exactly: `qtool quantize
MODEL --statistics a.json --statistics b.json` quantizes from all of them without reading the
data again.
"""

from __future__ import annotations

import click

from qtool.cli.planning import (
    DATA_AS_FOR_QUANTIZE,
    custom_ops_option,
    data_option,
    engine_option,
    input_shape_option,
    samples_option,
)
from qtool.cli.render import print_fields, print_json, progress, stderr, stdout
from qtool.jobs import CalibrateJob, calibrate_file
from qtool.quantize import QuantizeOptions


@click.command("calibrate")
@click.argument("model_path", metavar="MODEL")
@data_option(DATA_AS_FOR_QUANTIZE, required=True)
@click.option("-o", "--output", required=True, help="Statistics file to write (JSON).")
@samples_option("Use at most N samples.")
@input_shape_option()
@engine_option("What runs the float model.")
@custom_ops_option()
@click.option("--force", is_flag=True, help="Replace an existing output file.")
@click.option("-q", "--quiet", is_flag=True, help="No progress and no summary.")
@click.option("--json", "as_json", is_flag=True, help="Print a summary as JSON.")
def calibrate_command(
    model_path: str,
    data: tuple[str, ...],
    output: str,
    samples: int | None,
    input_shapes: tuple[str, ...],
    engine: str,
    custom_ops: str | None,
    force: bool,
    quiet: bool,
    as_json: bool,
) -> None:
    """Gather the calibration statistics of MODEL over the data and write them to a file.

    Every histogram and mean in it merges exactly with those of other shards of the same
    model's data (same result whatever the split or order).
    """
    job = CalibrateJob(
        model_path=model_path,
        output_path=output,
        data=data,
        samples=samples,
        input_shapes=input_shapes,
        custom_ops=custom_ops,
        force=force,
        options=QuantizeOptions(engine=engine),
    )
    with progress(stderr, "calibrating", enabled=not (quiet or as_json)) as (advance, on_total):
        statistics = calibrate_file(job, progress=advance, on_total=on_total)
    summary = {
        "output": output,
        "samples": statistics.samples,
        "subgraphs": sorted(statistics.subgraphs),
        "tensors": sum(len(s.histograms.histograms) for s in statistics.subgraphs.values()),
        "fingerprint": statistics.fingerprint,
    }
    if as_json:
        print_json(summary)
    elif not quiet:
        print_fields(stdout, [(k, str(v)) for k, v in summary.items()])
