"""What a target costs: `--target-sqnr 30 --allow-float` against the default quantization on the
development models (MediaPipe's), and whether what qtool says holds on held-out photographs.

Per model, in one process, both runs as `qtool quantize` makes them (qtool.jobs: a target that is
not reached, or a result bigger than the float model, is exit 1 and nothing written): bytes
(float, default, target), the target result's ops per precision, seconds of each run and their
ratio (the issue's ceiling: 10x), and for each run the worst output's fitting SQNR qtool
reported (no --holdout: its own estimate) against the same measured independently in LiteRT on
the model's held-out photographs. A target declared reached that the held-out measurement puts
below the target is counted as contradicted.

    python -m bench.target_cost [--target DB] [--json FILE] [MODEL ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from bench.corpus import load_manifest
from bench.honesty import litert_outputs
from qtool.calibrate import load_dataset, model_inputs
from qtool.errors import QtoolError
from qtool.jobs import finish_quantization
from qtool.model import load_model
from qtool.quantize import QuantizeOptions
from qtool.quantize.accuracy import LITERT, measure_outputs

console = Console(width=200)
TARGET_DB = 30.0


def development_models(manifest: dict[str, dict]) -> list[str]:
    """The MediaPipe models qtool was developed on."""
    return [n for n, e in manifest.items() if e["source"]["package"] == "mediapipe"]


def run(entry: dict, options: QuantizeOptions) -> dict:
    """One quantization as the command line makes it: its bytes, ops, seconds and estimate
    against the held-out truth (or why it wrote nothing)."""
    path = Path(entry["file"])
    source = path.read_bytes()
    model = load_model(path)
    started = time.perf_counter()
    try:
        result, report, blob = finish_quantization(
            model,
            {0: load_dataset([entry["calib"]], model_inputs(model))},
            {},
            options,
            input_data=source,
        )
    except QtoolError as exc:
        return {"failure": str(exc), "seconds": time.perf_counter() - started}
    seconds = time.perf_counter() - started
    samples = np.load(entry["holdout"])
    reference = litert_outputs(source, samples)
    reference = [r.reshape(-1, *r.shape[2:]) if r.shape[1:2] == (1,) else r for r in reference]
    got = litert_outputs(blob, samples)
    got = [g.reshape(r.shape) for r, g in zip(reference, got, strict=True)]
    truth = {o.name: o for o in measure_outputs(model, 0, reference, got, LITERT)}
    gaps = [
        abs(min(o.fitting_db, 200) - min(truth[o.name].fitting_db, 200)) for o in result.accuracy
    ]
    modes = [d.mode.value for plan in result.plans.values() for d in plan.decisions]
    return {
        "seconds": seconds,
        "bytes": len(blob),
        "ops": {m: modes.count(m) for m in ("int8", "int16", "float")},
        "said_db": min(o.fitting_db for o in result.accuracy),
        "true_db": min(o.fitting_db for o in truth.values()),
        "gap_db": max(gaps, default=None),
        "target": report["sqnr_target"],
    }


def bench_target_cost(
    names: list[str] | None = None, target_db: float = TARGET_DB, json_path: Path | None = None
) -> list[dict]:
    """Print the table for `names` (default: the development models); returns its rows."""
    manifest = load_manifest()
    names = names or development_models(manifest)
    rows = []
    for name in names:
        entry = manifest[name]
        default = run(entry, QuantizeOptions())
        target = run(entry, QuantizeOptions(target_sqnr=target_db, allow_float=True))
        rows.append(
            {"model": name, "float_bytes": entry["bytes"], "default": default, "target": target}
        )
        console.print(
            f"{name}: default {default['seconds']:.1f} s, target {target['seconds']:.1f} s",
            highlight=False,
        )
        if json_path is not None:  # after every model: a long run cut short keeps what it measured
            json_path.write_text(json.dumps(rows, indent=1))
    report(rows, target_db)
    return rows


def _db(value: float | None) -> str:
    return "-" if value is None else f"{min(value, 200):.1f}"


def report(rows: list[dict], target_db: float) -> None:
    table = Table(title=f"--target-sqnr {target_db:g} --allow-float against the default")
    columns = ["model", "float B", "default B", "target B", "int8/int16/float", "default s"]
    columns += ["target s", "x", "said/true default", "said/true target", "LiteRT"]
    for column in columns:
        table.add_column(column, justify="left" if column == "model" else "right")
    ratios, gaps, contradicted, bigger = [], [], 0, 0
    for row in rows:
        default, target = row["default"], row["target"]
        ratio = target["seconds"] / default["seconds"]
        ratios.append(ratio)
        if default.get("gap_db") is not None:
            gaps.append(default["gap_db"])
        verdict = "-"
        if "bytes" in target:
            bigger += target["bytes"] > row["float_bytes"]
            confirmed = target["true_db"] >= target_db
            contradicted += not confirmed
            verdict = "confirms" if confirmed else "CONTRADICTS"
        ops = target.get("ops")
        table.add_row(
            row["model"],
            f"{row['float_bytes']:,}",
            f"{default['bytes']:,}" if "bytes" in default else default["failure"][:40],
            f"{target['bytes']:,}" if "bytes" in target else "exit 1",
            "-" if ops is None else f"{ops['int8']}/{ops['int16']}/{ops['float']}",
            f"{default['seconds']:.1f}",
            f"{target['seconds']:.1f}",
            f"{ratio:.1f}",
            f"{_db(default.get('said_db'))}/{_db(default.get('true_db'))}",
            f"{_db(target.get('said_db'))}/{_db(target.get('true_db'))}",
            verdict,
        )
    console.print(table)
    for row in rows:
        if "failure" in row["target"]:
            console.print(f"{row['model']}: {row['target']['failure']}", highlight=False)
    if rows:
        console.print(
            f"target runs: {sum('bytes' in r['target'] for r in rows)} of {len(rows)} reached, "
            f"{bigger} bigger than float, {contradicted} contradicted by LiteRT on held-out data; "
            f"time against the default: median {statistics.median(ratios):.1f}x, worst "
            f"{max(ratios):.1f}x (ceiling 10x)",
            highlight=False,
        )
    if gaps:
        console.print(
            f"default estimate (no --holdout) against held-out truth, worst output per model: "
            f"median {statistics.median(gaps):.2f} dB, worst {max(gaps):.2f} dB (goal: median "
            "within 2 dB)",
            highlight=False,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="corpus models (default: MediaPipe's)")
    parser.add_argument("--target", type=float, default=TARGET_DB, help="dB")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    bench_target_cost(args.models, args.target, args.json)


if __name__ == "__main__":
    main()
