"""`qtool inspect MODEL`: what is in a .tflite file."""

from __future__ import annotations

import click

from qtool.cli.render import print_fields, print_json, print_table, stdout
from qtool.model import load_model
from qtool.model.describe import describe_model, format_quant


@click.command("inspect")
@click.argument("model_path", metavar="MODEL", type=click.Path(dir_okay=True))
@click.option("--json", "as_json", is_flag=True, help="Print the description as JSON.")
@click.option("--ops/--no-ops", default=False, help="Also list every operator.")
@click.option("-q", "--quiet", is_flag=True, help="Print only the summary, not the tensors.")
def inspect_command(model_path: str, as_json: bool, ops: bool, quiet: bool) -> None:
    """Show a model: summary, then every tensor with dtype, shape and quantization."""
    info = describe_model(load_model(model_path), path=model_path)
    if as_json:
        print_json(info)
        return
    render_description(info, show_ops=ops, summary_only=quiet)


def render_description(info: dict, show_ops: bool = False, summary_only: bool = False) -> None:
    summary = info["summary"]
    print_fields(
        stdout,
        [
            ("model", str(info["path"])),
            ("subgraphs", str(summary["subgraphs"])),
            ("operators", ", ".join(f"{k} x{v}" for k, v in summary["ops_by_type"].items())),
            ("tensors", ", ".join(f"{k} x{v}" for k, v in summary["tensors_by_dtype"].items())),
            ("weights", f"{summary['weights_bytes']:,} bytes"),
            ("signatures", ", ".join(summary["signatures"]) or "(none)"),
        ],
    )
    if summary_only:
        return
    for s, subgraph in enumerate(info["subgraphs"]):
        if show_ops:
            print_table(
                stdout,
                f"subgraph {s} operators",
                ("#", "type", "inputs", "outputs"),
                [
                    (str(op["index"]), op["type"], str(op["inputs"]), str(op["outputs"]))
                    for op in subgraph["operators"]
                ],
            )
        io = {t: "input" for t in subgraph["inputs"]} | {t: "output" for t in subgraph["outputs"]}
        rows = []
        for tensor in subgraph["tensors"]:
            kind = io.get(tensor["index"]) or ("const" if tensor["constant"] else "")
            if tensor["sparse"]:
                kind += " sparse"
            rows.append(
                (
                    str(tensor["index"]),
                    tensor["name"],
                    tensor["dtype"],
                    str(tensor["shape"]),
                    kind,
                    format_quant(tensor["quantization"]),
                )
            )
        print_table(
            stdout,
            f"subgraph {s}" + (f" ({subgraph['name']})" if subgraph["name"] else ""),
            ("#", "name", "dtype", "shape", "kind", "quantization"),
            rows,
        )
