"""`qtool analyze MODEL --data PATH`: where a model's quantization error comes from."""

from __future__ import annotations

import click

from qtool.cli.planning import (
    DATA_AS_FOR_QUANTIZE,
    custom_ops_option,
    data_option,
    engine_option,
    input_shape_option,
    options_from,
    planning_options,
    samples_option,
)
from qtool.cli.render import print_fields, print_json, print_table, progress, stderr, stdout
from qtool.files import refuse_shared_destinations
from qtool.jobs import AnalyzeJob, analyze_file, job_inputs
from qtool.model import write_atomic
from qtool.model.io import refuse_input_overwrite
from qtool.quantize import QuantizeOptions
from qtool.quantize.accuracy import LITERT
from qtool.report.json_text import readable_json

SHOWN = 15


@click.command("analyze")
@click.argument("model_path", metavar="MODEL")
@data_option(DATA_AS_FOR_QUANTIZE, required=True)
@planning_options(target=False)
@samples_option()
@input_shape_option()
@engine_option()
@custom_ops_option()
@click.option(
    "--top", type=int, default=SHOWN, show_default=True, help="Places shown (all in JSON)."
)
@click.option("-o", "--output", help="Write the analysis as JSON to this file.")
@click.option(
    "--html",
    "html_path",
    metavar="FILE",
    help="Also write a self-contained HTML page: output and per-layer SQNR, the worst places "
    "and their remedies, each activation's histogram against its range.",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress and no table.")
@click.option("--json", "as_json", is_flag=True, help="Print the analysis as JSON.")
def analyze_command(
    model_path: str,
    data: tuple[str, ...],
    holdout: tuple[str, ...],
    samples: int | None,
    input_shapes: tuple[str, ...],
    engine: str,
    custom_ops: str | None,
    top: int,
    output: str | None,
    html_path: str | None,
    quiet: bool,
    as_json: bool,
    **planning,
) -> None:
    """Where the quantization error of MODEL comes from, and which remedy helps.

    For every layer's weights and every activation: each output's SQNR when only that place is
    quantized (simulated on held-out samples), the activation's own SQNR along the quantized
    model, and for the worst places the effect of each remedy (clip the range, bias correction,
    rounding optimisation, int16, float). Worst first.
    """
    job = AnalyzeJob(
        model_path=model_path,
        data=data,
        holdout=holdout,
        samples=samples,
        input_shapes=input_shapes,
        custom_ops=custom_ops,
        html_path=html_path,
        options=QuantizeOptions(engine=engine, **options_from(planning)),
    )
    if output:
        refuse_input_overwrite(output, job_inputs(job))
        if html_path:
            refuse_shared_destinations(output, html_path, what="the analysis and the page")
    with progress(stderr, "calibrating", enabled=not (quiet or as_json)) as (advance, _):
        analysis = analyze_file(job, progress=advance)
    if output:
        write_atomic(output, readable_json(analysis))
    if as_json:
        print_json(analysis)
    elif not quiet:
        render(analysis, top)
        if html_path:
            print_fields(stdout, [("page", html_path)])


def _db(value: float | None) -> str:
    return "exact" if value is None else f"{value:.1f}"


def _how(measured_in: str) -> str:
    return "measured in LiteRT" if measured_in == LITERT else "simulated: LiteRT cannot run it"


def _outputs(sqnr_db: dict, samples: int) -> str:
    """Each output's SQNR (dB) with one part of the quantization alone, simulated."""
    return ", ".join(f"{k} {_db(v)} dB" for k, v in sqnr_db.items()) + (
        f" (simulated on {samples} samples)"
    )


def render(analysis: dict, top: int) -> None:
    for sub in analysis["subgraphs"]:
        print_fields(
            stdout,
            [
                ("model", analysis["model"]),
                ("ranges", analysis["method"]),
                ("samples", f"{sub['output_samples']} ({analysis['samples_from']})"),
                (
                    "outputs",
                    ", ".join(f"{k} {_db(v)} dB" for k, v in sub["output_sqnr_db"].items())
                    + f" ({_how(sub['outputs_measured_in'])})",
                ),
                ("weights alone", _outputs(sub["weights_alone_sqnr_db"], sub["samples"])),
                ("activations alone", _outputs(sub["activations_alone_sqnr_db"], sub["samples"])),
            ],
        )
        rows = []
        for place in sub["places"][:top]:
            remedies = ", ".join(
                f"{r['remedy']} {_db(r['alone_worst_db'])}" for r in place["remedies"]
            )
            rows.append(
                (
                    "-" if place["op_index"] is None else str(place["op_index"]),
                    place["op"],
                    place["place"],
                    _db(place["alone_worst_db"]),
                    "-" if place["layer_sqnr_db"] is None else _db(place["layer_sqnr_db"]),
                    place["recommended"] or "-",
                    remedies or "-",
                    place["tensor"],
                )
            )
        print_table(
            stdout,
            "worst places: worst output's SQNR (dB) with only this place quantized (simulated on "
            f"{sub['samples']} samples)",
            ("#", "op", "place", "alone", "layer", "recommended", "remedies (alone dB)", "tensor"),
            rows,
        )
