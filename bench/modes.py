"""The weight modes against TensorFlow's converter and ai-edge-quantizer (issue 24).

For the corpus's development models, the Keras models with a SavedModel (TensorFlow's converter's
dynamic-range and float16 outputs are in the corpus) and a token MLP with large FULLY_CONNECTED
layers (bench/fc_model.py, trained in the TensorFlow venv): each mode's size, worst-output SQNR
against the float model on the held-out data (LiteRT, default XNNPACK delegate, every model run
the same way) and latency as a ratio of the float model's (XNNPACK, one thread, timed in the
same run); beside them TensorFlow's converter's outputs and ai-edge-quantizer's matching recipes
(bench/aeq_peer.py in its own venv). qtool gets the calibration data (int4 weights get their
rounding optimised on it) and never the held-out data.

The issue's goals are checked below the table: dynamic and float16 within 0.5 dB and 1% of the
converter's size on the Keras models (smaller counts as within); int4 blockwise on the token MLP
at least ai-edge-quantizer's SQNR at the same block size.

    python -m bench.modes [MODEL ...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from bench.cache import ROOT, cache_root
from bench.corpus import load_manifest, run_tf
from qtool.calibrate import Dataset
from qtool.check import check_loaded
from qtool.errors import QtoolError
from qtool.model import load_model, model_to_bytes, parse_model
from qtool.numerics import sqnr_db
from qtool.quantize import QuantizeOptions, quantize_loaded

console = Console(width=190)
HOLDOUT_SAMPLES = 128
TIMED_SAMPLES = 16
ROUNDS = 5
MODES = {  # name -> (QuantizeOptions fields, TensorFlow baseline, ai-edge-quantizer recipe)
    "dynamic": ({"mode": "dynamic"}, "tf_dynamic", "dynamic_wi8_afp32"),
    "weights": ({"mode": "weights"}, None, "weight_only_wi8_afp32"),
    "float16": ({"mode": "float16"}, "tf_float16", None),
    "dynamic int4": ({"mode": "dynamic", "weight_bits": 4}, None, "dynamic_wi4_afp32"),
    "dynamic int4 b32": (
        {"mode": "dynamic", "weight_bits": 4, "block_size": 32},
        None,
        "dynamic_wi4b32_afp32",
    ),
}
TOKEN_MLP = "token_mlp"
MARKDOWN = ROOT / "build" / "modes_table.md"


@dataclass
class Figures:
    """One model file's size, worst-output SQNR and latency ratio, or why there is none."""

    bytes: int | None = None
    sqnr: float | None = None
    latency: float | None = None
    failure: str = ""
    findings: list[str] | None = None  # qtool check's errors and warnings on the model

    def cells(self) -> list[str]:
        if self.bytes is None:
            return [self.failure[:40] or "-", "", ""]
        return [
            f"{self.bytes:,}",
            f"{self.sqnr:.2f}" if self.sqnr is not None else "-",
            f"{self.latency:.2f}x" if self.latency is not None else "",
        ]


def interpreter(blob: bytes, sample_shape: tuple[int, ...]):
    """A LiteRT interpreter (default XNNPACK delegate, one thread) fed one sample at a time."""
    from ai_edge_litert.interpreter import Interpreter

    found = Interpreter(model_content=blob, num_threads=1)
    (source,) = found.get_input_details()
    if list(source["shape"]) != [1, *sample_shape]:
        found.resize_tensor_input(source["index"], [1, *sample_shape])
    found.allocate_tensors()
    return found


def outputs(blob: bytes, samples: np.ndarray) -> dict[str, np.ndarray]:
    """Every output on every sample, by the output's name (converters keep the names, not
    always the order)."""
    run = interpreter(blob, samples.shape[1:])
    (source,) = run.get_input_details()
    found: dict[str, list[np.ndarray]] = {}
    for sample in samples:
        run.set_tensor(source["index"], sample[None].astype(source["dtype"]))
        run.invoke()
        for detail in run.get_output_details():
            found.setdefault(detail["name"], []).append(run.get_tensor(detail["index"]).copy())
    return {name: np.concatenate(parts) for name, parts in found.items()}


def worst_sqnr(reference: dict[str, np.ndarray], candidate: dict[str, np.ndarray]) -> float:
    """The lowest SQNR over outputs matched by name (by position when the names differ)."""
    if set(reference) != set(candidate):
        candidate = dict(zip(reference, candidate.values(), strict=True))
    return min(sqnr_db(reference[name], candidate[name]) for name in reference)


def _timer(blob: bytes, samples: np.ndarray):
    """A function timing one round of invokes on the first samples, per invoke."""
    run = interpreter(blob, samples.shape[1:])
    (source,) = run.get_input_details()
    feeds = [sample[None].astype(source["dtype"]) for sample in samples[:TIMED_SAMPLES]]

    def timed() -> float:
        started = time.perf_counter()
        for feed in feeds:
            run.set_tensor(source["index"], feed)
            run.invoke()
        return (time.perf_counter() - started) / len(feeds)

    return timed


