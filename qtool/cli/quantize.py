"""`qtool quantize MODEL --data PATH`: calibrate a float model and write its int8 version."""

from __future__ import annotations

import sys

import click
from rich.text import Text

from qtool.cli.planning import (
    custom_ops_option,
    data_option,
    engine_option,
    input_shape_option,
    options_from,
    planning_options,
    samples_option,
)
from qtool.cli.render import print_fields, print_json, print_table, progress, stderr, stdout
from qtool.display import printable
from qtool.jobs import QuantizeJob, QuantizeOutcome, quantize_file
from qtool.quantize import IO_MODES, QuantizeOptions
from qtool.quantize.accuracy import measures_text
from qtool.quantize.weight_quantizer import MODES
from qtool.refusals import SizeLimit
from qtool.report import summary_counts
from qtool.targets import target_names


@click.command("quantize")
@click.argument("model_path", metavar="MODEL")
@click.option("-o", "--output", help="Output model (default: <stem>_int8.tflite beside MODEL).")
@data_option(
    "Calibration data: .npy, .npz, a directory of them, or a generator of samples "
    "(module:function or file.py:function). Repeatable. A model with several signatures takes "
    "KEY=PATH per signature."
)
@click.option(
    "--statistics",
    multiple=True,
    metavar="FILE",
    help="Calibration statistics from qtool calibrate, instead of --data (several are merged).",
)
@planning_options(target=True)
@click.option(
    "--synthetic",
    is_flag=True,
    help="Calibrate on random data (ranges are NOT meaningful; for smoke tests).",
)
@samples_option()
@input_shape_option()
@click.option(
    "--io",
    "io_mode",
    type=click.Choice(IO_MODES),
    default="float",
    show_default=True,
    help="Type of the model's inputs and outputs.",
)
@click.option(
    "--mode",
    type=click.Choice(MODES),
    default="full",
    show_default=True,
    help="full: int8 activations and weights. dynamic: int8 weights read by LiteRT's hybrid "
    "kernels, activations float (no data needed). weights: int8 weights expanded by a "
    "DEQUANTIZE in front of float ops. float16: float16 weights behind a DEQUANTIZE.",
)
@click.option(
    "--weight-bits",
    type=click.Choice(["8", "4"]),
    default="8",
    show_default=True,
    help="4: int4 weights where LiteRT has the kernel (--mode dynamic or weights; int8 "
    "elsewhere, said in the report).",
)
@click.option(
    "--block-size",
    type=int,
    metavar="N",
    help="int4 weights in blocks of N inputs, one float16 scale each (--mode dynamic "
    "--weight-bits 4; FULLY_CONNECTED and EMBEDDING_LOOKUP; N a multiple of 32).",
)
@click.option(
    "--min-weight-elements",
    type=int,
    metavar="N",
    help="In --mode dynamic and weights, weights with fewer elements stay float (default "
    "1024, as TensorFlow's converter).",
)
@click.option(
    "--per-tensor-fc",
    is_flag=True,
    help="Per-tensor FULLY_CONNECTED weights, for runtimes that refuse per-axis ones (older "
    "TFLite Micro, NNAPI).",
)
@click.option(
    "--target",
    type=click.Choice(target_names()),
    help="Plan for this device (schemas/targets/): ops it runs only in float stay float; the "
    "audit says where each op runs on it.",
)
@click.option(
    "--keep-float",
    multiple=True,
    metavar="PATTERN",
    help="Keep matching ops in float: an op-type glob (SOFTMAX, '*POOL*') or a glob over the "
    "names of the tensors an op produces. Repeatable.",
)
@click.option("--strict", is_flag=True, help="Fail (exit 1) if any op has to stay float.")
@click.option(
    "--sparsify",
    is_flag=True,
    help="Also store dense weights that are mostly zero (pruned) sparse, behind a DENSIFY, "
    "where that is smaller and LiteRT runs it (weights stored sparse in the source stay "
    "sparse anyway).",
)
@click.option(
    "--max-size",
    metavar="BYTES|RATIOx",
    help="Fail (exit 1, nothing written) if the quantized model is bigger than this: a number "
    "of bytes (1500000) or a ratio of the input's size (0.5x).",
)
@click.option("--report", "report_path", help="Report file (default: <output stem>.report.json).")
@click.option(
    "--html",
    "html_path",
    metavar="FILE",
    help="Also write a self-contained HTML page: output and per-layer SQNR, each activation's "
    "histogram against its range, the ops left in float.",
)
@engine_option()
@custom_ops_option("Python module that registers numpy kernels for custom ops.")
@click.option(
    "--layer-errors",
    is_flag=True,
    help="Measure each layer's SQNR against the float model (runs both in LiteRT) and list "
    "the worst; all of them go in the report.",
)
@click.option(
    "--analyze",
    is_flag=True,
    help="Also analyse where the error comes from (as qtool analyze does); in the report.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of --synthetic data.")
