"""What a target run costs and may spend: its size against the float model, ops per precision and
time in the report, the float model's bytes as a ceiling, and the time budget."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest

import qtool
from qtool.errors import UsageError
from qtool.quantize import quantizer
from qtool.quantize.search_limits import Limits
from qtool.refusals import TargetNotReachedError
from tests.conftest import DATA, MODELS, ROOT
from tests.quantize.test_cli import assert_error
from tests.quantize.test_cli import qtool as run_qtool

MLP = MODELS / "mlp.tflite"
CNN = MODELS / "cnn.tflite"
SCHEMA = json.loads((ROOT / "schemas" / "report.schema.json").read_text())


def _mlp_data() -> np.ndarray:
    with np.load(DATA / "mlp_calib.npz") as data:
        return data["serving_default_features:0"]


def test_a_target_run_reports_its_bytes_ops_and_time(tmp_path: Path) -> None:
    out = tmp_path / "mlp.tflite"
    argv = ["quantize", str(MLP), "--data", str(DATA / "mlp_calib.npz"), "--target-sqnr", "42"]
    result = run_qtool(*argv, "--allow-float", "-o", str(out))
    assert result.returncode == 0, result.stderr
    report = json.loads(out.with_name("mlp.report.json").read_text())
    jsonschema.validate(report, SCHEMA)
    target = report["sqnr_target"]
    assert target["size_bytes"] == out.stat().st_size == report["output_model"]["size_bytes"]
    assert target["float_model_bytes"] == MLP.stat().st_size
    assert target["size_bytes"] <= target["float_model_bytes"]
    modes = [row["mode"] for row in report["ops"]]
    assert target["ops"] == {m: modes.count(m) for m in ("int8", "int16", "float")}
    assert target["ops"]["float"] >= 1  # 42 dB needs float on this model (as before)
    assert target["seconds"] > 0 and target["candidates"] >= 2
    assert target["budget_seconds"] >= 10 and target["subgraphs"][0]["stopped"] is None
    assert "s searching (" in result.stdout
    assert "target search: 1 candidates" in result.stderr  # progress, one line per candidate


def test_a_spent_budget_is_exit_1_naming_the_best_candidate(tmp_path: Path) -> None:
    out = tmp_path / "cnn.tflite"
    argv = ["quantize", str(CNN), "--data", str(DATA / "cnn_calib.npz"), "--target-sqnr", "45"]
    result = run_qtool(*argv, "--budget", "0.001", "-o", str(out))
    assert_error(result, "target SQNR 45 dB not reached", code=1)
    assert "time budget ran out" in result.stderr and "--budget SECONDS" in result.stderr
    assert "the best candidate measured had worst output" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_float_stage_never_grows_past_the_float_models_bytes(monkeypatch) -> None:
    """With a ceiling no float place fits under, the search that needs float (mlp at 55 dB)
    stops there: exit 1, the reason and the best it measured, nothing returned."""
    real = quantizer.search_limits

    def no_room(*args, **kwargs) -> Limits:
        return dataclasses.replace(real(*args, **kwargs), max_bytes=0)

    monkeypatch.setattr(quantizer, "search_limits", no_room)
    with pytest.raises(TargetNotReachedError, match="bigger than the float model") as caught:
        qtool.quantize_model(MLP, _mlp_data(), target_sqnr=55, allow_float=True)
    assert "int16 and 0 float places" in str(caught.value)


def test_the_budget_is_a_positive_number_of_seconds(tmp_path: Path) -> None:
    argv = ["quantize", str(MLP), "--data", str(DATA / "mlp_calib.npz"), "--target-sqnr", "30"]
    result = run_qtool(*argv, "--budget", "0", "-o", str(tmp_path / "q.tflite"))
    assert result.returncode == 2 and "--budget" in result.stderr
    for bad in (-1, float("nan"), True, "10"):
        with pytest.raises(UsageError, match="budget"):
            qtool.quantize_model(MLP, _mlp_data(), target_sqnr=30, budget=bad)