def latency_ratio(float_blob: bytes, blob: bytes, samples: np.ndarray) -> float:
    """The model's time per invoke over the float model's: the best of rounds taken in turn
    (on a busy machine, times taken apart drift more than the difference measured)."""
    candidate, reference = _timer(blob, samples), _timer(float_blob, samples)
    best = [float("inf"), float("inf")]
    for _ in range(ROUNDS):
        best = [min(best[0], candidate()), min(best[1], reference())]
    return best[0] / best[1]


def audited(blob: bytes) -> list[str]:
    """`qtool check`'s errors and warnings on a model (what it says of TensorFlow's and
    ai-edge-quantizer's outputs, and of qtool's own)."""
    findings = check_loaded(parse_model(blob, validate=False)).findings
    return [f"{f.rule} {f.op}" for f in findings if f.severity != "info"]


def measured(blob: bytes, samples, reference, float_blob: bytes) -> Figures:
    try:
        return Figures(
            len(blob),
            worst_sqnr(reference, outputs(blob, samples)),
            latency_ratio(float_blob, blob, samples),
            findings=audited(blob),
        )
    except (RuntimeError, ValueError) as error:
        return Figures(len(blob), failure=f"LiteRT: {str(error).splitlines()[0][:30]}")


def aeq_python() -> Path:
    """The python of ai-edge-quantizer's venv, build/aeqvenv of this checkout (`make bench`
    builds it from bench/aeq-requirements.txt)."""
    python = ROOT / "build" / "aeqvenv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"no ai-edge-quantizer venv at {python.parent.parent}: run `make bench`")
    return python