@click.option("-q", "--quiet", is_flag=True, help="No progress and no summary: one line.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--force", is_flag=True, help="Replace an existing output file.")
def quantize_command(
    model_path: str,
    output: str | None,
    data: tuple[str, ...],
    statistics: tuple[str, ...],
    holdout: tuple[str, ...],
    synthetic: bool,
    samples: int | None,
    input_shapes: tuple[str, ...],
    io_mode: str,
    mode: str,
    weight_bits: str,
    block_size: int | None,
    min_weight_elements: int | None,
    per_tensor_fc: bool,
    target: str | None,
    keep_float: tuple[str, ...],
    strict: bool,
    sparsify: bool,
    max_size: str | None,
    report_path: str | None,
    html_path: str | None,
    engine: str,
    custom_ops: str | None,
    layer_errors: bool,
    analyze: bool,
    seed: int,
    quiet: bool,
    as_json: bool,
    force: bool,
    **planning,
) -> None:
    """Quantize a float .tflite MODEL to int8 following the TFLite int8 spec, or only its
    weights (--mode dynamic, weights or float16; int4 with --weight-bits 4).

    Exit codes: 0 written and compliant; 1 impossible under the options (--strict, an
    unreachable --target-sqnr), or the written model fails the audit or its read-back (nothing
    written); 2 bad input or usage; 3 an internal error; 128 + N when signal N ended the run.
    """
    job = QuantizeJob(
        model_path=model_path,
        max_size=None if max_size is None else SizeLimit.parse(max_size),
        output_path=output,
        report_path=report_path,
        data=data,
        holdout=holdout,
        statistics=statistics,
        synthetic=synthetic,
        samples=samples,
        input_shapes=input_shapes,
        seed=seed,
        strict=strict,
        force=force,
        custom_ops=custom_ops,
        layer_errors=layer_errors,
        analyze=analyze,
        html_path=html_path,
        options=QuantizeOptions(
            io=io_mode,
            per_tensor_fc=per_tensor_fc,
            keep_float=keep_float,
            engine=engine,
            target=target,
            sparsify=sparsify,
            mode=mode,
            weight_bits=int(weight_bits),
            block_size=block_size,
            min_weight_elements=min_weight_elements,
            **options_from(planning),
        ),
    )
    if mode != "full" and not (data or holdout):
        stderr.print(
            Text("qtool: warning:", style="bold yellow")
            + Text(
                " no --data or --holdout: the accuracy is measured on SYNTHETIC random data and "
                "does not reflect real inputs"
            ),
            soft_wrap=True,
        )
    elif synthetic and not data:
        stderr.print(
            Text("qtool: warning:", style="bold yellow")
            + Text(
                " calibrating on SYNTHETIC random data: the activation ranges are not "
                "meaningful and accuracy will be poor"
            ),
            soft_wrap=True,
        )
    noisy = not (quiet or as_json)
    # The weight modes calibrate nothing: no progress bar.
    with progress(stderr, "calibrating", enabled=noisy and mode == "full") as (advance, on_total):
        outcome = quantize_file(
            job,
            progress=advance,
            on_total=on_total,
            search_progress=_search_line if noisy else None,
        )
    if as_json:
        print_json(outcome.report)
    elif not quiet:
        render_summary(outcome)
    else:
        stdout.out(f"wrote {printable(outcome.output_path)}", highlight=False)
    sys.exit(outcome.exit_code)


