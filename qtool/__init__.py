"""qtool: quantize float TFLite models to the int8 spec, and audit quantized models."""

__version__ = "0.1.0"
