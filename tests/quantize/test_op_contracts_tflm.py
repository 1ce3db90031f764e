"""The kernel contract in TFLite Micro: every op of the int8 and 16x8 tables, quantized by
`quantize --target tflm` from the one-op float models of the LiteRT op-contract tests
(test_op_contracts.py), runs in TFLite Micro's interpreter where the tflm profile places the
model there, within the LSBs stated for LiteRT's kernels; LiteRT's builtin kernels run the same
model. An op kept float must leave a model TFLite Micro runs (where the profile places it).

A separate file from the LiteRT tests so that the test workers share the two halves.
"""

from __future__ import annotations

import functools

import pytest

from qtool.errors import DataError
from qtool.model import parse_model
from qtool.targets.placement import ON_TARGET, place_model
from tests.check.oracles import tflm_result
from tests.quantize.op_contract import measure
from tests.quantize.op_expectations import (
    FLOAT_OVERFLOWS,
    OPEN_TFLM,
    OPEN_TFLM16,
    assert_within_stated,
    contract_cases,
)


@functools.cache
def _tflm_runs(data: bytes) -> bool:
    """Whether the tflm profile says every op of the model runs there (on the target)."""
    report = place_model(parse_model(data), "tflm")
    return all(p.status == ON_TARGET for p in report.ops)


@pytest.mark.parametrize(
    ("scheme", "case", "profile"),
    [*contract_cases("int8", OPEN_TFLM), *contract_cases("int16", OPEN_TFLM16)],
)
def test_op_contract_in_tflite_micro(scheme: str, case, profile: str) -> None:
    """Every op of both tables under `--target tflm` (and `--activations int16` for the 16x8
    one: int16 where TFLite Micro has the kernel, else int8, the tflm profile's `without`)."""
    if (case.name, profile) in FLOAT_OVERFLOWS and scheme == "int8":
        with pytest.raises(DataError, match="inf or NaN"):
            measure(case, profile, scheme, ("builtin",), _tflm_runs, target="tflm")
        return
    measured = measure(case, profile, scheme, ("builtin",), _tflm_runs, target="tflm")
    if measured.kept_float is not None:
        if _tflm_runs(measured.quantized):
            verdict = tflm_result(measured.quantized)
            assert verdict["runs"], (measured.kept_float, verdict["error"])
        return
    assert_within_stated(scheme, case, profile, measured)