WORST_LAYERS = 10


def render_accuracy(accuracy: dict, metric: str | None) -> None:
    """Each output's kind, SQNR, fitting SQNR, spread and measures; the user's metric; notes
    on SQNRs set by an output's grid."""
    if not accuracy["outputs"]:
        return
    print_table(
        stdout,
        f"outputs vs float ({accuracy['source']})",
        ("output", "kind", "SQNR dB", "fitting dB", "per sample min/median", "measures"),
        [
            (
                row["name"],
                row["kind"],
                _db(row["sqnr_db"]),
                _db(row["fitting_sqnr_db"]),
                f"{_db(row['sample_min_db'])} / {_db(row['sample_median_db'])}",
                measures_text(row["measures"]),
            )
            for row in accuracy["outputs"]
        ],
    )
    for found in accuracy.get("metric", []):
        print_fields(stdout, [("metric", f"{metric}: {found['value']:.6g}")])
    for row in accuracy["outputs"]:
        if row["floored"]:
            stdout.print(
                Text("note: ", style="cyan")
                + Text(
                    printable(
                        f"{row['name']}'s plain SQNR is set by its grid (its float values are a "
                        "few of its steps): read its decisions and its fitting SQNR (about the "
                        "0.5 threshold)"
                    )
                )
            )


def _search_line(text: str) -> None:
    """A target search's progress: one line per candidate on stderr."""
    stderr.out(text, highlight=False)


def _db(value: float | None) -> str:
    return "exact" if value is None else f"{value:.1f}"


def _target_text(target: dict) -> str:
    parts = []
    if target["sqnr_db"] is not None:
        parts.append(f"{target['sqnr_db']:g} dB")
    if target["metric"] is not None:
        parts.append(f"metric {target['metric']:g}")
    return " and ".join(parts)


def _target_fields(report: dict) -> list[tuple[str, str]]:
    device = report["device"]
    fields = [] if device is None else [("device", f"{device['name']} ({device['title']})")]
    target = report["sqnr_target"]
    if target is None:
        return fields
    remedies = [r for s in target["subgraphs"] for r in s["remedies"]]
    kinds = {
        kind: sum(r["kind"] == kind for r in remedies)
        for kind in ("rounding", "int16", "int8", "float")
    }
    size = report["output_model"]["size_bytes"]
    baseline = target["size_without_remedies_bytes"]
    cost = f", {size - baseline:+,} bytes" if baseline is not None else ""
    return [
        *fields,
        (
            "target",
            f"{_target_text(target)} "
            f"{'reached (confirmed on samples no choice saw)' if target['reached'] else 'NOT reached'}: "
            + (
                f"{kinds['int8']} int8, {kinds['float']} float weights"
                if report["settings"]["mode"] != "full"
                else f"{kinds['rounding']} rounding, {kinds['int16']} int16, {kinds['float']} float "
                "remedies"
            )
            + f"{cost}, {target['seconds']:.0f} s searching ({target['candidates']} candidates)",
        ),
    ]


def _weight_mode_fields(report: dict, counts: dict[str, int]) -> list[tuple[str, str]]:
    """The summary lines of a weight mode: what it stored, and how the ops read it."""
    settings = report["settings"]
    forms: dict[str, int] = {}
    for row in report["ops"]:
        if "weights" in row:
            forms[row["weights"]] = forms.get(row["weights"], 0) + 1
    stored = ", ".join(f"{n} {form}" for form, n in sorted(forms.items())) or "none"
    return [
        ("mode", f"{settings['mode']}: weights {stored}"),
        (
            "operators",
            f"{counts['hybrid']} hybrid, {counts['weight-only']} weight-only, "
            f"{counts['float16']} float16 weights, {counts['float']} float, "
            f"{counts['folded']} folded",
        ),
    ]


