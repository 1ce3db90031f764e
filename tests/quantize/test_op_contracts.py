"""The kernel contract, op by op: every op type of both spec tables, quantized by qtool from a
one-op float model over awkward ranges, computes in LiteRT's builtin kernels and in XNNPACK what
the float op computes on the dequantized inputs, within a stated number of output LSBs
(tests/quantize/op_expectations.py; TFLite Micro: test_op_contracts_tflm.py).

A failure here is a missing fact: it goes into `schemas/` (the op's operands, or
`kernel_contracts`), where quantize plans by it and check reports it. An op kept float by a
kernel contract (a comparison whose input scale its kernel cannot resolve) passes when the
reason names the contract.
"""

from __future__ import annotations

import pytest

from qtool.errors import DataError
from qtool.spec import load_spec
from tests.conftest import ROOT
from tests.quantize.op_cases import BOUNDARY, CASES, COVERED_ELSEWHERE
from tests.quantize.op_contract import measure
from tests.quantize.op_expectations import (
    FLOAT_OVERFLOWS,
    OPEN_LITERT,
    assert_within_stated,
    contract_cases,
)

RUNTIMES = ("builtin", "xnnpack")


def _check(scheme: str, case, profile: str) -> None:
    if (case.name, profile) in FLOAT_OVERFLOWS:
        with pytest.raises(DataError, match="inf or NaN"):
            measure(case, profile, scheme, RUNTIMES)
        return
    measured = measure(case, profile, scheme, RUNTIMES)
    if measured.kept_float is not None:
        assert "kernel" in measured.kept_float, measured.kept_float
        return
    assert_within_stated(scheme, case, profile, measured)


@pytest.mark.parametrize(("scheme", "case", "profile"), list(contract_cases("int8", OPEN_LITERT)))
def test_int8_op_contract(scheme: str, case, profile: str) -> None:
    _check(scheme, case, profile)


@pytest.mark.parametrize(("scheme", "case", "profile"), list(contract_cases("int16", OPEN_LITERT)))
def test_int16_op_contract(scheme: str, case, profile: str) -> None:
    _check(scheme, case, profile)


@pytest.mark.parametrize("scheme", ["int8", "int16"])
def test_boundary_ops_carry_every_code_exactly(scheme: str) -> None:
    """QUANTIZE and DEQUANTIZE, in every case above, are exact: each code of the type, fed as
    its dequantized value, comes back unchanged through a RESHAPE (the same-scale op that
    computes nothing)."""
    measured = measure(CASES["RESHAPE"], "asymmetric", scheme, RUNTIMES)
    # Far below half an LSB: every code came back (the rest is float32 rounding of values).
    assert max(measured.errors.values()) < 0.01, measured.errors


def test_every_op_of_both_tables_has_a_case() -> None:
    for scheme in ("int8", "int16"):
        missing = set(load_spec((), scheme).ops) - set(CASES) - BOUNDARY - set(COVERED_ELSEWHERE)
        assert not missing, f"{scheme}: no op-contract case for {sorted(missing)}"
    for op_type, test_file in COVERED_ELSEWHERE.items():
        assert op_type in (ROOT / test_file).read_text(), (op_type, test_file)
