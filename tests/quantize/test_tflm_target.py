"""What `quantize --target tflm` writes initialises and runs in the TFLite Micro interpreter,
and the report and summary name the device."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from qtool.cli import main
from qtool.model import model_to_bytes
from qtool.targets.placement import CANNOT_RUN, place_model
from tests.check.oracles import tflm_result
from tests.conftest import DATA, MODELS, float_model_names
from tests.quantize.common import quantized


@pytest.mark.parametrize("name", float_model_names())
def test_every_fixture_quantized_for_tflm_runs_in_tflite_micro(name: str) -> None:
    result = quantized(name, algorithm=(("target", "tflm"),))
    verdict = tflm_result(model_to_bytes(result.model))
    # An op TFLite Micro has no kernel for in any type (spec_ops' SELECT) stops the float model
    # too: check --target tflm says so, and only then may the model not run.
    unrunnable = [p.op for p in place_model(result.model, "tflm").ops if p.status == CANNOT_RUN]
    assert verdict["runs"] == (not unrunnable), (unrunnable, verdict.get("error"))


def test_the_report_and_summary_name_the_device(tmp_path) -> None:
    output = tmp_path / "cnn_tflm.tflite"
    report = tmp_path / "cnn_tflm.report.json"
    arguments = ["quantize", str(MODELS / "cnn.tflite"), "--data", str(DATA / "cnn_calib.npz")]
    arguments += ["--target", "tflm", "-o", str(output), "--report", str(report)]
    result = CliRunner().invoke(main, arguments, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    written = json.loads(report.read_text())
    assert written["device"]["name"] == "tflm"
    assert written["settings"]["device"] == "tflm"
    assert written["sqnr_target"] is None
    assert "TensorFlow Lite Micro" in result.output