def _equalized_fields(report: dict) -> list[tuple[str, str]]:
    """One line on the activations equalization rescaled, when it rescaled any."""
    pairs = report["equalized"]
    if not pairs:
        return []
    channels = sum(p["channels"] for p in pairs)
    largest = max(p["max_gain"] for p in pairs)
    return [
        (
            "equalized",
            f"{channels} channel(s) of {len(pairs)} activation(s) scaled up (up to {largest:g}x)",
        )
    ]


def render_summary(outcome: QuantizeOutcome) -> None:
    report = outcome.report
    counts = summary_counts(report)
    calibrations = report["calibration"]
    samples = sum(c["samples"] for c in calibrations)
    engines = "/".join(sorted({c["engine"] for c in calibrations}))
    seconds = sum(c["seconds"] for c in calibrations)
    synthetic = any(c["synthetic"] for c in calibrations)
    audit = report["audit"]
    status = (
        Text("compliant", style="green")
        if not audit["errors"]
        else Text("NOT compliant", style="red")
    )
    print_fields(
        stdout,
        [
            ("wrote", outcome.output_path),
            ("report", outcome.report_path),
            *([("page", outcome.html_path)] if outcome.html_path else []),
            (
                "size",
                f"{report['input_model']['size_bytes']:,} -> "
                f"{report['output_model']['size_bytes']:,} bytes",
            ),
            *(
                _weight_mode_fields(report, counts)
                if report["settings"]["mode"] != "full"
                else [
                    (
                        "calibration",
                        f"{samples} samples, {engines} engine, {seconds:.2f} s, "
                        f"{report['accuracy']['method']} ranges"
                        + (" (synthetic)" if synthetic else "")
                        + (f", {len(calibrations)} subgraphs" if len(calibrations) > 1 else ""),
                    ),
                    (
                        "operators",
                        f"{counts['int8']} int8, "
                        + (f"{counts['int16']} int16, " if counts["int16"] else "")
                        + f"{counts['float']} float, "
                        f"{counts['integer']} integer, {counts['folded']} folded",
                    ),
                ]
            ),
            *_equalized_fields(report),
            *_target_fields(report),
            ("audit", status + f": {audit['errors']} errors, {audit['warnings']} warnings"),
        ],
    )
    io_rows = []
    for row in report["io"]:
        q = row["quantization"] or {}
        io_rows.append(
            (
                row["role"],
                row["name"],
                row["dtype"],
                str(row["shape"]),
                f"{q['scale'][0]:.6g}" if "scale" in q else "-",
                str(q["zero_point"][0]) if "zero_point" in q else "-",
            )
        )
    print_table(
        stdout,
        "model inputs and outputs",
        ("role", "name", "dtype", "shape", "scale", "zero point"),
        io_rows,
    )
    render_accuracy(report["accuracy"], report["settings"].get("metric"))
    if report["float_ops"]:
        print_table(
            stdout,
            "operators left in float",
            ("#", "op", "reason"),
            [(str(row["index"]), row["op"], row["reason"]) for row in report["float_ops"]],
        )
    if report["layer_errors"]:
        print_table(
            stdout,
            "layers with the largest quantization error",
            ("tensor", "op", "SQNR dB"),
            [
                (
                    row["tensor"],
                    row["op"],
                    "exact" if row["sqnr_db"] is None else f"{row['sqnr_db']:.1f}",
                )
                for row in report["layer_errors"][:WORST_LAYERS]
            ],
        )
    for warning in report["warnings"]:
        stdout.print(Text("warning: ", style="yellow") + Text(printable(warning)))
    for finding in audit["findings"]:
        if finding["severity"] == "error":
            stdout.print(
                Text("audit error ", style="red")
                + Text(printable(f"{finding['rule']}: {finding['message']}"))
            )
