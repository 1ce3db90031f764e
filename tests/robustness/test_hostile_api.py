"""The Python API probed as a careless or hostile caller would (issue 21): every entry checks its
arguments and raises a QtoolError subclass naming the parameter; a generator object is read
only as far as `samples`; a model given as bytes is audited as the same model given as a path.

Found by trying: an unknown keyword and `samples='10'` raised TypeError, `samples=-5` was
accepted, a generator object was read whole (`list()`) before `samples` applied, and
`check(bytes)` raised where `check(path)` returned a QT-MODEL-INVALID finding.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

import qtool
from qtool.errors import QtoolError
from qtool.model import load_model, model_to_bytes
from tests.conftest import DATA, MODELS

MLP = MODELS / "mlp.tflite"
MLP_INT8 = MODELS / "tf_int8" / "mlp_int8.tflite"


def _samples() -> np.ndarray:
    return np.load(DATA / "mlp_calib.npz")["serving_default_features:0"][:16]


PROBES = {
    "quantize unknown keyword": (
        lambda: qtool.quantize_model(MLP, _samples(), calibraton="mse"),
        "calibraton",
    ),
    "quantize samples text": (
        lambda: qtool.quantize_model(MLP, _samples(), samples="10"),
        "samples",
    ),
    "quantize samples negative": (
        lambda: qtool.quantize_model(MLP, _samples(), samples=-5),
        "samples",
    ),
    "quantize samples bool": (
        lambda: qtool.quantize_model(MLP, _samples(), samples=True),
        "samples",
    ),
    "quantize keep_float string": (
        lambda: qtool.quantize_model(MLP, _samples(), keep_float="ADD"),
        "keep_float",
    ),
    "quantize strict text": (lambda: qtool.quantize_model(MLP, _samples(), strict="yes"), "strict"),
    "quantize statistics number": (lambda: qtool.quantize_model(MLP, statistics=3), "statistics"),
    "quantize progress text": (
        lambda: qtool.quantize_model(MLP, _samples(), progress="bar"),
        "progress",
    ),
    "calibrate samples zero": (
        lambda: qtool.calibrate_model(MLP, _samples(), samples=0),
        "samples",
    ),
    "calibrate engine": (lambda: qtool.calibrate_model(MLP, _samples(), engine="gpu"), "engine"),
    "analyze unknown keyword": (lambda: qtool.analyze_model(MLP, _samples(), bogus=1), "bogus"),
    "check min_sqnr text": (
        lambda: qtool.check_model(MLP_INT8, reference=MLP, data=_samples(), min_sqnr="20"),
        "min_sqnr",
    ),
    "check per_tensor_fc text": (
        lambda: qtool.check_model(MLP_INT8, per_tensor_fc="no"),
        "per_tensor_fc",
    ),
    "check target": (lambda: qtool.check_model(MLP_INT8, target="gpu"), "target"),
    "check fail_on": (lambda: qtool.check_model(MLP_INT8, fail_on="never"), "fail_on"),
}


@pytest.mark.parametrize("name", list(PROBES))
def test_bad_arguments_raise_qtool_errors_naming_the_parameter(name: str) -> None:
    call, parameter = PROBES[name]
    with pytest.raises(QtoolError) as caught:
        call()
    assert f"`{parameter}`" in str(caught.value)


def test_a_generator_object_is_read_only_up_to_samples() -> None:
    rows = _samples()
    pulled = itertools.count()

    def endless():
        for row in itertools.cycle(rows):
            if next(pulled) >= 100:
                raise RuntimeError("read past what samples allows")
            yield [row[None]]

    statistics = qtool.calibrate_model(MLP, endless(), samples=8)
    assert statistics.samples == 8
    assert next(pulled) <= 9  # 8 samples read, and not one more asked for


def test_a_generator_object_serves_every_pass_of_quantize() -> None:
    """Quantize reads its data more than once (calibration, then the plan's moments): the
    samples read on the first pass are kept for the others."""
    result = qtool.quantize_model(MLP, (row[None] for row in _samples()), samples=12)
    assert sum(c["samples"] for c in result.report["calibration"]) == 12


def test_check_of_bytes_finds_what_check_of_the_path_finds(tmp_path: Path) -> None:
    model = load_model(MLP_INT8)
    model.subgraphs[0].tensors[model.subgraphs[0].outputs[0]].shape = [1, 3]
    path = tmp_path / "wrong_shape.tflite"
    path.write_bytes(model_to_bytes(model))

    def findings(result) -> list[tuple]:
        return [(f.rule, f.op_index, f.message) for f in result.findings]

    by_path = qtool.check_model(path)
    assert {f.rule for f in by_path.findings} == {"QT-MODEL-INVALID"}
    assert findings(qtool.check_model(path.read_bytes())) == findings(by_path)
    assert findings(qtool.check_model(bytearray(path.read_bytes()))) == findings(by_path)
