"""Target profiles as data, their constraints, the placement rules, and `check --target` output."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
from click.testing import CliRunner

from qtool.check import check_paths
from qtool.check.formats.json_report import to_json
from qtool.check.formats.junit import to_junit
from qtool.check.formats.sarif import to_sarif
from qtool.cli import main
from qtool.model import parse_model
from qtool.targets import load_target, placement, target_names
from qtool.targets.constraints import CONSTRAINTS
from qtool.targets.placement import AFTER_PARTITION, FALLBACK, ON_TARGET, place_model
from tests.check.helpers import TF_INT8, tf_model
from tests.check.target_models import int8_model
from tests.check.validators import validate_junit, validate_sarif

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def test_profiles_match_their_schema_and_cite_sources() -> None:
    schema = json.loads((SCHEMAS / "targets" / "target.schema.json").read_text())
    assert {"tflm", "ethos-u", "edgetpu", "xnnpack"} <= set(target_names())
    for name in target_names():
        raw = json.loads((SCHEMAS / "targets" / f"{name}.json").read_text())
        jsonschema.validate(raw, schema)
        target = load_target(name)  # every constraint exists, every source is declared
        assert all(source.get("url") for source in target.sources.values())


def test_constraint_text_states_the_profile_limits() -> None:
    ethos = load_target("ethos-u")
    (stride,) = [u for u in ethos.ops["DEPTHWISE_CONV_2D"] if u.check == "stride-range"]
    assert CONSTRAINTS["stride-range"].text(stride.params) == (
        "Stride height and width must be in [1, 3]"
    )


def test_fallback_reason_names_constraint_and_limits() -> None:
    (placement,) = place_model(parse_model(int8_model("depthwise_stride4")), "ethos-u").ops
    assert placement.status == FALLBACK
    (reason,) = placement.reasons
    assert str(reason) == "[stride-range] Stride height and width must be in [1, 3] (stride 4x4)"


def test_edgetpu_moves_every_op_after_the_first_unsupported_one_to_the_cpu() -> None:
    report = place_model(tf_model("spec_ops_int8"), "edgetpu")
    # Op 0 is the QUANTIZE of the float model input: it runs on the CPU without cutting the graph.
    assert report.ops[0].status == FALLBACK
    assert all(r.check != "after-partition" for r in report.ops[1].reasons)
    first = next(i for i, p in enumerate(report.ops) if i > 0 and p.status != ON_TARGET)
    assert all(p.status == FALLBACK for p in report.ops[first:])
    supported = load_target("edgetpu").ops
    moved = [p for p in report.ops[first + 1 :] if p.op in supported]
    partitioned = [p for p in moved if p.reasons[-1].check == "after-partition"]
    assert partitioned and partitioned[0].op == "CONV_2D"  # supported, yet on the CPU


def test_the_io_conversions_that_do_not_cut_the_graph_are_the_specs(monkeypatch) -> None:
    """The QUANTIZEs of the float inputs and the DEQUANTIZE of an output between other ops run
    on the CPU without moving the rest off the Edge TPU, because the spec lists them as boundary
    ops (schemas/int8_spec.json, check.boundary_ops); a spec without them cuts the graph."""
    model = tf_model("multi_io_int8")
    placed = place_model(model, "edgetpu").ops
    off_target = [p.op for p in placed if p.status != ON_TARGET]
    assert off_target == ["QUANTIZE", "QUANTIZE", "DEQUANTIZE", "DEQUANTIZE"]
    assert placed[7].op == "DEQUANTIZE" and placed[8].status == ON_TARGET
    monkeypatch.setattr(placement, "boundary_ops", frozenset)  # a spec listing none
    cut = place_model(model, "edgetpu").ops
    assert all(p.status == FALLBACK for p in cut[2:])
    assert cut[2].reasons[-1].check == AFTER_PARTITION


def test_cnn_runs_entirely_on_the_edgetpu_with_int8_io() -> None:
    report = place_model(tf_model("cnn_int8_io"), "edgetpu")
    assert report.count(ON_TARGET) == len(report.ops) and report.mac_share == 1.0


def test_mac_share_counts_fallback_convolutions() -> None:
    report = place_model(parse_model(int8_model("depthwise_stride4")), "ethos-u")
    assert report.macs > 0 and report.mac_share == 0.0
    assert report.summary()["fallback"] == 1


def test_unsupported_op_is_an_error_in_every_format(tmp_path) -> None:
    path = TF_INT8 / "spec_ops_int8.tflite"
    (result,) = check_paths([path], target="tflm")
    (error,) = [f for f in result.findings if f.severity == "error"]
    assert error.rule == "QT-TARGET-UNSUPPORTED" and error.op == "SELECT"
    assert "[op-list]" in error.message
    report = to_json([result])
    jsonschema.validate(report, json.loads((SCHEMAS / "check.schema.json").read_text()))
    target = report["models"][0]["target"]
    assert (target["target"], target["cannot_run"], target["ops"]) == ("tflm", 1, 41)
    junit = to_junit([result])
    validate_junit(junit)
    assert 'name="target.cannot_run" value="1"' in junit and "QT-TARGET-UNSUPPORTED" in junit
    sarif = to_sarif([result])
    assert sarif["runs"][0]["properties"]["models"][0]["target"]["cannot_run"] == 1
    assert any(r["ruleId"] == "QT-TARGET-UNSUPPORTED" for r in sarif["runs"][0]["results"])
    validate_sarif(sarif)


def test_cli_target_summary_and_exit_code() -> None:
    runner = CliRunner()
    env = {**os.environ, "COLUMNS": "200"}
    ok = runner.invoke(
        main, ["check", str(TF_INT8 / "cnn_int8_io.tflite"), "--target", "ethos-u"], env=env
    )
    assert ok.exit_code == 0, ok.output
    assert "target ethos-u: 10 of 10 ops (100.0% of 471,488 MACs) run on the Ethos-U NPU" in (
        ok.output
    )
    failing = runner.invoke(
        main, ["check", str(TF_INT8 / "spec_ops_int8.tflite"), "--target", "tflm", "-q"], env=env
    )
    assert failing.exit_code == 1 and "1 cannot run" in failing.output
    unknown = runner.invoke(main, ["check", str(TF_INT8 / "cnn_int8.tflite"), "--target", "npu9"])
    assert unknown.exit_code == 2


def test_hybrid_ops_cannot_run_on_tflm() -> None:
    model = parse_model(int8_model("conv_stride4_valid"))
    subgraph = model.subgraphs[0]
    (conv,) = subgraph.operators
    ifm = subgraph.tensors[conv.inputs[0]]
    ifm.dtype, ifm.quantization = 0, None  # float32 input, int8 weights: a hybrid op
    (placement,) = place_model(model, "tflm").ops
    assert placement.status == "none"
    assert placement.reasons[0].check == "no-hybrid"
