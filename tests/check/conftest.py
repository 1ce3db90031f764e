from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from qtool.model import QuantParams, save_model
from tests.check.helpers import TF_INT8, mutate, op_index, op_tensor, tf_model
from tests.conftest import MODELS


def write_model_files(folder: Path) -> dict[str, Path]:
    """Model files for report and CLI tests, by what an audit finds in them.

    clean: none; errors: an error and a warning; warnings: one warning; float: not quantized;
    unreadable: not a TFLite file.
    """
    cnn = tf_model("cnn_int8")
    conv = op_index(cnn, "CONV_2D")
    x, w, bias = (op_tensor(cnn, conv, "input", p) for p in range(3))

    def weight_and_bias(m) -> None:
        tensors = m.subgraphs[0].tensors
        weights = m.tensor_data(tensors[w]).copy()
        weights.flat[0] = -128
        m.set_tensor_data(m.subgraphs[0], w, weights)
        biases = m.tensor_data(tensors[bias]).copy()
        biases[0] = 2**31 - 1
        m.set_tensor_data(m.subgraphs[0], bias, biases)

    def per_tensor(m) -> None:
        tensors = m.subgraphs[0].tensors
        largest = tensors[w].quantization.scale.max()
        tensors[w].quantization = QuantParams.of(largest, 0)
        tensors[bias].quantization = QuantParams.of(
            tensors[x].quantization.scale[0] * np.float32(largest), 0
        )

    files = {"clean": TF_INT8 / "cnn_int8.tflite", "float": MODELS / "mlp.tflite"}
    for name, edit in (("errors", weight_and_bias), ("warnings", per_tensor)):
        files[name] = folder / f"{name}.tflite"
        save_model(mutate(cnn, edit)[0], files[name])
    files["unreadable"] = folder / "unreadable.tflite"
    files["unreadable"].write_bytes(b"this is not a flatbuffer")
    return files


@pytest.fixture(scope="session")
def model_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The models of `write_model_files`, written once per session."""
    return write_model_files(tmp_path_factory.mktemp("models"))
