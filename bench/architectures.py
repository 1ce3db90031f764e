"""Generate real-architecture float models and TF's int8 conversions for `make bench`.

Needs `tensorflow-cpu` (installed by hand; like fixtures/make_fixtures.py it is never a
dependency). Writes to build/architectures/, which is not committed (tens of MB): Keras
MobileNetV2, MobileNetV3-Small, ResNet50 and EfficientNetB0 at 96x96 with random weights and
randomised batch-norm statistics, so that activations are not degenerate. When the folder
exists, `python -m bench` quantizes each model with qtool and compares SQNR with TF's.

    /path/to/tf/python -m bench.architectures
"""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

OUT = Path(__file__).resolve().parent.parent / "build" / "architectures"
SIZE = 96
CALIBRATION, HOLDOUT = 32, 8
ARCHITECTURES = {
    "mobilenet_v2": lambda: keras.applications.MobileNetV2(
        input_shape=(SIZE, SIZE, 3), weights=None, classes=10
    ),
    "mobilenet_v3_small": lambda: keras.applications.MobileNetV3Small(
        input_shape=(SIZE, SIZE, 3), weights=None, classes=10, include_preprocessing=False
    ),
    "resnet50": lambda: keras.applications.ResNet50(
        input_shape=(SIZE, SIZE, 3), weights=None, classes=10
    ),
    "efficientnet_b0": lambda: keras.applications.EfficientNetB0(
        input_shape=(SIZE, SIZE, 3), weights=None, classes=10
    ),
}


def randomise_batch_norm(model: keras.Model, rng: np.random.Generator) -> None:
    # Fresh statistics (mean 0, variance 1) make every BN an identity; real networks are not.
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.moving_mean.assign(rng.normal(0, 0.1, layer.moving_mean.shape).astype("f4"))
            layer.moving_variance.assign(
                rng.uniform(0.5, 1.5, layer.moving_variance.shape).astype("f4")
            )


def convert(model: keras.Model, directory: Path, calibration: np.ndarray) -> tuple[bytes, bytes]:
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(
        name="serving_default",
        fn=lambda x: {"logits": model(x, training=False)},
        input_signature=[tf.TensorSpec((1, SIZE, SIZE, 3), tf.float32, name="image")],
    )
    archive.write_out(str(directory), verbose=False)
    float_model = tf.lite.TFLiteConverter.from_saved_model(str(directory)).convert()
    converter = tf.lite.TFLiteConverter.from_saved_model(str(directory))
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: ([sample[None]] for sample in calibration)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    return float_model, converter.convert()


def main() -> None:
    rng = np.random.default_rng(0)
    OUT.mkdir(parents=True, exist_ok=True)
    calibration = rng.uniform(-1, 1, (CALIBRATION, SIZE, SIZE, 3)).astype(np.float32)
    np.save(OUT / "calib.npy", calibration)
    np.save(OUT / "holdout.npy", rng.uniform(-1, 1, (HOLDOUT, SIZE, SIZE, 3)).astype(np.float32))
    for name, build in ARCHITECTURES.items():
        model = build()
        randomise_batch_norm(model, rng)
        float_model, int8_model = convert(model, OUT / f"saved_{name}", calibration)
        (OUT / f"{name}.tflite").write_bytes(float_model)
        (OUT / f"{name}_tf_int8.tflite").write_bytes(int8_model)
        print(f"{name}: {len(float_model):,} bytes float, {len(int8_model):,} bytes TF int8")


if __name__ == "__main__":
    main()
