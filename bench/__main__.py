"""`python -m bench`: calibration speed and accuracy on the real models (bench/speed.py,
bench/accuracy.py, bench/corpus_accuracy.py), engine vs LiteRT on the fixtures, and audit time on a 10 MB model.

Every figure is a ratio against a baseline timed in the same process, so results compare across
machines. Targets (from the issues): calibration with the numpy engine takes at most 1.5x
LiteRT's time; `qtool check` of a 10 MB model takes well under a second, and of any graph well
under a second per thousand operators, linearly (bench/wide.py); start-up (import time of `qtool
--help` and `qtool check`) stays under 0.1 s (bench/startup.py); a `--target-sqnr 30
--allow-float` run on the development models is never bigger than float and takes at most 10x
the default quantization (bench/target_cost.py); 10,000 samples calibrate within 1.3x of as
many plain inferences plus the fixed cost, in flat memory (bench/many.py).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import partial
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from bench.accuracy import bench_accuracy
from bench.aeq_time import bench_aeq_time
from bench.corpus import load_manifest, manifest_table
from bench.corpus_accuracy import bench_corpus_accuracy
from bench.many import bench_many
from bench.modes import bench_modes
from bench.phases import bench_phases
from bench.scale import bench_scale
from bench.shards import bench_shards
from bench.size import bench_size
from bench.speed import bench_speed
from bench.startup import bench_startup
from bench.target_cost import bench_target_cost
from bench.targets import bench_targets
from bench.timing import best_of
from bench.wide import bench_wide
from qtool.calibrate import (
    Dataset,
    MinMaxObserver,
    activation_tensors,
    calibrate,
    load_dataset,
    model_inputs,
)
from qtool.check.audit import audit_model
from qtool.model import load_model, model_to_bytes, save_model
from qtool.model.build import GraphBuilder
from qtool.numerics import sqnr_db
from qtool.prepare import prepare_float_model
from qtool.quantize import QuantizeOptions, quantize_loaded

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
SAMPLES = 64
console = Console()


def litert_pass(model_bytes: bytes, feeds: list[np.ndarray], preserve: bool) -> Callable[[], None]:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    resolver = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES if preserve else OpResolverType.AUTO
    interpreter = Interpreter(
        model_content=model_bytes,
        experimental_op_resolver_type=resolver,
        experimental_preserve_all_tensors=preserve,
    )
    interpreter.allocate_tensors()
    inputs = [d["index"] for d in interpreter.get_input_details()]
    tensors = list(range(len(interpreter.get_tensor_details()))) if preserve else []

    def run() -> None:
        for i in range(feeds[0].shape[0]):
            for index, feed in zip(inputs, feeds, strict=True):
                interpreter.set_tensor(index, feed[i : i + 1])
            interpreter.invoke()
            for t in tensors:
                with contextlib.suppress(ValueError):  # tensors without data (placeholders)
                    interpreter.get_tensor(t)

    return run


def preserved_seconds(blob: bytes, feeds: list[np.ndarray]) -> float | None:
    """The LiteRT pass keeping every tensor, timed in a child process: LiteRT 2.x segfaults on
    some models there (unit_norm's RSQRT with every tensor preserved); None when it does."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        try:
            return pool.submit(_time_preserved, blob, feeds).result()
        except BrokenProcessPool:
            return None


def _time_preserved(blob: bytes, feeds: list[np.ndarray]) -> float:
    return best_of(litert_pass(blob, feeds, preserve=True))


def calibrate_once(model, dataset, tensors) -> None:
    calibrate(model, dataset, "numpy", MinMaxObserver(tensors))


def bench_calibration() -> None:
    table = Table(title=f"calibration pass, {SAMPLES} samples (best of 3)")
    for column in (
        "model",
        "numpy engine s",
        "LiteRT invoke s",
        "ratio",
        "LiteRT+tensors s",
        "ratio",
    ):
        table.add_column(column, justify="right")
    ratios, preserved_ratios = [], []
    for path in sorted((FIXTURES / "models").glob("*.tflite")):
        name = path.stem
        model = prepare_float_model(load_model(path)).model
        dataset = load_dataset([str(FIXTURES / "data" / f"{name}_calib.npz")], model_inputs(model))
        feeds = next(dataset.iter_chunks(SAMPLES))
        tensors = activation_tensors(model)
        ours = best_of(partial(calibrate_once, model, dataset, tensors))
        blob = model_to_bytes(model)
        plain = best_of(litert_pass(blob, feeds, preserve=False))
        preserved = preserved_seconds(blob, feeds)
        ratios.append(ours / plain)
        if preserved is not None:
            preserved_ratios.append(ours / preserved)
        table.add_row(
            name,
            f"{ours:.4f}",
            f"{plain:.4f}",
            f"{ours / plain:.2f}x",
            f"{preserved:.4f}" if preserved is not None else "(LiteRT crashed)",
            f"{ours / preserved:.2f}x" if preserved is not None else "-",
        )
    console.print(table)
    console.print(
        f"geometric mean ratio numpy / LiteRT invoke (XNNPACK, outputs only): "
        f"{geometric_mean(ratios):.2f}x\n"
        f"geometric mean ratio numpy / LiteRT keeping every tensor (what calibration needs): "
        f"{geometric_mean(preserved_ratios):.2f}x (target <= 1.5x)"
    )


def geometric_mean(values: list[float]) -> float:
    return float(np.exp(np.mean(np.log(values))))


def ten_megabyte_model(directory: Path) -> Path:
    """A quantized MLP of ten 1024x1024 layers: ~10 MB of int8 weights."""
    rng = np.random.default_rng(0)
    builder = GraphBuilder()
    x = builder.input("x", [1, 1024])
    for layer in range(10):
        weights = rng.standard_normal((1024, 1024)) / 32
        bias = rng.standard_normal(1024) / 10
        x = builder.fully_connected(x, weights, bias, f"fc{layer}", activation=1)
    model = builder.finish([x])
    data = Dataset.from_arrays([rng.standard_normal((8, 1024)).astype(np.float32)], "bench")
    result = quantize_loaded(model, data, QuantizeOptions())
    path = directory / "mlp10mb_int8.tflite"
    save_model(result.model, path)
    return path


def bench_check() -> None:
    from ai_edge_litert.interpreter import Interpreter

    with tempfile.TemporaryDirectory() as tmp:
        path = ten_megabyte_model(Path(tmp))
        size = path.stat().st_size
        audit = best_of(lambda: audit_model(load_model(path)))
        load = best_of(lambda: Interpreter(model_path=str(path)).allocate_tensors())
    table = Table(title="qtool check (load + audit), best of 3")
    for column in ("model size", "check s", "LiteRT load+allocate s", "ratio"):
        table.add_column(column, justify="right")
    table.add_row(f"{size / 1e6:.1f} MB", f"{audit:.4f}", f"{load:.4f}", f"{audit / load:.2f}x")
    console.print(table)


def bench_architectures() -> None:
    """qtool vs TF's converter on real architectures, when bench/architectures.py made them."""
    directory = ROOT / "build" / "architectures"
    if not (directory / "calib.npy").exists():
        console.print(
            "(real architectures: run `python -m bench.architectures` with TensorFlow "
            "installed to add MobileNetV2/V3, ResNet50 and EfficientNetB0 here)"
        )
        return
    holdout = np.load(directory / "holdout.npy")
    table = Table(title="real architectures: quantize + SQNR vs the float model (dB)")
    for column in ("model", "float MB", "quantize s", "audit errors", "qtool dB", "TF dB"):
        table.add_column(column, justify="right")
    for path in sorted(directory.glob("*.tflite")):
        if path.stem.endswith("_tf_int8"):
            continue
        model = load_model(path)
        data = load_dataset([str(directory / "calib.npy")], model_inputs(model))
        started = time.perf_counter()
        result = quantize_loaded(model, data, QuantizeOptions())
        seconds = time.perf_counter() - started
        errors = sum(f.severity == "error" for f in audit_model(result.model))
        reference = litert_outputs(path.read_bytes(), holdout)
        ours = litert_outputs(model_to_bytes(result.model), holdout)
        theirs = litert_outputs((directory / f"{path.stem}_tf_int8.tflite").read_bytes(), holdout)
        table.add_row(
            path.stem,
            f"{path.stat().st_size / 1e6:.1f}",
            f"{seconds:.2f}",
            str(errors),
            f"{sqnr_db(reference, ours):.2f}",
            f"{sqnr_db(reference, theirs):.2f}",
        )
    console.print(table)


def litert_outputs(model_bytes: bytes, samples: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=model_bytes)
    interpreter.allocate_tensors()
    (source,), (sink,) = interpreter.get_input_details(), interpreter.get_output_details()
    outputs = []
    for sample in samples:
        interpreter.set_tensor(source["index"], sample[None])
        interpreter.invoke()
        outputs.append(interpreter.get_tensor(sink["index"]).copy())
    return np.concatenate(outputs)


if __name__ == "__main__":
    console.print(manifest_table(load_manifest()))  # `make corpus` built it
    bench_startup()
    bench_speed()
    bench_phases()
    bench_scale()
    bench_many()
    for profiled in (True, False):
        bench_shards(profile=profiled)
    bench_accuracy()
    bench_corpus_accuracy()
    bench_size(json_path=ROOT / "build" / "size.json")
    bench_modes()
    bench_aeq_time()
    bench_target_cost(json_path=ROOT / "build" / "target_cost.json")
    bench_calibration()
    bench_check()
    bench_wide()
    bench_targets(ten_megabyte_model)
    bench_architectures()
