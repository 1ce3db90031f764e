"""TensorFlow's converter on a SavedModel: the float .tflite and the converter's own quantized
models, the baselines qtool is measured against. Runs in the TensorFlow venv (bench/corpus.py
builds it); never imported by qtool or its tests.

Settings, exactly (TF 2.21's `tf.lite.TFLiteConverter.from_saved_model`, default signature):
* float: no option.
* tf_int8: full-integer int8, `optimizations=[Optimize.DEFAULT]`, `representative_dataset` =
  the model's calibration file (the samples qtool gets, each fed as a batch of 1, in order),
  `target_spec.supported_ops=[TFLITE_BUILTINS_INT8]`; inputs and outputs stay float (the
  converter's default inference types), like qtool's default `--io float`.
* tf_dynamic: dynamic-range, `optimizations=[Optimize.DEFAULT]` and nothing else (int8 weights,
  float activations).
* tf_float16: `optimizations=[Optimize.DEFAULT]`, `target_spec.supported_types=[tf.float16]`.
A stateful model (tf.Variable state) is converted with `experimental_enable_resource_variables`
in every mode, which keeps its state in VAR_HANDLE / READ_VARIABLE / ASSIGN_VARIABLE.

    python -m bench.tf_convert SAVED_MODEL CALIB.npy OUT_PREFIX [--resource-variables]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

ROOT = Path(__file__).resolve().parent.parent
MODES = ("float", "tf_int8", "tf_dynamic", "tf_float16")


def converter(saved: Path, mode: str, calibration: np.ndarray, resource_variables: bool):
    """The converter for one mode, configured as the module docstring says."""
    result = tf.lite.TFLiteConverter.from_saved_model(str(saved))
    if resource_variables:
        result.experimental_enable_resource_variables = True
    if mode == "float":
        return result
    result.optimizations = [tf.lite.Optimize.DEFAULT]
    if mode == "tf_int8":
        result.representative_dataset = lambda: ([sample[None]] for sample in calibration)
        result.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    elif mode == "tf_float16":
        result.target_spec.supported_types = [tf.float16]
    elif mode != "tf_dynamic":
        raise ValueError(f"unknown mode {mode}")
    return result


def convert_all(
    saved: Path,
    calibration: Path,
    prefix: Path,
    resource_variables: bool = False,
    modes: tuple[str, ...] = MODES,
) -> dict[str, str]:
    """Write `{prefix}.tflite` (float) and `{prefix}_{mode}.tflite` for each mode not yet on
    disk, each in a child process (TF's converter can crash the process: the Keras 3 LSTM's
    int8 calibration segfaults); return `{mode: file name}` for those written or present, and
    `{mode: "error: ..."}` for those the converter refused or crashed on, recorded beside them
    so that a later run does not try again."""
    outcome: dict[str, str] = {}
    for mode in modes:
        target = target_path(prefix, mode)
        if not target.exists() and mode not in recorded_errors(prefix):
            command = [sys.executable, "-m", "bench.tf_convert", str(saved), str(calibration)]
            command += [str(prefix), "--one", mode]
            command += ["--resource-variables"] if resource_variables else []
            child = subprocess.run(command, cwd=ROOT, check=False)
            if child.returncode < 0:
                record_error(prefix, mode, f"converter crashed (signal {-child.returncode})")
            elif child.returncode > 0 and mode not in recorded_errors(prefix):
                raise RuntimeError(f"bench.tf_convert {mode} failed (exit {child.returncode})")
        outcome[mode] = target.name if target.exists() else recorded_errors(prefix)[mode]
    return outcome


def convert_one(
    saved: Path, mode: str, calibration: np.ndarray, prefix: Path, resource_variables: bool
) -> None:
    """One mode, in this process: the model written, or the converter's refusal recorded (its
    last message line)."""
    try:
        blob = converter(saved, mode, calibration, resource_variables).convert()
    except Exception as error:  # the converter's refusal is a result to record
        lines = [line for line in str(error).splitlines() if line.strip()] or [""]
        record_error(prefix, mode, f"{type(error).__name__}: {lines[-1][:300]}")
        return
    target = target_path(prefix, mode)
    partial = target.with_name(target.name + ".partial")
    partial.write_bytes(blob)
    partial.replace(target)


def target_path(prefix: Path, mode: str) -> Path:
    return prefix.with_name(prefix.name + ("" if mode == "float" else f"_{mode}") + ".tflite")


def errors_path(prefix: Path) -> Path:
    return prefix.with_name(prefix.name + "_converter_errors.json")


def recorded_errors(prefix: Path) -> dict[str, str]:
    path = errors_path(prefix)
    return json.loads(path.read_text()) if path.exists() else {}


def record_error(prefix: Path, mode: str, message: str) -> None:
    known = recorded_errors(prefix)
    known[mode] = f"error: {message}"
    errors_path(prefix).write_text(json.dumps(known, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("saved", type=Path)
    parser.add_argument("calibration", type=Path)
    parser.add_argument("prefix", type=Path)
    parser.add_argument("--resource-variables", action="store_true")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--one", choices=MODES, help="convert this mode in this process")
    args = parser.parse_args()
    if args.one:
        calibration = np.load(args.calibration)
        convert_one(args.saved, args.one, calibration, args.prefix, args.resource_variables)
        return
    modes = tuple(args.modes.split(","))
    outcome = convert_all(args.saved, args.calibration, args.prefix, args.resource_variables, modes)
    print(json.dumps(outcome))


if __name__ == "__main__":
    main()
