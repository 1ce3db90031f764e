"""Graph forms exporters produce, end to end: 0-d and 1-d activations.

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
from tests.quantize.graph_forms import Form, litert_sqnr, scalar_form, vector_form

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
    searched = qtool.quantize_model(
        form.model, form.calibration, holdout=form.holdout, target_sqnr=30, allow_float=True
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
