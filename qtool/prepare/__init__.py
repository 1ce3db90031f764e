"""Preparation of a float model, before anything runs it for calibration: constant operators
folded away (float16 weights behind DEQUANTIZE, sparse weights behind DENSIFY, shape arithmetic)
and operators without an integer kernel rewritten into exact equivalents that have one."""

from qtool.prepare.float_model import FloatModel, prepare_float_model

__all__ = ["FloatModel", "prepare_float_model"]
