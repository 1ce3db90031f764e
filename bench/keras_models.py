"""Keras models trained here on small real tasks (bench/keras_data.py), exported to float .tflite
with TensorFlow's converter, with their SavedModels (and .keras files) kept and the converter's
baselines written beside them (bench/tf_convert.py). Runs in the TensorFlow venv that
`make corpus` builds (TensorFlow 2.21, Keras 3, tf_keras); bench/corpus.py calls it.

| model | task | graph form in the .tflite |
| keras_lstm_fused | spoken digits, LSTM(48) | tf_keras, batch-1 signature: UNIDIRECTIONAL_SEQUENCE_LSTM |
| keras_lstm_while | spoken digits, LSTM(48) | Keras 3, batch 1: a WHILE loop (cond + body subgraphs) |
| keras_gru_while | spoken digits, GRU(48) | Keras 3, batch 1: a WHILE loop (TFLite has no GRU op) |
| keras_stream_gru | spoken digits, one frame per step | tf.Variable state: VAR_HANDLE / READ_VARIABLE / ASSIGN_VARIABLE, CALL_ONCE |
| keras_cnn_flatten | handwritten digits | dynamic batch [-1, 8, 8, 1], Flatten's shape arithmetic |
| keras_mobilenet_v2 | photograph crops | MobileNetV2 alpha 0.35, 96x96, batch 1 |

Training is deterministic (fixed seeds, TensorFlow's op determinism) and takes about three
minutes on two cores (3 min measured; the converter runs add as much again).

    python -m bench.keras_models OUT_DIR [NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf
import tf_keras

from bench import keras_data
from bench.tf_convert import convert_all

SEED = 1234
UNITS = 48
EPOCHS = 60  # recurrent models: 15 batches an epoch


def seeded() -> None:
    """The same weights and the same tensor names whatever was built before in this process
    (Keras numbers layer names per session)."""
    keras.backend.clear_session()
    tf_keras.backend.clear_session()
    keras.utils.set_random_seed(SEED)
    tf_keras.utils.set_random_seed(SEED)
    tf.config.experimental.enable_op_determinism()


def accuracy(predict: Callable[[np.ndarray], np.ndarray], task: keras_data.Task) -> float:
    logits = predict(task.holdout)
    return float(np.mean(np.argmax(logits, axis=-1) == task.holdout_labels))


def export_keras3(model: keras.Model, saved: Path, shape: tuple) -> None:
    """A SavedModel whose serving signature has the given input shape, and the .keras file."""
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        name="serving_default",
        fn=lambda x: model(x, training=False),
        input_signature=[tf.TensorSpec(shape, tf.float32, name="input")],
    )
    archive.write_out(str(saved), verbose=False)
    model.save(saved.with_name(saved.name.replace("_saved", ".keras")))


def recurrent(layer: str) -> Callable[[Path, keras_data.Task], dict]:
    """A Keras 3 LSTM or GRU classifier, exported with batch 1 (Keras 3 lowers it to WHILE)."""

    def build(saved: Path, task: keras_data.Task) -> dict:
        model = keras.Sequential(
            [
                keras.layers.Input(task.x.shape[1:]),
                getattr(keras.layers, layer)(UNITS),
                keras.layers.Dense(10),
            ]
        )
        fit(model, task, epochs=EPOCHS)
        export_keras3(model, saved, (1, *task.x.shape[1:]))
        return {"holdout_accuracy": accuracy(model.predict, task), "epochs": EPOCHS}

    return build


def lstm_fused(saved: Path, task: keras_data.Task) -> dict:
    """tf_keras's LSTM saved with a batch-1 signature, which the converter fuses into
    UNIDIRECTIONAL_SEQUENCE_LSTM (TF's documented way to convert a Keras LSTM)."""
    model = tf_keras.Sequential(
        [
            tf_keras.layers.Input(task.x.shape[1:]),
            tf_keras.layers.LSTM(UNITS),
            tf_keras.layers.Dense(10),
        ]
    )
    fit(model, task, epochs=EPOCHS)
    run = tf.function(lambda x: model(x, training=False))
    signature = run.get_concrete_function(tf.TensorSpec((1, *task.x.shape[1:]), tf.float32))
    model.save(str(saved), save_format="tf", signatures=signature)
    return {"holdout_accuracy": accuracy(model.predict, task), "epochs": EPOCHS}


def fit(model, task: keras_data.Task, epochs: int, batch: int = 32) -> None:
    lib = tf_keras if isinstance(model, tf_keras.Model) else keras
    model.compile(
        optimizer=lib.optimizers.Adam(1e-3),
        loss=lib.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    model.fit(task.x, task.y, epochs=epochs, batch_size=batch, verbose=0, shuffle=True)


class Streaming(tf.Module):
    """The trained causal conv + GRU classifier run one frame per call, its state in variables:
    the last three frames (the conv's receptive field) and the GRU's hidden state.

    The trained weights enter as constants, as in streaming keyword spotters: only the state is
    a variable. (Calling the Keras layers here would make TF's converter keep their weights as
    uninitialised resource variables, which LiteRT cannot read.)"""

    def __init__(self, conv, cell, head) -> None:
        super().__init__()
        self.conv_kernel, self.conv_bias = (tf.constant(w.numpy()) for w in conv.weights)
        kernel, recurrent, bias = (w.numpy() for w in cell.weights)
        self.kernel, self.recurrent = tf.constant(kernel), tf.constant(recurrent)
        self.input_bias, self.recurrent_bias = tf.constant(bias[0]), tf.constant(bias[1])
        self.head_kernel, self.head_bias = (tf.constant(w.numpy()) for w in head.weights)
        self.frames = tf.Variable(tf.zeros((1, 3, keras_data.MEL_BINS)), trainable=False)
        self.hidden = tf.Variable(tf.zeros((1, UNITS)), trainable=False)

    @tf.function(input_signature=[tf.TensorSpec((1, keras_data.MEL_BINS), tf.float32, "frame")])
    def step(self, frame):
        frames = tf.concat([self.frames[:, 1:], frame[:, None]], axis=1)
        self.frames.assign(frames)
        conv = tf.nn.conv1d(frames, self.conv_kernel, stride=1, padding="VALID")[:, 0]
        features = tf.nn.relu(conv + self.conv_bias)
        # Keras's GRU (reset_after=True): gates z, r and candidate h from input and state
        x_z, x_r, x_h = tf.split(features @ self.kernel + self.input_bias, 3, axis=-1)
        h_z, h_r, h_h = tf.split(self.hidden @ self.recurrent + self.recurrent_bias, 3, axis=-1)
        update, reset = tf.sigmoid(x_z + h_z), tf.sigmoid(x_r + h_r)
        candidate = tf.tanh(x_h + reset * h_h)
        hidden = update * self.hidden + (1 - update) * candidate
        self.hidden.assign(hidden)
        return {"logits": hidden @ self.head_kernel + self.head_bias}


def stream_gru(saved: Path, task: keras_data.Task) -> dict:
    conv = keras.layers.Conv1D(32, 3, activation="relu")
    cell = keras.layers.GRUCell(UNITS)
    head = keras.layers.Dense(10)
    model = keras.Sequential(
        [
            keras.layers.Input(task.x.shape[1:]),
            keras.layers.ZeroPadding1D((2, 0)),  # causal: each step sees itself and 2 before
            conv,
            keras.layers.RNN(cell),
            head,
        ]
    )
    fit(model, task, epochs=EPOCHS)
    module = Streaming(conv, cell, head)
    tf.saved_model.save(module, str(saved), signatures={"serving_default": module.step})
    model.save(saved.with_name(saved.name.replace("_saved", ".keras")))
    # the streamed module must compute what the sequence model does, step by step
    sequence = task.holdout[:1]
    for frame in sequence[0]:
        streamed = module.step(tf.constant(frame[None]))["logits"].numpy()
    gap = float(np.abs(streamed - model.predict(sequence, verbose=0)).max())
    if gap > 1e-3:
        raise AssertionError(f"streaming model differs from the sequence model by {gap}")
    return {"holdout_accuracy": accuracy(model.predict, task), "epochs": EPOCHS}


def cnn_flatten(saved: Path, task: keras_data.Task) -> dict:
    model = keras.Sequential(
        [
            keras.layers.Input(task.x.shape[1:]),
            keras.layers.Conv2D(16, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    fit(model, task, epochs=30)
    export_keras3(model, saved, (None, *task.x.shape[1:]))  # dynamic batch
    return {"holdout_accuracy": accuracy(model.predict, task), "epochs": 30}


def mobilenet_v2(saved: Path, task: keras_data.Task) -> dict:
    model = keras.applications.MobileNetV2(
        input_shape=task.x.shape[1:], alpha=0.35, weights=None, classes=10
    )
    # Keras's momentum 0.999 leaves the moving statistics near their initial values after the
    # 256 steps trained here (inference then sees other activations than training did)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.momentum = 0.9
    # softmax is part of Keras's MobileNetV2 head: train on its probabilities
    model.compile(
        optimizer=keras.optimizers.Adam(2e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=["accuracy"],
    )
    model.fit(task.x, task.y, epochs=8, batch_size=32, verbose=0, shuffle=True)
    export_keras3(model, saved, (1, *task.x.shape[1:]))
    return {"holdout_accuracy": accuracy(model.predict, task), "epochs": 8}


def _as_given(samples: np.ndarray, held_out: bool) -> np.ndarray:
    return samples


def _stream(samples: np.ndarray, held_out: bool) -> np.ndarray:
    """Utterances streamed one after another: 4 to calibrate (392 frames, what the converter
    gets too), 32 held out. A streaming model's error grows along the stream and its state
    carries from one utterance into the next, so 4 held-out utterances rank two int8 models
    differing by a decibel one way and 4 others the other way (measured): judging them needs
    a longer stream."""
    return keras_data.streamed(samples[: 32 if held_out else 4])


# name -> (task, its calibration or held-out samples as the model reads them, builder)
MODELS: dict[str, tuple[str, Callable, Callable]] = {
    "keras_lstm_fused": ("spoken_digits", _as_given, lstm_fused),
    "keras_lstm_while": ("spoken_digits", _as_given, recurrent("LSTM")),
    "keras_gru_while": ("spoken_digits", _as_given, recurrent("GRU")),
    "keras_stream_gru": ("spoken_digits", _stream, stream_gru),
    "keras_cnn_flatten": ("handwritten_digits", _as_given, cnn_flatten),
    "keras_mobilenet_v2": ("photographs", _as_given, mobilenet_v2),
}


def build(name: str, out: Path, tasks: dict) -> dict:
    """Train, export and convert one model unless its record exists; return its record."""
    record_path = out / f"{name}.json"
    if record_path.exists():
        return json.loads(record_path.read_text())
    task_name, samples, builder = MODELS[name]
    if task_name not in tasks:
        tasks[task_name] = getattr(keras_data, task_name)()
    task = tasks[task_name]
    seeded()
    started = time.perf_counter()
    saved = out / f"{name}_saved"
    record = builder(saved, task)
    record["train_seconds"] = round(time.perf_counter() - started, 1)
    calibration, holdout = samples(task.calibration, False), samples(task.holdout, True)
    np.save(out / f"{name}_calib.npy", calibration)
    np.save(out / f"{name}_holdout.npy", holdout)
    record["files"] = convert_all(
        saved, out / f"{name}_calib.npy", out / name, resource_variables=name == "keras_stream_gru"
    )
    record["task"] = task_name
    record_path.write_text(json.dumps(record, indent=2))
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("names", nargs="*", default=list(MODELS))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tasks: dict = {}
    for name in args.names:
        record = build(name, args.out, tasks)
        print(f"{name}: {json.dumps(record)}", flush=True)


if __name__ == "__main__":
    main()
