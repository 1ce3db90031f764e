"""Quantization: plan int8 parameters from the spec and rewrite float graphs."""

from qtool.quantize.options import IO_MODES, QuantizeOptions
from qtool.quantize.quantizer import FloatOp, QuantizeResult, quantize_loaded

__all__ = [
    "IO_MODES",
    "FloatOp",
    "QuantizeOptions",
    "QuantizeResult",
    "quantize_loaded",
]
