"""Quantization numerics: pure numpy implementations of the quantize/dequantize definitions.

* TFLite's int8 affine scheme and its parameter math (:mod:`qtool.numerics.affine`),
* TensorFlow's Quantize op, bit for bit (:mod:`qtool.numerics.tf_quantize`),
* nGraph's Quantize (:mod:`qtool.numerics.ngraph`) and DirectML's DEQUANTIZE_LINEAR
  (:mod:`qtool.numerics.directml`),
* rounding modes and integer types shared by all of them,
* error metrics (SQNR) between a reference and its quantized approximation.
"""

from qtool.numerics.affine import (
    INT32_LIMIT,
    MIN_SCALE,
    ZERO_RANGE_SCALE,
    AffineParams,
    activation_params,
    bias_overflow,
    bias_scale,
    dequantize,
    fake_quantize,
    fake_quantize_mean,
    largest_products,
    multiplier_reaches_one,
    quantize,
    quantize_bias,
    quantize_multiplier,
    symmetric_activation_params,
    symmetric_params,
)
from qtool.numerics.directml import dml_dequantize_linear
from qtool.numerics.dtypes import INT_TYPES, IntType, int_type, pack_int4, qrange, unpack_int4
from qtool.numerics.metrics import SqnrAccumulator, sqnr_db, sqnr_from_sums
from qtool.numerics.ngraph import ngraph_quantize
from qtool.numerics.rounding import RoundMode, round_values
from qtool.numerics.tf_quantize import TF_MODES, TF_TYPES, TFQuantizeResult, tf_quantize

__all__ = [
    "INT32_LIMIT",
    "INT_TYPES",
    "MIN_SCALE",
    "TF_MODES",
    "TF_TYPES",
    "ZERO_RANGE_SCALE",
    "AffineParams",
    "IntType",
    "RoundMode",
    "SqnrAccumulator",
    "TFQuantizeResult",
    "activation_params",
    "bias_overflow",
    "bias_scale",
    "dequantize",
    "dml_dequantize_linear",
    "fake_quantize",
    "fake_quantize_mean",
    "int_type",
    "largest_products",
    "multiplier_reaches_one",
    "ngraph_quantize",
    "pack_int4",
    "qrange",
    "quantize",
    "quantize_bias",
    "quantize_multiplier",
    "round_values",
    "sqnr_db",
    "sqnr_from_sums",
    "symmetric_activation_params",
    "symmetric_params",
    "tf_quantize",
    "unpack_int4",
]
