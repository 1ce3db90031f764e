"""Per-layer error report: every int8 activation measured against the float model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jsonschema
import numpy as np

from qtool.calibrate import load_dataset, model_inputs
from qtool.model import load_model
from qtool.model.edit import clone_model
from qtool.quantize.analysis import layer_errors
from tests.conftest import DATA, ROOT
from tests.quantize.common import fixture_path, quantized
from tests.quantize.test_cli import qtool


def cnn_errors(int8_model=None):
    result = quantized("cnn")
    dataset = load_dataset([str(DATA / "cnn_calib.npz")], model_inputs(result.float_model))
    return layer_errors(result.float_model, int8_model or result.model, dataset)


def test_every_int8_activation_is_measured_worst_first() -> None:
    errors = cnn_errors()
    result = quantized("cnn")
    float_graph = result.float_model.subgraphs[0]
    produced = {float_graph.tensors[t].name for op in float_graph.operators for t in op.outputs}
    assert {e.tensor for e in errors} == produced | {float_graph.tensors[0].name}
    values = [e.sqnr_db for e in errors]
    assert values == sorted(values)
    assert all(v > 20 for v in values), errors


def test_a_broken_layer_stands_out() -> None:
    result = quantized("cnn")
    broken = clone_model(result.model)
    target = next(t for t in broken.subgraphs[0].tensors if t.name.startswith("cnn_1/pwconv3"))
    # A scale 16x too small saturates this layer's output; the layers before it are unaffected.
    target.quantization.scale = target.quantization.scale / 16
    before = {e.tensor: e.sqnr_db for e in cnn_errors()}
    after = {e.tensor: e.sqnr_db for e in cnn_errors(broken)}
    assert after[target.name] < before[target.name] - 10
    upstream = [name for name in before if name.startswith(("cnn_1/conv1", "cnn_1/dwconv2"))]
    assert upstream and all(math.isclose(after[n], before[n]) for n in upstream)


def test_cli_report_lists_layer_errors(tmp_path: Path) -> None:
    out = tmp_path / "cnn_int8.tflite"
    result = qtool(
        "quantize",
        str(fixture_path("cnn")),
        "--data",
        str(DATA / "cnn_calib.npz"),
        "-o",
        str(out),
        "--layer-errors",
    )
    assert result.returncode == 0, result.stderr
    assert "largest quantization error" in result.stdout
    report = json.loads(out.with_name("cnn_int8.report.json").read_text())
    jsonschema.validate(report, json.loads((ROOT / "schemas" / "report.schema.json").read_text()))
    assert len(report["layer_errors"]) == len(cnn_errors())
    assert np.isfinite([row["sqnr_db"] for row in report["layer_errors"]]).all()
    assert load_model(out).subgraphs  # the model itself is unchanged by the measurement
