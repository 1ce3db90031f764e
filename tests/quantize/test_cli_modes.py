"""`qtool quantize --mode` and `qtool check` on its outputs, end to end on the command line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from tests.conftest import DATA, MODELS, ROOT
from tests.quantize.test_cli import qtool

SCHEMA = json.loads((ROOT / "schemas" / "report.schema.json").read_text())


@pytest.fixture
def cnn(tmp_path: Path) -> Path:
    path = tmp_path / "cnn.tflite"
    shutil.copy(MODELS / "cnn.tflite", path)
    return path


def test_dynamic_needs_no_data_and_says_what_it_measured_on(cnn: Path) -> None:
    done = qtool("quantize", str(cnn), "--mode", "dynamic")
    assert done.returncode == 0, done.stderr
    assert "SYNTHETIC" in done.stderr
    written = cnn.with_name("cnn_dynamic.tflite")
    report = json.loads(cnn.with_name("cnn_dynamic.report.json").read_text())
    jsonschema.validate(report, SCHEMA)
    assert report["settings"]["mode"] == "dynamic" and report["calibration"] == []
    assert report["settings"]["synthetic"] and "synthetic" in report["accuracy"]["source"]
    hybrid = [row for row in report["ops"] if row["mode"] == "hybrid"]
    assert hybrid and {row["weights"] for row in hybrid} == {"int8 per-axis"}
    assert {row["reason"].split(",")[0] for row in report["float_ops"]} <= {
        f"{n} weights" for n in (144, 320, 384, 432)
    }
    assert "mode: dynamic: weights 2 int8 per-axis" in done.stdout
    checked = qtool("check", str(written))
    assert checked.returncode == 0 and "weights: hybrid 2 int8 per-axis" in checked.stdout


def test_int4_blocks_with_data_measured_on_held_out_samples(cnn: Path) -> None:
    done = qtool(
        "quantize",
        str(cnn),
        "--mode",
        "dynamic",
        "--weight-bits",
        "4",
        "--block-size",
        "32",
        "--min-weight-elements",
        "0",
        "--data",
        str(DATA / "cnn_calib.npz"),
        "--holdout",
        str(DATA / "cnn_holdout.npz"),
        "--json",
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    jsonschema.validate(report, SCHEMA)
    assert Path(report["output_model"]["path"]).name == "cnn_dynamic_int4.tflite"
    forms = {row["op"]: row.get("weights") for row in report["ops"] if row["mode"] == "hybrid"}
    assert forms["FULLY_CONNECTED"].startswith("int4 blockwise 32")
    assert forms["DEPTHWISE_CONV_2D"].startswith("int8 per-axis")  # no int4 hybrid kernel
    assert report["accuracy"]["source"].startswith("measured in LiteRT on 32 samples of held-out")
    assert report["audit"]["errors"] == 0 and report["audit"]["warnings"] == 0


def test_a_weight_mode_target_is_confirmed_on_samples_no_choice_saw(cnn: Path) -> None:
    done = qtool(
        "quantize",
        str(cnn),
        *("--mode", "dynamic", "--weight-bits", "4", "--min-weight-elements", "0"),
        *("--data", str(DATA / "cnn_calib.npz"), "--holdout", str(DATA / "cnn_holdout.npz")),
        *("--target-sqnr", "30", "--json"),
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    jsonschema.validate(report, SCHEMA)
    target = report["sqnr_target"]
    (searched,) = target["subgraphs"]
    assert target["reached"] and searched["search_reached"] and searched["confirmed"]
    assert searched["candidates"] > 1 and searched["stopped"] is None
    assert {r["place"] for r in searched["remedies"]} == {"weights"}
    assert target["size_bytes"] < target["float_model_bytes"]
    (output,) = report["accuracy"]["outputs"]
    assert output["sqnr_db"] >= 30 and output["kind"] == "classes"
    assert report["accuracy"]["independent"] is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mode", "float16", "--weight-bits", "4"], "weight_bits does not apply"),
        (["--mode", "dynamic", "--block-size", "32"], "weight_bits 4"),
        (["--mode", "weights", "--io", "int8"], "io applies to mode full"),
        (["--mode", "dynamic", "--layer-errors"], "layer_errors applies to mode full"),
        (["--mode", "dynamic", "--target-sqnr", "30"], "need data to fit on"),
        (["--mode", "dynamic", "--budget", "30"], "budget applies to mode full"),
    ],
)
def test_weight_mode_options_that_do_not_go_together(cnn: Path, args, message) -> None:
    done = qtool("quantize", str(cnn), *args)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("qtool: error:")
    assert message in done.stderr
    assert not list(cnn.parent.glob("cnn_*.tflite"))


def _dynamic_shape_conv(path: Path) -> None:
    """A CONV_2D (3x3, VALID) declared on a 1x1 image with dynamic height and width: LiteRT
    cannot prepare it at its declared shape, float or quantized (openWakeWord's melspectrogram
    is declared [1, 1] so)."""
    import numpy as np

    from qtool.model import model_to_bytes
    from qtool.model.build import GraphBuilder

    b = GraphBuilder()
    x = b.input("x", [1, 1, 1, 4])
    b.subgraph.tensors[x].shape_signature = [1, -1, -1, 4]
    weights = np.random.default_rng(24).normal(size=(64, 3, 3, 4)).astype(np.float32)
    conv = b.op(
        "CONV_2D",
        [x, b.constant("w", weights), b.constant("bias", np.zeros(64, np.float32))],
        output_shape=[1, 1, 1, 64],
        options_type="Conv2DOptions",
        options={"padding": 1, "stride_w": 1, "stride_h": 1},
    )
    b.subgraph.tensors[conv].shape_signature = [1, -1, -1, 64]
    path.write_bytes(model_to_bytes(b.finish([conv])))


def test_a_model_that_cannot_run_at_its_declared_shape_runs_at_the_shape_given(
    tmp_path: Path,
) -> None:
    source = tmp_path / "dynamic.tflite"
    _dynamic_shape_conv(source)
    done = qtool("quantize", str(source), "--mode", "dynamic")
    assert done.returncode == 2  # as in mode full: the shape it runs at is asked for
    assert "--input-shape" in done.stderr.strip().splitlines()[-1]
    assert not list(tmp_path.glob("dynamic_*"))
    done = qtool("quantize", str(source), "--mode", "dynamic", "--input-shape", "x=1,6,5,4")
    assert done.returncode == 0, done.stderr
    report = json.loads(tmp_path.joinpath("dynamic_dynamic.report.json").read_text())
    jsonschema.validate(report, SCHEMA)
    assert report["settings"]["input_shapes"] == {"x": [1, 6, 5, 4]}
    assert report["io"][0]["shape"] == [1, 6, 5, 4]
    (output,) = report["accuracy"]["outputs"]
    assert output["measured_in"] == "LiteRT" and output["sqnr_db"] > 30
    assert qtool("check", str(tmp_path / "dynamic_dynamic.tflite")).returncode == 0
