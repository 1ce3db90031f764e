"""The accuracy gate: `check QUANTIZED --reference FLOAT --data D --min-sqnr DB`, and qtool.evaluate."""

from __future__ import annotations

import json
import os

import jsonschema
import pytest
from click.testing import CliRunner

from qtool.calibrate import load_dataset, model_inputs
from qtool.check import AccuracyGate, check_paths
from qtool.check.formats.json_report import to_json
from qtool.check.formats.junit import to_junit
from qtool.check.formats.sarif import to_sarif
from qtool.cli import main
from qtool.evaluate import compare_models
from qtool.model import load_model
from tests.check.helpers import TF_INT8
from tests.check.validators import validate_junit, validate_sarif
from tests.conftest import DATA, MODELS, manifest

HOLDOUT = str(DATA / "cnn_holdout.npz")
CNN_INT8 = TF_INT8 / "cnn_int8.tflite"


def _compare(name: str, engine: str):
    entry = manifest()[name]
    reference = load_model(MODELS / f"{entry['float_model']}.tflite")
    data = load_dataset(
        [str(DATA / f"{entry['float_model']}_holdout.npz")], model_inputs(reference)
    )
    return compare_models(reference, load_model(TF_INT8 / f"{name}.tflite"), data, engine)


@pytest.mark.parametrize("name", ["cnn_int8", "cnn_int8_io", "mixed_ops_int8", "multi_io_int8"])
def test_litert_sqnr_matches_the_manifest(name: str) -> None:
    """The fixtures' manifest records TF's SQNR per output, measured with TensorFlow."""
    comparison = _compare(name, "litert")
    recorded = manifest()[name]["sqnr_db_vs_float"]
    assert comparison.engine == "litert" and comparison.samples == 32
    ours = sorted(o.sqnr_db for o in comparison.outputs)
    # TF measured with its own interpreter's kernels; LiteRT's reference kernels round a little
    # differently in LOGISTIC/TANH tables.
    assert ours == pytest.approx(sorted(recorded.values()), abs=1.5)


@pytest.mark.parametrize("name", ["cnn_int8", "mixed_ops_int8", "multi_io_int8", "spec_ops_int8"])
def test_simulation_is_close_to_litert(name: str) -> None:
    simulated, real = _compare(name, "simulate"), _compare(name, "litert")
    for sim, lit in zip(simulated.outputs, real.outputs, strict=True):
        assert abs(sim.sqnr_db - lit.sqnr_db) < 2.0, (sim, lit)


def test_top1_only_for_class_scores() -> None:
    comparison = _compare("multi_io_int8", "litert")
    kinds = sorted(o.kind for o in comparison.outputs)
    assert kinds == ["classes", "regression"]  # a softmax head and a regression
    (classes,) = [o for o in comparison.outputs if o.kind == "classes"]
    assert classes.measures["top1_agreement"] >= 0.9
    (regression,) = [o for o in comparison.outputs if o.kind == "regression"]
    assert "top1_agreement" not in regression.measures
    assert 0 < regression.measures["relative_error"] < 0.2


def test_gate_fails_below_threshold_in_every_format() -> None:
    gate = AccuracyGate(str(MODELS / "cnn.tflite"), (HOLDOUT,), min_sqnr=40)
    (result,) = check_paths([CNN_INT8], accuracy=gate)
    (finding,) = [f for f in result.findings if f.rule == "QT-SQNR-LOW"]
    assert finding.severity == "error" and "< min-sqnr 40 dB" in finding.message
    report = to_json([result])
    jsonschema.validate(
        report, json.loads((MODELS.parents[1] / "schemas" / "check.schema.json").read_text())
    )
    assert report["models"][0]["accuracy"]["min_sqnr"] == 40
    junit, sarif = to_junit([result]), to_sarif([result])
    validate_junit(junit)
    assert "QT-SQNR-LOW" in junit and "accuracy.sqnr_db." in junit
    assert any(r["ruleId"] == "QT-SQNR-LOW" for r in sarif["runs"][0]["results"])
    validate_sarif(sarif)


def test_gate_passes_as_info() -> None:
    (result,) = check_paths(
        [CNN_INT8], accuracy=AccuracyGate(str(MODELS / "cnn.tflite"), (HOLDOUT,))
    )
    (finding,) = result.findings
    assert (finding.rule, finding.severity) == ("QT-SQNR", "info")
    assert "(classes)" in finding.message and "top-1 100.0%" in finding.message


def test_cli_gate() -> None:
    runner = CliRunner()
    env = {**os.environ, "COLUMNS": "200"}
    args = ["check", str(CNN_INT8), "--reference", str(MODELS / "cnn.tflite"), "--data", HOLDOUT]
    passing = runner.invoke(main, [*args, "-q"], env=env)
    assert passing.exit_code == 0 and "worst output SQNR 30.5" in passing.output
    failing = runner.invoke(main, [*args, "--min-sqnr", "35", "--format", "json"], env=env)
    assert failing.exit_code == 1
    assert json.loads(failing.output)["models"][0]["summary"]["errors"] == 1
    alone = runner.invoke(main, ["check", str(CNN_INT8), "--reference", str(MODELS / "cnn.tflite")])
    assert alone.exit_code == 2 and "--data" in alone.output
