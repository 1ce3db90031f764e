"""Graph forms exporters produce, end to end: 0-d and 1-d activations, dynamic input shapes,
control flow (IF, WHILE).

Every command runs on small built models (no TensorFlow), and every produced model is compared
with its float original in LiteRT, with the builtin kernels and with XNNPACK, in dB.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import qtool
from qtool.model import TensorType
from tests.quantize.graph_forms import (
    Form,
    dynamic_form,
    if_form,
    litert_outputs,
    litert_sqnr,
    scalar_form,
    vector_form,
    while_form,
)

FORMS = {"scalar": scalar_form, "vector": vector_form}


def feeds(form: Form, split: dict[str, np.ndarray]) -> list[np.ndarray]:
    from qtool.calibrate import model_inputs

    return [split[spec.name] for spec in model_inputs(form.model)]


@pytest.mark.parametrize("name", sorted(FORMS))
def test_scalar_and_vector_activations_quantize_and_run(name: str) -> None:
    form = FORMS[name]()
    result = qtool.quantize_model(form.model, form.calibration, holdout=form.holdout)
    assert result.compliant
    reported = result.accuracy
    assert len(reported) == len(form.model.subgraphs[0].outputs)
    for xnnpack in (False, True):
        measured = litert_sqnr(form.blob, result.model_bytes, feeds(form, form.holdout), xnnpack)
        assert min(measured) > 20, (xnnpack, measured)
        if xnnpack:  # what qtool reports is LiteRT's (XNNPACK) measurement on the same samples
            assert np.allclose(list(reported.values()), measured, atol=0.05), (reported, measured)


@pytest.mark.parametrize("name", sorted(FORMS))
def test_scalar_and_vector_activations_in_every_command(name: str) -> None:
    form = FORMS[name]()
    searched = qtool.quantize_model(  # toy models: int16 biases outweigh their float weights
        form.model,
        form.calibration,
        holdout=form.holdout,
        target_sqnr=30,
        allow_float=True,
        max_size="4x",
    )
    measured = litert_sqnr(form.blob, searched.model_bytes, feeds(form, form.holdout), True)
    assert min(measured) > 24  # the search aims at 30 dB on its own samples
    analysis = qtool.analyze_model(form.model, form.calibration, holdout=form.holdout)
    (subgraph,) = analysis["subgraphs"]
    whole = min(subgraph["output_sqnr_db"].values())
    # One place quantized alone costs less than all of them together (a scalar's samples once
    # broadcast against the reference's rows: -15 dB).
    alone = [p["alone_worst_db"] for p in subgraph["places"] if p["alone_worst_db"] is not None]
    assert alone and min(alone) > whole - 3, (whole, alone)
    statistics = qtool.calibrate_model(form.model, form.calibration)
    from_statistics = qtool.quantize_model(form.model, statistics=statistics, holdout=form.holdout)
    assert min(from_statistics.accuracy.values()) > 20
    audit = qtool.check_model(from_statistics.model_bytes, reference=form.model, data=form.holdout)
    assert audit.passed and audit.accuracy["outputs"], audit.to_dict()


def test_scalar_activations_in_reports_and_pages(tmp_path: Path) -> None:
    form = scalar_form()
    model = tmp_path / "scalar.tflite"
    model.write_bytes(form.blob)
    np.save(tmp_path / "x.npy", form.calibration["x"])
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "qtool",
            "quantize",
            str(model),
            "--data",
            str(tmp_path / "x.npy"),
            "--analyze",
            "--layer-errors",
            "--optimize-rounding",
            "--html",
            str(tmp_path / "page.html"),
            "-q",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "scalar_int8.report.json").read_text())
    assert {e["tensor"] for e in report["layer_errors"]} >= {"peak", "floor"}
    assert "floor" in (tmp_path / "page.html").read_text()


def qtool_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "qtool", *args], capture_output=True, text=True, timeout=300
    )


def test_dynamic_input_takes_the_shape_of_the_data() -> None:
    form = dynamic_form()
    result = qtool.quantize_model(form.model, form.calibration, holdout=form.holdout)
    (audio,) = [row for row in result.report["io"] if row["role"] == "input"]
    assert audio["shape"] == [1, 64]
    assert result.report["settings"]["input_shapes"] == {"audio": [1, 64]}
    subgraph = result.model.subgraphs[0]
    written = subgraph.tensors[subgraph.inputs[0]]
    assert (written.shape, written.shape_signature) == ([1, 64], [-1, -1])
    assert min(result.accuracy.values()) > 30
    # It runs at the shape it was quantized at, and at any other the signature allows, as the
    # float model does (the run-time SHAPE -> RESHAPE chain is kept, not frozen).
    for width in (64, 128):
        windows = np.tile(form.holdout["audio"], 2)[:, :width]
        for xnnpack in (False, True):
            measured = litert_sqnr(form.blob, result.model_bytes, [windows], xnnpack)
            assert min(measured) > 25, (width, xnnpack, measured)


def test_input_shape_option(tmp_path: Path) -> None:
    form = dynamic_form()
    model = tmp_path / "frontend.tflite"
    model.write_bytes(form.blob)
    np.save(tmp_path / "audio.npy", form.calibration["audio"])
    data = ["--data", str(tmp_path / "audio.npy")]
    chosen = ["--input-shape", "audio=1,64"]
    stats = str(tmp_path / "stats.json")
    assert qtool_cli("calibrate", str(model), *data, *chosen, "-o", stats, "-q").returncode == 0
    named = qtool_cli("quantize", str(model), *data, *chosen, "-o", str(tmp_path / "a.tflite"))
    assert named.returncode == 0, named.stderr
    assert "[1, 64]" in named.stdout
    from_data = qtool_cli("quantize", str(model), *data, "-o", str(tmp_path / "b.tflite"))
    assert (tmp_path / "a.tflite").read_bytes() == (tmp_path / "b.tflite").read_bytes()
    assert from_data.returncode == 0
    from_statistics = qtool_cli(
        "quantize", str(model), "--statistics", stats, *chosen, "-o", str(tmp_path / "c.tflite")
    )
    assert from_statistics.returncode == 0, from_statistics.stderr
    analysis = qtool_cli("analyze", str(model), *data, *chosen, "-q")
    assert analysis.returncode == 0, analysis.stderr
    # The accuracy gate runs the float reference at the data's shape too.
    gate = qtool_cli("check", str(tmp_path / "a.tflite"), "--reference", str(model), *data)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert "worst output SQNR" in gate.stdout


@pytest.mark.parametrize(
    ("shape", "data_width", "fragment"),
    [
        (None, 1, "cannot run at the input shapes audio=[1, 1]: operator 2 (CONV_2D)"),
        ("audio=64", 64, "cannot take shape [64]: the model declares it [-1, -1]"),
        ("sound=1,64", 64, "no such input (inputs: audio)"),
        ("audio=1,0", 64, "positive dimensions"),
    ],
)
def test_input_shapes_it_cannot_take(
    tmp_path: Path, shape: str | None, data_width: int, fragment: str
) -> None:
    model = tmp_path / "frontend.tflite"
    model.write_bytes(dynamic_form().blob)
    np.save(tmp_path / "audio.npy", np.zeros((8, data_width), np.float32))
    chosen = [] if shape is None else ["--input-shape", shape]
    result = qtool_cli("quantize", str(model), "--data", str(tmp_path / "audio.npy"), *chosen)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("qtool: error: ") and fragment in line, line


def besides_size(warnings: list[str]) -> list[str]:
    """The warnings but the size one (these built models are so small that the int8 spec's
    quantization parameters outweigh the bytes int8 weights save)."""
    return [w for w in warnings if "is bigger than its source" not in w]


def float_ops_by_subgraph(model) -> dict[int, list[str]]:
    """Per subgraph, the types of the ops that compute in float (converters aside)."""
    found = {}
    for s, subgraph in enumerate(model.subgraphs):
        found[s] = [
            model.op_type(op)
            for op in subgraph.operators
            if model.op_type(op) not in ("QUANTIZE", "DEQUANTIZE")
            and any(subgraph.tensors[t].dtype == TensorType.FLOAT32 for t in op.inputs + op.outputs)
        ]
    return found


@pytest.mark.parametrize("make", [if_form, while_form], ids=["if", "while"])
def test_control_flow_bodies_are_calibrated_and_quantized(make) -> None:
    form = make()
    result = qtool.quantize_model(form.model, form.calibration, holdout=form.holdout)
    assert result.compliant
    assert besides_size(result.report["warnings"]) == []
    floats = float_ops_by_subgraph(result.model)
    if make is while_form:
        # The loop carries a recurrent state: it runs in int16x8, loop variables and body,
        # with the reason; nothing computes in float.
        rows = {(row["subgraph"], row["op"]): row for row in result.report["ops"]}
        assert rows[(2, "TANH")]["mode"] == "int16"
        assert rows[(2, "FULLY_CONNECTED")]["mode"] == "int16"
        assert rows[(0, "WHILE")]["mode"] == "int16"
        assert "recurrent state (loop variable 1, b_state)" in rows[(0, "WHILE")]["reason"]
        assert all(not found for found in floats.values())
    else:  # every subgraph computes in int8: the caller's control-flow op and what it runs
        assert all(not found for found in floats.values())
    assert qtool.check_model(result.model_bytes).passed
    reported = result.accuracy
    assert reported and min(reported.values()) > 20
    feeds = [form.holdout[name] for name in form.holdout]
    for xnnpack in (False, True):
        measured = litert_sqnr(form.blob, result.model_bytes, feeds, xnnpack)
        assert min(measured) > 20, (xnnpack, measured)
        if xnnpack:
            assert np.allclose(list(reported.values()), measured, atol=0.05)


def test_control_flow_in_every_command(tmp_path: Path) -> None:
    form = if_form()
    searched = qtool.quantize_model(
        form.model, form.calibration, holdout=form.holdout, target_sqnr=30, allow_float=True
    )
    assert min(searched.accuracy.values()) > 24
    # Beyond what int8 branches give, the IF and what it runs are kept float as one place.
    strict = qtool.quantize_model(
        form.model, form.calibration, holdout=form.holdout, target_sqnr=40, allow_float=True
    )
    assert min(strict.accuracy.values()) > 40
    modes = {(row["subgraph"], row["op"]): row["mode"] for row in strict.report["ops"]}
    assert modes[(0, "IF")] == "float" and modes[(1, "LOGISTIC")] == "float"
    assert all("to reach the target SQNR" in w for w in besides_size(strict.report["warnings"]))
    analysis = qtool.analyze_model(form.model, form.calibration, holdout=form.holdout)
    kinds = {place["place"] for place in analysis["subgraphs"][0]["places"]}
    assert kinds == {"weights", "activation", "calls"}
    statistics = qtool.calibrate_model(form.model, form.calibration)
    path = tmp_path / "stats.json"
    statistics.save(path)
    from_file = qtool.quantize_model(form.model, statistics=path, holdout=form.holdout)
    direct = qtool.quantize_model(
        form.model, form.calibration, holdout=form.holdout, calibration="minmax"
    )
    # The statistics of what the IF ran travel with the file, exactly.
    assert float_ops_by_subgraph(from_file.model) == float_ops_by_subgraph(direct.model)
    assert abs(min(from_file.accuracy.values()) - min(direct.accuracy.values())) < 3


def test_a_branch_that_never_ran_stays_float_and_says_why() -> None:
    form = if_form()
    quiet = {"x": form.calibration["x"] * 0.05}  # the peak never reaches the threshold
    result = qtool.quantize_model(form.model, quiet, holdout=form.holdout)
    (warning,) = besides_size(result.report["warnings"])
    assert "then branch of IF op 3 (subgraph 0)" in warning and "never ran" in warning
    modes = {(row["subgraph"], row["op"]): row["mode"] for row in result.report["ops"]}
    assert modes[(0, "IF")] == "float"
    assert modes[(2, "TANH")] == "int8"  # the branch that ran is int8 inside
    feeds = [form.holdout["x"]]
    assert litert_outputs(result.model_bytes, feeds, False)  # it runs
    assert qtool.check_model(result.model_bytes).passed


def test_a_scalar_folded_from_constants_stays_a_scalar() -> None:
    """A shape computed from constants (ADD of two scalars) packed with another scalar: once
    folded it must stay 0-d, or PACK would join a [1] with a []."""
    from qtool.model.build import GraphBuilder

    b = GraphBuilder()
    x = b.input("x", [1, 4])
    one = b.op(
        "ADD",
        [b.constant("a", np.array(1, np.int32)), b.constant("b", np.array(0, np.int32))],
        output_shape=[],
        output_dtype=np.int32,
        options_type="AddOptions",
    )
    shape = b.op(
        "PACK",
        [one, b.constant("width", np.array(4, np.int32))],
        output_shape=[2],
        output_dtype=np.int32,
        options_type="PackOptions",
        options={"values_count": 2, "axis": 0},
    )
    dense = b.fully_connected(x, np.eye(4) * 0.5, None, "dense")
    model = b.finish([b.op("RESHAPE", [dense, shape], output_shape=[1, 4], name="out")])
    samples = np.random.default_rng(6).uniform(-1, 1, (24, 4)).astype(np.float32)
    result = qtool.quantize_model(model, samples)
    assert min(result.accuracy.values()) > 30


def test_a_dynamic_batch_before_control_flow() -> None:
    """A dynamic batch (signature [-1, 8]) kept at its declared shape quantizes although no
    static shape follows the IF; resizing it past the IF is a one-line refusal."""
    form = if_form()
    subgraph = form.model.subgraphs[0]
    subgraph.tensors[subgraph.inputs[0]].shape_signature = [-1, 8]
    result = qtool.quantize_model(form.model, form.calibration, holdout=form.holdout)
    assert min(result.accuracy.values()) > 20
    with pytest.raises(qtool.errors.UsageError, match=r"operator 3 \(IF\) has no shape rule"):
        qtool.quantize_model(form.model, form.calibration, input_shapes={"x": (2, 8)})


def test_call_once_runs_its_initialiser_as_control_flow_runs_a_body() -> None:
    """CALL_ONCE's initialiser runs on an engine of the caller's calls sharing its state (as IF
    and WHILE bodies do): calibration observes its one run per sequence, and the quantized
    stream keeps its initial value on the variable's grid."""
    from tests.recurrent_models import sequences, stream_model

    calibration, holdout = sequences(2, 60, 8, seed=5)
    statistics = qtool.calibrate_model(stream_model(), calibration)
    assert statistics.subgraphs[0].samples == 60 and statistics.of(1).samples == 1
    result = qtool.quantize_model(stream_model(), calibration, holdout=holdout)
    assert not result.result.float_ops and qtool.check_model(result.model_bytes).passed
    assert min(result.accuracy.values()) > 25
