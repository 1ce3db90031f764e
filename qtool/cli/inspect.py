"""`qtool inspect MODEL`: what is in a .tflite file."""

from __future__ import annotations

import click
from rich.table import Table
from rich.text import Text

from qtool.cli.render import print_json, stdout
from qtool.model import load_model
from qtool.model.describe import describe_model, format_quant


@click.command("inspect")
@click.argument("model_path", metavar="MODEL", type=click.Path(dir_okay=True))
@click.option("--json", "as_json", is_flag=True, help="Print the description as JSON.")
@click.option("--ops/--no-ops", default=False, help="Also list every operator.")
def inspect_command(model_path: str, as_json: bool, ops: bool) -> None:
    """Show a model: summary, then every tensor with dtype, shape and quantization."""
    info = describe_model(load_model(model_path), path=model_path)
    if as_json:
        print_json(info)
        return
    render_description(info, show_ops=ops)


def render_description(info: dict, show_ops: bool = False) -> None:
    summary = info["summary"]
    head = Table.grid(padding=(0, 2))
    head.add_row("[bold]model[/]", Text(str(info["path"])))
    head.add_row("subgraphs", str(summary["subgraphs"]))
    head.add_row(
        "operators", Text(", ".join(f"{k} x{v}" for k, v in summary["ops_by_type"].items()))
    )
    head.add_row("tensors", ", ".join(f"{k} x{v}" for k, v in summary["tensors_by_dtype"].items()))
    head.add_row("weights", f"{summary['weights_bytes']:,} bytes")
    head.add_row("signatures", Text(", ".join(summary["signatures"]) or "(none)"))
    stdout.print(head)
    for s, subgraph in enumerate(info["subgraphs"]):
        if show_ops:
            op_table = Table(title=f"subgraph {s} operators", title_justify="left")
            for column in ("#", "type", "inputs", "outputs"):
                op_table.add_column(column)
            for op in subgraph["operators"]:
                op_table.add_row(
                    str(op["index"]), Text(op["type"]), str(op["inputs"]), str(op["outputs"])
                )
            stdout.print(op_table)
        table = Table(
            title=Text(f"subgraph {s}" + (f" ({subgraph['name']})" if subgraph["name"] else "")),
            title_justify="left",
        )
        for column in ("#", "name", "dtype", "shape", "kind", "quantization"):
            table.add_column(column, overflow="fold")
        io = {t: "input" for t in subgraph["inputs"]} | {t: "output" for t in subgraph["outputs"]}
        for tensor in subgraph["tensors"]:
            kind = io.get(tensor["index"]) or ("const" if tensor["constant"] else "")
            if tensor["sparse"]:
                kind += " sparse"
            table.add_row(
                str(tensor["index"]),
                Text(tensor["name"]),
                tensor["dtype"],
                str(tensor["shape"]),
                kind,
                format_quant(tensor["quantization"]),
            )
        stdout.print(table)