def peer(source: Path, recipe: str, directory: Path) -> tuple[bytes | None, str]:
    """ai-edge-quantizer's output of `recipe` (made once, kept in `directory`), or its
    refusal."""
    out = directory / f"{source.stem}_aeq_{recipe}.tflite"
    refusal = out.with_suffix(".refused")
    if not out.exists() and not refusal.exists():
        done = subprocess.run(
            [str(aeq_python()), "-m", "bench.aeq_peer", str(source), str(out), recipe],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            lines = done.stderr.strip().splitlines() or [f"exit {done.returncode}"]
            refusal.write_text(lines[-1])
    if out.exists():
        return out.read_bytes(), ""
    return None, refusal.read_text()


def token_mlp() -> dict:
    """The token MLP's corpus-like entry, trained in the TensorFlow venv when missing."""
    directory = cache_root() / "modes"
    if not (directory / f"{TOKEN_MLP}.json").exists():
        directory.mkdir(parents=True, exist_ok=True)
        run_tf("bench.fc_model", str(directory))
    return {
        "name": TOKEN_MLP,
        "file": str(directory / f"{TOKEN_MLP}.tflite"),
        "calib": str(directory / f"{TOKEN_MLP}_calib.npy"),
        "holdout": str(directory / f"{TOKEN_MLP}_holdout.npy"),
        "baselines": {
            mode: str(directory / f"{TOKEN_MLP}_{mode}.tflite")
            for mode in ("tf_dynamic", "tf_float16")
        },
    }


def entries(names: list[str] | None) -> list[dict]:
    """The development models, all of MediaPipe's, the Keras models with converter baselines,
    the token MLP."""
    corpus = load_manifest()
    chosen = [
        entry
        for entry in corpus.values()
        if entry["role"] == "development"
        or entry.get("baselines")
        or entry["source"].get("package") == "mediapipe"
    ]
    chosen.append(token_mlp())
    return [entry for entry in chosen if not names or entry["name"] in names]


def bench_modes(names: list[str] | None = None) -> list[dict]:
    """Print the modes table and the issue's goals; returns the rows."""
    scratch = cache_root() / "modes" / "peers"
    scratch.mkdir(parents=True, exist_ok=True)
    table = Table(
        title="weight modes: bytes, worst-output SQNR dB (held-out, LiteRT), latency vs float "
        "(XNNPACK, 1 thread); TensorFlow's converter; ai-edge-quantizer"
    )
    for column in ("model", "mode", "qtool bytes", "dB", "latency", "TF bytes", "dB", "latency"):
        table.add_column(column, justify="left" if column in ("model", "mode") else "right")
    for column in ("aeq bytes", "dB", "latency"):
        table.add_column(column, justify="right")
    rows = []
    for entry in entries(names):
        rows += _model_rows(entry, scratch, table)
    console.print(table)
    _goals(rows)
    MARKDOWN.parent.mkdir(parents=True, exist_ok=True)
    MARKDOWN.write_text(markdown(rows))
    console.print(f"markdown tables (docs/quantize.md): {MARKDOWN}")
    return rows


def _model_rows(entry: dict, scratch: Path, table: Table) -> list[dict]:
    source = Path(entry["file"])
    model = load_model(source)
    samples = np.load(entry["holdout"])[:HOLDOUT_SAMPLES].astype(np.float32)
    calibration = np.load(entry["calib"]).astype(np.float32)
    blob = source.read_bytes()
    try:
        reference = outputs(blob, samples)
    except (RuntimeError, ValueError) as error:
        table.add_row(entry["name"], "-", f"float model: {str(error)[:60]}")
        return []
    rows = []
    for mode, (fields, baseline, recipe) in MODES.items():
        try:
            result = quantize_loaded(
                model,
                {0: Dataset.from_arrays([calibration])},
                QuantizeOptions(**fields),
            )
            ours = measured(model_to_bytes(result.model), samples, reference, blob)
        except QtoolError as error:
            ours = Figures(failure=str(error).splitlines()[0])
        theirs = Figures()
        path = entry.get("baselines", {}).get(baseline or "", "")
        if path.endswith(".tflite") and Path(path).exists():
            theirs = measured(Path(path).read_bytes(), samples, reference, blob)
        elif path:
            theirs = Figures(failure=path)
        peer_figures = Figures()
        if recipe is not None:
            peer_blob, refusal = peer(source, recipe, scratch)
            peer_figures = (
                measured(peer_blob, samples, reference, blob)
                if peer_blob is not None
                else Figures(failure=refusal)
            )
        table.add_row(entry["name"], mode, *ours.cells(), *theirs.cells(), *peer_figures.cells())
        rows.append(
            {"model": entry["name"], "mode": mode, "qtool": ours, "tf": theirs, "aeq": peer_figures}
        )
    return rows


def _cell(figures: Figures) -> str:
    if figures.bytes is None:
        return figures.failure[:40] or "-"
    db = "-" if figures.sqnr is None else f"{figures.sqnr:.1f}"
    return f"{figures.bytes / 1000:,.0f} kB, {db} dB"


def markdown(rows: list[dict]) -> str:
    """The docs' tables: qtool's every mode on every model (size, worst-output SQNR, what
    `qtool check` said), and the comparisons with TensorFlow's converter and ai-edge-quantizer."""
    modes = list(MODES)
    by_model: dict[str, dict[str, dict]] = {}
    for row in rows:
        by_model.setdefault(row["model"], {})[row["mode"]] = row
    lines = [
        "| model | " + " | ".join(modes) + " | check |",
        "|---|" + "---|" * (len(modes) + 1),
    ]
    for model, found in by_model.items():
        flagged = sum(bool(found[m]["qtool"].findings) for m in modes if m in found)
        verdict = "compliant" if not flagged else f"{flagged} modes with findings"
        cells = [_cell(found[m]["qtool"]) if m in found else "-" for m in modes]
        lines.append(f"| {model} | " + " | ".join(cells) + f" | {verdict} |")
    lines += [
        "",
        "| model | mode | qtool | TensorFlow's converter | ai-edge-quantizer |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        if row["tf"].bytes is None and row["model"] != TOKEN_MLP:
            continue
        cells = [_cell(row[tool]) for tool in ("qtool", "tf", "aeq")]
        lines.append(f"| {row['model']} | {row['mode']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _goals(rows: list[dict]) -> None:
    """The issue's goals, each comparison printed with its verdict, and what `qtool check` said
    of every model measured."""
    for tool in ("qtool", "tf", "aeq"):
        audits = [row[tool] for row in rows if row[tool].findings is not None]
        flagged = [
            f"{row['model']} {row['mode']}: {', '.join(row[tool].findings)}"
            for row in rows
            if row[tool].findings
        ]
        console.print(
            f"qtool check on {len(audits)} {tool} outputs: {len(flagged)} with errors or "
            "warnings" + "".join(f"\n  {line}" for line in flagged)
        )
    for row in rows:
        ours, theirs, peer_figures = row["qtool"], row["tf"], row["aeq"]
        if theirs.bytes and ours.bytes:  # every model with a SavedModel
            size = ours.bytes / theirs.bytes - 1
            db = ours.sqnr - theirs.sqnr
            met = db >= -0.5 and size <= 0.01
            console.print(
                f"{row['model']} {row['mode']}: {db:+.2f} dB, {size:+.1%} size against "
                f"TensorFlow's converter: {'met' if met else 'NOT met'} (goal: within 0.5 dB, "
                "within 1% of its size)"
            )
        if row["model"] == TOKEN_MLP and row["mode"].endswith("b32") and peer_figures.sqnr:
            db = ours.sqnr - peer_figures.sqnr
            console.print(
                f"{TOKEN_MLP} int4 blockwise 32: {ours.sqnr:.2f} dB against ai-edge-quantizer's "
                f"{peer_figures.sqnr:.2f} ({db:+.2f} dB): {'met' if db >= 0 else 'NOT met'}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*")
    bench_modes(parser.parse_args().models or None)


if __name__ == "__main__":
    sys.exit(main())
