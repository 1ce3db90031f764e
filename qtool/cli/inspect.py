"""`qtool inspect MODEL`: what is in a .tflite file."""

from __future__ import annotations

from pathlib import Path

import click

from qtool.cli.render import print_fields, print_json, print_table, stdout
from qtool.model import load_model
from qtool.model.describe import describe_model, format_quant
from qtool.model.sizes import size_breakdown


@click.command("inspect")
@click.argument("model_path", metavar="MODEL", type=click.Path(dir_okay=True))
@click.option("--json", "as_json", is_flag=True, help="Print the description as JSON.")
@click.option("--ops/--no-ops", default=False, help="Also list every operator.")
@click.option(
    "--sizes",
    is_flag=True,
    help="Also say where the file's bytes go: weights by type, biases, sparse indices, "
    "quantization parameters, names, metadata, graph structure, and the ten largest tensors.",
)
@click.option("-q", "--quiet", is_flag=True, help="Print only the summary, not the tensors.")
def inspect_command(model_path: str, as_json: bool, ops: bool, sizes: bool, quiet: bool) -> None:
    """Show a model: summary, then every tensor with dtype, shape and quantization."""
    model = load_model(model_path)
    info = describe_model(model, path=model_path)
    if sizes:
        info["sizes"] = size_breakdown(model, Path(model_path).stat().st_size).to_dict()
    if as_json:
        print_json(info)
        return
    render_description(info, show_ops=ops, summary_only=quiet)
    if sizes:
        render_sizes(info["sizes"])


def render_sizes(sizes: dict) -> None:
    """The byte breakdown as two tables: by category, then the largest tensors."""
    total = sizes["total_bytes"]
    print_table(
        stdout,
        f"bytes ({total:,} in all)",
        ("part", "bytes", "share"),
        [
            (part, f"{count:,}", f"{100 * count / max(total, 1):.1f}%")
            for part, count in sizes["parts"].items()
            if count
        ],
    )
    print_table(
        stdout,
        "largest tensors",
        ("subgraph", "name", "dtype", "shape", "role", "bytes"),
        [
            (
                str(t["subgraph"]),
                t["name"],
                t["dtype"] + (" sparse" if t["sparse"] else ""),
                str(t["shape"]),
                t["role"],
                f"{t['bytes']:,}",
            )
            for t in sizes["largest_tensors"]
        ],
    )


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
