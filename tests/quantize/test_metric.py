"""The user's own metric (`--metric module:function`, `metric=`): reported by quantize, optimised
by `--target-metric`, gated by `check --metric --min-metric`, from the command line and the
Python API; with a top-1 metric on a classifier and an IoU metric on a box regressor."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import jsonschema
import numpy as np
import pytest

import qtool
from qtool.errors import DataError, UsageError
from qtool.model import model_to_bytes
from qtool.model.build import GraphBuilder
from qtool.quantize import QuantizeOptions
from tests.conftest import DATA, MODELS, ROOT
from tests.quantize.test_cli import assert_error
from tests.quantize.test_cli import qtool as run_qtool

CNN = MODELS / "cnn.tflite"
CNN_DATA = DATA / "cnn_calib.npz"
CNN_HOLDOUT = DATA / "cnn_holdout.npz"

METRICS = textwrap.dedent(
    """
    import numpy as np

    def top1(reference, outputs):
        return float(np.mean(reference[0].argmax(-1) == outputs[0].argmax(-1)))

    def _corners(boxes):
        boxes = boxes.reshape(-1, 4)
        low = np.minimum(boxes[:, :2], boxes[:, 2:])
        high = np.maximum(boxes[:, :2], boxes[:, 2:])
        return low, high

    def iou(reference, outputs):
        (a_low, a_high), (b_low, b_high) = _corners(reference[0]), _corners(outputs[0])
        inner = np.clip(np.minimum(a_high, b_high) - np.maximum(a_low, b_low), 0, None)
        overlap = inner.prod(axis=1)
        union = (a_high - a_low).prod(axis=1) + (b_high - b_low).prod(axis=1) - overlap
        return float(np.mean(overlap / union))

    def raises(reference, outputs):
        raise ValueError("no boxes here")

    def not_a_number(reference, outputs):
        return float("nan")

    def words(reference, outputs):
        return "good"
    """
)


@pytest.fixture
def metrics(tmp_path: Path) -> Path:
    path = tmp_path / "metrics.py"
    path.write_text(METRICS)
    return path


def box_model(path: Path) -> Path:
    """A box regressor: 8 features -> FULLY_CONNECTED -> 4 box corners (ymin, xmin, ymax,
    xmax), boxes about 1 wide around varying centres."""
    rng = np.random.default_rng(3)
    weights = rng.normal(0, 0.3, (4, 8)).astype(np.float32)
    weights[2:] = weights[:2]  # the far corner follows the near one...
    bias = np.array([0.0, 0.0, 1.0, 1.0], np.float32)  # ...one unit away
    builder = GraphBuilder()
    x = builder.input("features", [1, 8])
    boxes = builder.fully_connected(x, weights, bias, "boxes")
    path.write_bytes(model_to_bytes(builder.finish([boxes])))
    return path


def box_data(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 1, (count, 8)).astype(np.float32)


def test_a_top1_metric_from_the_command_line(tmp_path: Path, metrics: Path) -> None:
    out = tmp_path / "cnn_int8.tflite"
    result = run_qtool(
        "quantize", str(CNN), "--data", str(CNN_DATA), "--metric", f"{metrics}:top1",
        "-o", str(out), "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    jsonschema.validate(report, json.loads((ROOT / "schemas" / "report.schema.json").read_text()))
    assert report["settings"]["metric"] == f"{metrics}:top1"
    ((found,),) = [report["accuracy"]["metric"]]
    # The user's top-1 is qtool's own measure of this classifier, on the same samples.
    (output,) = report["accuracy"]["outputs"]
    assert output["kind"] == "classes"
    assert found["value"] == pytest.approx(output["measures"]["top1_agreement"])
    assert set(report["accuracy"]["method_metrics"]) == set(report["accuracy"]["method_scores_db"])
    shown = run_qtool(
        "quantize", str(CNN), "--data", str(CNN_DATA), "--metric", f"{metrics}:top1",
        "-o", str(out), "--force",
    )  # fmt: skip
    assert f"metric: {metrics}:top1: " in shown.stdout


def test_an_iou_metric_as_a_target_from_the_command_line(tmp_path: Path, metrics: Path) -> None:
    model = box_model(tmp_path / "boxes.tflite")
    np.save(tmp_path / "calib.npy", box_data(64, 1))
    out = tmp_path / "boxes_int8.tflite"
    args = ["quantize", str(model), "--data", str(tmp_path / "calib.npy"), "-o", str(out)]
    result = run_qtool(*args, "--metric", f"{metrics}:iou", "--target-metric", "0.97", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    target = report["sqnr_target"]
    assert target["metric"] == 0.97 and target["sqnr_db"] is None and target["reached"]
    assert target["subgraphs"][0]["metric"] >= 0.97
    assert report["accuracy"]["metric"][0]["value"] >= 0.97  # confirmed where no choice looked
    # An IoU no plan reaches: exit 1, nothing written.
    written = out.read_bytes()
    missed = run_qtool(*args, "--force", "--metric", f"{metrics}:iou", "--target-metric", "1.5")
    assert_error(missed, "target metric 1.5 not reached", code=1)
    assert out.read_bytes() == written


def test_metrics_from_the_python_api(tmp_path: Path) -> None:
    def top1(reference, outputs):
        return float(np.mean(reference[0].argmax(-1) == outputs[0].argmax(-1)))

    calibration = np.load(CNN_DATA)
    result = qtool.quantize_model(CNN, calibration, metric=top1)
    assert result.metric == pytest.approx(result.outputs[0]["measures"]["top1_agreement"])
    assert result.report["settings"]["metric"].endswith("top1")

    model = box_model(tmp_path / "boxes.tflite")

    def iou(reference, outputs):
        namespace: dict = {}
        exec(METRICS, namespace)  # the same IoU as the command line's
        return namespace["iou"](reference, outputs)

    boxes = qtool.quantize_model(model, box_data(64, 1), metric=iou, target_metric=0.97)
    assert boxes.metric >= 0.97 and boxes.report["sqnr_target"]["reached"]
    passed = qtool.check_model(
        boxes.model_bytes, reference=model, data=box_data(32, 2), metric=iou, min_metric=0.9
    )
    assert passed.passed and passed.accuracy["metric"] >= 0.9
    (info,) = [f for f in passed.findings if f.rule == "QT-METRIC"]
    assert ">= min-metric 0.9" in info.message
    failed = qtool.check_model(
        boxes.model_bytes, reference=model, data=box_data(32, 2), metric=iou, min_metric=1.01
    )
    assert not failed.passed and [f.rule for f in failed.errors] == ["QT-METRIC-LOW"]


def test_check_gates_on_the_metric(tmp_path: Path, metrics: Path) -> None:
    out = tmp_path / "cnn_int8.tflite"
    made = run_qtool("quantize", str(CNN), "--data", str(CNN_DATA), "-o", str(out))
    assert made.returncode == 0, made.stderr
    gate = ["check", str(out), "--reference", str(CNN), "--data", str(CNN_HOLDOUT)]
    gate += ["--metric", f"{metrics}:top1"]
    passing = run_qtool(*gate, "--min-metric", "0.5", "--format", "json")
    assert passing.returncode == 0, passing.stdout + passing.stderr
    checked = json.loads(passing.stdout)
    jsonschema.validate(checked, json.loads((ROOT / "schemas" / "check.schema.json").read_text()))
    accuracy = checked["models"][0]["accuracy"]
    assert accuracy["metric"] >= 0.5 and accuracy["min_metric"] == 0.5
    failing = run_qtool(*gate, "--min-metric", "1.5")
    assert failing.returncode == 1 and "QT-METRIC-LOW" in failing.stdout


@pytest.mark.parametrize(
    ("function", "fragment"),
    [
        ("raises", "metrics.raises raised ValueError: no boxes here"),
        ("not_a_number", "returned nan, not a finite number"),
        ("words", "returned str, not a number"),
        ("missing", "has no function 'missing'"),
    ],
)
def test_a_bad_metric_is_one_line(tmp_path: Path, metrics: Path, function, fragment) -> None:
    out = tmp_path / "cnn_int8.tflite"
    result = run_qtool(
        "quantize", str(CNN), "--data", str(CNN_DATA), "--metric", f"{metrics}:{function}",
        "-o", str(out),
    )  # fmt: skip
    assert_error(result, fragment)
    assert "--metric" in result.stderr
    assert not out.exists()


def test_a_target_metric_needs_a_metric(tmp_path: Path) -> None:
    result = run_qtool(
        "quantize", str(CNN), "--data", str(CNN_DATA), "--target-metric", "0.9",
        "-o", str(tmp_path / "x.tflite"),
    )  # fmt: skip
    assert_error(result, "target_metric needs a metric")
    with pytest.raises(UsageError, match="needs a metric"):
        QuantizeOptions(target_metric=0.9)
    with pytest.raises(UsageError, match="not a function"):
        qtool.quantize_model(CNN, np.load(CNN_DATA), metric="no colon here")
    check = run_qtool("check", str(CNN), "--min-metric", "0.9")
    assert check.returncode == 2 and "--min-metric needs --metric" in check.stderr


def test_a_metric_error_from_the_api_names_the_function() -> None:
    def broken(reference, outputs):
        return [1, 2]

    with pytest.raises(DataError, match="broken returned list, not a number"):
        qtool.quantize_model(CNN, np.load(CNN_DATA), metric=broken)
