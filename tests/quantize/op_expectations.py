"""What the op-contract tests expect of each case: the output LSBs a kernel may be off by, the
ranges where the float op is not what the kernel approximates, and the contracts found but not
yet planned by (open: the case fails, and says why). Shared by the LiteRT and the TFLite Micro
op-contract tests."""

from __future__ import annotations

import pytest

from qtool.spec import load_spec
from tests.quantize.op_cases import BOUNDARY, CASES, COVERED_ELSEWHERE, RANGES, OpCase
from tests.quantize.op_contract import Measured

# Output LSBs a kernel may be off by: half an LSB of the reference's rounding plus half of the
# kernel's own requantization.
DEFAULT_LSB = 1.0
# Where a kernel computes less exactly than one requantization, measured, with the reason.
STATED_LSB = {
    ("int16", "EXP"): (160.0, "int16 EXP interpolates a lookup table over the input range"),
    ("int16", "LOG"): (16.0, "int16 LOG interpolates a lookup table over the input range"),
    ("int16", "RSQRT"): (190.0, "int16 RSQRT interpolates a lookup table over the input range"),
    ("int16", "RESIZE_BILINEAR"): (
        100.0,
        "int16 RESIZE_BILINEAR weighs with 10 fractional bits (1/1024 of the input span)",
    ),
    ("int16", "GELU"): (600.0, "int16 GELU interpolates a lookup table over the input range"),
    ("int16", "LOGISTIC"): (2.0, "int16 LOGISTIC's fixed-point approximation"),
    ("int16", "TANH"): (3.0, "int16 TANH's fixed-point approximation"),
    ("int16", "SOFTMAX"): (4.0, "int16 SOFTMAX's exp and reciprocal lookup tables"),
    ("int16", "REDUCE_PROD"): (4.0, "int16 REDUCE_PROD requantizes after every product"),
    ("int16", "BATCH_MATMUL"): (1.5, "int16 BATCH_MATMUL rounds the multiplier twice"),
    ("int16", "DEPTHWISE_CONV_2D"): (1.5, "16x8 DEPTHWISE_CONV_2D rounds the multiplier twice"),
    ("int16", "TRANSPOSE_CONV"): (1.5, "16x8 TRANSPOSE_CONV rounds the multiplier twice"),
}
# Ranges where the float op itself is not what the integer kernel approximates.
FLOAT_OP_DIFFERS = {
    ("L2_NORMALIZATION", "tiny"): "the float op divides by max(norm, 1e-6); the int8 kernel is "
    "scale-free",
}
# Ranges where the float op overflows float32: quantize refuses such calibration data (no
# accuracy can be measured against inf), which these cases check instead.
FLOAT_OVERFLOWS = {("EXP", "large")}  # exp(1200)
# Known defects: contracts the LiteRT and TFLite Micro tests found that qtool does not plan by
# yet. Each is a strict xfail (it fails the suite the day it is fixed, so the mark goes), says
# what a user of such a model gets, and how to avoid it until the contract is a fact in schemas/.
OPEN_LITERT = {
    ("int16", "DIV", "negative", "act-act"): "known defect: an int16 DIV whose output scale is far "
    "below input scale / divisor scale gets an output multiplier outside LiteRT's range and a "
    "wrong result; avoid with --keep-float DIV",
    ("int16", "DIV", "tiny"): "known defect, as int16 DIV negative: avoid with --keep-float DIV",
    ("int16", "LOG", "large"): "known defect: int16 LOG's lookup table over [0, 5000] is 16,000 "
    "LSB off near log(10); avoid with --keep-float LOG (the default int8 plan keeps LOG float)",
    ("int16", "RSQRT", "large"): "known defect: int16 RSQRT's lookup table over a wide range is "
    "off as LOG's is; avoid with --keep-float RSQRT",
}
# The same, found in TFLite Micro for what `quantize --target tflm` writes.
OPEN_TFLM = {
    ("int8", "LOGISTIC", "large"): "known defect on --target tflm: TFLite Micro's int8 LOGISTIC "
    "needs input scale * 2^27 to fit int32 (scale < 16; micro/kernels/logistic_common.cc), else "
    "128 LSB off; qtool does not yet keep such a LOGISTIC float: use --keep-float LOGISTIC",
    ("int8", "TANH", "large"): "known defect on --target tflm, as LOGISTIC large "
    "(tanh_common.cc): use --keep-float TANH",
    ("int8", "LOG_SOFTMAX", "tiny"): "known defect on --target tflm: TFLite Micro's int8 "
    "LOG_SOFTMAX refuses a tiny input scale at prepare: use --keep-float LOG_SOFTMAX",
    ("int8", "ELU", "tiny"): "known defect on --target tflm: TFLite Micro's int8 ELU is 3 LSB "
    "off on a tiny input scale: use --keep-float ELU where that matters",
}


# int16x8 under --target tflm: the ops TFLite Micro has no int16 kernel for are planned in int8
# there (the tflm profile's `without` in schemas/int16x8_spec.json); these run at prepare but
# not at invoke for extreme scales.
OPEN_TFLM16 = {
    key: f"known defect on --target tflm with int16 activations: TFLite Micro's int16 {key[1]} "
    f"fails at invoke on a {key[2]} input scale (qtool does not yet plan around it); the model "
    f"does not run there. Avoid with --keep-float {key[1]}, or by leaving {key[1]} out of "
    "--int16 patterns (int8 runs)"
    for key in (
        ("int16", "EQUAL", "large", "act-const"),
        ("int16", "EQUAL", "tiny", "const-act"),
        ("int16", "NOT_EQUAL", "large", "act-const"),
        ("int16", "NOT_EQUAL", "tiny", "const-act"),
        ("int16", "FULLY_CONNECTED", "tiny"),
        ("int16", "RSQRT", "large"),
        ("int16", "EXP", "large"),
    )
}


def contract_cases(scheme: str, open_cases: dict[tuple[str, str, str], str]):
    """A pytest param (scheme, case, profile) for every op of the scheme's table (the boundary
    ops aside), every layout of its operands and every range; `open_cases` are xfail."""
    for op_type in sorted(load_spec((), scheme).ops):
        if op_type in BOUNDARY or op_type in COVERED_ELSEWHERE:
            continue
        for case in CASES[op_type].layouts():
            for profile in RANGES:
                marks = ()
                # Keyed by op and range, or by op, range and operand layout where only some
                # layouts fail. Strict: a case that starts passing says so.
                for key in (
                    (scheme, op_type, profile),
                    (scheme, op_type, profile, case.layout_name()),
                ):
                    if key in open_cases:
                        marks = pytest.mark.xfail(reason=open_cases[key], strict=True)
                ident = "-".join(filter(None, [scheme, op_type, case.layout_name(), profile]))
                yield pytest.param(scheme, case, profile, id=ident, marks=marks)


def assert_within_stated(scheme: str, case: OpCase, profile: str, measured: Measured) -> None:
    """Every runtime ran the case, within the LSBs stated for it."""
    assert not measured.failures, measured.failures
    if (case.name, profile) in FLOAT_OP_DIFFERS:
        return
    limit, _ = STATED_LSB.get((scheme, case.name), (DEFAULT_LSB, ""))
    worst = max(measured.errors.values())
    assert worst <= limit, f"{case.name} {profile}: {measured.errors} LSB > {limit}"
