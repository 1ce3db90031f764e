"""`qtool inspect`: summary, per-tensor table, and the same content as JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from qtool.model import load_model
from tests.conftest import MODELS

INT8_CNN = MODELS / "tf_int8" / "cnn_int8.tflite"


def inspect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "qtool", "inspect", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_json_describes_every_tensor_and_op() -> None:
    result = inspect(str(INT8_CNN), "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    model = load_model(INT8_CNN)
    subgraph = model.subgraphs[0]
    summary = info["summary"]
    assert summary["operators"] == len(subgraph.operators)
    assert summary["ops_by_type"]["CONV_2D"] == 3
    assert sum(summary["tensors_by_dtype"].values()) == len(subgraph.tensors)
    assert summary["weights_bytes"] == model.weights_nbytes()
    assert summary["signatures"] == ["serving_default"]
    tensors = info["subgraphs"][0]["tensors"]
    depthwise = next(
        t
        for t in tensors
        if t["constant"]
        and t["dtype"] == "INT8"
        and t["quantization"].get("quantized_dimension") == 3
    )
    assert len(depthwise["quantization"]["scale"]) == depthwise["shape"][3]


def test_text_shows_summary_and_compact_per_axis_params() -> None:
    result = inspect(str(INT8_CNN), "--ops")
    assert result.returncode == 0, result.stderr
    for fragment in (
        "subgraphs",
        "CONV_2D x3",
        "INT8 x",
        "weights",
        "serving_default",
        "per-axis[3] x16",
        "zp -128",
        "operators",
    ):
        assert fragment in result.stdout, fragment
