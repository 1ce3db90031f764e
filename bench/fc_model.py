"""A model with large FULLY_CONNECTED layers for the int4 comparison of bench/modes.py: a token
MLP on the spoken digits (bench/keras_data.py), trained here in the TensorFlow venv.

Each of the 98 frames of 32 log-mel energies goes through Dense(1024, relu) and Dense(1024,
relu) (a FULLY_CONNECTED of 98 rows, 1M weights), the frames are averaged, then Dense(1024,
relu) (1M weights) and Dense(10). Exported with a batch-1 signature as a float .tflite, its
SavedModel, and TensorFlow's converter's dynamic-range and float16 baselines (bench/tf_convert.py),
with calibration and held-out data and a record of the training.

    python -m bench.fc_model OUT_DIR        # in the TensorFlow venv (bench/corpus.py's)
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np

from bench import keras_data
from bench.keras_models import accuracy, export_keras3, fit, seeded
from bench.tf_convert import convert_all

NAME = "token_mlp"
WIDTH = 1024
EPOCHS = 30


def build(out: Path) -> dict:
    """Train, export and convert; the record written beside the model."""
    seeded()
    started = time.perf_counter()
    task = keras_data.spoken_digits()
    model = keras.Sequential(
        [
            keras.layers.Input(task.x.shape[1:]),
            keras.layers.Dense(WIDTH, activation="relu"),
            keras.layers.Dense(WIDTH, activation="relu"),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(WIDTH, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    fit(model, task, epochs=EPOCHS)
    saved = out / f"{NAME}_saved"
    export_keras3(model, saved, (1, *task.x.shape[1:]))
    np.save(out / f"{NAME}_calib.npy", task.calibration)
    np.save(out / f"{NAME}_holdout.npy", task.holdout)
    baselines = convert_all(
        saved, out / f"{NAME}_calib.npy", out / NAME, modes=("float", "tf_dynamic", "tf_float16")
    )
    record = {
        "task": "spoken digits",
        "holdout_accuracy": accuracy(model.predict, task),
        "epochs": EPOCHS,
        "seconds": round(time.perf_counter() - started, 1),
        "baselines": baselines,
    }
    (out / f"{NAME}.json").write_text(json.dumps(record, indent=2))
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    print(json.dumps(build(out), indent=2))


if __name__ == "__main__":
    main()
